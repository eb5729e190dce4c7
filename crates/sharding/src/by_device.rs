//! The merge order of a read device by device (the sealer's `sealer::by_device`):
//! which device comes next, which of a key's readings it hands over, and in what order,
//! each once. Pure: the caller reads the pages and keeps each key's readings not handed
//! over yet; nothing here does I/O.
//!
//! A time-bucket key's sort key starts with the device id, so every key lists its items
//! device by device, in id order. So the next device is the least at the front of the
//! keys ([`next_device`]); each key's readings of it are at its front
//! ([`take_device`]), of which those the key answers for, inside the read's range, are
//! kept; and once no key may hold more of it, its readings are put in time order, ties
//! by event id, each once: of its copies, the one written last ([`in_order`],
//! `crate::written`).
//!
//! A run partition (`crate::slab`, `r#{group}#{hour}`) lists its items by their first
//! device, and an item holds the devices from its first on, in order, so its readings
//! are not in device order as they come: of each window, the item holding a device
//! can be any item read so far whose first device is at most it. Its readings are held
//! ([`release_runs`]) until the partition has shown every item that can hold them: one
//! whose first device is below the first device of the last item read (any later item
//! starts at or after that one), or all of them once it is read to its end.

use std::collections::VecDeque;

use crate::written::{Written, keep_last};

/// A reading as the merge by device sees it.
pub trait DeviceReading: Written {
    /// The device it belongs to.
    fn device(&self) -> &str;
    /// Its time, epoch ms.
    fn ts_ms(&self) -> i64;
    /// Its event id.
    fn event_id(&self) -> &str;
}

/// The device handed over next: the least of the devices at the keys' fronts, `None`
/// once every key is used up.
pub fn next_device<'a>(fronts: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    fronts.into_iter().min()
}

/// Moves the readings of `device` at the front of one key's `buffered` readings, and
/// keeps in `into` those the key answers for (`span`, `[from, to)` ms) inside the read's
/// `range` (`[from, to)` ms), at most `max` in all. Returns whether the device has more
/// than `max` (then what `into` holds is not all of them).
pub fn take_device<T: DeviceReading>(
    buffered: &mut VecDeque<T>,
    device: &str,
    span: (i64, i64),
    range: (i64, i64),
    max: usize,
    into: &mut Vec<T>,
) -> bool {
    let mut over = false;
    while buffered.front().is_some_and(|r| r.device() == device) {
        let Some(r) = buffered.pop_front() else {
            break;
        };
        let ts = r.ts_ms();
        if (span.0..span.1).contains(&ts) && (range.0..range.1).contains(&ts) {
            over |= into.len() >= max;
            if !over {
                into.push(r);
            }
        }
    }
    over
}

/// One device's readings gathered from every key, in time order (ties by event id),
/// each once: a reading stored twice (a redelivery, two blocks, a re-keyed copy) is the
/// copy written last ([`keep_last`]).
pub fn in_order<T: DeviceReading>(readings: &mut Vec<T>) {
    readings.sort_unstable_by(|a, b| (a.ts_ms(), a.event_id()).cmp(&(b.ts_ms(), b.event_id())));
    readings.dedup_by(|copy, kept| {
        let same = (copy.ts_ms(), copy.event_id()) == (kept.ts_ms(), kept.event_id());
        if same {
            keep_last(kept, copy);
        }
        same
    });
}

/// Readings in the order a run holds them, `(device, ts, event id)`, each once: of its
/// copies, the one written last ([`keep_last`]), as [`in_order`] for one device.
pub fn in_run_order<T: DeviceReading>(readings: &mut Vec<T>) {
    let identity = |r: &T| (r.device().to_owned(), r.ts_ms(), r.event_id().to_owned());
    readings.sort_unstable_by(|a, b| {
        (a.device(), a.ts_ms(), a.event_id()).cmp(&(b.device(), b.ts_ms(), b.event_id()))
    });
    readings.dedup_by(|copy, kept| {
        let same = identity(copy) == identity(kept);
        if same {
            keep_last(kept, copy);
        }
        same
    });
}

