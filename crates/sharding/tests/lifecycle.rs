//! The fan-out lifecycle as writers and readers live it: any sequence of raises (by
//! throttle, by measured rate, by an operator), shrinks after a quiet period, writers
//! whose cached metadata is up to a cache TTL old, readings stamped up to the accepted
//! skew ahead or hours behind, crashes between a write and the queue's delete, and
//! redeliveries. Every stored reading is found by the read plan of every range holding
//! it (one entity and every entity), and de-duplicated by sort key it appears exactly
//! once in the answer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::fanout::planned_raise;
use sharding::read_plan::{passes_time_filter, plan_all, plan_entity, sk_in_bounds};
use sharding::{
    Bucket, FanoutDecision, FanoutPolicy, Layout, ReadPlan, ReadingRef, ShardMeta, Signal,
    TableHistory, Throttle, TimeRange, Timestamp, decide, decide_shrink, write_key,
};

use crate::common::nz;

/// 2026-06-22T00:00:00Z
const T0: i64 = 1_782_086_400_000;
const ENTITY: &str = "sensor-alpha-001";
/// The template's defaults for SHARD_CACHE_TTL_SECS and MAX_FUTURE_SECS, and its fan-out
/// policy but for the key rate (`RAISE_AHEAD_WCU` 500 here, 100 by default).
const CACHE_TTL_MS: i64 = 60_000;
const MAX_FUTURE_MS: i64 = 300_000;
const POLICY: FanoutPolicy = FanoutPolicy {
    cooldown: Duration::from_secs(2),
    jitter: Duration::from_secs(1),
    max_fanout: 32,
    propagation_margin: Duration::from_secs(365),
    key_rate: 500.0,
    shrink_after: Duration::from_secs(900),
};
const WRITERS: usize = 3;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).expect("in range")
}

#[derive(Debug, Clone)]
enum Op {
    /// The clock moves on.
    Advance(i64),
    /// Writer `w`'s write was throttled at the key range: it re-reads the metadata and
    /// decides, with a measured rate in readings per second if it has one.
    Throttled { w: usize, rate: Option<u32> },
    /// Writer `w` measured a rate (no throttle): a raise ahead, and a busy mark.
    Busy { w: usize, rate: u32 },
    /// An operator schedules fan-out `k`.
    Planned { k: u32 },
    /// Writer `w` sees the entity quiet and asks for a shrink.
    Quiet { rate: Option<u32> },
    /// Writer `w` writes a reading stamped `offset` ms from now; `crash`: it dies before
    /// the delete, so the message comes back.
    Write { w: usize, offset: i64, crash: bool },
    /// Writer `w` receives a message again whose reading was already written.
    Redeliver { w: usize, pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let w = 0..WRITERS;
    prop_oneof![
        3 => prop_oneof![0..5_000i64, 0..120_000i64, 0..1_500_000i64].prop_map(Op::Advance),
        2 => (w.clone(), prop::option::of(0u32..40_000)).prop_map(|(w, rate)| Op::Throttled { w, rate }),
        1 => (w.clone(), 0u32..40_000).prop_map(|(w, rate)| Op::Busy { w, rate }),
        1 => (1u32..=32).prop_map(|k| Op::Planned { k }),
        2 => prop::option::of(0u32..2_000).prop_map(|rate| Op::Quiet { rate }),
        6 => (w.clone(), prop_oneof![-MAX_FUTURE_MS..=MAX_FUTURE_MS, -3 * 3_600_000i64..0], any::<bool>())
            .prop_map(|(w, offset, crash)| Op::Write { w, offset, crash }),
        2 => (w, any::<usize>()).prop_map(|(w, pick)| Op::Redeliver { w, pick }),
    ]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        // Sub-shards on base shards (N = 8: from j = 8 on keys of their own; N = 3: from
        // j = 3), and on keys of their own.
        2 => prop::sample::select(vec![Bucket::Minute, Bucket::Hour, Bucket::Day])
            .prop_map(|b| Layout::time_bucket(b, nz(8))),
        1 => prop::sample::select(vec![Bucket::Hour, Bucket::Day])
            .prop_map(|b| Layout::time_bucket(b, nz(3))),
        1 => prop::sample::select(vec![Bucket::Minute, Bucket::Hour, Bucket::Day])
            .prop_map(|b| Layout::time_bucket_dedicated(b, nz(8))),
        1 => Just(Layout::random(nz(2))),
        1 => Just(Layout::calculated("event_id", nz(2))),
    ]
}

