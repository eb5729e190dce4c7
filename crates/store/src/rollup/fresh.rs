//! The fleet's fresh minutes (`fresh#{hour}`/`{minute}`): the cells of one compacted slab
//! window, written by the sealer's compaction (docs/design-slabs.md, "The fleet's
//! minutes fresh") so the fleet's routes answer the minutes after the last sealed hour
//! within minutes of now, rather than at the hour's seal.
//!
//! A fresh minute is a pure function of its window's slabs, each reading counted once
//! (the copy written last, as its runs keep it): its readings, the distinct devices
//! that sent them, and each metric's exact cell. So it is written unconditionally, and a
//! compaction killed and run again, or two at once, write the same body. Every window
//! compaction passes gets one, even of no reading, so a reader tells a minute with no
//! slab-held reading from one not compacted yet: the minutes it answers are those up to
//! the first without an item ([`fresh_end`]).
//!
//! What a fresh minute does not hold: a reading stored in its device's own items (a
//! device whose share of a batch filled a write unit, a reading older than the slabs
//! accept), and a reading that arrived after its window was compacted. Those reach the
//! fleet's cells when the hour is sealed; the hour's seal stays the record, and a reader
//! answers a sealed hour from its fleet parts alone.

use serde::{Deserialize, Serialize};

use super::cells::Cells;
use super::{HOUR_MS, MINUTE_MS, RollupItem, RollupKey, hour_label, hour_of};
use crate::error::StoreError;

/// One compacted window's fleet cells: its start (epoch ms, a whole minute) and the
/// cells of every slab-held reading in it, `devices` the distinct devices that sent
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreshMinute {
    #[serde(rename = "t")]
    pub start_ms: i64,
    #[serde(rename = "c")]
    pub cells: Cells,
}

/// The key of the fresh minute starting at `start_ms`.
pub fn key(start_ms: i64) -> RollupKey {
    RollupKey {
        pk: partition(hour_of(start_ms)),
        sk: format!("{:02}", (start_ms - hour_of(start_ms)) / MINUTE_MS),
    }
}

/// The partition of one hour's fresh minutes: one Query reads the hour's 60.
pub fn partition(hour_ms: i64) -> String {
    format!("fresh#{}", hour_label(hour_ms))
}

impl FreshMinute {
    /// Its item, expiring at `ttl` (epoch s). Version 0: the body is a pure function of
    /// the window, written unconditionally.
    pub fn item(&self, ttl: Option<i64>) -> Result<RollupItem, StoreError> {
        if self.start_ms.rem_euclid(MINUTE_MS) != 0 {
            return Err(StoreError::Malformed(format!(
                "a fresh minute starts on a whole minute, not at {}",
                self.start_ms
            )));
        }
        RollupItem::with_body(key(self.start_ms), 0, self, ttl)
    }

    /// The fresh minute `item` holds, refused unless it lies where its key says.
    pub fn of(item: &RollupItem) -> Result<Self, StoreError> {
        let minute: FreshMinute = item.body()?;
        if key(minute.start_ms) != item.key() {
            return Err(StoreError::Malformed(format!(
                "fresh minute {}/{} holds the minute starting at {}",
                item.pk, item.sk, minute.start_ms
            )));
        }
        Ok(minute)
    }
}

/// Where the fresh minutes `minutes` (any order) answer up to from `from_ms` (a whole
/// minute): the start of the first minute from it without one. `from_ms` itself when
/// its minute has none.
pub fn fresh_end(minutes: impl IntoIterator<Item = i64>, from_ms: i64) -> i64 {
    let mut starts: Vec<i64> = minutes.into_iter().filter(|&m| m >= from_ms).collect();
    starts.sort_unstable();
    starts.dedup();
    let mut end = from_ms;
    for start in starts {
        if start != end {
            break;
        }
        end += MINUTE_MS;
    }
    end
}

/// The hours whose fresh minutes a reader of `[from_ms, to_ms)` reads.
pub fn hours(from_ms: i64, to_ms: i64) -> impl Iterator<Item = i64> {
    let first = hour_of(from_ms);
    let last = hour_of(to_ms.max(from_ms + 1) - 1);
    (first..=last).step_by(HOUR_MS as usize)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::decimal::Decimal;

    const HOUR: i64 = 1_782_090_000_000;

    #[test]
    fn a_fresh_minute_is_keyed_by_its_hour_and_minute_and_reads_back() {
        let mut cells = Cells::default();
        let metrics = BTreeMap::from([("t".to_owned(), Decimal::parse("21.5").unwrap())]);
        cells.add_reading(&metrics);
        cells.devices = 1;
        let minute = FreshMinute {
            start_ms: HOUR + 7 * MINUTE_MS,
            cells,
        };
        let item = minute.item(Some(99)).unwrap();
        assert_eq!(item.pk, format!("fresh#{HOUR:013}"));
        assert_eq!(item.sk, "07");
        assert_eq!(item.ttl, Some(99));
        assert_eq!(FreshMinute::of(&item).unwrap(), minute);
        let mut moved = item.clone();
        moved.sk = "08".to_owned();
        assert!(FreshMinute::of(&moved).is_err(), "a body under another key");
        let ragged = FreshMinute {
            start_ms: HOUR + 1,
            ..FreshMinute::default()
        };
        assert!(ragged.item(None).is_err());
    }

    #[test]
    fn fresh_minutes_answer_up_to_the_first_missing_one() {
        let m = |i: i64| HOUR + i * MINUTE_MS;
        assert_eq!(fresh_end([m(2), m(0), m(1), m(4)], m(0)), m(3));
        assert_eq!(
            fresh_end([m(2), m(1)], m(0)),
            m(0),
            "its first minute has none"
        );
        assert_eq!(fresh_end([m(0), m(1), m(1)], m(1)), m(2));
        assert_eq!(fresh_end([], m(5)), m(5));
        let across: Vec<i64> = (0..70).map(m).collect();
        assert_eq!(fresh_end(across, m(50)), m(70), "across an hour");
    }

    #[test]
    fn a_reader_reads_each_hour_its_range_touches() {
        let h: Vec<i64> = hours(HOUR + 5 * MINUTE_MS, HOUR + HOUR_MS + 1).collect();
        assert_eq!(h, vec![HOUR, HOUR + HOUR_MS]);
        let h: Vec<i64> = hours(HOUR, HOUR + HOUR_MS).collect();
        assert_eq!(h, vec![HOUR]);
        assert_eq!(hours(HOUR, HOUR).collect::<Vec<_>>(), vec![HOUR]);
    }
}
