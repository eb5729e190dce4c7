//! Readings stored twice: fan-out keys nest, so a reading written, then redelivered
//! after a raise, can sit under two partition keys with one sort key; and a message
//! rebuilt into other blocks (a raise moved its first member's key, a partial write
//! split it) can hold a reading in two items. Reads show it once; the copies still
//! cost storage and WCU. Two slabs can hold one reading too (a batch written twice),
//! or a slab or run and the device's own item; a run and the slabs it was compacted
//! from do not count as two. A reading is identified by its sort key, qualified by its
//! entity where the sort key does not hold it ([`reading_identity`]); a block, slab or
//! run holds the readings its members' own sort keys name.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sharding::time::Timestamp;
use store::scan::Tier;

use super::analysis::Sampled;

/// Readings held by more than one item, from the items' sort keys (a block's, slab's or
/// run's: its members').
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DuplicateReport {
    /// Readings held, each time an item holds one: items of one reading whose sort key
    /// names it, and each member of each block, slab or run (but a slab's of a reading
    /// a run holds).
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

/// Counts the readings held by more than one item among `items` (a block's, a slab's
/// or a run's members each held by it; an item without a sort key left out), in any
/// order; an item seen twice (a write repeated on one key) counts once. A run stands
/// for its window's slabs: a reading a run holds is not held again by the slabs it was
/// compacted from (they expire), but is by a device's own item or another run, and a
/// reading no run holds is held again by a second slab. Memory: one entry per distinct
/// reading.
pub fn count_duplicates<'a>(items: impl IntoIterator<Item = &'a Sampled>) -> DuplicateReport {
    let mut holders_of: HashMap<String, Holders<'a>> = HashMap::new();
    for item in items {
        let Some(sk) = item.sk.as_deref() else {
            continue;
        };
        let pk = item.write.pk.as_str();
        let held: Vec<&str> = if item.members.is_empty() {
            vec![sk]
        } else {
            item.members.iter().map(String::as_str).collect()
        };
        for reading_sk in held {
            if let Some(identity) = reading_identity(pk, reading_sk) {
                let holders = holders_of.entry(identity).or_default();
                match item.tier {
                    Tier::Slab => holders.slabs.insert((pk, sk)),
                    Tier::Own | Tier::Run => holders.others.insert((pk, sk)),
                };
                holders.in_run |= item.tier == Tier::Run;
            }
        }
    }
    let copies: Vec<u64> = holders_of.values().map(Holders::copies).collect();
    let items: u64 = copies.iter().sum();
    let readings = copies.len() as u64;
    DuplicateReport {
        items,
        readings,
        duplicated: copies.iter().filter(|&&c| c > 1).count() as u64,
        extra_copies: items - readings,
    }
}

/// The items holding one reading, by their keys.
#[derive(Default)]
struct Holders<'a> {
    /// Slabs.
    slabs: HashSet<(&'a str, &'a str)>,
    /// Runs and the device's own items.
    others: HashSet<(&'a str, &'a str)>,
    /// Whether a run is among them.
    in_run: bool,
}

impl Holders<'_> {
    /// How many copies of the reading they hold: a run's slabs are none.
    fn copies(&self) -> u64 {
        let slabs = if self.in_run { 0 } else { self.slabs.len() };
        (self.others.len() + slabs) as u64
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
