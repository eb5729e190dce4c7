//! Item 9, continued: a month of hourly stats of one device writing a reading every
//! second, from the sealer's hour summaries (`dev#{device}`, one item an hour), against
//! today's raw stats route over the readings. Both on dynalite behind the capacity-proxy
//! in forward mode (10 ms a call).
//!
//! Two days of readings are written and sealed by the real sealer; the other 29 days'
//! summaries are those 48 sealed items again, each moved by whole days (its hour, first
//! and last reading), so the month's Query reads 744 summaries of the size the sealer
//! writes. The raw route reads the two days page by page; its month is extrapolated.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use capacity_proxy::{Proxy, ProxyConfig};
use query::{CursorKey, QueryService, ServiceConfig, parse_request};
use sealer::{Sealer, Settings as SealerSettings};
use sharding::epoch::TableHistory;
use sharding::time::Timestamp;
use store::ShardStore as _;
use store::dynamo::DynamoShards;
use store::read::{DynamoReadingSource, DynamoReadings};
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{
    DeviceHour, HOUR_MS, RollupItem, RollupQuery, RollupTable as _, hour_label, keys, query_all,
};

use crate::common::{self, Gen, T0_MS};
use crate::report::{Results, at_most};

const DEVICE: &str = "sensor-alpha-001";
/// Days written and sealed.
const SEEDED_DAYS: i64 = 2;
/// The month read.
const MONTH_DAYS: i64 = 31;
/// Item 4's stats layout: hour buckets over 32 shards, an item a reading.
const SHARDS: u32 = 32;
const LATENCY_MS: u64 = 10;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The raw route over the seeded days.
struct Raw {
    pages: u64,
    largest_page_buckets: u64,
    queries: u64,
    evaluated: u64,
    rcu: f64,
    ms: f64,
}

/// The month's Query of the summaries.
struct Month {
    queries: u64,
    evaluated: u64,
    items: usize,
    bytes: usize,
    rcu: f64,
    ms: f64,
    readings: u64,
}

pub async fn run(root: &Path, results: &mut Results) -> Result<()> {
    let server = stand_in::Dynalite::start(&stand_in::ensure_dynalite(root)?)?;
    let endpoint = server.endpoint();
    let tables = stand_in::provision_tables(
        &endpoint,
        &root.join("template.yaml"),
        "bench-month",
        stand_in::Backend::Dynalite,
    )
    .await
    .context("provisioning the template's tables")?;
    let (readings, shards, rollups) = (
        tables.name("ReadingsTable")?.to_owned(),
        tables.name("ShardsTable")?.to_owned(),
        tables.name("RollupTable")?.to_owned(),
    );
    let direct = Client::new(&stand_in::sdk_config(&endpoint).await);
    let table = TableHistory::new(common::hourly(SHARDS));
    DynamoShards::new(&direct, &shards)
        .create_layout(&table)
        .await?;
    let retention = Duration::from_secs(3650 * 86_400);
    for day in 0..SEEDED_DAYS {
        let items = (day * 86_400..(day + 1) * 86_400)
            .map(|i| {
                let g = Gen {
                    device: DEVICE.to_owned(),
                    event: format!("e{i:07}"),
                    ts_ms: T0_MS + i * 1000,
                    temperature: (i % 50) as f64,
                };
                common::keyed_item(&g, &table, retention)
            })
            .collect::<Result<Vec<_>>>()?;
        crate::query::write_all(&direct, &readings, items).await?;
        eprintln!("item 9: month: seeded day {} of {SEEDED_DAYS}", day + 1);
    }

    let raw = raw_stats(&endpoint, &readings, &shards).await?;

    // The sealer seals the seeded hours from the readings (a reseal: the same code as
    // its scheduled runs' hours).
    let now = Timestamp::from_millis(T0_MS + MONTH_DAYS * DAY_MS + HOUR_MS)?;
    let sealer = Sealer::new(
        DynamoReadings::new(&direct, &readings),
        DynamoShards::new(&direct, &shards),
        DynamoRollups::new(direct.clone(), &rollups),
        SealerSettings::default(),
    );
    let sealed = sealer
        .reseal(T0_MS, T0_MS + SEEDED_DAYS * DAY_MS, now, None)
        .await?;
    ensure!(
        sealed.hours_sealed == (SEEDED_DAYS * 24) as u64
            && sealed.readings == (SEEDED_DAYS * 86_400) as u64,
        "sealing the seeded days: {sealed:?}"
    );
    fill_month(&DynamoRollups::new(direct.clone(), &rollups)).await?;
    let month = month_query(&endpoint, &rollups).await?;
    ensure!(
        month.items as i64 == MONTH_DAYS * 24 && month.readings == (MONTH_DAYS * 86_400) as u64,
        "the month's summaries: {} items counting {} readings",
        month.items,
        month.readings
    );
    drop(server);
    report(results, &raw, &month);
    Ok(())
}