/// A writer's cached copy of the entity's metadata and when it read it.
#[derive(Debug, Clone)]
struct View {
    meta: ShardMeta,
    fetched: i64,
}

#[derive(Debug)]
struct World {
    table: TableHistory,
    default: u32,
    now: i64,
    store: ShardMeta,
    views: Vec<View>,
    /// (PK, SK) -> (event id, ts): what the readings table holds.
    items: BTreeMap<(String, String), (String, Timestamp)>,
    /// Readings written whose message will come back.
    crashed: Vec<(String, Timestamp)>,
    next_id: u64,
    rng: ChaCha8Rng,
}

impl World {
    fn new(layout: Layout) -> Self {
        let default = layout.default_fanout();
        let store = ShardMeta {
            number_of_shards: default,
            ..ShardMeta::initial(at(T0))
        };
        World {
            table: TableHistory::new(layout),
            default,
            now: T0,
            views: vec![
                View {
                    meta: store.clone(),
                    fetched: T0,
                };
                WRITERS
            ],
            store,
            items: BTreeMap::new(),
            crashed: Vec::new(),
            next_id: 0,
            rng: ChaCha8Rng::seed_from_u64(17),
        }
    }

    /// Writer `w`'s view, re-read once its cache has expired.
    fn view(&mut self, w: usize) -> &ShardMeta {
        if self.now - self.views[w].fetched >= CACHE_TTL_MS {
            self.refresh(w);
        }
        &self.views[w].meta
    }

    fn refresh(&mut self, w: usize) {
        self.views[w] = View {
            meta: self.store.clone(),
            fetched: self.now,
        };
    }

    /// A decision applied with the conditional update (it wins: the view is fresh).
    fn decide(&mut self, w: usize, signal: Signal) {
        self.refresh(w);
        let decision = decide(
            Some(&self.store),
            &signal,
            at(self.now),
            self.default,
            &POLICY,
            &mut self.rng,
        );
        if let FanoutDecision::Raise(raise) = decision {
            assert_eq!(raise.precondition_last_updated, self.store.last_updated);
            self.store = self.store.raised(&raise).expect("a valid raise");
            self.refresh(w);
        }
    }

