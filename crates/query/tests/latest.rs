//! Scenario 42: `GET /devices/{device_id}/latest`, one device's newest reading, read
//! from the readings table at the request's clock. The answer is the greatest by
//! timestamp, not the last written (an older reading that arrives later never replaces
//! it); readings at one millisecond go to the greatest event id; a reading stored under
//! two keys is one; a device with nothing in the look-back is a 404 in the API's error
//! shape, one outside the token's scope a 403 with nothing read; a newest reading 20 days
//! old is found within the request's budgets, and a look-back the budgets cannot finish
//! is refused by name. The same on dynalite, the newest reading inside a block.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use query::budget::RequestBudget;
use query::error::ApiError;
use query::model::format_ts;
use query::params::parse_request;
use query::service::{ReadStats, Request};
use query::{QueryService, ReadScope, ServiceConfig};
use serde_json::Value;
use sharding::block::BlockLayout;
use sharding::epoch::FanoutHistory;
use sharding::key::{ReadingRef, key_for_layout, write_key};
use sharding::layout::Layout;
use sharding::time::Bucket;
use store::block::BlockItem;
use store::item::{Reading, ReadingItem};
use store::memory::{MemoryReadings, MemoryShards};

use crate::common::{
    BASE_MS, R, fanout_history, hourly, key, load, load_blocks, nz, shard_table, table_history, ts,
};

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
/// The request's clock: in the middle of an hour bucket of the fixtures' day.
const NOW: i64 = BASE_MS + 10 * HOUR + 25 * MINUTE + 12_345;
/// How far ahead of the clock the look-back reaches (the ingest's `MAX_FUTURE_SECS`).
const AHEAD: i64 = 5 * MINUTE;

/// The layouts every property is checked under: hour buckets with one item a reading,
/// and a new table's default (hour buckets over 8 shards, blocks of a minute).
fn layouts() -> [(&'static str, Layout); 2] {
    [
        ("items", hourly(4)),
        (
            "blocks",
            Layout::time_bucket(Bucket::Hour, nz(8)).with_blocks(BlockLayout::default()),
        ),
    ]
}

fn reading(device: &str, event: &str, ts_ms: i64) -> R {
    R {
        device: device.to_owned(),
        event: event.to_owned(),
        ts_ms,
        value: crate::common::n((ts_ms % 1000) as f64 / 10.0),
    }
}

/// `device`'s readings every `step_ms` over `[from_ms, to_ms)`, event ids `e{i:06}`.
fn every(device: &str, from_ms: i64, to_ms: i64, step_ms: i64) -> Vec<R> {
    (0..)
        .map(|i| (i, from_ms + i * step_ms))
        .take_while(|&(_, t)| t < to_ms)
        .map(|(i, t)| reading(device, &format!("e{i:06}"), t))
        .collect()
}

type Svc<'a> = QueryService<&'a MemoryReadings, Arc<MemoryShards>>;

/// The service with the production settings (32 Queries in flight, default budgets).
fn service<'a>(table: &'a MemoryReadings, shards: &Arc<MemoryShards>) -> Svc<'a> {
    service_with(table, shards, RequestBudget::default())
}

fn service_with<'a>(
    table: &'a MemoryReadings,
    shards: &Arc<MemoryShards>,
    budget: RequestBudget,
) -> Svc<'a> {
    let mut config = ServiceConfig::new(key());
    config.budget = budget;
    QueryService::new(table, shards.clone(), config)
}

fn table_with(layout: Layout) -> (MemoryReadings, Arc<MemoryShards>) {
    let shards = shard_table(table_history(vec![(0, layout)]), []);
    (MemoryReadings::new(None), Arc::new(shards))
}

/// `GET /devices/{device}/latest` at [`NOW`]: the answer and what it cost.
async fn latest(svc: &Svc<'_>, device: &str) -> Result<(Value, ReadStats), ApiError> {
    let path = format!("/devices/{device}/latest");
    let endpoint = parse_request("GET", &path, None, &svc.config().limits).expect("valid");
    let (body, stats) = svc.execute(endpoint, ts(NOW)).await?;
    Ok((serde_json::from_str(&body).expect("a JSON answer"), stats))
}

