//! The front door's seal: what a dead letter of the IoT rule's message carries so that,
//! redriven, it is still read as its thing's.
//!
//! The ingest knows a message is the rule's by who sent it (its SenderId, the rule
//! role's) or by its own mark on a copy it sent itself. Neither survives a redrive: SQS
//! documents a redriven message as a new message (a new message id and enqueue time),
//! moved with the redriving principal's `sqs:SendMessage` on the destination, and says
//! nothing of the SenderId it then carries; a redrive by hand (receive from the DLQ,
//! send to the queue) carries the operator's. So the ingest vouches for the body
//! itself: the letter of a message it read as the rule's carries an HMAC-SHA256 of the
//! body under a key only the ingest holds ([`SEAL_ATTRIBUTE`]). Whoever sends it back,
//! a message whose seal holds is read as the rule's message it was, with every check
//! of the front door again; a body changed on the way, or a seal moved onto another
//! body, is refused with the reason, never taken for a publisher's message.
//!
//! The key is `FRONT_DOOR_KEY` (local runs, tests) or the template's
//! `FRONT_DOOR_SECRET_ARN` (a Secrets Manager secret: its `AWSCURRENT` version seals,
//! and `AWSPREVIOUS` too still opens, so a rotation leaves the letters sealed before
//! it redrivable until the next one).
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The message attribute holding the seal of a dead letter's body.
pub const SEAL_ATTRIBUTE: &str = "shardline.envelope_seal";
/// What a seal starts with: the version of its rule.
const VERSION: &str = "v1.";
/// What the MAC covers before the body, so that no other MAC under the key (there is
/// none today) can stand for a seal.
const CONTEXT: &[u8] = b"shardline-envelope-seal-v1\n";
/// The fewest bytes a key may have.
pub const MIN_KEY_BYTES: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// One sealing key.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey(Vec<u8>);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    /// A key of at least [`MIN_KEY_BYTES`] bytes; `Err` says why not.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, String> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!(
                "must be at least {MIN_KEY_BYTES} bytes, is {}",
                bytes.len()
            ));
        }
        Ok(Self(bytes))
    }

    fn tag(&self, body: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any size");
        mac.update(CONTEXT);
        mac.update(body.as_bytes());
        mac
    }
}

/// The keys the ingest seals with (`current`) and opens with (both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealKeys {
    pub current: SealKey,
    pub previous: Option<SealKey>,
}

impl From<SealKey> for SealKeys {
    fn from(current: SealKey) -> Self {
        Self {
            current,
            previous: None,
        }
    }
}

/// Why a seal does not hold. Each is a refusal of the message, never a reason to read
/// it as a publisher's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Not a seal this ingest makes.
    Malformed,
    /// A seal, but not of this body under a key the ingest holds.
    Mismatch,
    /// The ingest holds no key, so it cannot tell.
    NoKey,
}

impl Broken {
    /// The rule the message broke, for its dead letter.
    pub fn rule(self) -> &'static str {
        match self {
            Self::Malformed => {
                "is not a seal of the ingest's (v1.<HMAC-SHA256, base64url>): the message \
                 claims to be a redriven letter of the IoT rule's message and cannot show it"
            }
            Self::Mismatch => {
                "does not match the body: the letter was changed after the ingest sealed \
                 it, or sealed under a key the ingest no longer holds (rotated twice since)"
            }
            Self::NoKey => {
                "cannot be checked: the ingest holds no front-door key (FRONT_DOOR_KEY or \
                 FRONT_DOOR_SECRET_ARN)"
            }
        }
    }
}

