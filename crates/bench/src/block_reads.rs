//! Item 8, continued: reads of blocks on dynalite. One device's readings, one a second
//! for six hours, sent 50 to a message, stored twice on one dynalite server: as one item
//! a reading (a table with blocks off) and as the writer packs them (a table with the
//! default block layout). The query service reads both through the capacity-proxy in
//! forward mode (10 ms a call), which charges read units by the bytes each call
//! returns, as DynamoDB does for a Query without a filter. Measured: one device over
//! the six hour-buckets, limit 100, against a single Query of one key in the same run;
//! a point read by event id; and the read units of each.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use capacity_proxy::{Proxy, ProxyConfig, ProxyHandle};
use query::{CursorKey, QueryService, ServiceConfig};
use sharding::block::BlockLayout;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use store::ShardStore as _;
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;

use crate::common::{self, Gen, T0_MS};
use crate::report::{Results, at_most};

const DEVICE: &str = "sensor-alpha-001";
const HOURS: i64 = 6;
const SHARDS: u32 = 8;
const PER_MESSAGE: usize = 50;
const ITERATIONS: usize = 100;
const LATENCY_MS: u64 = 10;

/// The device's readings, one a second, time-ordered ids.
fn readings() -> Vec<Gen> {
    (0..HOURS * 3_600)
        .map(|i| Gen {
            device: DEVICE.to_owned(),
            event: format!("0190a1b2-c3d4-7e5f-8a9b-{i:012x}"),
            ts_ms: T0_MS + i * 1_000,
            temperature: 15.0 + (i % 200) as f64 / 10.0,
        })
        .collect()
}

/// One table's figures.
struct Figures {
    range_p50: f64,
    single_p50: f64,
    point_p50: f64,
    range_rcu: f64,
    point_rcu: f64,
    items: usize,
}

/// Runs the comparison and reports it under item 8.
pub async fn run(root: &Path, results: &mut Results) -> Result<()> {
    let server = stand_in::Dynalite::start(&stand_in::ensure_dynalite(root)?)?;
    let endpoint = server.endpoint();
    let gens = readings();
    let items = measure(root, &endpoint, "items", None, &gens).await?;
    let blocks = measure(
        root,
        &endpoint,
        "blocks",
        Some(BlockLayout::default()),
        &gens,
    )
    .await?;
    report(results, &items, &blocks);
    Ok(())
}

fn report(results: &mut Results, items: &Figures, blocks: &Figures) {
    // Today's single Query: one key of items, limit 100. A key of blocks answers 100
    // blocks to the same Query, far more bytes, so it is no baseline.
    let ratio = |f: &Figures| f.range_p50 / items.single_p50;
    results.goal(
        "8",
        "dynalite: one device over 6 hour-buckets, limit 100, a reading a second sent 50 to a message: p50 (x today's single Query: one key of items, limit 100), blocks on / off",
        format!(
            "{:.1} ms ({:.2}x) / {:.1} ms ({:.2}x)",
            blocks.range_p50,
            ratio(blocks),
            items.range_p50,
            ratio(items)
        ),
        "blocks' ratio <= blocks off's",
        at_most(ratio(blocks), ratio(items)),
    );
    results.goal(
        "8",
        "dynalite: the same read's read units (the proxy's charge, by the bytes returned), blocks on / off",
        format!(
            "{:.1} / {:.1} ({:.0}%)",
            blocks.range_rcu,
            items.range_rcu,
            100.0 * blocks.range_rcu / items.range_rcu
        ),
        "at most half",
        at_most(blocks.range_rcu, items.range_rcu / 2.0),
    );
    results.goal(
        "8",
        "dynalite: point read by event id (GET /devices/{id}/readings/{event_id}?ts=), p50, blocks on / off; read units each",
        format!(
            "{:.1} ms / {:.1} ms ({:.2}x); {:.1} / {:.1}",
            blocks.point_p50,
            items.point_p50,
            blocks.point_p50 / items.point_p50,
            blocks.point_rcu,
            items.point_rcu
        ),
        "<= 1.2x",
        at_most(blocks.point_p50 / items.point_p50, 1.2),
    );
    results.figure(
        "8",
        "dynalite: items stored for 21,600 readings, blocks on / off",
        format!("{} / {}", blocks.items, items.items),
    );
    results.note(
        "8",
        format!(
            "reads: one device ({DEVICE}), a reading a second for {HOURS} hours sent \
             {PER_MESSAGE} to a message, written straight to one dynalite server twice: one \
             item a reading (hour buckets, N = {SHARDS}, blocks off) and as store::pack packs \
             and encodes them under the default block layout (the same layout with blocks \
             on), each table with its layout in its own shard table. The query service in \
             process (query::QueryService over the DynamoDB adapter) through the \
             capacity-proxy in forward mode ({LATENCY_MS} ms a call), {ITERATIONS} requests \
             of each kind after 3 warm-up rounds; p50 of the wall time. The single Query is \
             one key's first hour, limit 100, on the table of items (today's). Read units are the \
             proxy's charge over the measured requests, per request (by the bytes each call \
             returns, eventually consistent: half a unit per 4 KB started). The point read \
             asks for a reading in the middle of the range; with blocks it is a GetItem \
             of the reading's own key and a Query of the device's keys over the block \
             window before it, at once."
        ),
    );
}

