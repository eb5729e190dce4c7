//! Helpers to load the shared in-memory readings and shard tables (`store::memory`)
//! and to build a service over them.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use query::cursor::CursorKeys;
use query::{CursorKey, QueryService, ServiceConfig};
use sharding::epoch::{Epoch, FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::layout::Strategy;
use sharding::time::{Bucket, Timestamp};
use store::block::BlockItem;
use store::item::{Reading, ReadingItem};
use store::memory::{MemoryReadings, MemoryShards};

/// `2026-06-22T00:00:00.000Z`
pub const BASE_MS: i64 = 1_782_086_400_000;

pub fn key() -> CursorKey {
    CursorKey::new(b"test-cursor-key-0123456789abcdef".to_vec()).expect("long enough")
}

/// [`key`] alone, cursors accepted for the default age.
pub fn keys() -> CursorKeys {
    key().into()
}

/// The shared in-memory shard metadata table with `layout` and each entity's fan-out
/// history (an entity that ever fanned out is in the hot set, as a raise leaves it).
pub fn shard_table(
    layout: TableHistory,
    entities: impl IntoIterator<Item = (String, FanoutHistory)>,
) -> MemoryShards {
    let shards = MemoryShards::new();
    shards.put_layout(layout);
    for (entity, history) in entities {
        shards.put_history(&entity, history);
    }
    shards
}

/// A reading as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct R {
    pub device: String,
    pub event: String,
    pub ts_ms: i64,
    /// Its `temperature`.
    pub value: store::Decimal,
}

/// `x` as a device sends it.
pub fn n(x: f64) -> store::Decimal {
    store::Decimal::from_f64(x).expect("a number DynamoDB stores")
}

/// How long test readings are kept.
const RETENTION: Duration = Duration::from_secs(86_400 * 365 * 100);

/// The key a writer at the reading's own time gives `r` (the fan-out in force at its
/// timestamp), and the reading as the store sees it.
fn keyed(shards: &MemoryShards, layout: &TableHistory, r: &R) -> (sharding::key::ItemKey, Reading) {
    let fanout = shards
        .entity(&r.device)
        .map(|meta| meta.shard_history)
        .unwrap_or_default();
    let ts = Timestamp::from_millis(r.ts_ms).unwrap();
    let key = write_key(
        &ReadingRef::new(&r.device, &r.event, ts),
        layout,
        &fanout,
        ts,
    )
    .unwrap()
    .key;
    let reading = Reading {
        device_id: r.device.clone(),
        event_id: r.event.clone(),
        ts,
        metrics: BTreeMap::from([("temperature".to_string(), r.value.clone())]),
        tags: BTreeMap::from([("site".to_string(), "lab".to_string())]),
        written: store::WriteOrder::OLDEST,
    };
    (key, reading)
}

/// The key [`load`] stores `r` under.
pub fn key_of(shards: &MemoryShards, r: &R) -> sharding::key::ItemKey {
    let layout = shards.layout().expect("layout set");
    keyed(shards, &layout, r).0
}

/// Writes `readings` through `sharding::key::write_key` under the histories, each by a
/// writer at the reading's own time (keyed with the fan-out in force at its timestamp).
pub fn load(table: &MemoryReadings, shards: &MemoryShards, readings: &[R]) {
    let layout = shards.layout().expect("layout set");
    for r in readings {
        let (key, reading) = keyed(shards, &layout, r);
        table.put(ReadingItem::new(&reading, key, RETENTION));
    }
}

/// Writes `readings` as a writer that packs blocks would: where the layout in force at
/// a reading packs blocks, each device's readings of one table epoch and one bucket are
/// cut by `sharding::block::group` and each block is stored under its first member's
/// write key (a block of one member as the reading's own item); elsewhere one item a
/// reading, as [`load`]. Returns the blocks of two or more members written.
pub fn load_blocks(table: &MemoryReadings, shards: &MemoryShards, readings: &[R]) -> usize {
    let layout = shards.layout().expect("layout set");
    // (device, epoch, bucket) -> its readings.
    let mut groups: BTreeMap<(String, usize, String), Vec<&R>> = BTreeMap::new();
    for r in readings {
        let at = ts(r.ts_ms);
        let epoch = layout
            .epochs()
            .iter()
            .rposition(|e| e.effective_from <= at)
            .unwrap_or(0);
        let bucket = match &layout.at(at).strategy {
            Strategy::TimeBucket { bucket, .. } => bucket.label(at),
            _ => String::new(),
        };
        groups
            .entry((r.device.clone(), epoch, bucket))
            .or_default()
            .push(r);
    }
    let mut blocks = 0;
    for mut members in groups.into_values() {
        members.sort_by(|a, b| (a.ts_ms, &a.event).cmp(&(b.ts_ms, &b.event)));
        members.dedup_by(|a, b| (a.ts_ms, &a.event) == (b.ts_ms, &b.event));
        let Some(blocks_layout) = layout.at(ts(members[0].ts_ms)).blocks else {
            for r in members {
                let (key, reading) = keyed(shards, &layout, r);
                table.put(ReadingItem::new(&reading, key, RETENTION));
            }
            continue;
        };
        for cut in sharding::block::group(&members, &blocks_layout, 200, |r| r.ts_ms, |_| 60) {
            let part = &members[cut];
            let (first_key, _) = keyed(shards, &layout, part[0]);
            let stored: Vec<Reading> = part.iter().map(|r| keyed(shards, &layout, r).1).collect();
            if let [single] = stored.as_slice() {
                table.put(ReadingItem::new(single, first_key, RETENTION));
            } else {
                table.put_block(BlockItem::new(&stored, &first_key, RETENTION).unwrap());
                blocks += 1;
            }
        }
    }
    blocks
}

