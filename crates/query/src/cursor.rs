//! Page cursors: the last emitted merge key, bound to the request that produced it and
//! sealed with HMAC-SHA256.
//!
//! Format: `base64url(json) "." base64url(hmac(json))`, no padding. The JSON holds a
//! version, the position and a fingerprint of the request's parameters. A cursor whose
//! MAC does not verify, that does not parse, or whose fingerprint differs from the
//! current request's is refused, so a cursor can never widen what a request may read:
//! the range, device, order and limit always come from the request itself, and the
//! position is checked to lie inside that range.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::ReadingKey;

type HmacSha256 = Hmac<Sha256>;

/// Current cursor format version.
pub const CURSOR_VERSION: u8 = 1;

/// Longest cursor accepted; a real one is a few hundred bytes. Keeps decoding cheap
/// for hostile input.
pub const MAX_CURSOR_LEN: usize = 2048;

/// The shortest HMAC key accepted from the configuration.
pub const MIN_KEY_LEN: usize = 16;

/// The secret that seals cursors. Its bytes never appear in `Debug` output.
#[derive(Clone)]
pub struct CursorKey(Vec<u8>);

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CursorKey(<{} bytes>)", self.0.len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorKeyError {
    #[error("cursor key is {0} bytes; at least {MIN_KEY_LEN} are required")]
    TooShort(usize),
}

impl CursorKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, CursorKeyError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_LEN {
            return Err(CursorKeyError::TooShort(bytes.len()));
        }
        Ok(Self(bytes))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; new_from_slice cannot fail for it.
        <HmacSha256 as Mac>::new_from_slice(&self.0).expect("HMAC accepts keys of any length")
    }
}

/// The parameters a cursor is bound to. Two requests with equal fingerprints read the
/// same set of readings in the same order and page size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub route: &'static str,
    pub device: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    pub descending: bool,
    pub limit: u32,
    /// Further parameters that shape what the route reads (stats: interval and metric);
    /// empty for the reading routes.
    pub detail: String,
}

impl Fingerprint {
    /// A short digest of the canonical form; collisions would need SHA-256 collisions.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        // Length-prefixed fields: no two parameter sets share an encoding.
        for field in [
            self.route.to_string(),
            self.device.clone().unwrap_or_default(),
            self.from_ms.to_string(),
            self.to_ms.to_string(),
            if self.descending { "desc" } else { "asc" }.to_string(),
            self.limit.to_string(),
        ]
        .iter()
        // An empty detail adds nothing, so cursors of the reading routes keep the
        // digest they had before the field existed.
        .chain((!self.detail.is_empty()).then_some(&self.detail))
        {
            h.update((field.len() as u64).to_be_bytes());
            h.update(field.as_bytes());
        }
        let out = h.finalize();
        hex::encode(&out[..16])
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    v: u8,
    fp: String,
    pos: ReadingKey,
}

/// Why a cursor was refused. All map to 400 `bad_cursor`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("cursor is too long")]
    TooLong,
    #[error("cursor is not in the expected format")]
    Malformed,
    #[error("cursor signature does not match; it was altered or issued by another deployment")]
    BadSignature,
    #[error("cursor version {0} is not supported")]
    Version(u8),
    #[error("cursor was issued for different request parameters")]
    OtherRequest,
    #[error("cursor position lies outside the requested range")]
    OutOfRange,
}

/// Seals `position` for the request described by `fp`.
pub fn encode_cursor(position: &ReadingKey, fp: &Fingerprint, key: &CursorKey) -> String {
    let body = Body {
        v: CURSOR_VERSION,
        fp: fp.digest(),
        pos: position.clone(),
    };
    // Serializing plain strings and integers cannot fail.
    let json = serde_json::to_vec(&body).expect("cursor body serializes");
    let mut mac = key.mac();
    mac.update(&json);
    let tag = mac.finalize().into_bytes();
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&json),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// Opens a cursor: verifies the seal, the version and the binding to `fp`, and that
/// the position lies in `fp`'s half-open range. Pure; never panics on any input.
pub fn decode_cursor(
    raw: &str,
    fp: &Fingerprint,
    key: &CursorKey,
) -> Result<ReadingKey, CursorError> {
    if raw.len() > MAX_CURSOR_LEN {
        return Err(CursorError::TooLong);
    }
    let (body_b64, tag_b64) = raw.split_once('.').ok_or(CursorError::Malformed)?;
    let json = URL_SAFE_NO_PAD
        .decode(body_b64)
        .map_err(|_| CursorError::Malformed)?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag_b64)
        .map_err(|_| CursorError::Malformed)?;
    let mut mac = key.mac();
    mac.update(&json);
    // Constant-time comparison.
    mac.verify_slice(&tag)
        .map_err(|_| CursorError::BadSignature)?;
    let body: Body = serde_json::from_slice(&json).map_err(|_| CursorError::Malformed)?;
    if body.v != CURSOR_VERSION {
        return Err(CursorError::Version(body.v));
    }
    if body.fp != fp.digest() {
        return Err(CursorError::OtherRequest);
    }
    if body.pos.ts_ms < fp.from_ms || body.pos.ts_ms >= fp.to_ms {
        return Err(CursorError::OutOfRange);
    }
    if let Some(device) = &fp.device
        && &body.pos.device_id != device
    {
        return Err(CursorError::OtherRequest);
    }
    Ok(body.pos)
}