/// The event id of `device`'s newest reading at [`NOW`], which must be answered.
async fn latest_event(svc: &Svc<'_>, device: &str) -> String {
    let (body, _) = latest(svc, device).await.expect("a reading");
    body["event_id"].as_str().expect("event_id").to_owned()
}

/// `GET path` at [`NOW`] as the edge answers it: status, content type, JSON body.
async fn http(svc: &Svc<'_>, path: &str) -> (u16, String, Value) {
    let resp = svc.handle_parts("GET", path, None, ts(NOW)).await;
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    let body = serde_json::from_str(resp.body()).expect("a JSON body");
    (resp.status().as_u16(), content_type, body)
}

/// The first reading of `device`'s range read newest first over the look-back (the
/// range route's cap, ending where the look-back does).
async fn newest_by_range(svc: &Svc<'_>, device: &str) -> Value {
    let to = NOW + AHEAD;
    let query = format!("from={}&to={to}&order=desc&limit=1", to - 31 * DAY);
    let resp = svc
        .handle_parts(
            "GET",
            &format!("/devices/{device}/readings"),
            Some(&query),
            ts(NOW),
        )
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.body());
    let page: Value = serde_json::from_str(resp.body()).unwrap();
    page["items"][0].clone()
}

#[tokio::test]
async fn the_newest_reading_is_answered_as_a_reading_with_as_of() {
    for (name, layout) in layouts() {
        let (table, shards) = table_with(layout);
        // dev-1 every 10 s over three hours; dev-2, on the same keys or not, later.
        let mut readings = every("dev-1", NOW - 3 * HOUR, NOW - 30 * SECOND, 10 * SECOND);
        readings.extend(every("dev-2", NOW - HOUR, NOW, 7 * SECOND));
        load_blocks(&table, &shards, &readings);
        let newest = readings
            .iter()
            .filter(|r| r.device == "dev-1")
            .max_by_key(|r| r.ts_ms)
            .unwrap();
        let svc = service(&table, &shards);
        let before = table.calls();
        let (body, stats) = latest(&svc, "dev-1").await.unwrap();
        assert_eq!(stats.calls, table.calls() - before, "{name}");
        assert_eq!(body["device_id"], "dev-1", "{name}: {body}");
        assert_eq!(body["event_id"], newest.event.as_str(), "{name}: {body}");
        assert_eq!(body["ts"], format_ts(newest.ts_ms).unwrap(), "{name}");
        assert_eq!(body["tags"]["site"], "lab", "{name}");
        assert_eq!(body["as_of"], format_ts(NOW).unwrap(), "{name}");
        let fields: BTreeSet<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            fields,
            BTreeSet::from(["device_id", "event_id", "ts", "metrics", "tags", "as_of"]),
            "{name}"
        );
        // A reading's own JSON, as the range route answers it, plus `as_of`.
        let mut reading = body.clone();
        reading.as_object_mut().unwrap().remove("as_of");
        assert_eq!(reading, newest_by_range(&svc, "dev-1").await, "{name}");
        assert_eq!(stats.items_returned, 1);
        println!(
            "{name}: a device writing every 10 s: Queries={} items evaluated={} rounds={} \
             (plan of {} Queries)",
            stats.calls, stats.items_read, stats.rounds, stats.plan_queries
        );
        assert!(stats.calls <= 4, "{name}: {stats:?}");
        assert!(stats.items_read <= 4, "{name}: {stats:?}");
    }
}

