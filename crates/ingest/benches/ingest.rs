//! Benchmark: readings/s of one handler instance writing through `capacity-proxy` in
//! sink mode with 10 ms injected latency per call, beside the limit
//! `MAX_INFLIGHT * 25 / RTT` (RTT = injected latency + a measured call round trip
//! without it). Shard metadata and the DLQ are the in-memory fakes: sink mode answers
//! only writes. Prints figures; asserts nothing.
//!
//! The workload is bench item 1's (bench/REPORT.md): events of 10 messages of 40 readings (400 readings,
//! one full round of `MAX_INFLIGHT` calls of 25 items), one invocation at a time,
//! readings of 5,000 devices spread over one day under hour buckets and N = 64, so no
//! partition key reaches the proxy's 1,000 WCU/s: the figure is the handler's, not the
//! emulated key capacity's. Also printed: the process CPU time over the timed loop
//! (handler, SDK and the in-process proxy together) against the wall time on this
//! machine's cores.
//! Run: `cargo bench -p ingest --bench ingest`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use capacity_proxy::{Faults, Proxy, ProxyConfig};
use ingest::{Config, Fate, Ingest, MemoryQueue};
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::time::Timestamp;
use store::dynamo::DynamoTable;
use store::memory::{MemoryRollups, MemoryShards};

const MAX_INFLIGHT: usize = 16;
const LATENCY_MS: u64 = 10;
/// Messages per invocation and readings per message: 400 readings, 16 calls.
const MESSAGES: usize = 10;
const READINGS: usize = 40;
const INVOCATIONS: usize = 125;
const DEVICES: usize = 5_000;
const RTT_CALLS: usize = 200;
/// Invocations before the timed ones: the layout and most devices' metadata are then
/// cached and the SDK's connections open, as in a warm Lambda instance.
const WARM_UP: usize = 5;
const DAY_MS: u64 = 86_400_000;

fn config() -> Result<Config> {
    let max_inflight = MAX_INFLIGHT.to_string();
    let vars: HashMap<&str, &str> = HashMap::from([
        ("TABLE_NAME", "readings"),
        ("SHARD_TABLE_NAME", "shards"),
        ("DLQ_URL", "http://127.0.0.1:1/000000000000/dlq"),
        ("MAX_INFLIGHT", max_inflight.as_str()),
        ("SHARDS", "64"),
        ("BUCKET", "hour"),
    ]);
    Ok(Config::from_lookup(|name| {
        vars.get(name).map(|v| (*v).to_owned())
    })?)
}

/// One invocation's event: `MESSAGES` messages of `READINGS` readings, unique ids,
/// devices and timestamps spread over the day after `base` (deterministic).
fn event(invocation: usize, base: Timestamp) -> Result<SqsEvent> {
    let records: Vec<serde_json::Value> = (0..MESSAGES)
        .map(|m| {
            let readings: Vec<serde_json::Value> = (0..READINGS)
                .map(|r| {
                    let n = ((invocation * MESSAGES + m) * READINGS + r) as u64;
                    // A multiplicative spread: consecutive readings land far apart.
                    let spread = n.wrapping_mul(2_654_435_761);
                    let ts = base.saturating_add(Duration::from_millis(spread % DAY_MS));
                    serde_json::json!({
                        "device_id": format!("dev-{:04}", spread % DEVICES as u64),
                        "event_id": format!("i{invocation}-m{m}-r{r}"),
                        "ts": ts.to_rfc3339(),
                        "metrics": {"temperature": 21.5, "humidity": 40.0 + r as f64},
                        "tags": {"site": "bench"},
                    })
                })
                .collect();
            serde_json::json!({
                "messageId": format!("i{invocation}-m{m}"),
                "body": serde_json::json!({ "readings": readings }).to_string(),
                "eventSource": "aws:sqs",
            })
        })
        .collect();
    Ok(serde_json::from_value(
        serde_json::json!({ "Records": records }),
    )?)
}

/// Median round trip of a 25-item `BatchWriteItem` through a sink proxy without
/// injected latency: what one call costs beyond the latency.
async fn call_round_trip() -> Result<Duration> {
    let mut config = ProxyConfig::sink();
    config.seed = Some(1);
    let proxy = Proxy::start(config).await?;
    let sdk = stand_in::dynamodb_client_without_retries(&proxy.url());
    let mut samples = Vec::with_capacity(RTT_CALLS);
    for call in 0..RTT_CALLS {
        let requests: Vec<WriteRequest> = (0..25)
            .map(|i| {
                let item = HashMap::from([
                    (
                        "PK".to_owned(),
                        AttributeValue::S(format!("3#2026-06-22T0{}", i % 8)),
                    ),
                    (
                        "SK".to_owned(),
                        AttributeValue::S(format!("dev#{call}#{i}")),
                    ),
                    (
                        "temperature".to_owned(),
                        AttributeValue::N("21.5".to_owned()),
                    ),
                ]);
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|put| WriteRequest::builder().put_request(put).build())
            })
            .collect::<Result<_, _>>()?;
        let started = Instant::now();
        sdk.batch_write_item()
            .request_items("readings", requests)
            .send()
            .await?;
        samples.push(started.elapsed());
    }
    proxy.shutdown().await?;
    samples.sort();
    samples
        .get(samples.len() / 2)
        .copied()
        .context("no samples")
}

