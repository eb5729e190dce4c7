//! Item 4: the default template's write units per reading, and query latency through the
//! proxy (forward mode, 10 ms) in front of dynalite (held to the goals) and moto
//! (context).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::AttributeValue;
use capacity_proxy::{Proxy, ProxyConfig};
use query::service::ReadStats;
use query::{CursorKey, QueryService, ServiceConfig, parse_request};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::epoch::TableHistory;
use sharding::key::ItemKey;
use store::ReadingItem;
use store::batch::{BatchWriter, Put, SizedItem, WriterConfig};
use store::dynamo::{DynamoShards, DynamoTable};
use store::read::DynamoReadingSource;
use store::{ShardReader, ShardStore as _};

use crate::common::{self, Gen, T0_MS};
use crate::report::{Results, at_most};

const SHARDS: u32 = 32;
const HOURS: i64 = 6;
const EVERY_MS: i64 = 120_000;
const LATENCY_MS: u64 = 10;
/// Days of one device's readings, one a second, that the stats figure reads by
/// default.
pub const STATS_DAYS: i64 = 4;

/// Settings of item 4.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub devices: usize,
    pub iterations: usize,
    /// Days of the stats figure.
    pub stats_days: i64,
}

fn pcts(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    (common::quantile(&xs, 0.5), common::quantile(&xs, 0.99))
}

/// The two DynamoDB stand-ins item 4 reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// Keeps each key's items, and each index's entries, in their own key order: a
    /// Query reads the key's range, as DynamoDB does. Its figures stand for DynamoDB.
    Dynalite,
    /// Answers every Query, on the table or an index, by scanning the whole table
    /// (`Table.query` in moto/dynamodb/models/table.py loops over `all_items()`): context.
    Moto,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Dynalite => "dynalite",
            Self::Moto => "moto",
        }
    }
}

/// A local DynamoDB stand-in, stopped when dropped.
enum Server {
    Dynalite(stand_in::Dynalite),
    Moto(stand_in::Moto),
}

impl Server {
    fn start(root: &Path, backend: Backend) -> Result<Self> {
        Ok(match backend {
            Backend::Dynalite => Self::Dynalite(stand_in::Dynalite::start(
                &stand_in::ensure_dynalite(root)?,
            )?),
            Backend::Moto => Self::Moto(stand_in::Moto::start(&stand_in::ensure_venv(root)?)?),
        })
    }

    fn endpoint(&self) -> String {
        match self {
            Self::Dynalite(d) => d.endpoint(),
            Self::Moto(m) => m.endpoint(),
        }
    }

    fn backend(&self) -> stand_in::Backend {
        match self {
            Self::Dynalite(_) => stand_in::Backend::Dynalite,
            Self::Moto(_) => stand_in::Backend::Moto,
        }
    }
}

/// What one backend's run measured, in ms and read statistics.
struct Measured {
    stored: usize,
    single: Vec<f64>,
    single_index: Vec<f64>,
    device: Vec<f64>,
    every: Vec<f64>,
    round: Vec<f64>,
    device_stats: Option<ReadStats>,
    every_stats: Option<ReadStats>,
}

/// Item 4: the write cost of the default template, then the reads on dynalite (the
/// figures held to the goals) and on moto (context).
pub async fn run(root: &Path, settings: Settings, results: &mut Results) -> Result<()> {
    write_units_per_reading(root, results).await?;
    stats_pages(root, settings, results).await?;
    for backend in [Backend::Dynalite, Backend::Moto] {
        let measured = measure(root, backend, settings)
            .await
            .with_context(|| format!("item 4 on {}", backend.name()))?;
        report(results, backend, settings, &measured);
    }
    Ok(())
}