#[tokio::test]
async fn an_older_reading_written_after_a_newer_one_does_not_replace_it() {
    for (name, layout) in layouts() {
        let (table, shards) = table_with(layout);
        let mut first = every("dev-1", NOW - HOUR, NOW - 10 * MINUTE, 20 * SECOND);
        first.push(reading("dev-1", "e-newest", NOW - 10 * MINUTE));
        load_blocks(&table, &shards, &first);
        let svc = service(&table, &shards);
        assert_eq!(latest_event(&svc, "dev-1").await, "e-newest", "{name}");
        // A late device sends older readings now: written after the newest, with event
        // ids that sort after it, alone and as a block of their own.
        load(
            &table,
            &shards,
            &[reading("dev-1", "z-late", NOW - 20 * MINUTE)],
        );
        let late: Vec<R> = every("dev-1", NOW - 11 * MINUTE, NOW - 10 * MINUTE, 5 * SECOND)
            .into_iter()
            .map(|r| R {
                event: format!("z-{}", r.event),
                ..r
            })
            .collect();
        load_blocks(&table, &shards, &late);
        assert_eq!(latest_event(&svc, "dev-1").await, "e-newest", "{name}");
        // A newer reading is answered as soon as it is written.
        load(
            &table,
            &shards,
            &[reading("dev-1", "a-newer", NOW - MINUTE)],
        );
        assert_eq!(latest_event(&svc, "dev-1").await, "a-newer", "{name}");
    }
}

/// Readings at one millisecond are ordered by event id, compared byte by byte (so
/// `e-9` after `e-10`, and lower case after upper case), and the greatest is the
/// newest: whether they share a block, sit in blocks and items, or are items each.
#[tokio::test]
async fn readings_at_one_millisecond_answer_the_greatest_event_id() {
    let at = NOW - 5 * MINUTE;
    let tied = ["e-10", "e-a", "E-z", "e-9"];
    for (name, layout) in layouts() {
        for alone in [None, Some("e-a"), Some("e-10")] {
            let (table, shards) = table_with(layout.clone());
            // A millisecond earlier, an event id greater than any: time comes first.
            let mut packed = vec![reading("dev-1", "zzz", at - 1)];
            for event in tied {
                let r = reading("dev-1", event, at);
                if Some(event) == alone {
                    load(&table, &shards, &[r]);
                } else {
                    packed.push(r);
                }
            }
            load_blocks(&table, &shards, &packed);
            let svc = service(&table, &shards);
            assert_eq!(
                latest_event(&svc, "dev-1").await,
                "e-a",
                "{name}, stored alone: {alone:?}"
            );
        }
    }
}

/// The keys a reading can be stored under for `hot-1`, raised to k = 4 two hours before
/// the clock.
#[derive(Debug, Clone, Copy)]
enum Stored {
    /// Written under k = 1, then redelivered after the raise and keyed under k = 4.
    Both,
    Cold,
    Raised,
}

#[tokio::test]
async fn a_reading_stored_under_two_keys_is_answered_once() {
    for stored in [Stored::Both, Stored::Cold, Stored::Raised] {
        let layout = hourly(2);
        let raise = fanout_history(vec![(NOW - 2 * HOUR, 4)]);
        let shards = Arc::new(shard_table(
            table_history(vec![(0, layout.clone())]),
            [("hot-1".to_owned(), raise)],
        ));
        let table = MemoryReadings::new(None);
        let put = |event: &str, ts_ms: i64, stored: Stored| {
            let r = reading("hot-1", event, ts_ms);
            let item = Reading {
                device_id: r.device.clone(),
                event_id: r.event.clone(),
                ts: ts(ts_ms),
                metrics: BTreeMap::from([("temperature".to_owned(), r.value.clone())]),
                tags: BTreeMap::new(),
                written: store::WriteOrder::OLDEST,
            };
            let fanouts: &[u32] = match stored {
                Stored::Both => &[1, 4],
                Stored::Cold => &[1],
                Stored::Raised => &[4],
            };
            let mut pks = BTreeSet::new();
            for &k in fanouts {
                let at = ReadingRef::new("hot-1", event, ts(ts_ms));
                let key = key_for_layout(&at, &layout, Some(k)).unwrap();
                pks.insert(key.pk.clone());
                table.put(ReadingItem::new(
                    &item,
                    key,
                    Duration::from_secs(86_400 * 3650),
                ));
            }
            pks
        };
        put("e-older", NOW - 30 * MINUTE, Stored::Both);
        let pks = put("e-newest", NOW - 5 * MINUTE, stored);
        if let Stored::Both = stored {
            assert_eq!(pks.len(), 2, "two partition keys: {pks:?}");
        }
        let svc = service(&table, &shards);
        let (body, stats) = latest(&svc, "hot-1").await.unwrap();
        assert_eq!(body["event_id"], "e-newest", "{stored:?}");
        assert_eq!(stats.items_returned, 1, "{stored:?}");
        // The range route the answer is read like shows the copy once, then the next.
        let to = NOW + AHEAD;
        let query = format!("from={}&to={to}&order=desc&limit=2", to - DAY);
        let resp = svc
            .handle_parts("GET", "/devices/hot-1/readings", Some(&query), ts(NOW))
            .await;
        let page: Value = serde_json::from_str(resp.body()).unwrap();
        let events: Vec<&str> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["event_id"].as_str().unwrap())
            .collect();
        assert_eq!(events, ["e-newest", "e-older"], "{stored:?}");
    }
}

