//! Keys per second per strategy, read-plan cost and merge throughput.

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sharding::key::key_for_layout;
use sharding::{
    Bucket, FanoutHistory, Layout, Order, ReadingRef, TableHistory, TimeRange, Timestamp, merge,
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
                    let r = ReadingRef {
                        entity: "sensor-alpha-001",
                        event_id: id,
                        ts: Timestamp::from_millis(T0 + i as i64).unwrap_or(Timestamp::MIN),
                        attribute: None,
                    };
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

fn merging(c: &mut Criterion) {
    let streams: Vec<Vec<u64>> = (0..16u64)
        .map(|s| (0..4096u64).map(|i| i * 16 + s).collect())
        .collect();
    let total: usize = streams.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group("merge");
    group.throughput(Throughput::Elements(total as u64));
    group.bench_function("16_streams_65536_items", |b| {
        b.iter(|| {
            black_box(merge(streams.clone(), |k: &u64| *k, Order::Ascending, None, None).ok())
        });
    });
    group.finish();
}

criterion_group!(benches, keys, merging);
criterion_main!(benches);
