//! Item 11: one-reading fleets in slabs. An hour of a fleet that sends one reading a
//! message goes through the real ingest handler, with the sealer's scheduled runs at
//! every minute of it (each compacts the windows closed by then), on dynalite behind the
//! capacity-proxy in forward mode, one proxy per table, which charges every call as
//! DynamoDB bills it. Each fleet runs twice on fresh tables: the layout of today (blocks)
//! and the same with slabs. Measured: write units a reading by tier (slabs, runs, the
//! devices' own items, the sealer's rollups), bytes stored a reading, and the read units
//! of one device's last 15 minutes, last hour, latest reading and a point read through
//! the query service, at the hour's end, while its last windows are still open.
//! [`readable`] measures on the real clock how soon a reading sent is answered through
//! run-local, on today's layout and with slabs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::Client;
use query::{CursorKey, QueryService, ServiceConfig};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sealer::Settings as SealerSettings;
use shardline_local::one_reading::FleetRun;
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;
use store::rollup::HOUR_MS;
use store::rollup::dynamo::DynamoRollups;

use crate::report::{Results, at_most};
use crate::sealer_bill::fleet::{Fleet, Kind, thousands};
use crate::sealer_bill::{Charges, HOUR, Tables, Tap, at, ingest_with, sealer_on};

/// The batching window and batch the template gives the event source with slabs
/// (`SlabBatchingWindow`, `SlabIngestBatchSize`): what one invocation gathers, so
/// what one slab can hold.
const SLAB_BATCH_WINDOW_MS: i64 =
    (shardline_local::run_local::DEFAULT_SLAB_BATCHING_WINDOW_SECS * 1_000.0) as i64;
const SLAB_BATCH: usize = shardline_local::run_local::DEFAULT_SLAB_BATCH_SIZE;
/// The template's event source: its batching window and batch size.
const TEMPLATE_BATCH_WINDOW_MS: i64 = 1_000;
const TEMPLATE_BATCH: usize = 100;
/// Devices of the time-to-readable fleet.
const READY_DEVICES: usize = 200;
/// The sealer's schedule, rate(1 minute).
const MINUTE_MS: i64 = 60_000;
/// Devices whose reads are measured, spread over the fleet.
const SAMPLED: usize = 20;

/// The layouts compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// A new table's layout before slabs: hour buckets, N = 8, blocks.
    Today,
    /// The same with slabs at their defaults.
    Slabs,
}

impl Layout {
    fn words(self) -> &'static str {
        match self {
            Layout::Today => "today's layout (blocks, 1-s window, batch 100)",
            Layout::Slabs => "slabs (5-s window, batch 1,000)",
        }
    }

    fn env(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Layout::Today => vec![],
            Layout::Slabs => vec![("SLABS", "on")],
        }
    }

    fn events(self, msgs: &[crate::sealer_bill::fleet::Msg]) -> Vec<(i64, std::ops::Range<usize>)> {
        match self {
            Layout::Today => Fleet::events(msgs),
            Layout::Slabs => Fleet::events_of(msgs, SLAB_BATCH_WINDOW_MS, SLAB_BATCH),
        }
    }
}

/// Write and read units of one layout's hour of one fleet.
#[derive(Debug, Default, Clone)]
struct Figures {
    readings: f64,
    /// Write units by tier: slabs, runs, the devices' own items, the sealer's rollups,
    /// the shard metadata.
    slab_wcu: f64,
    run_wcu: f64,
    own_wcu: f64,
    rollup_wcu: f64,
    shard_wcu: f64,
    /// Read units the compaction and the sealer spent on the readings table.
    readings_rcu: f64,
    /// Bytes stored by tier at the end (slabs before their expiry).
    slab_bytes: f64,
    run_bytes: f64,
    own_bytes: f64,
    /// Mean read units of one sampled device's reads.
    last_15_min: f64,
    last_hour: f64,
    latest: f64,
    point: f64,
    secs: f64,
}

impl Figures {
    fn wcu_per_reading(&self) -> f64 {
        (self.slab_wcu + self.run_wcu + self.own_wcu + self.rollup_wcu) / self.readings
    }
}

