//! Page cursors: the last emitted merge key, bound to the request that produced it and
//! sealed with HMAC-SHA256.
//!
//! Format: `base64url(json) "." base64url(hmac(json, binding))`, no padding. The JSON
//! holds a version, the id of the key that sealed it, when it was issued and the
//! position, nothing else. The request's [`Binding`] (route, parameters and the
//! caller's device grants) is not stored: it is sealed by the MAC alongside the JSON,
//! and the request that presents the cursor supplies it again. So a cursor opens only
//! for the request it was issued for, and holds no digest of its parameters or grants
//! that would let anyone holding a leaked cursor confirm a guess of them offline (the
//! MAC confirms nothing without the key). A cursor whose MAC does not verify (altered,
//! or presented with other parameters or grants) or that does not parse is refused, so
//! a cursor can never widen what a request may read: the range, device, order and limit
//! always come from the request itself, and the position is checked to lie inside that
//! range.
//!
//! Keys rotate ([`CursorKeys`]): a deployment seals with its current key and opens
//! cursors sealed with the current or the previous one, named by the key id each
//! cursor carries, so a rotation breaks no cursor in use. A cursor lives at most
//! [`DEFAULT_MAX_AGE`] (`CURSOR_MAX_AGE_SECS`): a day outlasts any paging session, a
//! leaked cursor stops working within it, and rotations at least that far apart leave
//! every live cursor under a key the deployment still holds.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use sharding::time::Timestamp;

use crate::model::ReadingKey;

type HmacSha256 = Hmac<Sha256>;

/// Current cursor format version: 2 carried the key id and the issue time; 3 stores no
/// fingerprint and seals the request's binding with the MAC instead. A cursor of
/// another version is refused (400 `bad_cursor`) before its seal is checked.
pub const CURSOR_VERSION: u8 = 3;

/// How long a cursor is accepted after it was issued, by default.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How far in the future a cursor's issue time may lie (clocks of two instances).
const ISSUE_SKEW: Duration = Duration::from_secs(300);

/// Longest cursor accepted; a real one is a few hundred bytes. Keeps decoding cheap
/// for hostile input.
pub const MAX_CURSOR_LEN: usize = 2048;

/// The shortest HMAC key accepted from the configuration.
pub const MIN_KEY_LEN: usize = 16;

/// The secret that seals cursors, and its id: the first 8 bytes of its SHA-256, in
/// hex, the same on every instance holding it. Its bytes never appear in `Debug`
/// output.
#[derive(Clone)]
pub struct CursorKey {
    bytes: Vec<u8>,
    id: String,
}

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CursorKey({}, <{} bytes>)", self.id, self.bytes.len())
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
        let id = hex::encode(&Sha256::digest(&bytes)[..8]);
        Ok(Self { bytes, id })
    }

    /// The key's id, which every cursor it seals carries.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; new_from_slice cannot fail for it.
        <HmacSha256 as Mac>::new_from_slice(&self.bytes).expect("HMAC accepts keys of any length")
    }
}

/// The keys a deployment holds: it seals with `current` and opens cursors sealed with
/// `current` or `previous` (the key before the last rotation), issued at most
/// `max_age` ago.
#[derive(Debug, Clone)]
pub struct CursorKeys {
    pub current: CursorKey,
    pub previous: Option<CursorKey>,
    pub max_age: Duration,
}

impl From<CursorKey> for CursorKeys {
    /// One key, no previous one, cursors accepted for [`DEFAULT_MAX_AGE`].
    fn from(current: CursorKey) -> Self {
        Self {
            current,
            previous: None,
            max_age: DEFAULT_MAX_AGE,
        }
    }
}

impl CursorKeys {
    /// The key with id `id`, if this deployment holds it.
    fn by_id(&self, id: &str) -> Option<&CursorKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.id == id)
    }

    /// Whether a cursor sealed with the key of id `id` can be opened.
    pub fn holds(&self, id: &str) -> bool {
        self.by_id(id).is_some()
    }
}

/// The keys a service uses, replaced whole when they are read again after a rotation
/// (a cursor naming a key this instance does not hold yet); clones share them.
#[derive(Debug, Clone)]
pub struct CursorKeyRing(Arc<RwLock<Arc<CursorKeys>>>);