/// Takes a page of a run partition read in sort-key order: its readings join those
/// `held`, and every held reading whose device is below `bound` moves, in device order,
/// to the back of `ready` (the stream a merge by device reads). `bound` is the first
/// device of the last item the partition has shown (`crate::slab::run_page_bound` of
/// the page's last key), `None` once the partition is read to its end. The readings
/// moved before are all below every bound since, so `ready` stays in device order.
pub fn release_runs<T: DeviceReading>(
    held: &mut Vec<T>,
    page: Vec<T>,
    bound: Option<&str>,
    ready: &mut VecDeque<T>,
) {
    held.extend(page);
    held.sort_by(|a, b| a.device().cmp(b.device()));
    let complete = match bound {
        Some(bound) => held.partition_point(|r| r.device() < bound),
        None => held.len(),
    };
    ready.extend(held.drain(..complete));
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct R {
        device: &'static str,
        ts: i64,
        event: &'static str,
        written: i64,
    }

    fn r(device: &'static str, ts: i64, event: &'static str, written: i64) -> R {
        R {
            device,
            ts,
            event,
            written,
        }
    }

    impl Written for R {
        fn written_cmp(&self, other: &Self) -> Ordering {
            self.written.cmp(&other.written)
        }
    }

    impl DeviceReading for R {
        fn device(&self) -> &str {
            self.device
        }
        fn ts_ms(&self) -> i64 {
            self.ts
        }
        fn event_id(&self) -> &str {
            self.event
        }
    }

    #[test]
    fn the_next_device_is_the_least_at_the_fronts() {
        assert_eq!(next_device(["b", "a", "c"]), Some("a"));
        assert_eq!(next_device(std::iter::empty()), None);
    }

    #[test]
    fn a_key_hands_over_its_front_readings_of_the_device_in_its_span_and_the_range() {
        let mut key: VecDeque<R> = [
            r("a", 5, "e1", 0),
            r("a", 15, "e2", 0),
            r("a", 25, "e3", 0),
            r("a", 35, "e4", 0),
            r("b", 12, "e5", 0),
        ]
        .into();
        let mut into = Vec::new();
        // The key answers for [10, 40), the read for [0, 30).
        let over = take_device(&mut key, "a", (10, 40), (0, 30), 10, &mut into);
        assert!(!over);
        assert_eq!(into, vec![r("a", 15, "e2", 0), r("a", 25, "e3", 0)]);
        // The next device stays, for its turn.
        assert_eq!(key, VecDeque::from([r("b", 12, "e5", 0)]));
    }

    #[test]
    fn a_device_with_more_than_the_read_may_hold_is_over() {
        let mut key: VecDeque<R> = (0..4).map(|t| r("a", t, "e", 0)).collect();
        let mut into = vec![r("a", 100, "x", 0)];
        assert!(take_device(&mut key, "a", (0, 10), (0, 10), 2, &mut into));
        // Its readings are all taken off the key all the same.
        assert!(key.is_empty());
        assert_eq!(into.len(), 2);
        let mut key: VecDeque<R> = (0..2).map(|t| r("a", t, "e", 0)).collect();
        let mut into = Vec::new();
        assert!(!take_device(&mut key, "a", (0, 10), (0, 10), 2, &mut into));
    }

    #[test]
    fn a_devices_readings_come_in_time_order_each_once_the_copy_written_last() {
        let mut readings = vec![
            r("a", 20, "e1", 1),
            r("a", 10, "e2", 1),
            r("a", 20, "e1", 3),
            r("a", 10, "e1", 1),
            r("a", 20, "e1", 2),
        ];
        in_order(&mut readings);
        assert_eq!(
            readings,
            vec![
                r("a", 10, "e1", 1),
                r("a", 10, "e2", 1),
                r("a", 20, "e1", 3)
            ]
        );
    }

    #[test]
    fn a_run_order_is_by_device_then_time_each_identity_once_the_copy_written_last() {
        let mut readings = vec![
            r("b", 10, "e1", 1),
            r("a", 20, "e1", 1),
            r("a", 20, "e1", 4),
            r("b", 10, "e1", 2),
            r("a", 10, "e2", 1),
        ];
        in_run_order(&mut readings);
        assert_eq!(
            readings,
            vec![
                r("a", 10, "e2", 1),
                r("a", 20, "e1", 4),
                r("b", 10, "e1", 2)
            ]
        );
    }

    #[test]
    fn a_run_partition_releases_a_device_only_once_no_later_item_can_hold_it() {
        // Window 1's item holds a..c, window 2's a..b then c (a second item): listed by
        // first device, a#1, a#2, c#2.
        let mut held = Vec::new();
        let mut ready = VecDeque::new();
        // The first page ends at a#2: a later item may start at a, so nothing is ready.
        let page = vec![
            r("a", 1, "w1", 0),
            r("b", 1, "w1", 0),
            r("c", 1, "w1", 0),
            r("a", 2, "w2", 0),
            r("b", 2, "w2", 0),
        ];
        release_runs(&mut held, page, Some("a"), &mut ready);
        assert!(ready.is_empty());
        // The next page shows c#2: a and b are complete, c is not.
        release_runs(&mut held, vec![r("c", 2, "w2", 0)], Some("c"), &mut ready);
        let devices: Vec<&str> = ready.iter().map(|r| r.device).collect();
        assert_eq!(devices, ["a", "a", "b", "b"]);
        // The end: c, both windows'.
        release_runs(&mut held, Vec::new(), None, &mut ready);
        let devices: Vec<&str> = ready.iter().map(|r| r.device).collect();
        assert_eq!(devices, ["a", "a", "b", "b", "c", "c"]);
        assert!(held.is_empty());
    }
}