/// Copies the sealed days' summaries over the rest of the month, each moved by whole
/// multiples of the seeded days.
async fn fill_month(rollups: &DynamoRollups) -> Result<()> {
    let sealed = query_all(
        rollups,
        RollupQuery::partition(keys::device_summaries(DEVICE), true),
    )
    .await?;
    ensure!(
        sealed.len() as i64 == SEEDED_DAYS * 24,
        "{} summaries sealed",
        sealed.len()
    );
    for hour in SEEDED_DAYS * 24..MONTH_DAYS * 24 {
        let source = &sealed[(hour % (SEEDED_DAYS * 24)) as usize];
        let shift = (hour - hour % (SEEDED_DAYS * 24)) * HOUR_MS;
        let mut dh: DeviceHour = source.body()?;
        dh.hour_ms += shift;
        dh.first_ms += shift;
        dh.last_ms += shift;
        let item = RollupItem::with_body(
            keys::device_summary(DEVICE, dh.hour_ms),
            source.version,
            &dh,
            source.ttl.map(|t| t + shift / 1000),
        )?;
        rollups.put(&item).await?;
    }
    Ok(())
}

/// The month's summaries, one Query after another until the last page, eventually
/// consistent (as the query's routes read the rollups table).
async fn month_query(endpoint: &str, rollups: &str) -> Result<Month> {
    let mut pc = ProxyConfig::forward(endpoint)?;
    pc.faults.latency_ms = LATENCY_MS;
    pc.seed = Some(9);
    let proxy = Proxy::start(pc).await?;
    let via = Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let (mut queries, mut evaluated, mut items, mut bytes, mut readings) = (0, 0, 0, 0, 0);
    let mut start = None;
    let t = Instant::now();
    loop {
        let out = via
            .query()
            .table_name(rollups)
            .key_condition_expression("PK = :pk AND SK BETWEEN :from AND :to")
            .expression_attribute_values(":pk", AttributeValue::S(keys::device_summaries(DEVICE)))
            .expression_attribute_values(":from", AttributeValue::S(hour_label(T0_MS)))
            .expression_attribute_values(
                ":to",
                AttributeValue::S(hour_label(T0_MS + MONTH_DAYS * DAY_MS - HOUR_MS)),
            )
            .set_exclusive_start_key(start)
            .send()
            .await?;
        queries += 1;
        evaluated += u64::try_from(out.scanned_count()).unwrap_or(0);
        for item in out.items() {
            items += 1;
            bytes += store::size::item_size(item);
            let body = match item.get("body") {
                Some(AttributeValue::S(b)) => b,
                _ => anyhow::bail!("a summary without its body"),
            };
            let dh: DeviceHour = serde_json::from_str(body)?;
            readings += dh.hour.readings;
        }
        start = out.last_evaluated_key;
        if start.is_none() {
            break;
        }
        ensure!(queries < 1_000, "the month's Queries never end");
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let rcu = proxy.stats().rcu_by_table.values().sum();
    proxy.shutdown().await?;
    Ok(Month {
        queries,
        evaluated,
        items,
        bytes,
        rcu,
        ms,
        readings,
    })
}

/// Today's route, `GET /devices/{id}/stats?interval=1h`, over the seeded days, page by
/// page with the default budgets.
async fn raw_stats(endpoint: &str, readings: &str, shards: &str) -> Result<Raw> {
    let mut pc = ProxyConfig::forward(endpoint)?;
    pc.faults.latency_ms = LATENCY_MS;
    pc.seed = Some(9);
    let proxy = Proxy::start(pc).await?;
    let via = Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let svc = QueryService::new(
        DynamoReadingSource::new(via.clone(), readings),
        DynamoShards::new(&via, shards),
        ServiceConfig::new(CursorKey::new(vec![9u8; 32])?),
    );
    let path = format!("/devices/{DEVICE}/stats");
    let mut raw = Raw {
        pages: 0,
        largest_page_buckets: 0,
        queries: 0,
        evaluated: 0,
        rcu: 0.0,
        ms: 0.0,
    };
    let mut cursor: Option<String> = None;
    let (mut buckets, mut counted) = (0, 0);
    let t = Instant::now();
    loop {
        let mut q = format!(
            "from={T0_MS}&to={}&interval=1h&metric=temperature",
            T0_MS + SEEDED_DAYS * DAY_MS
        );
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={c}"));
        }
        let endpoint = parse_request("GET", &path, Some(&q), &svc.config().limits)
            .map_err(|e| anyhow::anyhow!("{path}: {}", e.message))?;
        let (body, stats) = svc
            .execute(endpoint, store::clock::wall_clock()?)
            .await
            .map_err(|e| anyhow::anyhow!("{path}: {}", e.message))?;
        raw.pages += 1;
        raw.queries += stats.calls;
        raw.evaluated += stats.items_read;
        let body: serde_json::Value = serde_json::from_str(&body)?;
        let page = body["buckets"]
            .as_array()
            .context("a stats answer without buckets")?;
        raw.largest_page_buckets = raw.largest_page_buckets.max(page.len() as u64);
        buckets += page.len();
        counted += page
            .iter()
            .map(|b| b["count"].as_u64().unwrap_or(0))
            .sum::<u64>();
        cursor = body["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
        ensure!(raw.pages < 1_000, "the stats pages never end");
    }
    raw.ms = t.elapsed().as_secs_f64() * 1000.0;
    raw.rcu = proxy.stats().rcu_by_table.values().sum();
    proxy.shutdown().await?;
    ensure!(
        buckets as i64 == SEEDED_DAYS * 24 && counted as i64 == SEEDED_DAYS * 86_400,
        "raw stats: {counted} readings in {buckets} buckets"
    );
    Ok(raw)
}

fn report(results: &mut Results, raw: &Raw, month: &Month) {
    let hours = (MONTH_DAYS * 24) as u64;
    let scale = MONTH_DAYS as f64 / SEEDED_DAYS as f64;
    results.goal(
        "9",
        "a month of hourly stats of one device writing every second, from its hour summaries (one Query over 31 days, eventually consistent): Queries; items evaluated",
        format!(
            "{} {}; {} items evaluated ({} summaries, {} bytes, {:.1} RCU, {:.0} ms)",
            month.queries,
            if month.queries == 1 { "Query" } else { "Queries" },
            month.evaluated, month.items, month.bytes, month.rcu, month.ms
        ),
        "at most 5 Queries and 1,000 items",
        if month.queries <= 5 && month.evaluated <= 1_000 {
            "met".to_owned()
        } else {
            format!(
                "missed: Queries {}, items {}",
                at_most(month.queries as f64, 5.0),
                at_most(month.evaluated as f64, 1_000.0)
            )
        },
    );
    let month_pages = hours.div_ceil(raw.largest_page_buckets.max(1));
    // A page's readings budget alone: it ends at the first hour boundary past it.
    let budget_hours = query::stats::StatsBudget::default()
        .readings
        .div_ceil(3_600);
    let budget_pages = hours.div_ceil(budget_hours);
    results.figure(
        "9",
        "the same month by today's raw route (GET /devices/{id}/stats?interval=1h, default budgets), extrapolated from 2 days read: pages; Queries; items evaluated; RCU",
        format!(
            "{budget_pages} pages by the readings budget alone ({budget_hours} hours a page); {month_pages} at this run's largest page ({} hours, of the 2 days' {} pages read in {:.0} ms: a page the 3-s budget ends early holds fewer hours); {:.0} Queries ({} for 2 days); {:.0} items ({}); {:.0} RCU ({:.1}); the summaries read {:.0}x fewer items",
            raw.largest_page_buckets,
            raw.pages,
            raw.ms,
            raw.queries as f64 * scale,
            raw.queries,
            raw.evaluated as f64 * scale,
            raw.evaluated,
            raw.rcu * scale,
            raw.rcu,
            raw.evaluated as f64 * scale / month.evaluated.max(1) as f64,
        ),
    );
    results.note(
        "9",
        format!(
            "the month of summaries: one device ({DEVICE}), a reading a second, written as \
             item 4 writes them (an item a reading, hour buckets, N = {SHARDS}) for \
             {SEEDED_DAYS} days, which the real sealer sealed (sealer::Sealer::reseal, \
             default settings) into {} hour summaries; the other {} days' summaries are \
             those items moved by whole multiples of {SEEDED_DAYS} days (their hour, first \
             and last reading), so the month holds 744 summaries of the size the sealer \
             writes. One Query of the device's summaries between the month's first and last \
             hour, page after page, eventually consistent (as the query's routes read the \
             rollups table), through the capacity-proxy in forward mode ({LATENCY_MS} ms a \
             call); RCU is the proxy's charge, bytes the items' size by DynamoDB's rule. The \
             raw route is query::QueryService over the same readings, page by page with the \
             default budgets, for the {SEEDED_DAYS} seeded days; its month is extrapolated: \
             Queries, items and RCU x {MONTH_DAYS}/{SEEDED_DAYS}, pages = 744 hours over \
             the hours of the largest page (a page ends at the first hour boundary after \
             100,000 readings, 28 hours here, or earlier after 3 s, which adds pages). Item 4 read the whole month by the same route \
             in 29 pages on dynalite.",
            SEEDED_DAYS * 24,
            MONTH_DAYS - SEEDED_DAYS,
        ),
    );
}