#[tokio::test]
async fn a_device_with_no_reading_in_the_look_back_is_404_in_the_error_shape() {
    let (table, shards) = table_with(hourly(4));
    load(
        &table,
        &shards,
        &[
            reading("dev-old", "e1", NOW - 31 * DAY - 1),
            reading("dev-edge", "e1", NOW - 31 * DAY),
            reading("dev-ahead", "e1", NOW + AHEAD - 1),
            // Later than the ingest accepts a timestamp: stored here, never answered.
            reading("dev-far", "e1", NOW + AHEAD),
        ],
    );
    let svc = service(&table, &shards);
    for device in ["nobody", "dev-old", "dev-far"] {
        let (status, content_type, body) = http(&svc, &format!("/devices/{device}/latest")).await;
        assert_eq!(status, 404, "{device}: {body}");
        assert_eq!(content_type, "application/json");
        assert_eq!(body["error"]["code"], "not_found", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(device), "{message}");
        assert!(
            message.contains(&format_ts(NOW - 31 * DAY).unwrap()),
            "the look-back is named: {message}"
        );
        assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    }
    for device in ["dev-edge", "dev-ahead"] {
        let (status, _, body) = http(&svc, &format!("/devices/{device}/latest")).await;
        assert_eq!(status, 200, "{device}: {body}");
    }
    // A table nothing was written to yet: no layout stored, nothing read.
    let empty = MemoryReadings::new(None);
    let svc = service(&empty, &Arc::new(MemoryShards::new()));
    let (status, _, body) = http(&svc, "/devices/dev-1/latest").await;
    assert_eq!((status, &body["error"]["code"]), (404, &"not_found".into()));
    assert_eq!(empty.calls(), 0);
}

#[tokio::test]
async fn a_device_outside_the_tokens_scope_is_403_with_nothing_read() {
    let (table, shards) = table_with(hourly(4));
    load(
        &table,
        &shards,
        &[
            reading("site-a-1", "e1", NOW - MINUTE),
            reading("site-b-1", "e1", NOW - MINUTE),
        ],
    );
    let mut config = ServiceConfig::new(key());
    config.scope_claim = Some("shardline_devices".to_owned());
    let svc = QueryService::new(&table, shards.clone(), config);
    let scope = ReadScope::from_claim("shardline_devices", "site-a-* sensor-7").unwrap();
    let ask = |path: &'static str| Request {
        method: "GET",
        path,
        query: Some("consistent=true"),
    };
    let resp = svc
        .handle_as(Ok(&scope), ask("/devices/site-b-1/latest"), ts(NOW), None)
        .await;
    assert_eq!(resp.status(), 403, "{}", resp.body());
    let body: Value = serde_json::from_str(resp.body()).unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("site-b-1")
    );
    assert_eq!(table.calls(), 0, "the readings table was read");
    assert_eq!(shards.reads(), 0, "the shard metadata was read");
    let resp = svc
        .handle_as(Ok(&scope), ask("/devices/site-a-1/latest"), ts(NOW), None)
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.body());
}

