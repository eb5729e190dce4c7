//! Benchmark: sink-mode BatchWriteItem throughput from many concurrent SDK clients, and the
//! latency forward mode adds per call compared with calling moto directly.
//! Prints figures; asserts nothing. Run: `cargo bench -p capacity-proxy --bench proxy`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use capacity_proxy::{Proxy, ProxyConfig};

const CLIENTS: usize = 8;
const TASKS_PER_CLIENT: usize = 8;
const THROUGHPUT_SECS: u64 = 5;
const LATENCY_CALLS: usize = 400;

fn reading(pk: String, sk: String) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk)),
        ("SK".to_owned(), AttributeValue::S(sk)),
        ("value".to_owned(), AttributeValue::N("21.5".to_owned())),
        ("payload".to_owned(), AttributeValue::S("x".repeat(450))),
    ])
}

async fn sink_throughput() -> Result<()> {
    let mut config = ProxyConfig::sink();
    config.seed = Some(1);
    let proxy = Proxy::start(config).await?;
    let accepted = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(THROUGHPUT_SECS);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let sdk = stand_in::dynamodb_client_without_retries(&proxy.url());
        for t in 0..TASKS_PER_CLIENT {
            let sdk = sdk.clone();
            let (accepted, calls) = (accepted.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let reqs: Vec<WriteRequest> = (0..25)
                        .map(|i| {
                            // Many distinct keys, so the budget never binds: this measures the proxy.
                            let pk = format!("dev-{c}-{t}-{}", (n + i) % 64);
                            let sk = format!("{n:010}-{i:02}");
                            PutRequest::builder()
                                .set_item(Some(reading(pk, sk)))
                                .build()
                                .map(|p| WriteRequest::builder().put_request(p).build())
                        })
                        .collect::<Result<_, _>>()?;
                    n += 25;
                    let out = sdk
                        .batch_write_item()
                        .request_items("readings", reqs)
                        .send()
                        .await?;
                    let un = out
                        .unprocessed_items()
                        .and_then(|m| m.get("readings"))
                        .map_or(0, Vec::len);
                    accepted.fetch_add(25 - un as u64, Ordering::Relaxed);
                    calls.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let items = accepted.load(Ordering::Relaxed);
    let stats = proxy.stats();
    println!(
        "sink BatchWriteItem: {} clients x {} tasks, {:.1} s: {} items acknowledged, {:.0} items/s, {:.0} calls/s (goal >= 20000 items/s); sink holds {} keys",
        CLIENTS,
        TASKS_PER_CLIENT,
        secs,
        items,
        items as f64 / secs,
        calls.load(Ordering::Relaxed) as f64 / secs,
        stats.sink_items
    );
    proxy.shutdown().await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn latencies(c: &Client, table: &str, label: &str) -> Result<Vec<Duration>> {
    for i in 0..50 {
        c.put_item()
            .table_name(table)
            .set_item(Some(reading(format!("warm-{label}"), format!("{i}"))))
            .send()
            .await?;
    }
    let mut out = Vec::with_capacity(LATENCY_CALLS);
    for i in 0..LATENCY_CALLS {
        let item = reading(format!("lat-{label}-{}", i % 16), format!("{i}"));
        let t = Instant::now();
        c.put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await?;
        out.push(t.elapsed());
    }
    out.sort();
    Ok(out)
}

async fn forward_latency() -> Result<()> {
    let root = stand_in::repo_root()?;
    let venv = stand_in::ensure_venv(&root)?;
    let moto = stand_in::Moto::start(&venv)?;
    let direct = stand_in::dynamodb_client_without_retries(&moto.endpoint());
    stand_in::create_pk_sk_table(&direct, "bench", "PK").await?;
    let proxy = Proxy::start(ProxyConfig::forward(&moto.endpoint())?).await?;
    let via = stand_in::dynamodb_client_without_retries(&proxy.url());

    let d = latencies(&direct, "bench", "direct").await?;
    let p = latencies(&via, "bench", "proxy").await?;
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
        let (a, b) = (percentile(&d, q), percentile(&p, q));
        println!(
            "forward PutItem {name}: moto direct {:.2} ms, via proxy {:.2} ms, added {:.2} ms",
            ms(a),
            ms(b),
            ms(b) - ms(a)
        );
    }
    proxy.shutdown().await?;
    Ok(())
}

fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        sink_throughput().await?;
        forward_latency().await
    })
}
