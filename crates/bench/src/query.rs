//! Item 4: query latency through the proxy (forward mode, 10 ms) in front of moto.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::AttributeValue;
use capacity_proxy::{Proxy, ProxyConfig};
use query::{CursorKey, QueryService, ServiceConfig, parse_request};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::epoch::TableHistory;
use store::ShardStore;
use store::batch::{BatchWriter, WriterConfig};
use store::dynamo::{DynamoShards, DynamoTable};
use store::read::DynamoReadingSource;

use crate::common::{self, Gen, T0_MS};
use crate::report::{Results, at_most};

const SHARDS: u32 = 32;
const HOURS: i64 = 6;
const EVERY_MS: i64 = 120_000;
const LATENCY_MS: u64 = 10;

/// Settings of item 4.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub devices: usize,
    pub iterations: usize,
}

fn pcts(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    (common::quantile(&xs, 0.5), common::quantile(&xs, 0.99))
}

/// Item 4.
pub async fn run(root: &Path, settings: Settings, results: &mut Results) -> Result<()> {
    let venv = stand_in::ensure_venv(root)?;
    let moto = stand_in::Moto::start(&venv)?;
    // The time index is off by default (one more write unit per reading); this item
    // measures the every-device route with it, as a deployment that turns it on reads.
    let stack = stand_in::provision_with(
        &moto.endpoint(),
        &root.join("template.yaml"),
        "bench",
        &[("TimeIndex".to_owned(), "enabled".to_owned())],
    )
    .await
    .context("provisioning the template's tables on moto")?;
    let direct = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&moto.endpoint()).await);
    // The time index as the stand-in created it from template.yaml (TimeIndex=enabled).
    let time_index = stack.readings_time_index.clone();
    let table = TableHistory::new(common::hourly(SHARDS));
    DynamoShards::new(&direct, &stack.shard_table_name)
        .create_layout(&table)
        .await?;

    // Every device, one reading every 2 minutes for 6 hours, written straight to moto.
    let retention = Duration::from_secs(3650 * 86_400);
    let mut items = Vec::new();
    for d in 0..settings.devices {
        for i in 0..(HOURS * 3_600_000 / EVERY_MS) {
            let g = Gen {
                device: format!("dev-{d:05}"),
                event: format!("e{i:05}"),
                ts_ms: T0_MS + i * EVERY_MS + d as i64,
                temperature: 20.0,
            };
            items.push(common::keyed_item(&g, &table, retention)?.to_item()?);
        }
    }
    let stored = items.len();
    let writer = BatchWriter::new(
        DynamoTable::new(&direct, &stack.table_name),
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
            items,
            tokio::time::Instant::now() + Duration::from_secs(600),
            &mut rng,
        )
        .await;
    anyhow::ensure!(
        report.stats.written as usize == stored,
        "seeding moto wrote {} of {stored} items",
        report.stats.written
    );

    let mut pc = ProxyConfig::forward(&moto.endpoint())?;
    pc.faults.latency_ms = LATENCY_MS;
    pc.seed = Some(4);
    let proxy = Proxy::start(pc).await?;
    let via = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let mut config = ServiceConfig::new(CursorKey::new(vec![7u8; 32])?);
    config.time_index.clone_from(&time_index);
    let svc = QueryService::new(
        DynamoReadingSource::new(via.clone(), &stack.table_name),
        DynamoShards::new(&via, &stack.shard_table_name),
        config,
    );

    // One device's partition for one hour: the single Query every figure is set against.
    let one = common::keyed_item(
        &Gen {
            device: "dev-00001".to_owned(),
            event: "e00000".to_owned(),
            ts_ms: T0_MS + 1,
            temperature: 20.0,
        },
        &table,
        retention,
    )?;
    // One partition key, limit 100, on the table or on an index.
    let single = |pk: String, index: Option<String>| {
        let via = via.clone();
        let name = stack.table_name.clone();
        async move {
            let t = Instant::now();
            via.query()
                .table_name(name)
                .set_index_name(index)
                .key_condition_expression("PK = :pk")
                .expression_attribute_values(":pk", AttributeValue::S(pk))
                .limit(100)
                .send()
                .await?;
            anyhow::Ok(t.elapsed().as_secs_f64() * 1000.0)
        }
    };
    // One shard's hour through the time index: the kind of Query a read over every
    // device makes (moto answers an index Query by scanning every item of the table).
    let shard_hour = common::keyed_item(
        &Gen {
            device: "dev-00001".to_owned(),
            event: "e00000".to_owned(),
            ts_ms: T0_MS + 2 * 3_600_000 + 1,
            temperature: 20.0,
        },
        &table,
        retention,
    )?;
    let request = |path: &'static str, query: String| {
        let svc = &svc;
        async move {
            let t = Instant::now();
            let endpoint = parse_request("GET", path, Some(&query), &svc.config().limits)
                .map_err(|e| anyhow::anyhow!("{path}?{query}: {}", e.message))?;
            let (_, stats) = svc
                .execute(endpoint)
                .await
                .map_err(|e| anyhow::anyhow!("{path}?{query}: {}", e.message))?;
            anyhow::Ok((t.elapsed().as_secs_f64() * 1000.0, stats))
        }
    };
    let device_q = format!("from={T0_MS}&to={}&limit=100", T0_MS + HOURS * 3_600_000);
    let all_q = format!(
        "from={}&to={}&limit=100",
        T0_MS + 2 * 3_600_000,
        T0_MS + 3 * 3_600_000
    );
    // Warm-up: connections, the directory cache.
    for _ in 0..3 {
        single(one.pk.clone(), None).await?;
        request("/devices/dev-00001/readings", device_q.clone()).await?;
        request("/readings", all_q.clone()).await?;
    }
    let (mut s, mut si, mut d, mut a) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut d_stats, mut a_stats) = (None, None);
    for _ in 0..settings.iterations {
        s.push(single(one.pk.clone(), None).await?);
        if time_index.is_some() {
            si.push(single(shard_hour.pk.clone(), time_index.clone()).await?);
        }
        let (ms, st) = request("/devices/dev-00001/readings", device_q.clone()).await?;
        d.push(ms);
        d_stats = Some(st);
        let (ms, st) = request("/readings", all_q.clone()).await?;
        a.push(ms);
        a_stats = Some(st);
    }
    proxy.shutdown().await?;
    drop(moto);

    let (s50, s99) = pcts(s);
    let (d50, d99) = pcts(d);
    let (a50, a99) = pcts(a);
    results.figure(
        "4",
        "single Query (one PK, limit 100): p50 / p99",
        format!("{s50:.1} / {s99:.1} ms"),
    );
    if !si.is_empty() {
        let (i50, i99) = pcts(si);
        results.figure(
            "4",
            "single Query through the time index (one shard's hour, limit 100): p50 / p99",
            format!("{i50:.1} / {i99:.1} ms"),
        );
        results.figure(
            "4",
            "every device over 1 hour, N = 32: p50 / p99 (x single time-index Query; context, \
             the goal is set against the single Query above)",
            format!("{:.2}x / {:.2}x", a50 / i50, a99 / i99),
        );
    }
    for (name, p50, p99, goal) in [
        ("one device over 6 hour-buckets, limit 100", d50, d99, 2.0),
        ("every device over 1 hour, N = 32, limit 100", a50, a99, 3.0),
    ] {
        results.goal(
            "4",
            &format!("{name}: p50 / p99 (x single Query)"),
            format!(
                "{p50:.1} / {p99:.1} ms ({:.2}x / {:.2}x)",
                p50 / s50,
                p99 / s99
            ),
            &format!("<= {goal}x"),
            format!(
                "p50 {}; p99 {}",
                at_most(p50 / s50, goal),
                at_most(p99 / s99, goal)
            ),
        );
    }
    for (name, st, goal) in [
        ("every device over 1 hour, limit=100", a_stats, Some(1.5)),
        ("one device over 6 hours, limit=100", d_stats, None),
    ] {
        if let Some(st) = st {
            let ratio = st.items_read as f64 / st.items_returned.max(1) as f64;
            let value = format!(
                "{ratio:.2} ({} read / {} returned, {} Query calls in {} rounds, plan {} Queries)",
                st.items_read, st.items_returned, st.calls, st.rounds, st.plan_queries
            );
            match goal {
                Some(g) => {
                    results.goal(
                        "4",
                        &format!("over-read ratio, {name}"),
                        value,
                        "<= 1.5",
                        at_most(ratio, g),
                    );
                }
                None => results.figure("4", &format!("over-read ratio, {name}"), value),
            }
        }
    }
    let all_path = match &time_index {
        Some(name) => format!(
            "reads over every device go through the time index {name} (the LSI on ts_ms the \
             stand-in created from template.yaml with TimeIndex=enabled), page by page; moto answers a \
             Query on an index by scanning every item of the table (Table.query in \
             moto/dynamodb/models/table.py loops over all_items() when an index is named), \
             where DynamoDB reads only the key's partition, so the time-index single Query is \
             given beside the base-table one"
        ),
        None => "reads over every device read each shard's whole bucket and sort it (no time \
                 index on the provisioned table)"
            .to_owned(),
    };
    results.note(
        "4",
        format!(
            "moto (stand-in venv) with the template's tables; {all_path}; a device's read over \
             several buckets reads ahead into later buckets once the first round shows their \
             density; layout hour buckets, N = {SHARDS}; \
             {} devices x one reading every 2 minutes for {HOURS} hours ({stored} items) written \
             straight to moto; then the query service in process (query::QueryService: \
             parse_request + execute, the real planner, scatter-gather and merge over the \
             DynamoDB adapter) through the capacity-proxy in forward mode with {LATENCY_MS} ms \
             injected latency per call. {} measured requests of each kind after 3 warm-up rounds \
             (the service's shard-metadata cache is warm, as in a running Lambda). Over-read = \
             items DynamoDB evaluated / items returned.",
            settings.devices, settings.iterations
        ),
    );
    Ok(())
}