/// A dynalite with the default template's tables, named `{prefix}-{LogicalId}`.
async fn default_tables(root: &Path, prefix: &str) -> Result<(Server, stand_in::Tables)> {
    let server = Server::start(root, Backend::Dynalite)?;
    let tables = stand_in::provision_tables(
        &server.endpoint(),
        &root.join("template.yaml"),
        prefix,
        server.backend(),
    )
    .await
    .context("provisioning the default template's tables")?;
    Ok((server, tables))
}

/// Write units one reading costs with the default template: its item's units, once
/// for the table and once more for every index on it (each writes the item again).
async fn write_units_per_reading(root: &Path, results: &mut Results) -> Result<()> {
    let (server, tables) = default_tables(root, "bench-default").await?;
    let client = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&server.endpoint()).await);
    let described = client
        .describe_table()
        .table_name(tables.name("ReadingsTable")?)
        .send()
        .await?;
    let table = described
        .table()
        .context("DescribeTable answered no table")?;
    let indexes = table.local_secondary_indexes().len() + table.global_secondary_indexes().len();
    let item = common::keyed_item(
        &Gen {
            device: "sensor-alpha-001".to_owned(),
            event: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".to_owned(),
            ts_ms: T0_MS,
            temperature: 21.5,
        },
        &TableHistory::new(common::hourly(SHARDS)),
        Duration::from_secs(365 * 86_400),
    )?
    .to_item()?;
    let size = store::size::item_size(&item);
    let units = store::size::write_units(size) * (1 + indexes);
    results.goal(
        "4",
        "write units per reading, default template (a reading of the demo's shape)",
        format!(
            "{units}.0 ({size}-byte item, {} WCU; {indexes} indexes on the readings table)",
            store::size::write_units(size)
        ),
        "<= 1.0",
        at_most(units as f64, 1.0),
    );
    Ok(())
}

/// Hourly stats of one device writing a reading every second, over `STATS_DAYS` days,
/// page by page with the default budget, on dynalite through the capacity-proxy (10 ms
/// per call): how many pages, and the slowest page against the query function's
/// default 10-s timeout.
async fn stats_pages(root: &Path, settings: Settings, results: &mut Results) -> Result<()> {
    let days = settings.stats_days;
    let (server, tables) = default_tables(root, "bench-stats").await?;
    let (readings_table, shards_table) = (
        tables.name("ReadingsTable")?.to_owned(),
        tables.name("ShardsTable")?.to_owned(),
    );
    let direct = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&server.endpoint()).await);
    let table = TableHistory::new(common::hourly(SHARDS));
    DynamoShards::new(&direct, &shards_table)
        .create_layout(&table)
        .await?;
    let retention = Duration::from_secs(3650 * 86_400);
    // A day at a time, so a month's 2.7 M items are never all in memory at once.
    let mut written = 0;
    for day in 0..days {
        let items = (day * 86_400..(day + 1) * 86_400)
            .map(|i| {
                let g = Gen {
                    device: "sensor-alpha-001".to_owned(),
                    event: format!("e{i:07}"),
                    ts_ms: T0_MS + i * 1000,
                    temperature: (i % 50) as f64,
                };
                common::keyed_item(&g, &table, retention)
            })
            .collect::<Result<Vec<_>>>()?;
        written += write_all(&direct, &readings_table, items).await?;
        eprintln!("item 4: stats: seeded day {} of {days}", day + 1);
    }

    let mut pc = ProxyConfig::forward(&server.endpoint())?;
    pc.faults.latency_ms = LATENCY_MS;
    pc.seed = Some(5);
    let proxy = Proxy::start(pc).await?;
    let via = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let svc = QueryService::new(
        DynamoReadingSource::new(via.clone(), &readings_table),
        DynamoShards::new(&via, &shards_table),
        ServiceConfig::new(CursorKey::new(vec![7u8; 32])?),
    );
    let (mut pages, mut buckets, mut counted, mut slowest, mut total) = (0, 0, 0u64, 0.0f64, 0.0);
    let mut cursor: Option<String> = None;
    loop {
        let mut query = format!(
            "from={T0_MS}&to={}&interval=1h&metric=temperature",
            T0_MS + days * 86_400_000
        );
        if let Some(c) = &cursor {
            query.push_str(&format!("&cursor={c}"));
        }
        let path = "/devices/sensor-alpha-001/stats";
        let t = Instant::now();
        let endpoint = parse_request("GET", path, Some(&query), &svc.config().limits)
            .map_err(|e| anyhow::anyhow!("{path}: {}", e.message))?;
        let now = store::clock::wall_clock()?;
        let (body, _) = svc
            .execute(endpoint, now)
            .await
            .map_err(|e| anyhow::anyhow!("{path}: {}", e.message))?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let body: serde_json::Value = serde_json::from_str(&body)?;
        slowest = slowest.max(ms);
        total += ms;
        pages += 1;
        for b in body["buckets"]
            .as_array()
            .context("stats answer without buckets")?
        {
            buckets += 1;
            counted += b["count"].as_u64().unwrap_or(0);
        }
        cursor = body["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
        anyhow::ensure!(pages < 10_000, "the stats pages never end");
    }
    proxy.shutdown().await?;
    anyhow::ensure!(
        counted == written as u64 && buckets == days * 24,
        "stats counted {counted} readings in {buckets} buckets of {written} in {}",
        days * 24
    );
    results.goal(
        "4",
        &format!(
            "dynalite: hourly stats of one device, a reading a second for {days} days \
             ({written} readings), default budget: pages; slowest page; all pages"
        ),
        format!("{pages} pages of complete buckets; {slowest:.0} ms; {total:.0} ms"),
        "slowest page <= 6 s (the function's timeout is 10 s)",
        at_most(slowest / 1000.0, 6.0),
    );
    Ok(())
}

