//! Who may read which device. Under the JWT authorizer (`ApiAuth=JWT`), one claim of
//! the caller's token (`READ_SCOPE_CLAIM`; the template's `JwtDevicesClaim`, by
//! default `shardline_devices`) lists what the caller may read: device ids
//! (`sensor-7`), id prefixes (`site-a-*`), or `*` for every device, separated by
//! ASCII spaces (U+0020) or commas, and by nothing else. API Gateway hands a token's
//! claims to the function as strings, an array claim as `[a b]`, so both spellings
//! read the same.
//!
//! Any other whitespace or control character anywhere in the claim (a no-break space,
//! an ideographic space, a line separator, a tab, a newline, NUL, ...) makes the whole
//! claim unreadable, never a separator: were `site-a-1\u{a0}*` split on Unicode
//! spaces, its tail `*` would grant every device. A claim is read only as the entries
//! its ASCII spaces and commas separate.
//!
//! The scope is enforced on every route, before anything is read: a device route
//! outside it is 403; a read over every device answers only the devices in it (their
//! readings are kept as pages arrive, before the merge, so no answer, position or
//! cursor names another device), and its cursors are bound to the scope.
//!
//! A token without the claim, or with one that cannot be read, reads nothing: the
//! scope fails closed. Without `READ_SCOPE_CLAIM` (`ApiAuth=IAM`), every caller the
//! authorizer let through reads every device: IAM policies grant paths
//! (`execute-api:Invoke` on `.../GET/devices/<id>/*`), and ids have one spelling in
//! a path (`crate::params::match_route`).

use std::collections::BTreeSet;

use crate::error::ApiError;

/// Most entries a device claim may list: each device read is checked against them.
pub const MAX_GRANTS: usize = 100;

/// Longest device claim read, in bytes.
pub const MAX_CLAIM_LEN: usize = 4096;

/// What a caller may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadScope {
    /// Every device: no device claim is configured (IAM auth), or the token grants `*`.
    Every,
    /// Only the devices a token's claim grants.
    Devices(DeviceGrants),
}

/// The devices a token grants: exact ids and id prefixes, never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceGrants {
    claim: String,
    ids: BTreeSet<String>,
    prefixes: BTreeSet<String>,
}

/// Why a token grants no read. Every case is 403: the caller is authenticated, its
/// token just does not say what it may read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("the request carries no token claims; this API reads the {0:?} claim of a JWT")]
    NoClaims(String),
    #[error("the token has no {0:?} claim, which lists the devices it may read")]
    Missing(String),
    #[error("the token's {0:?} claim grants no device")]
    Empty(String),
    #[error("the token's {claim:?} claim is longer than {MAX_CLAIM_LEN} bytes")]
    TooLong { claim: String },
    #[error("the token's {claim:?} claim lists more than {MAX_GRANTS} entries")]
    TooMany { claim: String },
    #[error(
        "the token's {claim:?} claim holds {found}, a whitespace or control character; \
         only ASCII spaces and commas separate its entries"
    )]
    Unreadable { claim: String, found: String },
    #[error(
        "the token's {claim:?} claim holds {entry:?}, which is neither a device id, an id \
         prefix ending in '*', nor '*'"
    )]
    BadEntry { claim: String, entry: String },
}