/// The fleets: 1,000 devices, one reading a message, every 10 s and every minute, each
/// with readings of about 60 and about 500 bytes.
fn fleets(devices: usize) -> Vec<Fleet> {
    let mut out = Vec::new();
    for kind in [Kind::TwoMetrics, Kind::Wide] {
        for every_ms in [10_000, 60_000] {
            out.push(Fleet {
                label: format!(
                    "{} devices, a reading every {} s, {}",
                    thousands(devices),
                    every_ms / 1_000,
                    kind.words()
                ),
                devices,
                per_message: 1,
                every_ms,
                kind,
            });
        }
    }
    out
}

/// Runs item 11.
pub async fn run(root: &Path, devices: usize, results: &mut Results) -> Result<()> {
    let tools = stand_in::ensure_dynalite(root)?;
    for (i, fleet) in fleets(devices).iter().enumerate() {
        let mut measured = Vec::new();
        for layout in [Layout::Today, Layout::Slabs] {
            eprintln!("item 11: {}, {}", fleet.label, layout.words());
            let figures = measure(root, &tools, fleet, layout, &format!("bench-slab{i}"))
                .await
                .with_context(|| format!("{}, {}", fleet.label, layout.words()))?;
            measured.push(figures);
        }
        report(results, fleet, &measured[0], &measured[1]);
    }
    results.note("11", NOTE);
    Ok(())
}

/// The time from `SendMessage`'s return to the first answer of the reading's point
/// read through run-local's query API, on the real clock: a fleet of 200 devices, one
/// reading a message, published for a minute at a steady rate to moto's SQS, ingested
/// by run-local in process on dynalite behind the capacity-proxy, once on today's
/// layout with the template's event source, once with slabs and the event source their
/// defaults ask for. Each run has its servers to itself; they run one after the other.
pub async fn readable(root: &Path, results: &mut Results) -> Result<()> {
    let pollers = shardline_local::run_local::DEFAULT_MAX_CONCURRENCY;
    for (slabs, window_ms, batch, pollers) in [
        (false, TEMPLATE_BATCH_WINDOW_MS, TEMPLATE_BATCH, pollers),
        (true, SLAB_BATCH_WINDOW_MS, SLAB_BATCH, pollers),
        // Each poller gathers its own batch: fewer of them fill each slab more.
        (true, SLAB_BATCH_WINDOW_MS, SLAB_BATCH, 2),
    ] {
        let run = FleetRun {
            root: root.to_path_buf(),
            prefix: format!("bench-ready-{}", if slabs { "slabs" } else { "today" }),
            devices: READY_DEVICES,
            every: Duration::from_secs(10),
            // With slabs, long enough for the first windows to close and be compacted,
            // so the fleet's fresh minutes show.
            publish_for: Duration::from_secs(if slabs { 180 } else { 60 }),
            sample_one_in: 6,
            slabs,
            batching_window: Duration::from_millis(u64::try_from(window_ms)?),
            batch_size: batch,
            max_concurrency: pollers,
        };
        eprintln!("item 11: time to readable, {}", run.words());
        let f = run
            .run()
            .await
            .with_context(|| format!("time to readable, {}", run.layout_words()))?;
        let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
        let p99 = secs(f.quantile(0.99));
        results.goal(
            "11",
            &format!(
                "time from SendMessage to readable through run-local, {}",
                run.words()
            ),
            format!(
                "p50 {:.2} s, p99 {p99:.2} s, max {:.2} s ({} sampled of {} messages, {} never read within 60 s; {:.3} write units a reading, {} readings a slab)",
                secs(f.quantile(0.5)),
                secs(f.latencies.last().copied()),
                f.latencies.len(),
                f.sent,
                f.never_read,
                f.wcu_per_reading(),
                f.readings_a_slab()
                    .map_or("no".to_owned(), |n| format!("{n:.1}")),
            ),
            "p99 at most 10 s",
            if f.never_read > 0 {
                "not met (some never read)".to_owned()
            } else {
                at_most(p99, 10.0)
            },
        );
        if slabs {
            let (figure, verdict) = match f.fresh_lag_range() {
                Some((least, most)) => (
                    format!(
                        "{} s to {} s behind now ({} polls of GET /stats, every 5 s)",
                        least.as_secs(),
                        most.as_secs(),
                        f.fresh_lags.len()
                    ),
                    at_most(most.as_secs_f64(), 480.0),
                ),
                None => (
                    "no fresh minute during the run".to_owned(),
                    "not met".to_owned(),
                ),
            };
            results.goal(
                "11",
                &format!(
                    "the fleet's fresh minutes (GET /stats fresh_to) behind now, {}",
                    run.words()
                ),
                figure,
                "at most 8 min",
                verdict,
            );
        }
    }
    results.note("11", READY_NOTE);
    Ok(())
}

