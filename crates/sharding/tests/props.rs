//! Properties of the key design over random epoch histories (1: every written key is
//! covered by the read plan of every range holding it; 2: plans cost one query per
//! bucket for a cold entity and hold no query that cannot hold data; 3: a writer gives
//! a reading the same key every time): legacy `Unsharded` to sharded,
//! N up and down, k up and down, and a writer's clock anywhere a reading can be written
//! (ahead of it by the accepted skew, or after it by a redelivery or a late device).

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use sharding::epoch::Epoch;
use sharding::read_plan::{passes_time_filter, plan_all, plan_entity, sk_in_bounds};
use sharding::{
    Bucket, FanoutHistory, Layout, PlanError, REKEY_HORIZON, ReadingRef, Strategy as KeyStrategy,
    TableHistory, TimeRange, Timestamp, propagation_margin, write_key,
};

use crate::common::nz;

/// 2026-06-22T00:00:00Z
const T0: i64 = 1_782_086_400_000;
const HOUR: i64 = 3_600_000;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).expect("in range")
}

fn bucket() -> impl Strategy<Value = Bucket> {
    prop::sample::select(Bucket::ALL.to_vec())
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        1 => Just(Layout::unsharded()),
        1 => (1u32..=12).prop_map(|n| Layout::random(nz(n))),
        1 => (1u32..=12, any::<bool>()).prop_map(|(n, on_event)| {
            Layout::calculated(if on_event { "event_id" } else { "site" }, nz(n))
        }),
        3 => (1u32..=40, bucket(), any::<bool>()).prop_map(|(n, b, base)| if base {
            Layout::time_bucket(b, nz(n))
        } else {
            Layout::time_bucket_dedicated(b, nz(n))
        }),
    ]
}

/// A table history starting (often) with the legacy layout, then 0..4 changes.
fn table_history() -> impl Strategy<Value = TableHistory> {
    let first = prop_oneof![2 => Just(Layout::unsharded()), 1 => layout()];
    let changes = prop::collection::vec((1..3 * HOUR, layout()), 0..4);
    (first, changes).prop_map(|(first, changes)| {
        let mut epochs = vec![Epoch {
            effective_from: Timestamp::MIN,
            value: first,
        }];
        let mut t = T0 - HOUR;
        for (gap, value) in changes {
            t += gap;
            epochs.push(Epoch {
                effective_from: at(t),
                value,
            });
        }
        TableHistory::from_epochs(epochs).expect("sorted by construction")
    })
}

/// 0..4 fan-out epochs, k going up and down.
fn fanout_history(max_k: u32) -> impl Strategy<Value = FanoutHistory> {
    prop::collection::vec((1..3 * HOUR, 1..=max_k), 0..4).prop_map(|changes| {
        let mut t = T0 - HOUR / 2;
        let epochs = changes
            .into_iter()
            .map(|(gap, k)| {
                t += gap;
                Epoch {
                    effective_from: at(t),
                    value: k,
                }
            })
            .collect();
        FanoutHistory::from_epochs(epochs).expect("sorted by construction")
    })
}

#[derive(Debug, Clone)]
struct Reading {
    entity: &'static str,
    event_id: String,
    /// One tag, `site`, which a `Calculated` layout on `site` hashes.
    tags: BTreeMap<String, String>,
    ts: Timestamp,
}

impl Reading {
    fn as_ref(&self) -> ReadingRef<'_> {
        ReadingRef {
            entity: self.entity,
            event_id: &self.event_id,
            ts: self.ts,
            tags: &self.tags,
        }
    }
}

fn reading() -> impl Strategy<Value = Reading> {
    (
        prop::sample::select(vec!["sensor-alpha-001", "dev-1", "dev-2", "x"]),
        "[a-z0-9]{1,8}",
        "[a-z]{1,4}",
        (T0 - HOUR)..(T0 + 10 * HOUR),
    )
        .prop_map(|(entity, event_id, site, ms)| Reading {
            entity,
            event_id,
            tags: BTreeMap::from([("site".to_owned(), site)]),
            ts: at(ms),
        })
}