impl ReadScope {
    /// The scope a token's `claim` grants, from the token's claims as API Gateway hands
    /// them over (`None`: the request carried no JWT claims at all).
    pub fn from_claims<'a>(
        claim: &str,
        claims: Option<impl Fn(&str) -> Option<&'a str>>,
    ) -> Result<Self, ScopeError> {
        let claims = claims.ok_or_else(|| ScopeError::NoClaims(claim.to_owned()))?;
        let value = claims(claim).ok_or_else(|| ScopeError::Missing(claim.to_owned()))?;
        Self::from_claim(claim, value)
    }

    /// The scope one claim value grants: entries separated by ASCII spaces or commas,
    /// in square brackets or not. Any other whitespace or control character makes the
    /// claim unreadable.
    pub fn from_claim(claim: &str, value: &str) -> Result<Self, ScopeError> {
        let claim_name = || claim.to_owned();
        if value.len() > MAX_CLAIM_LEN {
            return Err(ScopeError::TooLong {
                claim: claim_name(),
            });
        }
        if let Some(c) = value
            .chars()
            .find(|&c| c != SPACE && is_blank_or_control(c))
        {
            return Err(ScopeError::Unreadable {
                claim: claim_name(),
                found: format!("U+{:04X}", u32::from(c)),
            });
        }
        let trimmed = value.trim_matches(SPACE);
        let listed = trimmed
            .strip_prefix('[')
            .and_then(|v| v.strip_suffix(']'))
            .unwrap_or(trimmed);
        let entries: Vec<&str> = listed
            .split([',', SPACE])
            .map(|e| e.trim_matches('"'))
            .filter(|e| !e.is_empty())
            .collect();
        if entries.len() > MAX_GRANTS {
            return Err(ScopeError::TooMany {
                claim: claim_name(),
            });
        }
        let mut grants = DeviceGrants {
            claim: claim_name(),
            ids: BTreeSet::new(),
            prefixes: BTreeSet::new(),
        };
        for entry in entries {
            if entry == "*" {
                return Ok(Self::Every);
            }
            let (id, set) = match entry.strip_suffix('*') {
                Some(prefix) => (prefix, &mut grants.prefixes),
                None => (entry, &mut grants.ids),
            };
            if sharding::key::validate_id("device_id", id).is_err() {
                return Err(ScopeError::BadEntry {
                    claim: claim_name(),
                    entry: entry.chars().take(64).collect(),
                });
            }
            set.insert(id.to_owned());
        }
        if grants.ids.is_empty() && grants.prefixes.is_empty() {
            return Err(ScopeError::Empty(claim_name()));
        }
        Ok(Self::Devices(grants))
    }

    /// Whether the caller may read `device`.
    pub fn allows(&self, device: &str) -> bool {
        match self {
            Self::Every => true,
            Self::Devices(grants) => grants.allows(device),
        }
    }

    /// 403 unless the caller may read `device`.
    pub fn check(&self, device: &str) -> Result<(), ApiError> {
        match self {
            Self::Devices(grants) if !grants.allows(device) => Err(ApiError::forbidden(format!(
                "the token's {:?} claim does not grant device {device:?}",
                grants.claim
            ))),
            _ => Ok(()),
        }
    }

    /// The grants, unless every device is granted.
    pub fn grants(&self) -> Option<&DeviceGrants> {
        match self {
            Self::Every => None,
            Self::Devices(grants) => Some(grants),
        }
    }
}

impl DeviceGrants {
    /// Whether `device` is one of the ids, or starts with one of the prefixes.
    pub fn allows(&self, device: &str) -> bool {
        self.ids.contains(device) || self.prefixes.iter().any(|p| device.starts_with(p.as_str()))
    }

    /// The granted ids when the grants are ids alone, no more than `most` of them: a
    /// read over every device can then read those devices' keys alone.
    pub fn few_ids(&self, most: usize) -> Option<impl Iterator<Item = &str>> {
        (self.prefixes.is_empty() && self.ids.len() <= most)
            .then(|| self.ids.iter().map(String::as_str))
    }

