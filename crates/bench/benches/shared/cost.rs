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
use sharding::block::BlockLayout;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ItemKey, KeyError, ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::pack;
use store::size::item_size;
use store::{Reading, ReadingItem};

const T0: i64 = 1_782_086_400_000;
const READINGS: usize = 1_000;

/// Counts the allocations (and reallocations) of one pass of a closure.
pub type AllocationCounter<'a> = &'a dyn Fn(&dyn Fn()) -> usize;

/// One pass over the fixture, returning a sum of what it made.
type Pass = fn(&Fixture) -> usize;

/// The passes, each over the fixture's 1,000 readings: the whole path, then the same
/// path by stage, each over what the stage before it produced (so the report can say
/// where the time goes), the marshal through `serde_dynamo` for the ratio in the same
/// run, and a fixed reference workload that no change to the project changes, which
/// the report gives the path's figures as ratios to. Each returns a sum of what it
/// made, so nothing is optimised away.
const PASSES: [(&str, Pass); 7] = [
    ("parse_validate_key_marshal", Fixture::whole_path),
    ("blocks_of_50", Fixture::blocks_of_50),
    ("parse_validate", Fixture::parse),
    ("key", Fixture::key),
    ("marshal_size", Fixture::marshal),
    ("marshal_size_serde_dynamo", Fixture::marshal_serde_dynamo),
    ("reference", Fixture::reference),
];

/// Times every pass in the criterion group `group`. With `count_allocations` (a pass
/// of a closure in, allocations and reallocations out), also counts allocations per
/// reading of each pass (one pass each; the counts do not vary between passes) and
/// writes them to `criterion/cost/allocations.json`.
pub fn run(c: &mut Criterion, group: &str, count_allocations: Option<AllocationCounter<'_>>) {
    let fixture = Fixture::new();
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(READINGS as u64));
    for (name, pass) in PASSES {
        group.bench_function(name, |b| b.iter(|| black_box(pass(&fixture))));
    }
    group.finish();
    if let Some(count) = count_allocations {
        let allocations: BTreeMap<&str, f64> = PASSES
            .iter()
            .map(|(name, pass)| {
                let n = count(&|| {
                    black_box(pass(&fixture));
                });
                (*name, n as f64 / READINGS as f64)
            })
            .collect();
        write_allocations(&allocations);
    }
}

/// 1,000 single-reading message bodies (2 metrics, 1 tag), what each stage reads, and
/// what the stage before it produced; and the same 1,000 readings' shape as 20 messages
/// of 50 readings of one device each, for a table that packs blocks.
struct Fixture {
    bodies: Vec<String>,
    block_bodies: Vec<String>,
    block_table: TableHistory,
    limits: Limits,
    table: TableHistory,
    fanout: FanoutHistory,
    retention: Duration,
    readings: Vec<Reading>,
    keyed: Vec<(Reading, ItemKey)>,
}

impl Fixture {
    fn new() -> Self {
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
        let block_bodies: Vec<String> = (0..READINGS / 50)
            .map(|m| {
                let readings: Vec<serde_json::Value> = (0..50)
                    .map(|i| {
                        let n = m * 50 + i;
                        serde_json::json!({
                            "device_id": format!("dev-{m:05}"),
                            "event_id": format!("0190a3b2-7c4d-7e5f-8a9b-{n:012x}"),
                            "ts": T0 + n as i64 * 100,
                            "metrics": {"temperature": 21.5, "humidity": 40.0 + n as f64 / 100.0},
                            "tags": {"site": "plant-7"},
                        })
                    })
                    .collect();
                serde_json::json!({ "readings": readings }).to_string()
            })
            .collect();
        let limits = Limits {
            now: Timestamp::from_millis(T0 + 86_400_000).unwrap_or(Timestamp::MAX),
            max_future: Duration::from_secs(300),
            retention: Duration::from_secs(30 * 86_400),
            max_readings: 500,
        };
        let hourly =
            Layout::time_bucket(Bucket::Hour, NonZeroU32::new(64).unwrap_or(NonZeroU32::MIN));
        let mut fixture = Self {
            bodies,
            block_bodies,
            block_table: TableHistory::new(hourly.clone().with_blocks(BlockLayout::default())),
            limits,
            table: TableHistory::new(hourly),
            fanout: FanoutHistory::new(),
            retention: Duration::from_secs(30 * 86_400),
            readings: Vec::new(),
            keyed: Vec::new(),
        };
        fixture.readings = fixture
            .bodies
            .iter()
            .filter_map(|body| parse_body(body, &fixture.limits).ok())
            .flatten()
            .collect();
        fixture.keyed = fixture
            .readings
            .iter()
            .filter_map(|r| Some((r.clone(), fixture.key_of(r).ok()?)))
            .collect();
        fixture
    }