/// Writes `readings` straight to `table_name`; returns how many were written.
pub(crate) async fn write_all(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    readings: Vec<ReadingItem>,
) -> Result<usize> {
    let stored = readings.len();
    let keys: Vec<ItemKey> = readings
        .iter()
        .map(|r| ItemKey {
            pk: r.pk.clone(),
            sk: r.sk.clone(),
        })
        .collect();
    let items = readings
        .iter()
        .map(ReadingItem::to_item)
        .collect::<Result<Vec<_>, _>>()?;
    let puts = keys
        .iter()
        .zip(&items)
        .map(|(key, item)| {
            let sized = SizedItem::new(item.clone(), store::size::item_size(item))?;
            Ok(Put::new(key, sized))
        })
        .collect::<Result<Vec<_>>>()?;
    let writer = BatchWriter::new(
        DynamoTable::new(client, table_name),
        WriterConfig {
            max_inflight: 4,
            backoff: sharding::Backoff {
                base: Duration::from_millis(25),
                cap: Duration::from_millis(1000),
                max_attempts: 8,
            },
        },
    );
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let report = writer
        .write(
            puts,
            tokio::time::Instant::now() + Duration::from_secs(3600),
            &mut rng,
            // A call that fails whole consumed its items: the copies make them again.
            &items,
        )
        .await;
    anyhow::ensure!(
        report.stats.written as usize == stored,
        "seeding wrote {} of {stored} items",
        report.stats.written
    );
    Ok(stored)
}