async fn measure(
    root: &Path,
    tools: &stand_in::NodeTools,
    fleet: &Fleet,
    layout: Layout,
    prefix: &str,
) -> Result<Figures> {
    let server = stand_in::Dynalite::start(tools)?;
    let endpoint = server.endpoint();
    let provisioned = stand_in::provision_tables(
        &endpoint,
        &root.join("template.yaml"),
        prefix,
        stand_in::Backend::Dynalite,
    )
    .await
    .context("provisioning the template's tables")?;
    let tables = Tables {
        readings: provisioned.name("ReadingsTable")?.to_owned(),
        shards: provisioned.name("ShardsTable")?.to_owned(),
        rollups: provisioned.name("RollupTable")?.to_owned(),
    };
    store_layout(&endpoint, &tables, layout).await?;
    let started = Instant::now();
    let tap = Tap::start(&endpoint, &tables).await?;
    let clients = tap.clients().await;
    let service = ingest_with(&tables, clients.clone(), &layout.env())?;
    let sealer = sealer_on(&tables, clients);
    let msgs = fleet.messages();
    let events = layout.events(&msgs);
    let end = HOUR + HOUR_MS;
    let mut next_run = HOUR;
    let mut written = 0;
    for (i, (now_ms, range)) in events.iter().enumerate() {
        // The schedule's runs due before this event.
        while next_run <= *now_ms {
            sealer.run(at(next_run)?, None).await?;
            next_run += MINUTE_MS;
        }
        let mut event = SqsEvent::default();
        event.records = msgs[range.clone()]
            .iter()
            .enumerate()
            .map(|(k, m)| fleet.record(range.start + k, m))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let report = service
            .process(&event, at(*now_ms)?, deadline, &mut rng)
            .await;
        ensure!(
            report.dead_lettered == 0 && report.response()?.batch_item_failures.is_empty(),
            "event {i}: {} dead-lettered, some messages reported",
            report.dead_lettered
        );
        written += report.readings_written;
    }
    ensure!(
        written == fleet.readings() as u64,
        "wrote {written} of {} readings",
        fleet.readings()
    );
    // The reads, at the hour's end, its last windows still open.
    let reads = read_units(&endpoint, &tables, fleet, end).await?;
    // The rest of the schedule: the hour's windows compacted, then the hour sealed.
    let horizon = i64::try_from(SealerSettings::default().horizon.as_millis())?;
    while next_run <= end + horizon + 2 * MINUTE_MS {
        sealer.run(at(next_run)?, None).await?;
        next_run += MINUTE_MS;
    }
    let charges = tap.finish().await?;
    let stored = stored_bytes(&endpoint, &tables.readings).await?;
    let tier = |prefix: &'static str| move |pk: &str| pk.starts_with(prefix);
    let own = |pk: &str| !pk.starts_with("s#") && !pk.starts_with("r#");
    let units = |c: &Charges, f: &dyn Fn(&str) -> bool| c.units(&tables.readings, f);
    drop(server);
    Ok(Figures {
        readings: fleet.readings() as f64,
        slab_wcu: units(&charges, &tier("s#")).wcu,
        run_wcu: units(&charges, &tier("r#")).wcu,
        own_wcu: units(&charges, &own).wcu,
        rollup_wcu: charges.table(&tables.rollups).wcu,
        shard_wcu: charges.table(&tables.shards).wcu,
        readings_rcu: charges.table(&tables.readings).rcu,
        slab_bytes: stored.0,
        run_bytes: stored.1,
        own_bytes: stored.2,
        last_15_min: reads.0,
        last_hour: reads.1,
        latest: reads.2,
        point: reads.3,
        secs: started.elapsed().as_secs_f64(),
    })
}

