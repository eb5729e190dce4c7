//! `capacity-proxy` binary: parse flags, start the proxy, print `listening on http://ADDR`,
//! stop on SIGTERM or Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use capacity_proxy::{ConfigFile, Faults, Limits, Proxy, ProxyConfig};
use clap::Parser;

/// Local hot-partition emulator and fault injector for DynamoDB (JSON 1.0 protocol).
#[derive(Debug, Parser)]
#[command(version, group(clap::ArgGroup::new("target").required(true).args(["upstream", "sink"])))]
struct Args {
    /// Address to listen on (port 0 = any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Upstream DynamoDB endpoint, e.g. http://127.0.0.1:5000.
    #[arg(long)]
    upstream: Option<String>,
    /// Answer BatchWriteItem and PutItem in process instead of forwarding.
    #[arg(long)]
    sink: bool,
    /// WCU per second per partition key value.
    #[arg(long, default_value_t = 1000.0)]
    key_wcu: f64,
    /// RCU per second per partition key value.
    #[arg(long, default_value_t = 3000.0)]
    key_rcu: f64,
    /// Seconds of unused capacity a bucket may retain.
    #[arg(long, default_value_t = 0.0)]
    burst_seconds: f64,
    /// Table-level WCU per second cap (every table).
    #[arg(long)]
    table_wcu: Option<f64>,
    /// Table-level RCU per second cap (every table).
    #[arg(long)]
    table_rcu: Option<f64>,
    /// Partition key attribute when a table's key schema is unknown.
    #[arg(long, default_value = "PK")]
    pk_attr: String,
    /// Sort key attribute recorded by the sink.
    #[arg(long, default_value = "SK")]
    sk_attr: String,
    /// TOML file with [tables.NAME] settings (pk_attr, sk_attr, key_wcu, key_rcu,
    /// burst_seconds, table_wcu, table_rcu).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Fixed latency added to each data-plane call, ms.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Uniform random extra latency in [0, N] ms.
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Fraction of BatchWriteItem items returned unprocessed whatever the budget.
    #[arg(long, default_value_t = 0.0)]
    unprocessed_rate: f64,
    /// Fraction of calls answered HTTP 500 InternalServerError.
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Fraction of calls throttled as a whole (key-range reason).
    #[arg(long, default_value_t = 0.0)]
    throttle_rate: f64,
    /// Fraction of calls whose connection is closed without a reply.
    #[arg(long, default_value_t = 0.0)]
    drop_rate: f64,
    /// Seed for fault decisions (random when absent).
    #[arg(long)]
    seed: Option<u64>,
    /// Write `second,table,pk,wcu,throttled_items` rows here, flushed each second.
    #[arg(long)]
    heat_csv: Option<PathBuf>,
    /// Region used in throttling ARNs.
    #[arg(long, default_value = "us-east-1")]
    region: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut config = match &args.upstream {
        Some(url) => ProxyConfig::forward(url)?,
        None => ProxyConfig::sink(),
    };
    config.listen = args.listen;
    config.limits = Limits {
        key_wcu: args.key_wcu,
        key_rcu: args.key_rcu,
        burst_seconds: args.burst_seconds,
        table_wcu: args.table_wcu,
        table_rcu: args.table_rcu,
    };
    config.pk_attr = args.pk_attr;
    config.sk_attr = args.sk_attr;
    if let Some(path) = &args.config {
        config.tables = ConfigFile::load(path)?.tables;
    }
    config.faults = Faults {
        latency_ms: args.latency_ms,
        jitter_ms: args.jitter_ms,
        unprocessed_rate: args.unprocessed_rate,
        error_rate: args.error_rate,
        throttle_rate: args.throttle_rate,
        drop_rate: args.drop_rate,
    };
    config.seed = args.seed;
    config.heat_csv = args.heat_csv;
    config.region = args.region;

    let proxy = Proxy::start(config)
        .await
        .context("starting capacity-proxy")?;
    {
        // Other tooling waits for this exact line on stdout.
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", proxy.url())?;
        out.flush()?;
    }
    wait_for_signal().await?;
    proxy.shutdown().await?;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
}