impl CursorKeyRing {
    pub fn new(keys: impl Into<CursorKeys>) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(keys.into()))))
    }

    /// The keys now.
    pub fn get(&self) -> Arc<CursorKeys> {
        self.0.read().clone()
    }

    /// Replaces the keys.
    pub fn replace(&self, keys: CursorKeys) {
        *self.0.write() = Arc::new(keys);
    }
}

/// What a cursor is bound to: the request's route and parameters, and the caller's
/// device grants where they shape the answer. Two requests with equal bindings read the
/// same set of readings in the same order and page size. It is sealed by the cursor's
/// MAC and never stored in the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub route: &'static str,
    pub device: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    pub descending: bool,
    pub limit: u32,
    /// Further parameters that shape what the route reads (stats: interval and metric;
    /// the device list: prefix and `seen_since`); empty for the reading routes.
    pub detail: String,
    /// The caller's device grants in their canonical form, on the routes whose pages
    /// they shape (a read over every device, the device list); `None` for a caller who
    /// may read every device, and on a route of one device, whose grant is checked on
    /// each request.
    pub scope: Option<String>,
}

impl Binding {
    /// Feeds the binding to `mac`, each field length-prefixed (an absent one as a
    /// marker byte), so no two bindings feed the same bytes.
    fn seal_into(&self, mac: &mut HmacSha256) {
        let order = if self.descending { "desc" } else { "asc" };
        let (from, to, limit) = (
            self.from_ms.to_string(),
            self.to_ms.to_string(),
            self.limit.to_string(),
        );
        let fields = [
            Some(self.route),
            self.device.as_deref(),
            Some(from.as_str()),
            Some(to.as_str()),
            Some(order),
            Some(limit.as_str()),
            Some(self.detail.as_str()),
            self.scope.as_deref(),
        ];
        for field in fields {
            match field {
                None => mac.update(&[0]),
                Some(text) => {
                    mac.update(&[1]);
                    mac.update(&(text.len() as u64).to_be_bytes());
                    mac.update(text.as_bytes());
                }
            }
        }
    }
}

/// What a cursor stores: nothing of its request but the position it resumes at.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    v: u8,
    /// The id of the key that sealed it.
    k: String,
    /// When it was issued, in epoch milliseconds.
    t: i64,
    pos: ReadingKey,
}

/// What a cursor says of itself before its seal is checked: only to refuse another
/// version and to choose the key.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    v: Option<u8>,
    #[serde(default)]
    k: Option<String>,
}

impl Header {
    /// The header of a cursor's JSON body; empty when it does not parse.
    fn of(json: &[u8]) -> Self {
        serde_json::from_slice(json).unwrap_or(Self { v: None, k: None })
    }
}

/// Why a cursor was refused. All map to 400 `bad_cursor`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("cursor is too long")]
    TooLong,
    #[error("cursor is not in the expected format")]
    Malformed,
    #[error(
        "cursor signature does not match this request: the cursor was altered, or issued \
         for a different request (other parameters or device grants) or by another deployment"
    )]
    BadSignature,
    #[error("cursor version {0} is not supported; start the read again without a cursor")]
    Version(u8),
    #[error(
        "cursor was sealed with a key this deployment no longer holds (rotated since); \
         start the read again without a cursor"
    )]
    UnknownKey,
    #[error("cursor expired (issued more than {0} s ago); start the read again without a cursor")]
    Expired(u64),
    #[error(
        "cursor was issued later than now by more than the clocks of two functions differ; \
         start the read again without a cursor"
    )]
    IssuedAhead,
    #[error("cursor was issued for different request parameters")]
    OtherRequest,
    #[error("cursor position lies outside the requested range")]
    OutOfRange,
}

/// The MAC of a cursor's JSON body for the request `binding` describes.
fn tag(key: &CursorKey, json: &[u8], binding: &Binding) -> HmacSha256 {
    let mut mac = key.mac();
    mac.update(&(json.len() as u64).to_be_bytes());
    mac.update(json);
    binding.seal_into(&mut mac);
    mac
}