#[tokio::main]
async fn main() -> Result<()> {
    let overhead = call_round_trip().await?;

    let mut proxy_config = ProxyConfig::sink();
    proxy_config.seed = Some(2);
    proxy_config.faults = Faults {
        latency_ms: LATENCY_MS,
        ..Faults::default()
    };
    let proxy = Proxy::start(proxy_config).await?;
    let sdk = stand_in::dynamodb_client_without_retries(&proxy.url());
    let config = config()?;
    let table = DynamoTable::new(&sdk, config.table_name.clone());
    let service: Ingest<_, _, _, MemoryRollups> =
        Ingest::new(config, table, MemoryShards::new(), MemoryQueue::new());
    let now = Timestamp::parse("2026-06-22T04:00:00Z")?;
    let base = Timestamp::parse("2026-06-21T04:00:00Z")?;
    let mut rng = StdRng::seed_from_u64(3);

    // Warm-up: the layout and every device's metadata are cached afterwards, and the
    // SDK's connections are open.
    for w in 0..WARM_UP {
        let warm = event(INVOCATIONS + w, base)?;
        service.process(&warm, now, deadline(), &mut rng).await;
    }

    let events: Vec<SqsEvent> = (0..INVOCATIONS)
        .map(|i| event(i, base))
        .collect::<Result<_>>()?;
    let mut readings = 0usize;
    let mut calls = 0u64;
    let mut reported = 0usize;
    let cpu_before = cpu_time()?;
    let threads_before = thread_cpu()?;
    let started = Instant::now();
    for event in &events {
        let report = service.process(event, now, deadline(), &mut rng).await;
        calls += report.writes.calls;
        for m in &report.messages {
            match m.fate {
                Fate::Written { readings: n } => readings += n,
                _ => reported += 1,
            }
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_time()?.saturating_sub(cpu_before);
    let threads: Vec<(String, Duration)> = thread_cpu()?
        .into_iter()
        .map(|(name, t)| {
            let before = threads_before.get(&name).copied().unwrap_or_default();
            (name, t.saturating_sub(before))
        })
        .filter(|(_, t)| !t.is_zero())
        .collect();
    let stats = proxy.stats();
    let sink_items = stats.sink_items;
    proxy.shutdown().await?;

    let rate = readings as f64 / elapsed.as_secs_f64();
    let rtt = Duration::from_millis(LATENCY_MS) + overhead;
    let limit = MAX_INFLIGHT as f64 * 25.0 / rtt.as_secs_f64();
    println!("ingest handler through capacity-proxy (sink, {LATENCY_MS} ms injected latency)");
    println!("  MAX_INFLIGHT                 {MAX_INFLIGHT}");
    println!(
        "  invocations                  {INVOCATIONS} x {MESSAGES} messages x {READINGS} readings"
    );
    println!("  readings written             {readings}");
    println!("  messages not written         {reported}");
    println!("  BatchWriteItem calls         {calls}");
    println!("  items in the sink            {sink_items}");
    println!(
        "  items throttled by the proxy {}",
        stats.throttled_by_reason.values().sum::<u64>()
    );
    println!(
        "  CPU time (whole process)     {:.3} s = {:.2} cores busy on average ({} cores)",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() / elapsed.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for (name, t) in &threads {
        println!(
            "    thread {name:<21} {:.3} s ({:.0}% of the wall time)",
            t.as_secs_f64(),
            t.as_secs_f64() / elapsed.as_secs_f64() * 100.0
        );
    }
    println!(
        "  elapsed                      {:.3} s",
        elapsed.as_secs_f64()
    );
    println!(
        "  call round trip (no latency) {:.3} ms (median of {RTT_CALLS})",
        overhead.as_secs_f64() * 1e3
    );
    println!(
        "  RTT                          {:.3} ms",
        rtt.as_secs_f64() * 1e3
    );
    println!("  readings/s                   {rate:.0}");
    println!("  limit MAX_INFLIGHT*25/RTT    {limit:.0}");
    println!("  ratio                        {:.3}", rate / limit);
    Ok(())
}

/// CPU time of every thread of this process so far (Linux: the sum of each task's
/// on-CPU nanoseconds in /proc/self/task/*/schedstat; threads that already exited are
/// not counted, and this bench's runtime keeps its workers).
fn cpu_time() -> Result<Duration> {
    Ok(thread_cpu()?.values().sum())
}

/// CPU time so far by thread name: the main thread runs the handler (`block_on`: parse,
/// key, marshal, the batch writer and the SDK's request building); the runtime workers
/// run the in-process proxy and the connections' I/O.
fn thread_cpu() -> Result<std::collections::BTreeMap<String, Duration>> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let dir = task?.path();
        let stat = std::fs::read_to_string(dir.join("schedstat"))?;
        let on_cpu = stat.split_whitespace().next().context("empty schedstat")?;
        let name = std::fs::read_to_string(dir.join("comm"))?.trim().to_owned();
        *by_name.entry(name).or_insert(Duration::ZERO) += Duration::from_nanos(on_cpu.parse()?);
    }
    Ok(by_name)
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(900)
}
