//! Readings stored twice: fan-out keys nest, so a reading written, then redelivered
//! after a raise, can sit under two partition keys with one sort key; and a message
//! rebuilt into other blocks (a raise moved its first member's key, a partial write
//! split it) can hold a reading in two items. Reads show it once; the copies still
//! cost storage and WCU. A reading is identified by its sort key, qualified by its
//! entity where the sort key does not hold it ([`reading_identity`]); a block holds
//! the readings its members' own sort keys name.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sharding::time::Timestamp;

/// Readings held by more than one item, from the items' sort keys (a block's: its
/// members').
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DuplicateReport {
    /// Readings held, each time an item holds one: items of one reading whose sort key
    /// names it, and each member of each block.
    pub items: u64,
    /// Distinct readings among them.
    pub readings: u64,
    /// Readings held by more than one item.
    pub duplicated: u64,
    /// Items beyond each reading's first (what de-duplicating reads leave out).
    pub extra_copies: u64,
}

/// The identity of the reading a Shardline item holds, from its keys: a sort key
/// `{entity}#{ts}#{event_id}` (time-bucket layouts) names it whole; `{ts}#{event_id}`
/// names it within one entity, the partition key's first `#` segment (`{entity}` or
/// `{entity}#{r}`). `None` for a sort key of neither shape (not a reading).
#[must_use]
pub fn reading_identity(pk: &str, sk: &str) -> Option<String> {
    let parts: Vec<&str> = sk.split('#').collect();
    let is_ts = |s: &str| Timestamp::parse(s).is_ok();
    match parts.as_slice() {
        [entity, ts, event] if !entity.is_empty() && is_ts(ts) && !event.is_empty() => {
            Some(sk.to_owned())
        }
        [ts, event] if is_ts(ts) && !event.is_empty() => {
            let entity = pk.split('#').next().unwrap_or(pk);
            Some(format!("{entity}#{sk}"))
        }
        _ => None,
    }
}

/// Counts the readings held by more than one item among `items` (partition key, sort
/// key, and a block's members' own sort keys, empty for an item of one reading), in
/// any order; an item seen twice (a write repeated on one key) counts once. Memory:
/// one entry per distinct reading.
pub fn count_duplicates<'a>(
    items: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
) -> DuplicateReport {
    let mut pks_of: HashMap<String, HashSet<(&'a str, &'a str)>> = HashMap::new();
    for (pk, sk, members) in items {
        let held: Vec<&str> = if members.is_empty() {
            vec![sk]
        } else {
            members.iter().map(String::as_str).collect()
        };
        for reading_sk in held {
            if let Some(identity) = reading_identity(pk, reading_sk) {
                pks_of.entry(identity).or_default().insert((pk, sk));
            }
        }
    }
    let items: u64 = pks_of.values().map(|pks| pks.len() as u64).sum();
    let readings = pks_of.len() as u64;
    DuplicateReport {
        items,
        readings,
        duplicated: pks_of.values().filter(|pks| pks.len() > 1).count() as u64,
        extra_copies: items - readings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_named_by_its_sort_key_and_entity() {
        let at = "2026-06-22T00:00:00.007Z";
        let bucket_sk = format!("dev-1#{at}#e1");
        assert_eq!(
            reading_identity("1#2026-06-22T00", &bucket_sk),
            reading_identity("1.3#2026-06-22T00", &bucket_sk)
        );
        let plain_sk = format!("{at}#e1");
        assert_eq!(
            reading_identity("dev-1#0", &plain_sk),
            reading_identity("dev-1#2", &plain_sk)
        );
        // One sort key under two entities: two readings.
        assert_ne!(
            reading_identity("dev-1#0", &plain_sk),
            reading_identity("dev-2#0", &plain_sk)
        );
        assert_eq!(reading_identity("OPS_LOG", "METADATA"), None);
    }
}