/// Seals `json` as a cursor for `binding` with `key`, as [`encode_cursor`] seals its
/// body: for fuzzing what [`decode_cursor`] checks after the seal with bodies of any
/// content. Not for minting cursors.
#[doc(hidden)]
pub fn seal_body(json: &[u8], binding: &Binding, key: &CursorKey) -> String {
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(json),
        URL_SAFE_NO_PAD.encode(tag(key, json, binding).finalize().into_bytes())
    )
}

/// Seals `position` for the request described by `binding` with the current key,
/// issued `now`.
pub fn encode_cursor(
    position: &ReadingKey,
    binding: &Binding,
    keys: &CursorKeys,
    now: Timestamp,
) -> String {
    let key = &keys.current;
    let body = Body {
        v: CURSOR_VERSION,
        k: key.id.clone(),
        t: now.as_millis(),
        pos: position.clone(),
    };
    // Serializing plain strings and integers cannot fail.
    let json = serde_json::to_vec(&body).expect("cursor body serializes");
    seal_body(&json, binding, key)
}

/// The id of the key a cursor of the current version names, unverified: to learn
/// whether this deployment holds it before opening the cursor (see [`CursorKeyRing`]).
/// A cursor of another version names none: it is refused whatever key sealed it.
pub fn sealer_id(raw: &str) -> Option<String> {
    if raw.len() > MAX_CURSOR_LEN {
        return None;
    }
    let body_b64 = raw.split_once('.')?.0;
    let json = URL_SAFE_NO_PAD.decode(body_b64).ok()?;
    let header = Header::of(&json);
    header.v.filter(|v| *v == CURSOR_VERSION)?;
    header.k
}

/// Opens a cursor at `now` for the request described by `binding`: refuses another
/// version, verifies the seal of the body and `binding` with the key it names (the
/// current or the previous one), then its age, and that the position lies in
/// `binding`'s half-open range. Pure; never panics on any input.
pub fn decode_cursor(
    raw: &str,
    binding: &Binding,
    keys: &CursorKeys,
    now: Timestamp,
) -> Result<ReadingKey, CursorError> {
    if raw.len() > MAX_CURSOR_LEN {
        return Err(CursorError::TooLong);
    }
    let (body_b64, tag_b64) = raw.split_once('.').ok_or(CursorError::Malformed)?;
    let json = URL_SAFE_NO_PAD
        .decode(body_b64)
        .map_err(|_| CursorError::Malformed)?;
    let sealed = URL_SAFE_NO_PAD
        .decode(tag_b64)
        .map_err(|_| CursorError::Malformed)?;
    let header = Header::of(&json);
    // Another version is refused before its seal is checked: an older cursor's seal
    // covers another message, and its refusal should say why.
    if let Some(v) = header.v
        && v != CURSOR_VERSION
    {
        return Err(CursorError::Version(v));
    }
    let key = match header.k {
        Some(id) => keys.by_id(&id).ok_or(CursorError::UnknownKey)?,
        // A body naming no key (altered, or not a cursor): its seal is checked with the
        // current key, and whatever passes that, the parse then refuses.
        None => &keys.current,
    };
    // Constant-time comparison.
    tag(key, &json, binding)
        .verify_slice(&sealed)
        .map_err(|_| CursorError::BadSignature)?;
    let body: Body = serde_json::from_slice(&json).map_err(|_| CursorError::Malformed)?;
    let age_ms = now.as_millis().saturating_sub(body.t);
    let max_age_ms = i64::try_from(keys.max_age.as_millis()).unwrap_or(i64::MAX);
    let skew_ms = i64::try_from(ISSUE_SKEW.as_millis()).unwrap_or(i64::MAX);
    if age_ms > max_age_ms {
        return Err(CursorError::Expired(keys.max_age.as_secs()));
    }
    if age_ms < -skew_ms {
        return Err(CursorError::IssuedAhead);
    }
    // Only a holder of the key could seal a position outside the request; the checks
    // still bound the read.
    if body.pos.ts_ms < binding.from_ms || body.pos.ts_ms >= binding.to_ms {
        return Err(CursorError::OutOfRange);
    }
    if let Some(device) = &binding.device
        && &body.pos.device_id != device
    {
        return Err(CursorError::OtherRequest);
    }
    Ok(body.pos)
}