/// A range containing `ts`.
fn around(ts: Timestamp, before: i64, after: i64) -> TimeRange {
    TimeRange::new(at(ts.as_millis() - before), at(ts.as_millis() + after + 1)).expect("non-empty")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Property 1: every written key is covered by the read plan of every range that
    /// contains the reading's timestamp, for one entity and for all entities.
    #[test]
    fn written_keys_are_covered_by_read_plans(
        table in table_history(),
        fanout in fanout_history(6),
        r in reading(),
        before in 0..3 * HOUR,
        after in 0..3 * HOUR,
        written in -300_000..3 * HOUR,
    ) {
        let now = at(r.ts.as_millis() + written);
        let key = write_key(&r.as_ref(), &table, &fanout, now).expect("valid reading").key;
        let range = around(r.ts, before, after);
        let plan = plan_entity(r.entity, range, &table, &fanout).expect("plan");
        prop_assert!(
            plan.queries.iter().any(|q| q.pk == key.pk && sk_in_bounds(q, &key.sk) && q.covers.contains(r.ts)),
            "key {:?} not in the entity plan {:?}", key, plan
        );
        match plan_all(range, &table, &[(r.entity, &fanout)]) {
            Ok(all) => prop_assert!(
                all.queries.iter().any(|q| q.pk == key.pk && passes_time_filter(q, r.ts)),
                "key {:?} not in the all-entities plan", key
            ),
            Err(PlanError::Unsupported { .. }) => {
                let other = table
                    .spans(range)
                    .iter()
                    .any(|(_, l)| !matches!(l.strategy, KeyStrategy::TimeBucket { .. }));
                prop_assert!(other, "refused although every span is time-bucketed");
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }

    /// Exactness at the edges: a reading just outside the range is outside every query's
    /// sort-key bounds (entity plans) or time filter (all-entities plans).
    #[test]
    fn plans_exclude_readings_outside_the_range(
        table in table_history(),
        fanout in fanout_history(6),
        r in reading(),
        len in 1..3 * HOUR,
        written in -300_000..3 * HOUR,
    ) {
        let now = at(r.ts.as_millis() + written);
        let key = write_key(&r.as_ref(), &table, &fanout, now).expect("valid reading").key;
        let t = r.ts.as_millis();
        let before = TimeRange::new(at(t - len), at(t)).expect("non-empty");
        let after = TimeRange::new(at(t + 1), at(t + 1 + len)).expect("non-empty");
        for range in [before, after] {
            let plan = plan_entity(r.entity, range, &table, &fanout).expect("plan");
            let hit = plan.queries.iter().any(|q| q.pk == key.pk && sk_in_bounds(q, &key.sk));
            prop_assert!(!hit, "reading at {} read by the plan for {}", r.ts, range);
            if let Ok(all) = plan_all(range, &table, &[(r.entity, &fanout)]) {
                let hit = all.queries.iter().any(|q| q.pk == key.pk && passes_time_filter(q, r.ts));
                prop_assert!(!hit, "reading at {} passes the all-entities plan for {}", r.ts, range);
            }
        }
    }

    /// Property 2a: an entity with k = 1 costs one query per bucket, also across epoch
    /// boundaries that keep the layout.
    #[test]
    fn stable_entity_costs_one_query_per_bucket(
        n in 1u32..=40,
        b in bucket(),
        base in any::<bool>(),
        table_changes in prop::collection::vec(1..3 * HOUR, 0..4),
        fanout_changes in prop::collection::vec(1..3 * HOUR, 0..4),
        from in (T0 - HOUR)..(T0 + 10 * HOUR),
        len in 1..8 * HOUR,
    ) {
        let layout = if base {
            Layout::time_bucket(b, nz(n))
        } else {
            Layout::time_bucket_dedicated(b, nz(n))
        };
        let mut epochs = vec![Epoch { effective_from: Timestamp::MIN, value: layout.clone() }];
        let mut t = T0 - HOUR;
        for gap in table_changes {
            t += gap;
            epochs.push(Epoch { effective_from: at(t), value: layout.clone() });
        }
        let table = TableHistory::from_epochs(epochs).expect("sorted");
        let mut t = T0;
        let fanout = FanoutHistory::from_epochs(fanout_changes.into_iter().map(|gap| {
            t += gap;
            Epoch { effective_from: at(t), value: 1 }
        }).collect()).expect("sorted");
        let range = TimeRange::new(at(from), at(from + len)).expect("non-empty");
        let plan = plan_entity("sensor-alpha-001", range, &table, &fanout).expect("plan");
        prop_assert_eq!(plan.len(), b.spans(range).count());
        let mut pks: Vec<&str> = plan.queries.iter().map(|q| q.pk.as_str()).collect();
        pks.sort_unstable();
        pks.dedup();
        prop_assert_eq!(pks.len(), plan.len());
    }

    /// Property 2b: read plans are exact up to nesting: every query of an entity plan can
    /// hold data (some reading of that entity in the query's range, written at some
    /// time, is keyed to it), and no two queries overlap. A raised entity's cold key is
    /// the exception: only a writer whose cache predates the raise keys to it.
    #[test]
    fn every_planned_query_can_hold_data(
        table in table_history(),
        fanout in fanout_history(4),
        entity in prop::sample::select(vec!["sensor-alpha-001", "dev-1"]),
        from in (T0 - HOUR)..(T0 + 10 * HOUR),
        len in 1..4 * HOUR,
    ) {
        let range = TimeRange::new(at(from), at(from + len)).expect("non-empty");
        let plan = plan_entity(entity, range, &table, &fanout).expect("plan");
        for q in &plan.queries {
            let ts = q.covers.from();
            let horizon = ts.saturating_add(REKEY_HORIZON);
            // The writer clocks at which the fan-out in the reading's window changes.
            let nows: Vec<Timestamp> = std::iter::once(ts)
                .chain(
                    fanout
                        .epochs()
                        .iter()
                        .map(|e| e.effective_from)
                        .filter(|t| ts < *t && *t <= horizon),
                )
                .collect();
            let witness = (0..2000).map(|i| format!("w{i}")).find(|id| {
                let tags = BTreeMap::from([("site".to_owned(), id.clone())]);
                let r = ReadingRef::new(entity, id, ts).with_tags(&tags);
                nows.iter().any(|now| {
                    let key = write_key(&r, &table, &fanout, *now).expect("valid").key;
                    key.pk == q.pk && sk_in_bounds(q, &key.sk)
                })
            });
            let cold_of_raised = !q.pk.split('#').next().unwrap_or_default().contains('.')
                && matches!(table.at(ts).strategy, KeyStrategy::TimeBucket { .. })
                && fanout.read_fanout(ts, 1) >= 2;
            prop_assert!(witness.is_some() || cold_of_raised, "no reading lands in {:?}", q);
        }
        for (i, a) in plan.queries.iter().enumerate() {
            for b in &plan.queries[i + 1..] {
                let disjoint = a.pk != b.pk || a.covers.intersect(&b.covers).is_none();
                prop_assert!(disjoint, "{:?} overlaps {:?}", a, b);
            }
        }
    }

    /// Property 3: a writer at a given clock always gives a reading the same key, also
    /// after a table change or a fan-out shrink scheduled with the propagation margin
    /// while the reading could still be accepted. (A raise re-keys what is not written
    /// yet, on purpose: keys nest, so readers still find it.)
    #[test]
    fn same_reading_same_key(
        mut table in table_history(),
        mut fanout in fanout_history(6),
        r in reading(),
        new_layout in layout(),
        new_k in 1u32..=8,
        ttl_s in 0u64..600,
        skew_s in 0u64..120,
        lag in 0..600_000i64,
    ) {
        let skew = Duration::from_secs(skew_s);
        let margin = propagation_margin(Duration::from_secs(ttl_s), skew, Duration::from_millis(1));
        // A writer at `now` still accepts this reading: ts <= now + skew.
        let now = at(r.ts.as_millis() - i64::try_from(skew.as_millis()).expect("small") + lag);
        let first = write_key(&r.as_ref(), &table, &fanout, now).expect("valid").key;
        prop_assert_eq!(&write_key(&r.as_ref(), &table, &fanout, now).expect("valid").key, &first);
        let _ = table.schedule(new_layout, now, margin);
        if fanout.for_write(r.ts, now).is_some_and(|k| new_k < k) {
            let _ = fanout.schedule(new_k, now, margin);
        }
        prop_assert_eq!(write_key(&r.as_ref(), &table, &fanout, now).expect("valid").key, first);
    }
}
