//! Blocks under the read plans (docs/design-blocks.md): a message's readings, packed
//! into blocks the way a writer packs them (per table epoch and bucket, cut by
//! `sharding::block::group`, each block under its first member's write key, with the
//! fan-out a writer at any clock had), are found by the plan of every range holding
//! one of them: some query reads the block's key, its sort key lies in the query's
//! bounds, and the reading lies in what the query answers for. Under any table and
//! fan-out history, blocks or not in each epoch, for one entity and for all entities.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sharding::block::{BlockLayout, block_sk, group};
use sharding::epoch::Epoch;
use sharding::read_plan::{passes_time_filter, plan_all, plan_entity, sk_in_bounds};
use sharding::{
    Bucket, FanoutHistory, ItemKey, Layout, PlanError, ReadingRef, TableHistory, TimeRange,
    Timestamp, write_key,
};

use crate::common::nz;

/// 2026-06-22T00:00:00Z
const T0: i64 = 1_782_086_400_000;
const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const ENTITY: &str = "sensor-alpha-001";

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).expect("in range")
}

fn blocks() -> impl Strategy<Value = Option<BlockLayout>> {
    prop_oneof![
        1 => Just(None),
        3 => (1u32..(10 * MINUTE as u32), 2u32..40).prop_map(|(window_ms, max_readings)| {
            Some(BlockLayout { window_ms, max_bytes: 4_096, max_readings })
        }),
    ]
}

fn layout() -> impl Strategy<Value = Layout> {
    let bucket = prop::sample::select(vec![Bucket::Minute, Bucket::Hour]);
    let strategy = prop_oneof![
        1 => Just(Layout::unsharded()),
        1 => (1u32..=6).prop_map(|n| Layout::random(nz(n))),
        3 => (1u32..=8, bucket, any::<bool>()).prop_map(|(n, b, base)| if base {
            Layout::time_bucket(b, nz(n))
        } else {
            Layout::time_bucket_dedicated(b, nz(n))
        }),
    ];
    (strategy, blocks()).prop_map(|(layout, blocks)| Layout { blocks, ..layout })
}