/// Stores `readings` (one device's, sorted by time then event id) as one block under
/// the first one's write key, whatever the layout: a block a writer made of them.
pub fn put_block(table: &MemoryReadings, shards: &MemoryShards, readings: &[R]) {
    let layout = shards.layout().expect("layout set");
    let (first_key, _) = keyed(shards, &layout, &readings[0]);
    let stored: Vec<Reading> = readings
        .iter()
        .map(|r| keyed(shards, &layout, r).1)
        .collect();
    table.put_block(BlockItem::new(&stored, &first_key, RETENTION).unwrap());
}

pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

pub fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap()
}

pub fn table_history(epochs: Vec<(i64, Layout)>) -> TableHistory {
    let mut v = vec![];
    for (i, (at, layout)) in epochs.into_iter().enumerate() {
        v.push(Epoch {
            effective_from: if i == 0 { Timestamp::MIN } else { ts(at) },
            value: layout,
        });
    }
    TableHistory::from_epochs(v).unwrap()
}

pub fn fanout_history(epochs: Vec<(i64, u32)>) -> FanoutHistory {
    FanoutHistory::from_epochs(
        epochs
            .into_iter()
            .map(|(at, k)| Epoch {
                effective_from: ts(at),
                value: k,
            })
            .collect(),
    )
    .unwrap()
}

pub fn hourly(n: u32) -> Layout {
    Layout::time_bucket(Bucket::Hour, nz(n))
}

/// The wall clock, as the service's edge reads it for each request.
pub fn now() -> Timestamp {
    store::clock::wall_clock().expect("a usable clock")
}

pub type Service<'a> = QueryService<&'a MemoryReadings, Arc<MemoryShards>>;

pub fn service(table: &MemoryReadings, shards: Arc<MemoryShards>) -> Service<'_> {
    service_with(table, shards, None)
}

/// A service reading over every device through the time index `time_index` (the fake
/// serves any index name as the time index).
pub fn service_with<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    time_index: Option<&str>,
) -> Service<'a> {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    config.time_index = time_index.map(str::to_owned);
    QueryService::new(table, shards, config)
}

/// An answer as two reads of the same page must agree on it: its cursor's position and
/// request, without the time the cursor was issued.
pub fn without_issue_time(answer: &serde_json::Value) -> serde_json::Value {
    use base64::Engine as _;
    let mut answer = answer.clone();
    if let Some(cursor) = answer.get("next_cursor").and_then(|c| c.as_str()) {
        let body = cursor.split_once('.').map_or(cursor, |(body, _)| body);
        let mut opened: serde_json::Value = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .expect("a cursor body");
        opened.as_object_mut().map(|o| o.remove("t"));
        answer["next_cursor"] = opened;
    }
    answer
}

/// Calls the service and returns (status, JSON body).
pub async fn get(svc: &Service<'_>, path_and_query: &str) -> (u16, serde_json::Value) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let resp = svc.handle_parts("GET", path, query, now()).await;
    let status = resp.status().as_u16();
    let body = serde_json::from_str(resp.body()).expect("JSON body");
    (status, body)
}

/// Each item's metric `name` in a readings page, as the decimal its JSON text spells
/// (read raw, never through a double), for comparison with what was sent.
pub fn answered_decimals(page: &str, name: &str) -> Vec<bigdecimal::BigDecimal> {
    #[derive(serde::Deserialize)]
    struct Page {
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        metrics: BTreeMap<String, Box<serde_json::value::RawValue>>,
    }
    let page: Page = serde_json::from_str(page).expect("a readings page");
    page.items
        .iter()
        .map(|i| i.metrics[name].get().parse().expect("a decimal"))
        .collect()
}

/// Writes `readings` (any metrics and tags) as [`load`] writes an [`R`]: each under the
/// key a writer at its own time gives it.
#[allow(
    dead_code,
    reason = "the sealer's tests write readings of many metrics; the query's do not"
)]
pub fn load_readings(table: &MemoryReadings, shards: &MemoryShards, readings: &[Reading]) {
    let layout = shards.layout().expect("layout set");
    for reading in readings {
        let fanout = shards
            .entity(&reading.device_id)
            .map(|meta| meta.shard_history)
            .unwrap_or_default();
        let at = ReadingRef::new(&reading.device_id, &reading.event_id, reading.ts);
        let key = write_key(&at, &layout, &fanout, reading.ts).unwrap().key;
        table.put(ReadingItem::new(reading, key, RETENTION));
    }
}