/// Stores the table's layout before the hour: today's (hour buckets, N = 8, blocks),
/// and for [`Layout::Slabs`] the same switched to slabs at the hour's start, as
/// `shardline slabs on` switches an existing table. A table whose first layout has slabs
/// holds them from the beginning of time, and its first compaction would walk the
/// expiry's two days of empty windows before the hour.
async fn store_layout(endpoint: &str, tables: &Tables, layout: Layout) -> Result<()> {
    use sharding::epoch::{Epoch, TableHistory};
    use store::ShardStore as _;
    let today = crate::common::hourly(8).with_blocks(sharding::block::BlockLayout::default());
    let mut epochs = vec![Epoch {
        effective_from: sharding::time::Timestamp::MIN,
        value: today.clone(),
    }];
    if layout == Layout::Slabs {
        epochs.push(Epoch {
            effective_from: at(HOUR)?,
            value: today.with_slabs(sharding::slab::SlabLayout::default()),
        });
    }
    let client = Client::new(&stand_in::sdk_config(endpoint).await);
    DynamoShards::new(&client, &tables.shards)
        .create_layout(&TableHistory::from_epochs(epochs)?)
        .await?;
    Ok(())
}

/// Mean read units of the sampled devices' four reads at `now`: the last 15 minutes, the
/// last hour, the latest reading, and a point read of a reading 10 minutes old.
async fn read_units(
    endpoint: &str,
    tables: &Tables,
    fleet: &Fleet,
    now_ms: i64,
) -> Result<(f64, f64, f64, f64)> {
    let tap = Tap::start(endpoint, tables).await?;
    let [r, s, l] = tap.clients().await;
    let svc = QueryService::new(
        DynamoReadingSource::new(r, &tables.readings),
        DynamoShards::new(&s, &tables.shards),
        ServiceConfig::new(CursorKey::new(vec![11u8; 32])?),
    )
    .with_rollups(DynamoRollups::new(l, &tables.rollups));
    let now = at(now_ms)?;
    let mut sums = [0.0; 4];
    for k in 0..SAMPLED {
        let d = k * fleet.devices / SAMPLED;
        let device = fleet.device(d);
        let (event, ts) = fleet.reading_before(d, now_ms - 10 * MINUTE_MS);
        let requests = [
            (
                format!("/devices/{device}/readings"),
                format!("from={}&to={now_ms}&limit=1000", now_ms - 15 * MINUTE_MS),
            ),
            (
                format!("/devices/{device}/readings"),
                format!("from={}&to={now_ms}&limit=1000", now_ms - HOUR_MS),
            ),
            (format!("/devices/{device}/latest"), String::new()),
            (
                format!("/devices/{device}/readings/{event}"),
                format!("ts={ts}"),
            ),
        ];
        for (sum, (path, query)) in sums.iter_mut().zip(&requests) {
            let before = tap.read_units();
            let answer = svc.handle_parts("GET", path, Some(query), now).await;
            ensure!(
                answer.status().as_u16() == 200,
                "{path}?{query} answered {}: {}",
                answer.status(),
                answer.body()
            );
            *sum += tap.read_units() - before;
        }
    }
    tap.finish().await?;
    let n = SAMPLED as f64;
    Ok((sums[0] / n, sums[1] / n, sums[2] / n, sums[3] / n))
}

/// Bytes stored in the readings table by tier: slabs, runs, the devices' own items.
async fn stored_bytes(endpoint: &str, table: &str) -> Result<(f64, f64, f64)> {
    let client = Client::new(&stand_in::sdk_config(endpoint).await);
    let mut pages = client
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send();
    let (mut slabs, mut runs, mut own) = (0.0, 0.0, 0.0);
    while let Some(item) = pages.next().await {
        let item = item?;
        let bytes = store::size::item_size(&item) as f64;
        let pk = item
            .get("PK")
            .and_then(|v| v.as_s().ok())
            .map_or("", String::as_str);
        if pk.starts_with("s#") {
            slabs += bytes;
        } else if pk.starts_with("r#") {
            runs += bytes;
        } else {
            own += bytes;
        }
    }
    Ok((slabs, runs, own))
}