/// A first layout, then 0..3 changes within the readings' hours.
fn table_history() -> impl Strategy<Value = TableHistory> {
    (layout(), prop::collection::vec((1..HOUR, layout()), 0..3)).prop_map(|(first, changes)| {
        let mut epochs = vec![Epoch {
            effective_from: Timestamp::MIN,
            value: first,
        }];
        let mut t = T0;
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
fn fanout_history() -> impl Strategy<Value = FanoutHistory> {
    prop::collection::vec((1..HOUR, 1u32..=6), 0..4).prop_map(|changes| {
        let mut t = T0;
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

/// A stored item: its key and the timestamps of the readings it holds.
#[derive(Debug)]
struct Stored {
    key: ItemKey,
    members: Vec<i64>,
}

/// One message's readings (distinct ids, timestamps from `first` on, spaced by the
/// gaps), written by a writer whose clock reads `written` after the first reading.
fn store(
    table: &TableHistory,
    fanout: &FanoutHistory,
    first: i64,
    gaps: &[i64],
    written: i64,
) -> Vec<Stored> {
    let tags = BTreeMap::new();
    let mut ts = first;
    let readings: Vec<(i64, String)> = gaps
        .iter()
        .enumerate()
        .map(|(i, gap)| {
            ts += gap;
            (ts, format!("e{i:04}"))
        })
        .collect();
    let now = at(first + written);
    // The writer packs within one table epoch and one bucket (one partition key's time).
    let mut groups: BTreeMap<(usize, String), Vec<(i64, String)>> = BTreeMap::new();
    for (ts, id) in readings {
        let layout = table.at(at(ts));
        let epoch = table
            .spans(TimeRange::new(at(T0 - 10 * HOUR), at(ts + 1)).expect("range"))
            .len();
        let bucket = match &layout.strategy {
            sharding::Strategy::TimeBucket { bucket, .. } => bucket.label(at(ts)),
            _ => String::new(),
        };
        groups.entry((epoch, bucket)).or_default().push((ts, id));
    }
    let key = |ts: i64, id: &str| {
        let r = ReadingRef {
            entity: ENTITY,
            event_id: id,
            ts: at(ts),
            tags: &tags,
        };
        write_key(&r, table, fanout, now).expect("valid").key
    };
    let mut stored = Vec::new();
    for members in groups.into_values() {
        let layout = table.at(at(members[0].0));
        let Some(blocks) = layout.blocks else {
            stored.extend(members.iter().map(|(ts, id)| Stored {
                key: key(*ts, id),
                members: vec![*ts],
            }));
            continue;
        };
        for cut in group(&members, &blocks, 100, |m| m.0, |_| 30) {
            let part = &members[cut];
            let first_key = key(part[0].0, &part[0].1);
            let key = if part.len() == 1 {
                first_key
            } else {
                ItemKey {
                    sk: block_sk(
                        &first_key.sk,
                        part.iter().map(|(ts, id)| (*ts, id.as_str())),
                    ),
                    pk: first_key.pk,
                }
            };
            stored.push(Stored {
                key,
                members: part.iter().map(|m| m.0).collect(),
            });
        }
    }
    stored
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_reading_of_every_block_is_found_by_the_plans_of_its_ranges(
        table in table_history(),
        fanout in fanout_history(),
        first in T0..(T0 + 2 * HOUR),
        gaps in prop::collection::vec(0i64..20_000, 1..80),
        written in -300_000i64..(2 * HOUR),
        before in 0..(2 * HOUR),
        after in 0..(2 * HOUR),
        pick in any::<prop::sample::Index>(),
    ) {
        let stored = store(&table, &fanout, first, &gaps, written);
        let all: Vec<(&Stored, i64)> = stored.iter().flat_map(|s| s.members.iter().map(move |t| (s, *t))).collect();
        let (item, ts) = all[pick.index(all.len())];
        let range = TimeRange::new(at(ts - before), at(ts + after + 1)).expect("non-empty");
        let plan = plan_entity(ENTITY, range, &table, &fanout).expect("plan");
        prop_assert!(
            plan.queries.iter().any(|q| q.pk == item.key.pk
                && sk_in_bounds(q, &item.key.sk)
                && q.covers.contains(at(ts))),
            "reading at {} of {:?} not in the entity plan of {}: {:?}", ts, item, range, plan
        );
        match plan_all(range, &table, &[(ENTITY, &fanout)]) {
            Ok(all) => {
                let item_ts = at(item.members[0]);
                prop_assert!(
                    all.queries.iter().any(|q| q.pk == item.key.pk
                        && q.starts().contains(item_ts)
                        && passes_time_filter(q, at(ts))),
                    "reading at {} of {:?} not in the all-entities plan of {}", ts, item, range
                );
            }
            Err(PlanError::Unsupported { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}

/// A block keyed just before a shrink holds a reading just after it: the key it sits in
/// is read only for the instants before the shrink, and the plan still answers for
/// the reading, up to the block window after them.
#[test]
fn a_block_straddling_a_shrink_is_read_for_its_later_readings() {
    let blocks = BlockLayout {
        window_ms: 60_000,
        max_bytes: 4_096,
        max_readings: 10,
    };
    let table = TableHistory::from_epochs(vec![Epoch {
        effective_from: Timestamp::MIN,
        value: Layout::time_bucket(Bucket::Hour, nz(4)).with_blocks(blocks),
    }])
    .expect("one epoch");
    let shrink = T0 + 30 * MINUTE;
    let fanout = FanoutHistory::from_epochs(vec![
        Epoch {
            effective_from: at(T0),
            value: 4,
        },
        Epoch {
            effective_from: at(shrink),
            value: 1,
        },
    ])
    .expect("sorted");
    // Members 10 s before the shrink and 20 s after it, written at the first's time.
    let stored = store(&table, &fanout, shrink - 10_000, &[0, 30_000], 0);
    assert_eq!(stored.len(), 1, "one block: {stored:?}");
    assert!(
        stored[0].key.pk.contains('#')
            && !stored[0]
                .key
                .pk
                .starts_with(&format!("{}#", sharding::shard_index(ENTITY, nz(4)))),
        "under a sub-shard: {stored:?}"
    );
    let later = shrink + 20_000;
    let range = TimeRange::new(at(later), at(later + 1)).expect("non-empty");
    let plan = plan_entity(ENTITY, range, &table, &fanout).expect("plan");
    let item = &stored[0];
    assert!(
        plan.queries.iter().any(|q| q.pk == item.key.pk
            && sk_in_bounds(q, &item.key.sk)
            && q.covers.contains(at(later))),
        "{plan:?}"
    );
}

/// A block never spans a bucket, so a range that starts a bucket reads no key of the
/// bucket before it, however long the block window: neither the entity's plan nor the
/// plan over every entity. One that starts a minute into it reads back only to its start.
#[test]
fn a_range_that_starts_a_bucket_reads_nothing_of_the_bucket_before() {
    let blocks = BlockLayout {
        window_ms: 10 * MINUTE as u32,
        max_bytes: 4_096,
        max_readings: 50,
    };
    let table = TableHistory::from_epochs(vec![Epoch {
        effective_from: Timestamp::MIN,
        value: Layout::time_bucket(Bucket::Hour, nz(4)).with_blocks(blocks),
    }])
    .expect("one epoch");
    let fanout = FanoutHistory::new();
    let earlier = "2026-06-21T23";
    for from in [T0, T0 + MINUTE] {
        let range = TimeRange::new(at(from), at(T0 + 3 * HOUR)).expect("non-empty");
        let plan = plan_entity(ENTITY, range, &table, &fanout).expect("plan");
        assert!(
            plan.queries.iter().all(|q| !q.pk.ends_with(earlier)),
            "{plan:?}"
        );
        assert!(
            plan.queries.iter().all(|q| q.starts().from() >= at(T0)),
            "{plan:?}"
        );
        let all = plan_all(range, &table, &[]).expect("plan");
        assert!(
            all.queries.iter().all(|q| !q.pk.ends_with(earlier)),
            "{all:?}"
        );
    }
}
