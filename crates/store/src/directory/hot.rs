//! The hot index: which entities a read over every device must plan sub-shards for.
//!
//! A reading's key can be raised (k > 1) only where its entity's read fan-out exceeds 1
//! (`FanoutHistory::read_spans`, default 1): from an hour before a raise, `REKEY_HORIZON`,
//! until the shrink back to 1 is in force. The index lists each entity in one item per
//! hour of that time (`hot#{YYYY-MM-DDTHH}`), so a read of a range looks up the hours of
//! the range, not every entity ever raised, and an entity shrunk long ago costs nothing
//! to a read of a later range. Each item holds only the entities raised in or across its
//! hour, and expires with the readings stamped in it.
//!
//! The entity item's `hot_through` says how far the listing is complete: every hour
//! before it in which the entity's stored history can raise a key lists the entity. A
//! writer extends it before keying a reading (`ShardDirectory::fanout`), a change lists
//! the hours it alters before it is written, and listings are never removed, so every
//! reading stored under a raised key lies in an hour that lists its entity.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sharding::epoch::{FanoutHistory, REKEY_HORIZON};
use sharding::fanout::ShardMeta;
use sharding::time::{Bucket, TimeRange, Timestamp};

/// The granularity of the hot index: one item per hour, whatever the table's layout.
pub const HOT_BUCKET: Bucket = Bucket::Hour;

/// An entity's stored metadata and how far the hot index lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityRecord {
    /// The metadata.
    pub meta: ShardMeta,
    /// Every hour before this in which the entity's readings can carry a raised key
    /// lists the entity; `None` on an item no writer has listed yet (a table from before
    /// the index: its raised entities are in the legacy `hot` item).
    pub hot_through: Option<Timestamp>,
}

impl EntityRecord {
    /// A record whose hot listing is not started.
    #[must_use]
    pub fn unlisted(meta: ShardMeta) -> Self {
        Self {
            meta,
            hot_through: None,
        }
    }
}

/// What a read of the hot index found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotListing {
    /// The entities of each hour asked for, by hour label (an hour without item: none).
    pub hours: BTreeMap<String, BTreeSet<String>>,
    /// The legacy one-item hot set, when asked for (empty if the table never had it).
    pub legacy: Option<BTreeSet<String>>,
}

/// Whether the hot index lists `entity` when it is raised: a device. An entity whose
/// name holds the key separator is no device (a slab group,
/// `sharding::slab::group_entity`): its keys are read by its group's own plan, which
/// reads every fan-out key of the group, never by a read over every device, which would
/// refuse its name.
#[must_use]
pub fn lists(entity: &str) -> bool {
    !entity.contains(sharding::key::SEPARATOR)
}

/// The labels of the hours `range` meets, in time order.
#[must_use]
pub fn hours_of(range: TimeRange) -> Vec<String> {
    HOT_BUCKET.spans(range).map(|span| span.label).collect()
}

/// One hour of the hot index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotHour {
    /// Its label, `YYYY-MM-DDTHH` (the item is `hot#{label}`).
    pub label: String,
    /// Its first millisecond.
    pub start: Timestamp,
}

/// The hours of `[from, to)` in which a reading of an entity with `history` can carry a
/// raised key (where its read fan-out, default 1, exceeds 1), in time order.
#[must_use]
pub fn raised_hours(history: &FanoutHistory, from: Timestamp, to: Timestamp) -> Vec<HotHour> {
    let Ok(range) = TimeRange::new(from, to) else {
        return Vec::new();
    };
    let mut out: Vec<HotHour> = Vec::new();
    for (span, k) in history.read_spans(range, 1) {
        if k < 2 {
            continue;
        }
        for hour in HOT_BUCKET.spans(span) {
            if out.last().is_none_or(|last| last.label != hour.label) {
                out.push(HotHour {
                    label: hour.label,
                    start: HOT_BUCKET.start(hour.range.from()),
                });
            }
        }
    }
    out
}

/// The labels of `hours`.
#[must_use]
pub fn labels(hours: &[HotHour]) -> Vec<String> {
    hours.iter().map(|h| h.label.clone()).collect()
}

/// Whether `history` raises a key of any reading stamped in `range`.
#[must_use]
pub fn raised_within(history: &FanoutHistory, range: TimeRange) -> bool {
    history.read_spans(range, 1).iter().any(|(_, k)| *k > 1)
}

/// The end of the listing a writer at `now` needs before keying: the hour boundary
/// after `now + lookahead` (a reading can be stamped up to the accepted future skew
/// ahead, which the lookahead covers), so a raised entity is listed once an hour.
#[must_use]
pub fn listing_end(now: Timestamp, lookahead: Duration) -> Timestamp {
    HOT_BUCKET.next_start(now.saturating_add(lookahead))
}

