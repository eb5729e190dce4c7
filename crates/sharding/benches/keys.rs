//! Keys per second per strategy, read-plan cost and merge throughput.

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sharding::key::key_for_layout;
use sharding::merge::{Arrival, BoundedMerge, Step, StreamShape, TimedKey};
use sharding::{
    Bucket, FanoutHistory, Layout, Order, ReadingRef, TableHistory, TimeRange, Timestamp,
    plan_entity,
};

const T0: i64 = 1_782_086_400_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn keys(c: &mut Criterion) {
    let ids: Vec<String> = (0..1000).map(|i| format!("evt-{i:08}")).collect();
    let layouts = [
        ("unsharded", Layout::unsharded(), None),
        ("random", Layout::random(nz(16)), None),
        ("calculated", Layout::calculated("event_id", nz(16)), None),
        (
            "time_bucket_k1",
            Layout::time_bucket(Bucket::Hour, nz(100)),
            None,
        ),
        (
            "time_bucket_k4",
            Layout::time_bucket(Bucket::Hour, nz(100)),
            Some(4),
        ),
    ];
    let mut group = c.benchmark_group("write_key");
    group.throughput(Throughput::Elements(ids.len() as u64));
    for (name, layout, fanout) in &layouts {
        group.bench_function(*name, |b| {
            b.iter(|| {
                for (i, id) in ids.iter().enumerate() {
                    let r = ReadingRef::new(
                        "sensor-alpha-001",
                        id,
                        Timestamp::from_millis(T0 + i as i64).unwrap_or(Timestamp::MIN),
                    );
                    black_box(key_for_layout(&r, layout, *fanout).ok());
                }
            });
        });
    }
    group.finish();

    let table = TableHistory::new(Layout::time_bucket(Bucket::Hour, nz(100)));
    let fanout = FanoutHistory::new();
    let from = Timestamp::from_millis(T0).unwrap_or(Timestamp::MIN);
    let to = Timestamp::from_millis(T0 + 24 * 3_600_000).unwrap_or(Timestamp::MAX);
    if let Ok(day) = TimeRange::new(from, to) {
        c.bench_function("plan_entity/day_of_hours", |b| {
            b.iter(|| black_box(plan_entity("sensor-alpha-001", day, &table, &fanout).ok()));
        });
    }
}

/// A merge key: the timestamp alone (unique in the bench).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Ts(i64);

impl TimedKey for Ts {
    fn ts_ms(&self) -> i64 {
        self.0
    }
}

/// Copies of one key are the same item here: any one is kept.
impl sharding::written::Written for Ts {
    fn written_cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// Drives a bounded merge over in-memory streams, serving each ask from `streams`.
fn merge_all(streams: &[Vec<Ts>], span: (i64, i64)) -> usize {
    let shapes = streams
        .iter()
        .map(|_| StreamShape {
            span,
            arrival: Arrival::InOrder,
        })
        .collect();
    let total = streams.iter().map(Vec::len).sum();
    let mut merge: BoundedMerge<Ts, Ts> = BoundedMerge::new(shapes, Order::Ascending, total, None);
    let mut at = vec![0usize; streams.len()];
    loop {
        match merge.step(32) {
            Step::Done { items, .. } => return items.len(),
            Step::Read(asks) => {
                for ask in asks {
                    let keys = &streams[ask.stream];
                    let start = at[ask.stream];
                    let take = ask.limit.map_or(keys.len(), |l| l as usize).max(1);
                    let end = (start + take).min(keys.len());
                    at[ask.stream] = end;
                    let page = keys[start..end].iter().map(|k| (*k, *k));
                    let last_ts = keys[..end].last().map(|k| k.0);
                    merge.deliver(ask.stream, page, last_ts, end == keys.len());
                }
            }
        }
    }
}

fn merging(c: &mut Criterion) {
    let streams: Vec<Vec<Ts>> = (0..16i64)
        .map(|s| (0..4096i64).map(|i| Ts(i * 16 + s)).collect())
        .collect();
    let total: usize = streams.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group("merge");
    group.throughput(Throughput::Elements(total as u64));
    group.bench_function("16_streams_65536_items", |b| {
        b.iter(|| black_box(merge_all(&streams, (0, 16 * 4096))));
    });
    group.finish();
}

criterion_group!(benches, keys, merging);
criterion_main!(benches);