/// A device whose newest reading is 20 days old: the look-back steps back over 480
/// empty hour buckets, opening at most twice as many a round as the round before (32 at
/// most), within the default budgets; the cost is printed. A device with nothing in 31
/// days costs the whole look-back, still within them. A budget that ends the look-back
/// first (a tighter one, a raised device's k + 1 keys a bucket, the deadline) is a 400
/// naming it and the instant back to which the device has nothing, never a timeout.
#[tokio::test]
async fn a_newest_reading_20_days_old_is_found_within_the_budgets() {
    let budget = RequestBudget::default();
    let old = NOW - 20 * DAY;
    for (name, layout) in layouts() {
        let (table, shards) = table_with(layout.clone());
        let mut readings = every("dev-1", old - MINUTE, old, 10 * SECOND);
        readings.extend(every("dev-2", NOW - 2 * DAY, NOW, 10 * MINUTE));
        load_blocks(&table, &shards, &readings);
        let svc = service(&table, &shards);
        let before = table.calls();
        let (body, stats) = latest(&svc, "dev-1").await.unwrap();
        assert_eq!(body["event_id"], "e000005", "{name}: {body}");
        assert_eq!(stats.calls, table.calls() - before);
        println!(
            "{name}: newest reading 20 days old: Queries={} items evaluated={} rounds={} \
             (plan of {})",
            stats.calls, stats.items_read, stats.rounds, stats.plan_queries
        );
        assert!(stats.calls <= budget.queries, "{name}: {stats:?}");
        assert!(stats.items_read <= budget.evaluated, "{name}: {stats:?}");
        assert!(stats.rounds <= 40, "{name}: {stats:?}");

        let before = table.calls();
        let e = latest(&svc, "nobody").await.unwrap_err();
        assert_eq!(e.code, "not_found", "{name}: {e}");
        println!(
            "{name}: no reading in 31 days (404): Queries={}",
            table.calls() - before
        );
        assert!(table.calls() - before <= budget.queries, "{name}");

        // A tighter Query budget ends the look-back before 20 days.
        let tight = RequestBudget {
            queries: 100,
            ..budget
        };
        let before = table.calls();
        let e = latest(&service_with(&table, &shards, tight), "dev-1")
            .await
            .unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, "budget_exceeded"), "{e}");
        assert!(e.message.contains("QUERY_MAX_QUERIES"), "{e}");
        assert!(e.message.contains("none at or after"), "{e}");
        assert!(e.message.contains("order=desc&limit=1"), "{e}");
        assert!(table.calls() - before <= 100, "{name}");

        // The deadline: no read is sent after it.
        let endpoint =
            parse_request("GET", "/devices/dev-1/latest", None, &svc.config().limits).unwrap();
        let e = svc
            .execute_by(&ReadScope::Every, endpoint, ts(NOW), Some(Instant::now()))
            .await
            .unwrap_err();
        assert_eq!(e.code, "budget_exceeded", "{e}");
        assert!(e.message.contains("QUERY_DEADLINE_MARGIN_MS"), "{e}");
    }
    // A device raised to k = 8 a month ago reads 9 keys a bucket (18 with blocks'
    // lanes): 2,000 Queries reach back about 4.6 days, not 20.
    let (_, layout) = layouts()[1].clone();
    let raised = fanout_history(vec![(NOW - 31 * DAY, 8)]);
    let shards = Arc::new(shard_table(
        table_history(vec![(0, layout)]),
        [("hot-1".to_owned(), raised)],
    ));
    let table = MemoryReadings::new(None);
    load_blocks(&table, &shards, &every("hot-1", old - MINUTE, old, SECOND));
    let e = latest(&service(&table, &shards), "hot-1")
        .await
        .unwrap_err();
    assert_eq!(e.code, "budget_exceeded", "{e}");
    assert!(e.message.contains("QUERY_MAX_QUERIES"), "{e}");
    assert!(table.calls() <= budget.queries);
}