/// When the items of hours listed up to `through` may expire: once every reading
/// stamped in them has (stamped at most `through`, kept `retention`).
#[must_use]
pub fn expiry(through: Timestamp, retention: Duration) -> Timestamp {
    through
        .saturating_add(retention)
        .saturating_add(REKEY_HORIZON)
}

/// What a change of `entity` decided at `decided` must list before it is written, and
/// the `hot_through` to store with it (`None`: leave the stored one).
///
/// A change alters the read fan-out only of readings stamped from `decided -
/// REKEY_HORIZON` on, so the new history is listed from there (or from the stored
/// `hot_through`, if earlier: the claim must hold for the whole span it covers) to
/// `max(stored, decided_end)`. A record never listed keeps no claim: it lists what the
/// change alters and leaves the backfill to the next writer.
#[must_use]
pub fn change_listing(
    stored: Option<&EntityRecord>,
    next: &FanoutHistory,
    decided: Timestamp,
    decided_end: Timestamp,
) -> (Vec<HotHour>, Option<Timestamp>) {
    let altered = decided.checked_sub(REKEY_HORIZON).unwrap_or(Timestamp::MIN);
    let legacy =
        stored.is_some_and(|r| r.hot_through.is_none() && r.meta.shard_history.ever_fanned_out());
    let through = stored.and_then(|r| r.hot_through);
    let from = through.map_or(altered, |w| w.min(altered));
    let to = through.map_or(decided_end, |w| w.max(decided_end));
    let hours = raised_hours(next, from, to);
    let claim = if legacy || !next.ever_fanned_out() {
        through
    } else {
        Some(to)
    };
    (hours, claim)
}

#[cfg(test)]
mod tests {
    use sharding::epoch::Epoch;

    use super::*;

    const H: i64 = 3_600_000;
    /// 2026-06-22T00:00Z.
    const BASE: i64 = 1_782_086_400_000;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(BASE + ms).expect("in range")
    }

    fn history(epochs: &[(i64, u32)]) -> FanoutHistory {
        FanoutHistory::from_epochs(
            epochs
                .iter()
                .map(|&(ms, value)| Epoch {
                    effective_from: at(ms),
                    value,
                })
                .collect(),
        )
        .expect("valid")
    }

    #[test]
    fn raised_hours_run_from_an_hour_before_the_raise_to_the_shrink() {
        // Raised at 02:30, back to 1 at 05:10.
        let h = history(&[(2 * H + H / 2, 4), (5 * H + H / 6, 1)]);
        assert_eq!(
            labels(&raised_hours(&h, at(0), at(10 * H))),
            [
                "2026-06-22T01",
                "2026-06-22T02",
                "2026-06-22T03",
                "2026-06-22T04",
                "2026-06-22T05"
            ]
        );
        assert!(raised_hours(&h, at(6 * H), at(9 * H)).is_empty());
        assert!(!raised_within(
            &h,
            TimeRange::new(at(5 * H + H / 6), at(9 * H)).expect("range")
        ));
        assert!(raised_within(
            &h,
            TimeRange::new(at(H + H / 2), at(H + H / 2 + 1)).expect("range")
        ));
        assert!(!raised_within(
            &h,
            TimeRange::new(at(0), at(H + H / 2)).expect("range")
        ));
    }

    #[test]
    fn a_change_lists_what_it_alters_and_keeps_the_claim_contiguous() {
        let meta = |h: FanoutHistory| ShardMeta {
            number_of_shards: 1,
            last_updated: at(0),
            shard_history: h,
            last_hot: None,
        };
        // A first raise at 10:20: 09:20 to the end of 11:00.
        let next = history(&[(10 * H + H / 3, 2)]);
        let (hours, claim) = change_listing(None, &next, at(10 * H + H / 3), at(12 * H));
        assert_eq!(
            labels(&hours),
            ["2026-06-22T09", "2026-06-22T10", "2026-06-22T11"]
        );
        assert_eq!(claim, Some(at(12 * H)));
        // A stored claim older than the altered span: the gap is listed too.
        let stored = EntityRecord {
            meta: meta(history(&[(2 * H, 2)])),
            hot_through: Some(at(4 * H)),
        };
        let next = history(&[(2 * H, 2), (10 * H, 4)]);
        let (hours, claim) = change_listing(Some(&stored), &next, at(10 * H), at(11 * H));
        assert_eq!(hours.first().map(|h| h.start), Some(at(4 * H)));
        assert_eq!(hours.len(), 7);
        assert_eq!(claim, Some(at(11 * H)));
        // A legacy record keeps no claim: the writers' backfill makes it.
        let legacy = EntityRecord::unlisted(meta(history(&[(2 * H, 2)])));
        let (hours, claim) = change_listing(Some(&legacy), &next, at(10 * H), at(11 * H));
        assert_eq!(labels(&hours), ["2026-06-22T09", "2026-06-22T10"]);
        assert_eq!(claim, None);
    }
}
