//! Item 5 of issue 8: CPU cost per reading of the ingest path without I/O: parse and
//! validate the message body, compute the key, marshal the item (serde_dynamo) and size
//! it. Run by `cargo xtask bench`; prints figures, asserts nothing.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ingest::{Limits, parse_body};
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::ReadingItem;
use store::size::item_size;

const T0: i64 = 1_782_086_400_000;
const READINGS: usize = 1_000;

fn cost(c: &mut Criterion) {
    let bodies: Vec<String> = (0..READINGS)
        .map(|i| {
            serde_json::json!({
                "device_id": format!("dev-{:05}", i % 500),
                "event_id": format!("evt-{i:08}"),
                "ts": T0 + i as i64 * 1000,
                "metrics": {"temperature": 21.5, "humidity": 40.0 + i as f64 / 100.0},
                "tags": {"site": "plant-7"},
            })
            .to_string()
        })
        .collect();
    let limits = Limits {
        now: Timestamp::from_millis(T0 + 86_400_000).unwrap_or(Timestamp::MAX),
        max_future: Duration::from_secs(300),
        retention: Duration::from_secs(30 * 86_400),
        max_readings: 500,
    };
    let table = TableHistory::new(Layout::time_bucket(
        Bucket::Hour,
        NonZeroU32::new(64).unwrap_or(NonZeroU32::MIN),
    ));
    let fanout = FanoutHistory::new();
    let retention = Duration::from_secs(30 * 86_400);
    let key_of = |r: &store::Reading| {
        write_key(
            &ReadingRef {
                entity: &r.device_id,
                event_id: &r.event_id,
                ts: r.ts,
                attribute: None,
            },
            &table,
            &fanout,
            r.ts,
        )
    };
    let mut group = c.benchmark_group("cost");
    group.throughput(Throughput::Elements(READINGS as u64));
    group.bench_function("parse_validate_key_marshal", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            for body in &bodies {
                let Ok(readings) = parse_body(black_box(body), &limits) else {
                    continue;
                };
                for r in readings {
                    let Ok(key) = key_of(&r) else {
                        continue;
                    };
                    if let Ok(item) = ReadingItem::marshal(&r, &key, retention) {
                        bytes += item_size(&item);
                    }
                }
            }
            black_box(bytes)
        });
    });
    // The same path by stage, each over what the stage before it produced, so the
    // report can say where the time goes.
    group.bench_function("parse_validate", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for body in &bodies {
                n += parse_body(black_box(body), &limits).map_or(0, |r| r.len());
            }
            black_box(n)
        });
    });
    let readings: Vec<_> = bodies
        .iter()
        .filter_map(|body| parse_body(body, &limits).ok())
        .flatten()
        .collect();
    group.bench_function("key", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for r in &readings {
                n += key_of(black_box(r)).map_or(0, |k| k.pk.len());
            }
            black_box(n)
        });
    });
    let keyed: Vec<_> = readings
        .iter()
        .filter_map(|r| Some((r, key_of(r).ok()?)))
        .collect();
    group.bench_function("marshal_size", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            for (r, key) in &keyed {
                if let Ok(item) = ReadingItem::marshal(black_box(r), key, retention) {
                    bytes += item_size(&item);
                }
            }
            black_box(bytes)
        });
    });
    group.finish();
}

criterion_group!(benches, cost);
criterion_main!(benches);