    fn write(&mut self, w: usize, event_id: String, ts: Timestamp) {
        let now = at(self.now);
        let history = self.view(w).shard_history.clone();
        let reading = ReadingRef::new(ENTITY, &event_id, ts);
        let key = write_key(&reading, &self.table, &history, now)
            .expect("valid")
            .key;
        self.items.insert((key.pk, key.sk), (event_id, ts));
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Advance(ms) => self.now += ms,
            Op::Throttled { w, rate } => {
                let now = at(self.now);
                let default = self.default;
                let keyed = self
                    .view(w)
                    .shard_history
                    .for_write(now, now)
                    .unwrap_or(default);
                let signal = Signal {
                    throttle: Throttle::KeyRange,
                    keyed,
                    rate: rate.map(f64::from),
                };
                self.decide(w, signal);
                self.store.last_hot = Some(at(self.now));
            }
            Op::Busy { w, rate } => {
                let signal = Signal {
                    throttle: Throttle::Other,
                    keyed: self.default,
                    rate: Some(f64::from(rate)),
                };
                self.decide(w, signal);
                self.store.last_hot = Some(at(self.now));
            }
            Op::Planned { k } => {
                if let Ok(Some(raise)) =
                    planned_raise(&self.store, k, at(self.now), self.default, &POLICY)
                {
                    self.store = self.store.raised(&raise).expect("a valid raise");
                }
            }
            Op::Quiet { rate } => {
                let shrink = decide_shrink(
                    &self.store,
                    rate.map(f64::from),
                    at(self.now),
                    self.default,
                    &POLICY,
                );
                if let Some(shrink) = shrink {
                    self.store = self.store.shrunk(&shrink).expect("a valid shrink");
                }
            }
            Op::Write { w, offset, crash } => {
                let id = format!("evt-{}", self.next_id);
                self.next_id += 1;
                let ts = at(self.now + offset);
                self.write(w, id.clone(), ts);
                if crash {
                    self.crashed.push((id, ts));
                }
            }
            Op::Redeliver { w, pick } => {
                if !self.crashed.is_empty() {
                    let (id, ts) = self.crashed[pick % self.crashed.len()].clone();
                    self.write(w, id, ts);
                }
            }
        }
    }

    /// The distinct readings `plan` reads, de-duplicated by sort key, with how many
    /// stored copies it met.
    fn answer(&self, plan: &ReadPlan, range: TimeRange) -> (BTreeSet<String>, usize) {
        let mut seen = BTreeSet::new();
        let mut copies = 0;
        for ((pk, sk), (id, ts)) in &self.items {
            let read = plan.queries.iter().any(|q| {
                &q.pk == pk
                    && sk_in_bounds(q, sk)
                    && passes_time_filter(q, *ts)
                    && q.covers.contains(*ts)
            });
            if read && range.contains(*ts) {
                copies += 1;
                seen.insert(format!("{sk}|{id}"));
            }
        }
        (seen, copies)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_stored_reading_is_read_exactly_once(
        layout in layout(),
        ops in prop::collection::vec(op(), 1..60),
        before in 0i64..7_200_000,
        after in 1i64..7_200_000,
    ) {
        let mut world = World::new(layout);
        for op in ops {
            world.apply(op);
        }
        // A reader with the metadata as it is now.
        let history = world.store.shard_history.clone();
        let stored: BTreeMap<&String, Timestamp> =
            world.items.values().map(|(id, ts)| (id, *ts)).collect();
        for (id, ts) in &stored {
            let range = TimeRange::new(at(ts.as_millis() - before), at(ts.as_millis() + after))
                .expect("non-empty");
            let expected: BTreeSet<&String> = stored
                .iter()
                .filter(|(_, t)| range.contains(**t))
                .map(|(id, _)| *id)
                .collect();
            let plan = plan_entity(ENTITY, range, &world.table, &history).expect("plan");
            let (found, _) = world.answer(&plan, range);
            let ids: BTreeSet<&str> = found.iter().filter_map(|s| s.split('|').nth(1)).collect();
            prop_assert!(ids.contains(id.as_str()), "{id} at {ts} not read by {plan:?}; items {:?}; history {history:?}", world.items);
            // Once each: a reading's copies share its sort key.
            prop_assert_eq!(found.len(), expected.len(), "readings counted twice or missed");
            if matches!(world.table.at(*ts).strategy, sharding::Strategy::TimeBucket { .. }) {
                let all = plan_all(range, &world.table, &[(ENTITY, &history)]).expect("plan");
                let (found_all, _) = world.answer(&all, range);
                prop_assert_eq!(found_all.len(), expected.len(), "every-device read differs");
            }
        }
    }
}

/// Two raises in one millisecond put the second 1 ms ahead; a writer keys a reading
/// stamped then with it. A smaller planned k afterwards must neither drop that raise nor
/// follow it with a smaller k (found by the property above).
#[test]
fn a_raise_a_millisecond_ahead_is_never_undone() {
    for layout in [
        Layout::time_bucket(Bucket::Minute, nz(8)),
        Layout::time_bucket_dedicated(Bucket::Minute, nz(8)),
    ] {
        let mut world = World::new(layout);
        for op in [
            Op::Throttled { w: 0, rate: None },
            Op::Write {
                w: 0,
                offset: 0,
                crash: false,
            },
            Op::Planned { k: 9 },
            Op::Throttled { w: 1, rate: None },
            Op::Write {
                w: 1,
                offset: 1,
                crash: false,
            },
            Op::Planned { k: 3 },
        ] {
            world.apply(op);
        }
        let history = world.store.shard_history.clone();
        assert_eq!(history.latest().map(|e| e.value), Some(9), "{history:?}");
        let range = TimeRange::new(at(T0), at(T0 + 2)).expect("non-empty");
        let plan = plan_entity(ENTITY, range, &world.table, &history).expect("plan");
        let (found, _) = world.answer(&plan, range);
        assert_eq!(found.len(), world.items.len(), "{plan:?} {:?}", world.items);
    }
}