/// Seeds one backend with the item's readings and times the reads through the query
/// service behind the capacity-proxy.
async fn measure(root: &Path, backend: Backend, settings: Settings) -> Result<Measured> {
    let server = Server::start(root, backend)?;
    // The time index is off by default (one more write unit per reading); this item
    // measures the every-device route with it, as a deployment that turns it on reads.
    let tables = stand_in::provision_tables_with(
        &server.endpoint(),
        &root.join("template.yaml"),
        "bench",
        server.backend(),
        &[("TimeIndex".to_owned(), "enabled".to_owned())],
    )
    .await
    .context("provisioning the template's tables")?;
    let (readings_table, shards_table) = (
        tables.name("ReadingsTable")?.to_owned(),
        tables.name("ShardsTable")?.to_owned(),
    );
    let direct = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&server.endpoint()).await);
    let time_index = stand_in::time_index(&direct, &readings_table)
        .await?
        .context("the provisioned readings table has no time index")?;
    let table = TableHistory::new(common::hourly(SHARDS));
    DynamoShards::new(&direct, &shards_table)
        .create_layout(&table)
        .await?;
    let stored = seed(&direct, &readings_table, &table, settings.devices).await?;

    let mut pc = ProxyConfig::forward(&server.endpoint())?;
    pc.faults.latency_ms = LATENCY_MS;
    pc.seed = Some(4);
    let proxy = Proxy::start(pc).await?;
    let via = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let mut config = ServiceConfig::new(CursorKey::new(vec![7u8; 32])?);
    config.time_index = Some(time_index.clone());
    let svc = QueryService::new(
        DynamoReadingSource::new(via.clone(), &readings_table),
        DynamoShards::new(&via, &shards_table),
        config,
    );
    let reads = Reads {
        via: &via,
        table_name: &readings_table,
        svc: &svc,
        // One device's partition for one hour: the single Query every figure is set
        // against.
        device_pk: pk_of("dev-00001", T0_MS + 1, &table)?,
        // One shard's hour through the time index: the kind of Query a read over every
        // device makes.
        shard_hour_pk: pk_of("dev-00001", T0_MS + 2 * 3_600_000 + 1, &table)?,
        time_index,
    };
    let measured = reads.time(settings.iterations, stored).await;
    proxy.shutdown().await?;
    measured
}

/// Every device, one reading every 2 minutes for 6 hours, written straight to the
/// backend; returns how many items.
async fn seed(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    table: &TableHistory,
    devices: usize,
) -> Result<usize> {
    let retention = Duration::from_secs(3650 * 86_400);
    let mut items = Vec::new();
    for d in 0..devices {
        for i in 0..(HOURS * 3_600_000 / EVERY_MS) {
            let g = Gen {
                device: format!("dev-{d:05}"),
                event: format!("e{i:05}"),
                ts_ms: T0_MS + i * EVERY_MS + d as i64,
                temperature: 20.0,
            };
            items.push(common::keyed_item(&g, table, retention)?);
        }
    }
    write_all(client, table_name, items).await
}

/// The partition key of `device`'s reading at `ts_ms`.
fn pk_of(device: &str, ts_ms: i64, table: &TableHistory) -> Result<String> {
    let g = Gen {
        device: device.to_owned(),
        event: "e00000".to_owned(),
        ts_ms,
        temperature: 20.0,
    };
    Ok(common::keyed_item(&g, table, Duration::from_secs(3650 * 86_400))?.pk)
}

/// The reads item 4 times, on one backend.
struct Reads<'a, S: store::read::ReadingSource, D: ShardReader> {
    via: &'a aws_sdk_dynamodb::Client,
    table_name: &'a str,
    svc: &'a QueryService<S, D>,
    device_pk: String,
    shard_hour_pk: String,
    time_index: String,
}

