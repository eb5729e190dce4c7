//! Property: one rule for a re-sent identity. Readings stored as several copies in
//! different streams (a re-send keyed under another fan-out's key), each copy written
//! at a distinct time, in any interleaving of streams, arrival kinds, pages, limits,
//! resumes and orders: the merge emits each reading once, and always the copy written
//! last, bounded or windowed.

use std::cmp::Ordering;

use proptest::prelude::*;
use sharding::merge::{Arrival, BoundedMerge, Order, PageAsk, Step, StreamShape, TimedKey};
use sharding::written::Written;

/// Timestamp, then the reading's id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(i64, u32);

impl TimedKey for Key {
    fn ts_ms(&self) -> i64 {
        self.0
    }
}

/// One stored copy: the reading and when this copy was written.
#[derive(Debug, Clone, PartialEq)]
struct Copy {
    key: Key,
    written: u32,
}

impl Written for Copy {
    fn written_cmp(&self, other: &Self) -> Ordering {
        self.written.cmp(&other.written)
    }
}

const SPAN: (i64, i64) = (0, 100);

/// A stream's copies in the order its pages deliver them.
fn arrival_order(mut copies: Vec<Copy>, arrival: Arrival, order: Order) -> Vec<Copy> {
    match arrival {
        Arrival::InOrder => copies.sort_by(|a, b| order.cmp(&a.key, &b.key)),
        // Time order, ties in reverse id order.
        Arrival::TimeIndexed | Arrival::Blocks { .. } => {
            copies.sort_by(|a, b| order.cmp(&a.key.0, &b.key.0).then(b.key.1.cmp(&a.key.1)));
        }
        // Any order: by when written.
        Arrival::Unordered => copies.sort_by_key(|c| c.written),
    }
    copies
}

/// Drives `merge` over `streams` with pages of at most `page_cap`; returns what it
/// emitted and whether more follow.
fn drive(
    mut merge: BoundedMerge<Key, Copy>,
    streams: &[(StreamShape, Vec<Copy>)],
    page_cap: usize,
) -> (Vec<Copy>, bool) {
    let mut positions = vec![0usize; streams.len()];
    let mut out = Vec::new();
    for _ in 0..100_000 {
        match merge.step(3) {
            Step::Done { items, more } => {
                out.extend(items);
                return (out, more);
            }
            Step::Read(asks) => {
                out.extend(merge.take_emitted());
                for PageAsk { stream, limit, .. } in asks {
                    let copies = &streams[stream].1;
                    let start = positions[stream];
                    let take = limit.map_or(page_cap, |l| (l as usize).min(page_cap));
                    let end = (start + take.max(1)).min(copies.len());
                    positions[stream] = end;
                    let page: Vec<(Key, Copy)> = copies[start..end]
                        .iter()
                        .map(|c| (c.key.clone(), c.clone()))
                        .collect();
                    let last_ts = page.last().map(|(k, _)| k.0);
                    merge.deliver(stream, page, last_ts, end == copies.len());
                }
            }
        }
    }
    panic!("the merge did not finish");
}

fn arrival() -> impl Strategy<Value = Arrival> {
    prop_oneof![
        Just(Arrival::InOrder),
        Just(Arrival::TimeIndexed),
        Just(Arrival::Blocks { window_ms: 1 }),
        Just(Arrival::Unordered)
    ]
}

/// Each reading: its millisecond (few, so ties are common) and the streams holding a
/// copy of it (a set, so a stream holds a reading once).
fn readings() -> impl Strategy<Value = Vec<(i64, Vec<bool>)>> {
    prop::collection::vec((0i64..10, prop::collection::vec(any::<bool>(), 4)), 1..30)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_reading_is_answered_once_as_its_last_written_copy(
        readings in readings(),
        arrivals in prop::collection::vec(arrival(), 4),
        // The write order of the copies: a shuffle, so distinct.
        seed in any::<u64>(),
        descending in any::<bool>(),
        limit in 1usize..12,
        page_cap in 1usize..6,
        windowed in any::<bool>(),
    ) {
        let order = if descending { Order::Descending } else { Order::Ascending };
        let mut copies: Vec<(usize, Copy)> = Vec::new();
        for (id, (tick, held_by)) in readings.iter().enumerate() {
            let key = Key(tick * 10, id as u32);
            let streams: Vec<usize> = held_by
                .iter()
                .enumerate()
                .filter(|(_, held)| **held)
                .map(|(s, _)| s)
                .collect();
            // Every reading is stored at least once.
            let streams = if streams.is_empty() { vec![id % 4] } else { streams };
            for s in streams {
                copies.push((s, Copy { key: key.clone(), written: 0 }));
            }
        }
        // Distinct write orders, shuffled by the seed (a multiplicative permutation).
        let n = copies.len() as u64;
        let step = (seed % n.max(1)) * 2 + 1;
        let modulus = n.next_power_of_two().max(2) * 2;
        let mut orders: Vec<u64> = (0..modulus).map(|i| (i * step + seed) % modulus).collect();
        orders.truncate(copies.len());
        for ((_, c), w) in copies.iter_mut().zip(orders) {
            c.written = w as u32;
        }
        let mut expected: Vec<Copy> = Vec::new();
        let mut all: Vec<Copy> = copies.iter().map(|(_, c)| c.clone()).collect();
        all.sort_by(|a, b| order.cmp(&a.key, &b.key).then(b.written.cmp(&a.written)));
        for c in all {
            if expected.last().is_none_or(|e| e.key != c.key) {
                expected.push(c);
            }
        }
        let streams: Vec<(StreamShape, Vec<Copy>)> = arrivals
            .iter()
            .enumerate()
            .map(|(s, &arrival)| {
                let mine = copies.iter().filter(|(at, _)| *at == s).map(|(_, c)| c.clone());
                (StreamShape { span: SPAN, arrival }, arrival_order(mine.collect(), arrival, order))
            })
            .collect();
        let shapes = || streams.iter().map(|(s, _)| *s).collect::<Vec<_>>();

        let answered = if windowed {
            drive(BoundedMerge::windowed(shapes(), order, limit, None), &streams, page_cap).0
        } else {
            // Page after page, each resumed after the last key of the one before.
            let mut answered: Vec<Copy> = Vec::new();
            let mut after: Option<Key> = None;
            loop {
                let merge = BoundedMerge::new(shapes(), order, limit, after.clone());
                let (items, more) = drive(merge, &streams, page_cap);
                prop_assert!(items.len() <= limit);
                after = items.last().map(|c| c.key.clone());
                answered.extend(items);
                if !more {
                    break;
                }
            }
            answered
        };
        prop_assert_eq!(answered, expected);
    }
}