fn report(results: &mut Results, fleet: &Fleet, today: &Figures, slabs: &Figures) {
    let per = |x: f64, f: &Figures| x / f.readings;
    let label = &fleet.label;
    for (layout, f) in [(Layout::Today, today), (Layout::Slabs, slabs)] {
        results.figure(
            "11",
            &format!("{label}, {}: write units a reading, by tier", layout.words()),
            format!(
                "{:.3} (slabs {:.3}, runs {:.3}, own items {:.3}, sealer {:.3}; shard metadata {:.0} WCU in all; {} readings, {:.0} s)",
                f.wcu_per_reading(),
                per(f.slab_wcu, f),
                per(f.run_wcu, f),
                per(f.own_wcu, f),
                per(f.rollup_wcu, f),
                f.shard_wcu,
                f.readings,
                f.secs,
            ),
        );
        results.figure(
            "11",
            &format!(
                "{label}, {}: read units of the readings table by the sealer and compaction, a reading",
                layout.words()
            ),
            format!("{:.4}", per(f.readings_rcu, f)),
        );
        results.figure(
            "11",
            &format!("{label}, {}: bytes stored a reading", layout.words()),
            format!(
                "runs {:.0}, own items {:.0}; slabs {:.0} until they expire",
                per(f.run_bytes, f),
                per(f.own_bytes, f),
                per(f.slab_bytes, f),
            ),
        );
    }
    let goal = if fleet.kind == Kind::TwoMetrics {
        "at most 0.10"
    } else {
        ""
    };
    let total = slabs.wcu_per_reading();
    let verdict = if goal.is_empty() {
        String::new()
    } else {
        at_most(total, 0.10)
    };
    results.goal(
        "11",
        &format!("{label}: write units a reading with slabs, all tiers"),
        format!("{total:.3} (today's {:.3})", today.wcu_per_reading()),
        goal,
        verdict,
    );
    for (what, t, s) in [
        ("last 15 minutes", today.last_15_min, slabs.last_15_min),
        ("last hour", today.last_hour, slabs.last_hour),
        ("latest reading", today.latest, slabs.latest),
        ("point read", today.point, slabs.point),
    ] {
        let ratio = s / t;
        results.goal(
            "11",
            &format!("{label}: read units of a device's {what}, slabs / today"),
            format!("{s:.2} / {t:.2} = {ratio:.1}x"),
            "at most 10x",
            at_most(ratio, 10.0),
        );
    }
}

const NOTE: &str = "one-reading fleets in slabs: for each fleet, one hour of readings \
    (2026-06-22 01:00-02:00 UTC), one a message, through ingest::Ingest::process in process \
    on dynalite behind the capacity-proxy in forward mode (one proxy per table, per-key limits \
    lifted), twice on fresh tables: today's layout (hour buckets, N = 8, blocks on; events of \
    the template's 1-s batching window, at most 100 messages) and the same with slabs at their \
    defaults (events of a 5-s window, at most 1,000 messages). The real sealer runs at every \
    minute of the hour as its schedule would (each run compacts the windows closed by then) \
    and on until the hour is sealed. Write units are the proxy's charges by partition key: \
    slabs (s#), runs (r#), the devices' own items, and the rollups table (the sealer: the \
    compaction's progress and the hour's derived items). Reads: 20 devices spread over the \
    fleet, each read at the hour's end through query::QueryService with the rollups table \
    (its last windows still open), read units as the proxy charged them; a point read is of \
    a reading 10 minutes old. Bytes stored are DynamoDB's item sizes of a scan at the end; \
    slabs are counted before their TTL deletes them.";

const READY_NOTE: &str = "time to readable: 200 devices, each a reading every 10 s in a message \
    of its own (20 messages/s), sent one SendMessage each to moto's SQS on a steady schedule \
    for 60 s (180 s with slabs), the reading's timestamp its send time; \
    shardline_local::run_local in process (as the demo runs it) ingests them on dynalite \
    behind the capacity-proxy in forward mode, its sealer every 5 s (compaction's first \
    progress, which the ingest waits for before its first slab, comes in the run's first \
    seconds). While the fleet publishes, GET /stats is asked every 5 s how far its fresh \
    minutes reach (fresh_to). One message in 6 is sampled: from \
    SendMessage's return, its point read GET /devices/{id}/readings/{event_id}?ts= is asked \
    of run-local's query API every 100 ms until it answers 200, on the wall clock. Today's \
    layout runs with the template's event source (1-s window, batch 100), slabs (SLABS=on, \
    8 groups, 1-min windows) with the one their defaults ask for (5-s window, batch 1,000); \
    each with run-local's 20 pollers, slabs also with 2 (each poller gathers its own batch, \
    so fewer fill each slab more). The runs take turns, each on its own servers; the \
    sealer gets INGEST_TIMEOUT_SECS = 30, run-local's function timeout.";