impl<S: store::read::ReadingSource, D: ShardReader> Reads<'_, S, D> {
    /// One partition key, limit 100, on the table or on an index; ms.
    async fn single(&self, pk: &str, index: Option<&str>) -> Result<f64> {
        let t = Instant::now();
        self.via
            .query()
            .table_name(self.table_name)
            .set_index_name(index.map(str::to_owned))
            .key_condition_expression("PK = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
            .limit(100)
            .send()
            .await?;
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    }

    /// One round of the every-device read alone: every shard's hour through the time
    /// index at once, a page of 4 each (the read's first round asks ceil(1.25 x 101 /
    /// 32) = 4); ms until the last answer.
    async fn round(&self) -> Result<f64> {
        // Partition keys are `{shard}#{bucket label}`.
        let (_, label) = self
            .shard_hour_pk
            .split_once('#')
            .context("a time-bucket partition key has a bucket label")?;
        let t = Instant::now();
        futures::future::try_join_all((0..SHARDS).map(|shard| {
            self.via
                .query()
                .table_name(self.table_name)
                .index_name(&self.time_index)
                .key_condition_expression("PK = :pk")
                .expression_attribute_values(":pk", AttributeValue::S(format!("{shard}#{label}")))
                .limit(4)
                .send()
        }))
        .await?;
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    }

    /// One API request through the query service; ms and its read statistics.
    async fn request(&self, path: &str, query: &str) -> Result<(f64, ReadStats)> {
        let t = Instant::now();
        let endpoint = parse_request("GET", path, Some(query), &self.svc.config().limits)
            .map_err(|e| anyhow::anyhow!("{path}?{query}: {}", e.message))?;
        let now = store::clock::wall_clock()?;
        let (_, stats) = self
            .svc
            .execute(endpoint, now)
            .await
            .map_err(|e| anyhow::anyhow!("{path}?{query}: {}", e.message))?;
        Ok((t.elapsed().as_secs_f64() * 1000.0, stats))
    }

    /// Three warm-up rounds (connections, the directory cache), then `iterations`
    /// measured rounds of each read.
    async fn time(&self, iterations: usize, stored: usize) -> Result<Measured> {
        let device_q = format!("from={T0_MS}&to={}&limit=100", T0_MS + HOURS * 3_600_000);
        let every_q = format!(
            "from={}&to={}&limit=100",
            T0_MS + 2 * 3_600_000,
            T0_MS + 3 * 3_600_000
        );
        const DEVICE: &str = "/devices/dev-00001/readings";
        for _ in 0..3 {
            self.single(&self.device_pk, None).await?;
            self.request(DEVICE, &device_q).await?;
            self.request("/readings", &every_q).await?;
        }
        let mut m = Measured {
            stored,
            single: Vec::new(),
            single_index: Vec::new(),
            device: Vec::new(),
            every: Vec::new(),
            round: Vec::new(),
            device_stats: None,
            every_stats: None,
        };
        for _ in 0..iterations {
            m.single.push(self.single(&self.device_pk, None).await?);
            m.single_index.push(
                self.single(&self.shard_hour_pk, Some(&self.time_index))
                    .await?,
            );
            let (ms, st) = self.request(DEVICE, &device_q).await?;
            m.device.push(ms);
            m.device_stats = Some(st);
            let (ms, st) = self.request("/readings", &every_q).await?;
            m.every.push(ms);
            m.every_stats = Some(st);
            m.round.push(self.round().await?);
        }
        Ok(m)
    }
}

/// Item 4's rows for one backend: held to the goals on dynalite, context on moto.
fn report(results: &mut Results, backend: Backend, settings: Settings, m: &Measured) {
    latency_rows(results, backend, m);
    over_read_rows(results, backend, m);
    note(results, backend, settings, m);
}

