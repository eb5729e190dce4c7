//! A one-reading fleet through run-local: devices that send one reading a message, at a
//! steady rate, published to moto's SQS and ingested by the runner in process (as the
//! demo runs it) on dynalite behind the capacity-proxy in forward mode. Measured on the
//! real clock: for a sample of messages, the time from `SendMessage`'s return to the
//! first answer of the reading's point read through the runner's query API; then the
//! proxy's write units of the readings table by partition key (slabs `s#`, runs `r#`,
//! the devices' own items) and the bytes the table holds by the same split. The demo's
//! one-reading phase and the bench's item 11 run it on today's layout and with slabs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use capacity_proxy::{Proxy, ProxyConfig, StatsSnapshot};
use shardline::env::EnvLookup;

use crate::query_api::QueryApi;
use crate::run_local::{self, Settings};

/// How often a sampled reading's point read is asked until it answers.
const POLL_EVERY: Duration = Duration::from_millis(100);
/// How long after its send a sampled reading may take before it counts as never read.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// How often the fleet's stats are asked how far their fresh minutes reach.
const FLEET_POLL_EVERY: Duration = Duration::from_secs(5);
/// How long the queue may take to empty once the publishing ended.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// One run's fleet, layout and event source.
#[derive(Debug, Clone)]
pub struct FleetRun {
    /// The repository root (the template, the stand-in's tools).
    pub root: PathBuf,
    /// Names the run's queues and tables.
    pub prefix: String,
    pub devices: usize,
    /// Each device sends one reading every this often.
    pub every: Duration,
    /// How long the fleet publishes.
    pub publish_for: Duration,
    /// One message in this many is sampled for its time to readable.
    pub sample_one_in: usize,
    /// `SLABS=on` (at the slab defaults) or today's layout.
    pub slabs: bool,
    /// The event source's batching window and batch size, and its concurrency.
    pub batching_window: Duration,
    pub batch_size: usize,
    pub max_concurrency: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct FleetFigures {
    /// Messages (one reading each) accepted by SQS.
    pub sent: u64,
    /// Sampled readings' times from `SendMessage`'s return to readable, sorted.
    pub latencies: Vec<Duration>,
    /// Sampled readings not readable within a minute of their send.
    pub never_read: u64,
    /// Whether the queue emptied after the publishing.
    pub drained: bool,
    /// Write units of the readings table: slabs, runs, the devices' own items.
    pub slab_wcu: f64,
    pub run_wcu: f64,
    pub own_wcu: f64,
    /// Write units of the shard and rollups tables.
    pub other_wcu: f64,
    /// Bytes the readings table holds at the end: slabs, runs, own items.
    pub slab_bytes: f64,
    pub run_bytes: f64,
    pub own_bytes: f64,
    /// Slab items the table holds at the end, and the readings in them: how many
    /// readings a slab gathered.
    pub slabs_held: u64,
    pub slab_members: u64,
    /// How far the fleet's fresh minutes trailed now (`GET /stats`' `fresh_to`, asked
    /// every [`FLEET_POLL_EVERY`] while the fleet published), sorted; none before the
    /// first window was compacted.
    pub fresh_lags: Vec<Duration>,
    /// Wall time of the whole run, servers included.
    pub elapsed: Duration,
}

impl FleetFigures {
    /// Write units of the readings table a reading sent, every tier.
    pub fn wcu_per_reading(&self) -> f64 {
        (self.slab_wcu + self.run_wcu + self.own_wcu) / self.sent.max(1) as f64
    }

    /// Bytes held a reading sent, every tier (slabs before their expiry).
    pub fn bytes_per_reading(&self) -> f64 {
        (self.slab_bytes + self.run_bytes + self.own_bytes) / self.sent.max(1) as f64
    }

    /// How far the fleet's fresh minutes trailed now: least and most, over the polls
    /// that found any.
    pub fn fresh_lag_range(&self) -> Option<(Duration, Duration)> {
        Some((*self.fresh_lags.first()?, *self.fresh_lags.last()?))
    }