impl SealKeys {
    /// The seal of `body` under the current key.
    pub fn seal(&self, body: &str) -> String {
        let tag = self.current.tag(body).finalize().into_bytes();
        format!("{VERSION}{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Whether `seal` is the seal of `body` under a key held (in constant time).
    pub fn open(&self, body: &str, seal: &str) -> Result<(), Broken> {
        let tag = seal
            .strip_prefix(VERSION)
            .and_then(|t| URL_SAFE_NO_PAD.decode(t).ok())
            .ok_or(Broken::Malformed)?;
        let held = std::iter::once(&self.current).chain(self.previous.as_ref());
        for key in held {
            if key.tag(body).verify_slice(&tag).is_ok() {
                return Ok(());
            }
        }
        Err(Broken::Mismatch)
    }
}

/// Opens `seal` of `body` with `keys`, when the ingest holds any.
pub fn open(keys: Option<&SealKeys>, body: &str, seal: &str) -> Result<(), Broken> {
    keys.ok_or(Broken::NoKey)?.open(body, seal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(current: &[u8], previous: Option<&[u8]>) -> SealKeys {
        SealKeys {
            current: SealKey::new(current.to_vec()).expect("key"),
            previous: previous.map(|p| SealKey::new(p.to_vec()).expect("key")),
        }
    }

    #[test]
    fn a_seal_opens_only_for_its_body_and_a_key_held() {
        let k = keys(b"the-current-key-0123", None);
        let body = r#"{"payload":"e30=","thing":"dev-1","client":"dev-1"}"#;
        let seal = k.seal(body);
        assert!(seal.starts_with("v1."), "{seal}");
        assert_eq!(k.open(body, &seal), Ok(()));
        // One byte of the body changed, or the seal moved onto another body.
        let changed = body.replace("dev-1\",\"client", "dev-2\",\"client");
        assert_eq!(k.open(&changed, &seal), Err(Broken::Mismatch));
        assert_eq!(k.open("{}", &seal), Err(Broken::Mismatch));
        // Another key's seal, and what is not a seal at all.
        let other = keys(b"another-key-456789", None);
        assert_eq!(k.open(body, &other.seal(body)), Err(Broken::Mismatch));
        for bad in ["", "v1.", "v2.AAAA", "v1.not base64!", &seal[3..]] {
            let got = k.open(body, bad);
            assert!(
                got == Err(Broken::Malformed) || got == Err(Broken::Mismatch),
                "{bad}: {got:?}"
            );
        }
        assert_eq!(k.open(body, "v2.AAAA"), Err(Broken::Malformed));
        assert_eq!(open(None, body, &seal), Err(Broken::NoKey));
    }

    #[test]
    fn after_a_rotation_the_previous_key_still_opens_and_the_current_seals() {
        let before = keys(b"the-first-key-00000", None);
        let body = "{}";
        let old = before.seal(body);
        let after = keys(b"the-second-key-1111", Some(b"the-first-key-00000"));
        assert_eq!(after.open(body, &old), Ok(()));
        assert_ne!(after.seal(body), old);
        let twice = keys(b"the-third-key-22222", Some(b"the-second-key-1111"));
        assert_eq!(twice.open(body, &old), Err(Broken::Mismatch));
    }

    /// The vector of docs/formats.md ("A dead letter"), computed there by another
    /// implementation of HMAC-SHA256: the body and its seal.
    #[test]
    fn the_documented_vector_is_the_seal_of_its_body() {
        let formats = include_str!("../../../docs/formats.md");
        let start = formats
            .find("<!-- seal-vector -->")
            .expect("the seal vector of docs/formats.md");
        let text = &formats[start..];
        let open = text.find("```text\n").expect("a text fence") + "```text\n".len();
        let mut lines = text[open..].lines();
        let (body, seal) = (lines.next().expect("a body"), lines.next().expect("a seal"));
        let k = keys(b"shardline-seal-vector-key-000001", None);
        assert_eq!(k.seal(body), seal);
        assert_eq!(k.open(body, seal), Ok(()));
    }

    #[test]
    fn a_short_key_is_refused_and_a_key_is_never_printed() {
        assert!(SealKey::new(b"short".to_vec()).is_err());
        let k = SealKey::new(b"a-secret-key-of-24-bytes".to_vec()).expect("key");
        assert!(!format!("{k:?}").contains("secret"));
    }
}