/// Dynalite (DynamoDB's Query semantics, `ScannedCount` included): a device's readings
/// every 10 s packed into blocks of a minute, the newest inside the newest block and
/// tied at its millisecond with a smaller event id, an older one written alone after
/// them; and a device whose newest block is 20 days old. The costs are printed.
#[tokio::test]
async fn on_dynalite_the_newest_reading_inside_a_block_is_answered() -> anyhow::Result<()> {
    use crate::on_dynalite::{Counted, readings_on_dynalite, write_items};

    let (server, client, readings_table) = readings_on_dynalite("query-latest").await?;
    let layout = hourly(1).with_blocks(BlockLayout::default());
    let history = table_history(vec![(0, layout.clone())]);
    let retention = Duration::from_secs(86_400 * 3650);
    let stored = |r: &R| {
        let at = ts(r.ts_ms);
        let key = write_key(
            &ReadingRef::new(&r.device, &r.event, at),
            &history,
            &FanoutHistory::new(),
            at,
        )
        .unwrap()
        .key;
        let reading = Reading {
            device_id: r.device.clone(),
            event_id: r.event.clone(),
            ts: at,
            metrics: BTreeMap::from([("temperature".to_owned(), r.value.clone())]),
            tags: BTreeMap::new(),
            written: store::WriteOrder::OLDEST,
        };
        (key, reading)
    };
    // Blocks of six readings (a minute), the newest block's last two at one ms.
    let newest_ms = NOW - MINUTE - 7;
    let mut recent = every("dev-b", NOW - 2 * HOUR - 3 * SECOND, newest_ms, 10 * SECOND);
    recent.push(reading("dev-b", "e-tie-a", newest_ms));
    recent.push(reading("dev-b", "e-tie-b", newest_ms));
    let old = every(
        "dev-old",
        NOW - 20 * DAY,
        NOW - 20 * DAY + MINUTE,
        10 * SECOND,
    );
    let mut items = Vec::new();
    let mut blocks = 0;
    for readings in [&recent, &old] {
        for part in readings.chunks(6) {
            let (first_key, _) = stored(&part[0]);
            let members: Vec<Reading> = part.iter().map(|r| stored(r).1).collect();
            items.push(BlockItem::new(&members, &first_key, retention)?.to_item()?);
            blocks += 1;
        }
    }
    let (late_key, late) = stored(&reading("dev-b", "zz-late", NOW - 30 * MINUTE));
    items.push(ReadingItem::new(&late, late_key, retention).to_item()?);
    write_items(&client, &readings_table, items).await?;
    assert!(blocks > 100, "{blocks} blocks");
    let last_block = recent.chunks(6).last().map_or(0, <[R]>::len);
    assert!(last_block >= 3, "the newest reading is inside its block");

    let source = Counted::new(&client, &readings_table);
    let shards = Arc::new(shard_table(history.clone(), []));
    let svc = QueryService::new(&source, shards, ServiceConfig::new(key()));
    let ask = |device: &str| {
        parse_request(
            "GET",
            &format!("/devices/{device}/latest"),
            Some("consistent=true"),
            &svc.config().limits,
        )
        .unwrap()
    };
    let (body, _) = svc.execute(ask("dev-b"), ts(NOW)).await?;
    let (queries, evaluated) = source.take();
    let body: Value = serde_json::from_str(&body)?;
    assert_eq!(body["event_id"], "e-tie-b", "{body}");
    assert_eq!(body["ts"], format_ts(newest_ms).unwrap());
    println!(
        "dynalite, blocks: a device writing every 10 s: Queries={queries} items evaluated={evaluated}"
    );
    assert!(queries <= 4 && evaluated <= 4, "{queries} {evaluated}");

    let (body, _) = svc.execute(ask("dev-old"), ts(NOW)).await?;
    let (queries, evaluated) = source.take();
    let body: Value = serde_json::from_str(&body)?;
    assert_eq!(body["event_id"], "e000005", "{body}");
    println!(
        "dynalite, blocks: newest reading 20 days old: Queries={queries} items evaluated={evaluated}"
    );
    let budget = RequestBudget::default();
    assert!(queries <= budget.queries && evaluated <= budget.evaluated);

    let e = svc.execute(ask("nobody"), ts(NOW)).await.unwrap_err();
    let (queries, _) = source.take();
    assert_eq!(e.code, "not_found");
    println!("dynalite, blocks: no reading in 31 days (404): Queries={queries}");
    drop(server);
    Ok(())
}