    /// One spelling of the grants, the same for every token granting the same devices
    /// in any order or spelling: what a cursor of a read over every device is bound to.
    pub fn canonical(&self) -> String {
        let ids = self.ids.iter().map(String::as_str);
        let prefixes = self.prefixes.iter().map(|p| format!("{p}*"));
        ids.map(str::to_owned)
            .chain(prefixes)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The one space that separates a claim's entries (with the comma).
const SPACE: char = ' ';

/// Whether `c` is whitespace or a control character of any script: in a claim, only
/// [`SPACE`] of these is read, as a separator; any other makes the claim unreadable.
/// Format characters (U+200B, U+FEFF, ...) are neither: an entry holding one is no
/// device id, and refused as a bad entry.
fn is_blank_or_control(c: char) -> bool {
    c.is_whitespace() || c.is_control()
}

impl From<ScopeError> for ApiError {
    fn from(e: ScopeError) -> Self {
        ApiError::forbidden(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const CLAIM: &str = "shardline_devices";

    fn scope(value: &str) -> Result<ReadScope, ScopeError> {
        ReadScope::from_claim(CLAIM, value)
    }

    #[test]
    fn ids_and_prefixes_in_any_spelling_grant_the_same_devices() {
        for value in [
            "site-a-* sensor-7",
            "[site-a-* sensor-7]",
            "sensor-7,site-a-*",
            " [\"site-a-*\", \"sensor-7\"] ",
        ] {
            let s = scope(value).unwrap();
            assert!(s.allows("site-a-1"), "{value}");
            assert!(s.allows("site-a-"), "{value}");
            assert!(s.allows("sensor-7"), "{value}");
            assert!(!s.allows("sensor-70"), "{value}: an id is not a prefix");
            assert!(!s.allows("site-b-1"), "{value}");
            assert_eq!(s.grants().unwrap().canonical(), "sensor-7 site-a-*");
        }
    }

    #[test]
    fn a_star_grants_every_device() {
        assert_eq!(scope("site-a-* *").unwrap(), ReadScope::Every);
    }

    #[test]
    fn a_claim_that_cannot_be_read_grants_nothing() {
        assert!(matches!(scope(""), Err(ScopeError::Empty(_))));
        assert!(matches!(scope("[]"), Err(ScopeError::Empty(_))));
        assert!(matches!(scope("site#a"), Err(ScopeError::BadEntry { .. })));
        assert!(matches!(scope("a*b"), Err(ScopeError::BadEntry { .. })));
        assert!(matches!(scope("**"), Err(ScopeError::BadEntry { .. })));
        let many = (0..=MAX_GRANTS)
            .map(|i| format!("d{i}"))
            .collect::<Vec<_>>();
        assert!(matches!(
            scope(&many.join(" ")),
            Err(ScopeError::TooMany { .. })
        ));
        let long = "d".repeat(MAX_CLAIM_LEN + 1);
        assert!(matches!(scope(&long), Err(ScopeError::TooLong { .. })));
        let none = ReadScope::from_claims(CLAIM, Some(|_: &str| None::<&str>));
        assert!(matches!(none, Err(ScopeError::Missing(_))));
        let no_token = ReadScope::from_claims(CLAIM, None::<fn(&str) -> Option<&'static str>>);
        assert!(matches!(no_token, Err(ScopeError::NoClaims(_))));
    }

    /// Whitespace and control characters other than the ASCII space: Unicode spaces,
    /// line and paragraph separators, ASCII controls.
    const NOT_SEPARATORS: [char; 11] = [
        '\u{a0}', '\u{2028}', '\u{2029}', '\u{3000}', '\u{2003}', '\u{85}', '\u{1680}', '\t', '\n',
        '\r', '\0',
    ];

    #[test]
    fn only_an_ascii_space_or_a_comma_separates_entries() {
        for c in NOT_SEPARATORS {
            for value in [
                format!("site-a-1{c}*"),
                format!("[site-a-1{c}*]"),
                format!("sensor-7{c}site-b-*"),
                format!("site{c}a-1"),
                format!("site-a-1{c}"),
                format!("{c}site-a-1"),
                format!("site-a-1,{c}*"),
            ] {
                let refused = scope(&value);
                let Err(ScopeError::Unreadable { claim, found }) = &refused else {
                    panic!("{value:?}: {refused:?}");
                };
                assert_eq!(claim, CLAIM);
                assert_eq!(found, &format!("U+{:04X}", u32::from(c)), "{value:?}");
                let e = ApiError::from(refused.unwrap_err());
                assert_eq!(e.status, http::StatusCode::FORBIDDEN);
                assert!(e.message.contains(CLAIM), "{e}");
            }
        }
        // A format character is no separator either: it stays inside its entry, which
        // is then no device id.
        assert!(matches!(
            scope("site-a-1\u{200b}*"),
            Err(ScopeError::BadEntry { .. })
        ));
        assert!(matches!(scope("site-a-1 *"), Ok(ReadScope::Every)));
    }

    /// The devices the claim's entries name, its text cut at ASCII spaces and commas
    /// alone, with brackets and quotes taken off each entry.
    fn named(value: &str, device: &str) -> bool {
        value
            .split([' ', ','])
            .map(|e| e.trim_matches(['[', ']', '"']))
            .any(|e| {
                e == "*"
                    || e == device
                    || e.strip_suffix('*').is_some_and(|p| device.starts_with(p))
            })
    }

    proptest! {
        #[test]
        fn no_claim_grants_more_than_its_entries_name(
            value in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "b", "-", "1", "*", " ", ",", "[", "]", "\"", "\u{a0}", "\u{3000}",
                    "\u{2028}", "\t", "\n", "\0", "\u{200b}", "\u{85}", "é",
                ]),
                0..24,
            ).prop_map(|parts| parts.concat()),
            devices in proptest::collection::vec("[ab1-]{1,5}", 1..8),
        ) {
            let Ok(granted) = scope(&value) else { return Ok(()) };
            for device in devices.iter().map(String::as_str).chain(["zz-other"]) {
                if granted.allows(device) {
                    prop_assert!(
                        named(&value, device),
                        "{value:?} grants {device:?}, which none of its entries names"
                    );
                }
            }
        }
    }

    #[test]
    fn a_device_outside_the_scope_is_403_naming_claim_and_device() {
        let e = scope("site-a-*").unwrap().check("site-b-1").unwrap_err();
        assert_eq!(e.status, http::StatusCode::FORBIDDEN);
        assert!(
            e.message.contains(CLAIM) && e.message.contains("site-b-1"),
            "{e}"
        );
        assert!(ReadScope::Every.check("site-b-1").is_ok());
    }
}