    /// The `q` quantile (0..=1) of the sampled times to readable, by rank.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
        self.latencies.get(rank - 1).copied()
    }

    /// Readings a slab item holds on average (none without slabs).
    pub fn readings_a_slab(&self) -> Option<f64> {
        (self.slabs_held > 0).then(|| self.slab_members as f64 / self.slabs_held as f64)
    }

    /// Whether any run was written: the compaction of a closed window ran.
    pub fn compacted(&self) -> bool {
        self.run_wcu > 0.0
    }
}

impl FleetRun {
    /// Messages a second the fleet sends.
    pub fn rate(&self) -> f64 {
        self.devices as f64 / self.every.as_secs_f64()
    }

    /// The settings in words.
    pub fn words(&self) -> String {
        format!(
            "{} devices, a reading every {} s each ({:.0} messages/s), {} s; {}; event source: {} s window, batch {}, {} pollers",
            self.devices,
            self.every.as_secs_f64(),
            self.rate(),
            self.publish_for.as_secs(),
            self.layout_words(),
            self.batching_window.as_secs_f64(),
            self.batch_size,
            self.max_concurrency,
        )
    }

    /// The layout in words.
    pub fn layout_words(&self) -> String {
        if self.slabs {
            format!(
                "SLABS=on ({} groups, {}-min windows)",
                sharding::slab::DEFAULT_GROUPS,
                sharding::slab::DEFAULT_WINDOW_MINUTES
            )
        } else {
            "today's layout (hour buckets, N = 8, blocks)".to_owned()
        }
    }

    /// Starts moto, dynalite and the proxy, provisions the stack, runs the runner in
    /// process, publishes and measures, then stops everything.
    pub async fn run(&self) -> anyhow::Result<FleetFigures> {
        let started = Instant::now();
        let (moto, dynalite, stack) = crate::provision::start_stand_ins(&self.root, &self.prefix)
            .await
            .context("provisioning the one-reading fleet's stack")?;
        let proxy = Proxy::start(ProxyConfig::forward(&dynalite.endpoint())?).await?;
        let mut env = EnvLookup::from_pairs(stack.env_pairs());
        env.set("AWS_ENDPOINT_URL_SQS", moto.endpoint());
        env.set("SLABS", if self.slabs { "on" } else { "off" });
        // The template passes the sealer the ingest function's timeout: a slab window
        // closes no sooner than an invocation that could still write it has ended.
        env.set(
            "INGEST_TIMEOUT_SECS",
            run_local::DEFAULT_FUNCTION_TIMEOUT_SECS.to_string(),
        );
        let mut settings = Settings::new(&stack.queue_url);
        settings.batching_window = self.batching_window;
        settings.batch_size = self.batch_size;
        settings.max_concurrency = self.max_concurrency;
        // The sealer starts the compaction progress the ingest waits for before its first
        // slab; its schedule's minute would leave the phase's first minute without one.
        settings.seal_every = Some(Duration::from_secs(5));
        let running = run_local::start(settings, &env, Some(&proxy.url())).await?;
        let query = running.query_addr().context("the query API is not up")?;
        let sqs = aws_sdk_sqs::Client::new(&stand_in::sdk_config(&moto.endpoint()).await);

        let (stop, stopped) = tokio::sync::oneshot::channel();
        let watcher = tokio::spawn(watch_fleet(query, stopped));
        let published = self.publish(&sqs, &stack.queue_url, query).await;
        let _ = stop.send(());
        let mut fresh_lags = watcher.await.context("the fleet stats watcher")?;
        fresh_lags.sort_unstable();
        let (sent, mut latencies) = published?;
        let drained = drain(&sqs, &stack.queue_url).await?;
        running.stop();
        running.wait().await?;
        let charges = proxy.stats();
        proxy
            .shutdown()
            .await
            .map_err(|e| anyhow!("stopping capacity-proxy: {e}"))?;
        let dynamo =
            aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&dynalite.endpoint()).await);
        let stored = stored_by_tier(&dynamo, &stack.table_name).await?;
        drop((dynalite, moto));

        let sampled = latencies.len();
        let mut read: Vec<Duration> = latencies.drain(..).flatten().collect();
        read.sort_unstable();
        let units = |tier: Tier| wcu_of(&charges, &stack.table_name, tier);
        let total: f64 = charges.wcu_by_table.values().sum();
        let readings_wcu = charges
            .wcu_by_table
            .get(&stack.table_name)
            .copied()
            .unwrap_or(0.0);
        Ok(FleetFigures {
            sent,
            never_read: (sampled - read.len()) as u64,
            latencies: read,
            drained,
            slab_wcu: units(Tier::Slab),
            run_wcu: units(Tier::Run),
            own_wcu: units(Tier::Own),
            other_wcu: total - readings_wcu,
            slab_bytes: stored.bytes[Tier::Slab as usize],
            run_bytes: stored.bytes[Tier::Run as usize],
            own_bytes: stored.bytes[Tier::Own as usize],
            slabs_held: stored.slabs,
            slab_members: stored.slab_members,
            fresh_lags,
            elapsed: started.elapsed(),
        })
    }

    /// Sends the fleet's messages at their steady times, each on its own task; a
    /// sampled one then polls its reading's point read. Returns the messages SQS
    /// accepted, and each sampled one's time to readable (`None`: never read).
    async fn publish(
        &self,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
        query: SocketAddr,
    ) -> anyhow::Result<(u64, Vec<Option<Duration>>)> {
        let api = Arc::new(QueryApi::new(query, run_local::QUERY_TIMEOUT)?);
        let gap = self.every.div_f64(self.devices as f64);
        let messages = (self.publish_for.as_secs_f64() / gap.as_secs_f64()) as usize;
        let t0 = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for seq in 0..messages {
            tokio::time::sleep_until(t0 + gap * u32::try_from(seq)?).await;
            let message = Message::new(seq, seq % self.devices)?;
            let (sqs, queue_url, api) = (sqs.clone(), queue_url.to_owned(), Arc::clone(&api));
            let sampled = seq % self.sample_one_in == 0;
            tasks.spawn(async move {
                message
                    .send_and_watch(&sqs, &queue_url, &api, sampled)
                    .await
            });
        }
        let (mut sent, mut latencies) = (0, Vec::new());
        while let Some(outcome) = tasks.join_next().await {
            let (accepted, latency) = outcome.context("a publishing task failed")??;
            sent += u64::from(accepted);
            if accepted && let Some(latency) = latency {
                latencies.push(latency);
            }
        }
        Ok((sent, latencies))
    }
}