    fn key_of(&self, r: &Reading) -> Result<ItemKey, KeyError> {
        self.key_in(r, &self.table)
    }

    fn key_in(&self, r: &Reading, table: &TableHistory) -> Result<ItemKey, KeyError> {
        write_key(
            &ReadingRef::new(&r.device_id, &r.event_id, r.ts),
            table,
            &self.fanout,
            r.ts,
        )
        .map(|written| written.key)
    }

    /// Parse + validate + key + marshal + size, from the bodies.
    fn whole_path(&self) -> usize {
        let mut bytes = 0usize;
        for body in &self.bodies {
            let Ok(readings) = parse_body(black_box(body), &self.limits) else {
                continue;
            };
            for r in readings {
                let Ok(key) = self.key_of(&r) else {
                    continue;
                };
                bytes += ReadingItem::marshal(&r, &key, self.retention).size;
            }
        }
        bytes
    }

    /// The ingest's path where the table packs blocks (a new table's default), from
    /// the bodies of 50 readings: parse + validate; pack each message into writes and
    /// encode each write's item once under a placeholder key, whose size the observe
    /// stage measures the device's rate by (the pack stage); key each write by its
    /// first member and set its item's key (the keying). Per reading, as the whole path
    /// above.
    fn blocks_of_50(&self) -> usize {
        let mut bytes = 0usize;
        for body in &self.block_bodies {
            let Ok(readings) = parse_body(black_box(body), &self.limits) else {
                continue;
            };
            let units = pack::pack(&readings, &self.block_table);
            for members in pack::take(readings, &units) {
                let Ok(unkeyed) = pack::encode_unkeyed(&members, self.retention) else {
                    continue;
                };
                bytes += unkeyed.size;
                let Ok(first_key) = self.key_in(&members[0], &self.block_table) else {
                    continue;
                };
                let key = pack::item_key(&members, &first_key);
                bytes += pack::with_key(unkeyed, &key).size;
            }
        }
        bytes
    }

    /// Parse + validate, from the bodies.
    fn parse(&self) -> usize {
        self.bodies
            .iter()
            .map(|body| parse_body(black_box(body), &self.limits).map_or(0, |r| r.len()))
            .sum()
    }

    /// The key, from the parsed readings.
    fn key(&self) -> usize {
        self.readings
            .iter()
            .map(|r| self.key_of(black_box(r)).map_or(0, |k| k.pk.len()))
            .sum()
    }

    /// The typed encoder, which sizes the item as it builds it, from the keyed readings
    /// (and a copy of each key, which the whole path moves in instead).
    fn marshal(&self) -> usize {
        self.keyed
            .iter()
            .map(|(r, key)| ReadingItem::marshal(black_box(r), key, self.retention).size)
            .sum()
    }

    /// The same marshal through `serde_dynamo` from a borrowed view (what the ingest
    /// did before the typed encoder), and the item size.
    fn marshal_serde_dynamo(&self) -> usize {
        self.keyed
            .iter()
            .filter_map(|(r, key)| serde_dynamo_marshal(black_box(r), key, self.retention).ok())
            .map(|item| item_size(&item))
            .sum()
    }

    /// The reference workload: FNV-1a over the bytes of the 1,000 single-reading bodies,
    /// four rounds. It calls no code of the project and allocates nothing, so only the
    /// machine changes its time: measured in the same run as the path, it tells a slow
    /// machine (both slower, their ratio kept) from a slower path (the ratio grows).
    fn reference(&self) -> usize {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for round in 0..4u64 {
            hash ^= round;
            for body in &self.bodies {
                for &byte in black_box(body.as_bytes()) {
                    hash ^= u64::from(byte);
                    hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
                }
            }
        }
        hash as usize
    }
}

/// Writes the allocations per reading where the bench program reads them.
fn write_allocations(allocations: &BTreeMap<&str, f64>) {
    println!("allocations per reading: {allocations:?}");
    let path = criterion_dir().join("cost/allocations.json");
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::write(
                &path,
                serde_json::to_string_pretty(allocations).unwrap_or_default(),
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
    /// As doubles, as the ingest kept them then.
    #[serde(serialize_with = "as_doubles")]
    metrics: &'a BTreeMap<String, store::Decimal>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tags: &'a BTreeMap<String, String>,
    ttl: i64,
}

fn as_doubles<S: serde::Serializer>(
    metrics: &BTreeMap<String, store::Decimal>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(metrics.iter().map(|(name, v)| (name, v.to_f64())))
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