/// The single Queries' latencies, one round of the every-device read, and the two
/// routes' latencies as multiples of a single Query.
fn latency_rows(results: &mut Results, backend: Backend, m: &Measured) {
    let on = backend.name();
    let (s50, s99) = pcts(m.single.clone());
    let (i50, i99) = pcts(m.single_index.clone());
    let (d50, d99) = pcts(m.device.clone());
    let (a50, a99) = pcts(m.every.clone());
    results.figure(
        "4",
        &format!("{on}: single Query (one PK, limit 100): p50 / p99"),
        format!("{s50:.1} / {s99:.1} ms"),
    );
    results.figure(
        "4",
        &format!(
            "{on}: single Query through the time index (one shard's hour, limit 100): p50 / p99"
        ),
        format!("{i50:.1} / {i99:.1} ms"),
    );
    let (r50, r99) = pcts(m.round.clone());
    results.figure(
        "4",
        &format!(
            "{on}: one round alone: the {SHARDS} shards' Queries through the time index at \
             once, limit 4 each: p50 / p99 (x single Query)"
        ),
        format!(
            "{r50:.1} / {r99:.1} ms ({:.2}x / {:.2}x); the every-device read's p50 is {:.2}x \
             this round's",
            r50 / s50,
            r99 / s99,
            pcts(m.every.clone()).0 / r50
        ),
    );
    let rows = [
        ("one device over 6 hour-buckets, limit 100", d50, d99, 2.0),
        ("every device over 1 hour, N = 32, limit 100", a50, a99, 3.0),
    ];
    for (name, p50, p99, goal) in rows {
        let metric = format!("{on}: {name}: p50 / p99 (x single Query)");
        let value = format!(
            "{p50:.1} / {p99:.1} ms ({:.2}x / {:.2}x)",
            p50 / s50,
            p99 / s99
        );
        match backend {
            Backend::Dynalite => results.goal(
                "4",
                &metric,
                value,
                &format!("<= {goal}x"),
                format!(
                    "p50 {}; p99 {}",
                    at_most(p50 / s50, goal),
                    at_most(p99 / s99, goal)
                ),
            ),
            Backend::Moto => results.figure("4", &metric, value),
        }
    }
}

/// The over-read ratio of the two routes (items evaluated / items returned).
fn over_read_rows(results: &mut Results, backend: Backend, m: &Measured) {
    let on = backend.name();
    for (name, st, goal) in [
        (
            "every device over 1 hour, limit=100",
            m.every_stats,
            Some(1.3),
        ),
        (
            "one device over 6 hours, limit=100",
            m.device_stats,
            Some(1.3),
        ),
    ] {
        let Some(st) = st else { continue };
        let ratio = st.items_read as f64 / st.items_returned.max(1) as f64;
        let metric = format!("{on}: over-read ratio, {name}");
        let value = format!(
            "{ratio:.2} ({} read / {} returned, {} Query calls in {} rounds, plan {} Queries)",
            st.items_read, st.items_returned, st.calls, st.rounds, st.plan_queries
        );
        match (backend, goal) {
            (Backend::Dynalite, Some(g)) => {
                results.goal("4", &metric, value, &format!("<= {g}"), at_most(ratio, g));
            }
            _ => results.figure("4", &metric, value),
        }
    }
}

/// The note on how item 4 was measured on `backend`.
fn note(results: &mut Results, backend: Backend, settings: Settings, m: &Measured) {
    let on = backend.name();
    let how = match backend {
        Backend::Dynalite => {
            "dynalite keeps each key's items, and each index's entries, in their own key \
             order, and answers a Query, on the table or through the time index, from that \
             key's range (actions/query.js and db/index.js queryTable stream the index's own \
             store for an IndexName): its figures stand for DynamoDB and are held to the goals"
        }
        Backend::Moto => {
            "moto answers every Query, on the table or an index, by scanning every item of the \
             table (Table.query in moto/dynamodb/models/table.py loops over all_items()), so its \
             times grow with the table, not the key: context only"
        }
    };
    results.note(
        "4",
        format!(
            "{on}: {how}. The template's tables with TimeIndex=enabled (the every-device route \
             reads through the LSI on ts_ms page by page; the default template has no index); \
             layout hour buckets, N = {SHARDS}; {} devices x one reading every 2 minutes for \
             {HOURS} hours ({} items) written straight to {on}; then the query service in \
             process (query::QueryService: parse_request + execute, the real planner, \
             scatter-gather and merge over the DynamoDB adapter) through the capacity-proxy \
             in forward mode with {LATENCY_MS} ms injected latency per call. {} measured \
             requests of each kind after 3 warm-up rounds (the service's shard-metadata cache \
             is warm, and an every-device read plans its first round by the density the one \
             before it saw, as in a running Lambda). Over-read = items DynamoDB evaluated / \
             items returned.",
            settings.devices, m.stored, settings.iterations
        ),
    );
}