/// Provisions a stack named `prefix`, writes the readings as `blocks` says, and times
/// the reads.
async fn measure(
    root: &Path,
    endpoint: &str,
    prefix: &str,
    blocks: Option<BlockLayout>,
    gens: &[Gen],
) -> Result<Figures> {
    let tables = stand_in::provision_tables_with(
        endpoint,
        &root.join("template.yaml"),
        prefix,
        stand_in::Backend::Dynalite,
        &[],
    )
    .await
    .context("provisioning the template's tables")?;
    let (readings_table, shards_table) = (
        tables.name("ReadingsTable")?.to_owned(),
        tables.name("ShardsTable")?.to_owned(),
    );
    let direct = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(endpoint).await);
    let layout = common::hourly(SHARDS);
    let table = TableHistory::new(match blocks {
        Some(b) => layout.with_blocks(b),
        None => layout,
    });
    DynamoShards::new(&direct, &shards_table)
        .create_layout(&table)
        .await?;
    let stored = write(&direct, &readings_table, &table, gens).await?;

    let mut pc = ProxyConfig::forward(endpoint)?;
    pc.faults.latency_ms = LATENCY_MS;
    pc.seed = Some(8);
    let proxy = Proxy::start(pc).await?;
    let via = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let svc = QueryService::new(
        DynamoReadingSource::new(via.clone(), &readings_table),
        DynamoShards::new(&via, &shards_table),
        ServiceConfig::new(CursorKey::new(vec![8u8; 32])?),
    );
    let now = common::ts(T0_MS + (HOURS + 1) * 3_600_000)?;
    let range = format!("from={T0_MS}&to={}&limit=100", T0_MS + HOURS * 3_600_000);
    let range_path = format!("/devices/{DEVICE}/readings");
    let middle = &gens[gens.len() / 2];
    let point_path = format!("/devices/{DEVICE}/readings/{}", middle.event);
    let point_query = format!("ts={}", middle.ts_ms);
    // The key of the device's first reading, as one item of it is keyed.
    let single_pk = common::keyed_item(
        &gens[0],
        &TableHistory::new(common::hourly(SHARDS)),
        Duration::from_secs(86_400),
    )?
    .pk;

    let rcu = |proxy: &ProxyHandle| proxy.stats().rcu_by_table.values().sum::<f64>();
    let mut range_ms = Vec::new();
    let mut point_ms = Vec::new();
    let mut single_ms = Vec::new();
    let (mut range_rcu, mut point_rcu) = (0.0, 0.0);
    for i in 0..ITERATIONS + 3 {
        let measured = i >= 3;
        let before = rcu(&proxy);
        let (took, status, body) = timed_get(&svc, &range_path, &range, now).await;
        check(status, &body, 100)?;
        let after = rcu(&proxy);
        if measured {
            range_ms.push(took);
            range_rcu += after - before;
        }
        let before = rcu(&proxy);
        let (took, status, body) = timed_get(&svc, &point_path, &point_query, now).await;
        if status != 200 {
            bail!("the point read answered {status}: {body}");
        }
        let after = rcu(&proxy);
        if measured {
            point_ms.push(took);
            point_rcu += after - before;
        }
        let t = Instant::now();
        via.query()
            .table_name(&readings_table)
            .key_condition_expression("PK = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(single_pk.clone()))
            .limit(100)
            .send()
            .await?;
        if measured {
            single_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    proxy.shutdown().await?;
    let n = ITERATIONS as f64;
    Ok(Figures {
        range_p50: p50(range_ms),
        single_p50: p50(single_ms),
        point_p50: p50(point_ms),
        range_rcu: range_rcu / n,
        point_rcu: point_rcu / n,
        items: stored,
    })
}

/// One request's wall time in ms, status and body.
async fn timed_get<S, D>(
    svc: &QueryService<S, D>,
    path: &str,
    query: &str,
    now: sharding::time::Timestamp,
) -> (f64, u16, String)
where
    S: store::read::ReadingSource,
    D: store::ShardReader,
{
    let t = Instant::now();
    let answer = svc.handle_parts("GET", path, Some(query), now).await;
    let took = t.elapsed().as_secs_f64() * 1000.0;
    (took, answer.status().as_u16(), answer.body().clone())
}

/// A 200 answer of `limit` readings, or why not.
fn check(status: u16, body: &str, limit: usize) -> Result<()> {
    if status != 200 {
        bail!("the range read answered {status}: {body}");
    }
    let value: serde_json::Value = serde_json::from_str(body)?;
    let n = value["items"].as_array().map_or(0, Vec::len);
    if n != limit {
        bail!("the range read answered {n} readings, not {limit}");
    }
    Ok(())
}

fn p50(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Writes `gens`, sent [`PER_MESSAGE`] to a message, as the writer packs them under
/// `table`, with `BatchWriteItem` (unprocessed items sent again); returns the items.
async fn write(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    table: &TableHistory,
    gens: &[Gen],
) -> Result<usize> {
    let retention = Duration::from_secs(3_650 * 86_400);
    let mut items = Vec::new();
    for chunk in gens.chunks(PER_MESSAGE) {
        let readings: Vec<store::Reading> =
            chunk.iter().map(Gen::reading).collect::<Result<_>>()?;
        let units = store::pack::pack(&readings, table);
        for members in store::pack::take(readings, &units) {
            let first = members.first().context("a member")?;
            let first_key = write_key(
                &ReadingRef::new(&first.device_id, &first.event_id, first.ts),
                table,
                &FanoutHistory::new(),
                first.ts,
            )?
            .key;
            let key = store::pack::item_key(&members, &first_key);
            items.push(store::pack::encode(&members, &key, retention)?.item);
        }
    }
    let stored = items.len();
    for chunk in items.chunks(25) {
        let mut requests: Vec<WriteRequest> = chunk
            .iter()
            .map(|item| {
                Ok(WriteRequest::builder()
                    .put_request(PutRequest::builder().set_item(Some(item.clone())).build()?)
                    .build())
            })
            .collect::<Result<_>>()?;
        for _ in 0..20 {
            let out = client
                .batch_write_item()
                .request_items(name, requests)
                .send()
                .await?;
            requests = out
                .unprocessed_items
                .and_then(|mut u| u.remove(name))
                .unwrap_or_default();
            if requests.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !requests.is_empty() {
            bail!(
                "{} items left unprocessed after 20 attempts",
                requests.len()
            );
        }
    }
    Ok(stored)
}