/// Asks the fleet's stats (`GET /stats`, the last two hours by the minute) every
/// [`FLEET_POLL_EVERY`] until `stop`; returns how far behind now each answer's
/// `fresh_to` was. An answer without one (no window compacted yet, no slabs), or none at
/// all, adds nothing.
async fn watch_fleet(
    query: SocketAddr,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Vec<Duration> {
    let mut lags = Vec::new();
    let Ok(api) = QueryApi::new(query, run_local::QUERY_TIMEOUT) else {
        return lags;
    };
    loop {
        tokio::select! {
            _ = &mut stop => return lags,
            () = tokio::time::sleep(FLEET_POLL_EVERY) => {}
        }
        let Ok(now) = store::clock::wall_clock() else {
            continue;
        };
        let now = now.as_millis();
        let range = [
            ("from", (now - 2 * 3_600_000).to_string()),
            ("to", (now + 60_000).to_string()),
            ("interval", "1m".to_owned()),
        ];
        let Ok(reply) = api.get(&api.fleet_stats_url(), &range).await else {
            continue;
        };
        let page: serde_json::Value = match serde_json::from_str(&reply.body) {
            Ok(page) if reply.status.is_success() => page,
            _ => continue,
        };
        let fresh_to = page["fresh_to"]
            .as_str()
            .map(sharding::time::Timestamp::parse);
        if let Some(Ok(fresh_to)) = fresh_to {
            let behind = now.saturating_sub(fresh_to.as_millis());
            lags.push(Duration::from_millis(u64::try_from(behind).unwrap_or(0)));
        }
    }
}

/// One message of one reading.
struct Message {
    device: String,
    event_id: String,
    ts: i64,
    body: String,
}

impl Message {
    /// Message `seq`, of device `d`, timed now.
    fn new(seq: usize, d: usize) -> anyhow::Result<Self> {
        let device = format!("dev-{d:06}");
        let event_id = format!("0190a1b2-0000-7e5f-8a9b-{seq:012x}");
        let ts = store::clock::wall_clock()?.as_millis();
        let temp = 18.0 + (seq % 100) as f64 / 10.0;
        let body = serde_json::json!({ "readings": [{
            "device_id": device,
            "event_id": event_id,
            "ts": ts,
            "metrics": { "temp_c": temp, "humidity": 40.5 },
        }]})
        .to_string();
        Ok(Self {
            device,
            event_id,
            ts,
            body,
        })
    }

    /// Sends the message; when `sampled`, then asks its point read every
    /// [`POLL_EVERY`] until it answers. Returns whether SQS accepted it and, sampled,
    /// the time from the send's return to the first answer (`None`: not within
    /// [`GIVE_UP_AFTER`]).
    async fn send_and_watch(
        self,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
        api: &QueryApi,
        sampled: bool,
    ) -> anyhow::Result<(bool, Option<Option<Duration>>)> {
        let accepted = sqs
            .send_message()
            .queue_url(queue_url)
            .message_body(&self.body)
            .send()
            .await
            .is_ok();
        let returned = Instant::now();
        if !accepted || !sampled {
            return Ok((accepted, None));
        }
        let url = format!("{}/{}", api.readings_url(&self.device), self.event_id);
        let ts = [("ts", self.ts.to_string())];
        while returned.elapsed() < GIVE_UP_AFTER {
            // An answer lost to the runner's load is asked again, as a 404 is.
            if let Ok(reply) = api.get(&url, &ts).await
                && reply.status.is_success()
            {
                return Ok((true, Some(Some(returned.elapsed()))));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        Ok((true, Some(None)))
    }
}

/// Waits until the queue holds no message, visible or in flight, at most
/// [`DRAIN_LIMIT`]; whether it emptied.
async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> anyhow::Result<bool> {
    let until = Instant::now() + DRAIN_LIMIT;
    while Instant::now() < until {
        if run_local::queue_counts(sqs, queue_url).await? == (0, 0) {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(false)
}

/// The readings table's tiers, by partition key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Slab = 0,
    Run = 1,
    Own = 2,
}

impl Tier {
    fn of(pk: &str) -> Self {
        if pk.starts_with("s#") {
            Tier::Slab
        } else if pk.starts_with("r#") {
            Tier::Run
        } else {
            Tier::Own
        }
    }
}

/// Write units the proxy charged `table`'s keys of `tier`.
fn wcu_of(charges: &StatsSnapshot, table: &str, tier: Tier) -> f64 {
    charges
        .keys
        .iter()
        .filter(|k| k.table == table && Tier::of(&k.pk) == tier)
        .map(|k| k.wcu_total)
        .sum()
}

/// What the readings table holds at the end.
#[derive(Debug, Default)]
struct Stored {
    /// Bytes, as DynamoDB sizes items, by tier.
    bytes: [f64; 3],
    /// Slab items, and the readings in them.
    slabs: u64,
    slab_members: u64,
}

/// What `table` holds, by tier.
async fn stored_by_tier(dynamo: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<Stored> {
    let mut pages = dynamo
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send();
    let mut stored = Stored::default();
    while let Some(item) = pages.next().await {
        let item = item.context("scanning the readings table")?;
        let pk = item
            .get("PK")
            .and_then(|v| v.as_s().ok())
            .map_or("", String::as_str);
        let tier = Tier::of(pk);
        stored.bytes[tier as usize] += store::size::item_size(&item) as f64;
        if tier == Tier::Slab {
            stored.slabs += 1;
            let members = store::slab::decode(item).context("decoding a slab")?;
            stored.slab_members += members.len() as u64;
        }
    }
    Ok(stored)
}
