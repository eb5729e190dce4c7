//! The body of item 5's cost benches, shared by `cost.rs` (under the allocator the
//! ingest binary links, the figure held to the goal) and `cost_system.rs` (under the
//! system allocator, instrumented to count allocations: context and the counts).
//! Each is its own bench target because a process has one global allocator.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use ingest::{Limits, parse_body};
use serde::Serialize;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::ItemKey;
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::size::item_size;
use store::{Reading, ReadingItem};

const T0: i64 = 1_782_086_400_000;
const READINGS: usize = 1_000;

/// Counts the allocations (and reallocations) of one pass of a closure.
pub type AllocationCounter<'a> = &'a dyn Fn(&dyn Fn()) -> usize;

/// Times the whole path and each stage in the criterion group `group`. With
/// `count_allocations` (a pass of a closure in, allocations and reallocations out),
/// also counts allocations per reading and writes them to
/// `criterion/cost/allocations.json`.
pub fn run(c: &mut Criterion, group: &str, count_allocations: Option<AllocationCounter<'_>>) {
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
    let key_of = |r: &Reading| {
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
    let mut group = c.benchmark_group(group);
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
                    bytes += item_size(&ReadingItem::marshal(&r, &key, retention));
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
                bytes += item_size(&ReadingItem::marshal(black_box(r), key, retention));
            }
            black_box(bytes)
        });
    });
    // The same marshal through serde_dynamo from a borrowed view (what the ingest did
    // before the typed encoder), for the ratio in the same run.
    group.bench_function("marshal_size_serde_dynamo", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            for (r, key) in &keyed {
                if let Ok(item) = serde_dynamo_marshal(black_box(r), key, retention) {
                    bytes += item_size(&item);
                }
            }
            black_box(bytes)
        });
    });
    group.finish();

    let Some(count) = count_allocations else {
        return;
    };
    // Allocations per reading, whole path and by stage (one pass each; the counts do
    // not vary between passes).
    let per_reading = |f: &dyn Fn()| count(f) as f64 / READINGS as f64;
    let allocations = BTreeMap::from([
        (
            "parse_validate_key_marshal",
            per_reading(&|| {
                for body in &bodies {
                    for r in parse_body(body, &limits).unwrap_or_default() {
                        if let Ok(key) = key_of(&r) {
                            black_box(item_size(&ReadingItem::marshal(&r, &key, retention)));
                        }
                    }
                }
            }),
        ),
        (
            "parse_validate",
            per_reading(&|| {
                for body in &bodies {
                    black_box(parse_body(body, &limits).map(|r| r.len()).ok());
                }
            }),
        ),
        (
            "key",
            per_reading(&|| {
                for r in &readings {
                    black_box(key_of(r).ok());
                }
            }),
        ),
        (
            "marshal_size",
            per_reading(&|| {
                for (r, key) in &keyed {
                    black_box(item_size(&ReadingItem::marshal(r, key, retention)));
                }
            }),
        ),
        (
            "marshal_size_serde_dynamo",
            per_reading(&|| {
                for (r, key) in &keyed {
                    black_box(serde_dynamo_marshal(r, key, retention).ok());
                }
            }),
        ),
    ]);
    println!("allocations per reading: {allocations:?}");
    let path = criterion_dir().join("cost/allocations.json");
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::write(
                &path,
                serde_json::to_string_pretty(&allocations).unwrap_or_default(),
            )
        });
    if let Err(e) = written {
        eprintln!("cannot write {}: {e}", path.display());
    }
}

/// Where criterion writes its estimates: `CRITERION_HOME`, else
/// `$CARGO_TARGET_DIR/criterion`, else the workspace's `target/criterion`.
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion")
}

/// [`ReadingItem`]'s attributes borrowed from the reading, for `serde_dynamo`.
#[derive(Serialize)]
struct ReadingItemRef<'a> {
    #[serde(rename = "PK")]
    pk: &'a str,
    #[serde(rename = "SK")]
    sk: &'a str,
    device_id: &'a str,
    event_id: &'a str,
    ts: String,
    ts_ms: i64,
    metrics: &'a BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tags: &'a BTreeMap<String, String>,
    ttl: i64,
}

/// The reading's item through `serde_dynamo`, as the ingest marshalled it before.
fn serde_dynamo_marshal(
    reading: &Reading,
    key: &ItemKey,
    retention: Duration,
) -> Result<store::Item, serde_dynamo::Error> {
    let ts_ms = reading.ts.as_millis();
    let retention_secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
    serde_dynamo::to_item(ReadingItemRef {
        pk: &key.pk,
        sk: &key.sk,
        device_id: &reading.device_id,
        event_id: &reading.event_id,
        ts: reading.ts.to_rfc3339(),
        ts_ms,
        metrics: &reading.metrics,
        tags: &reading.tags,
        ttl: ts_ms.div_euclid(1000).saturating_add(retention_secs),
    })
}
