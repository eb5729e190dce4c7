//! Item 9: the sealer's bill. One hour of a fleet's readings goes through the real ingest
//! handler (the rollups table configured, so any late mark it wrote would be charged),
//! then the real sealer seals that hour, on dynalite behind the capacity-proxy in forward
//! mode, which charges every call as DynamoDB bills it: reads by what they read (strongly
//! consistent at full price), writes by the larger of the item before and after, a failed
//! condition at least one unit. One proxy per table, so each table's calls are counted
//! apart. The sealer's bill for the hour, in dollars at on-demand prices, is set against
//! the ingest's write bill for the same hour.
//!
//! The hour is one of the past: every reading is stamped in it, each event is handled at
//! its batching window's end (so every reading is on time), and the sealer runs at the
//! moments its schedule would (an earlier run leaves the watermark at the hour's start,
//! as in a running stack), so nothing takes an hour of wall time.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::Client;
use capacity_proxy::{KeyStats, Limits, Proxy, ProxyConfig, ProxyHandle};
use ingest::{Ingest, MemoryQueue};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sealer::{RunReport, Sealer, Settings as SealerSettings};
use sharding::capacity::ON_DEMAND_PRICE_PER_MILLION_WRITES;
use sharding::time::Timestamp;
use store::dynamo::{DynamoShards, DynamoTable};
use store::read::DynamoReadings;
use store::rollup::HOUR_MS;
use store::rollup::dynamo::DynamoRollups;

use crate::common::{self, T0_MS};
use crate::report::Results;

/// US dollars per million on-demand read request units, standard table class, us-east-1:
/// the read price beside `sharding::capacity::ON_DEMAND_PRICE_PER_MILLION_WRITES`
/// ($0.625 per million write units), which is the only price the project keeps.
pub const ON_DEMAND_PRICE_PER_MILLION_READS: f64 = 0.125;

/// The sealed hour: 2026-06-22T01:00Z.
pub(crate) const HOUR: i64 = T0_MS + HOUR_MS;
/// The template's `SealerSchedule`, rate(1 minute): runs an hour, one of which seals.
const RUNS_PER_HOUR: f64 = 60.0;
/// The template's `IngestBatchSize` and batching window: the messages of one event.
const BATCH_WINDOW_MS: i64 = 1_000;
/// The fleet of the shape (b), which the measured fleet scales down.
pub const FULL_FLEET: f64 = 100_000.0;
/// The ratio's goal, in percent of the ingest's write bill.
const GOAL_PERCENT: f64 = 5.0;

mod bill;
pub(crate) mod fleet;

use fleet::{Fleet, fleets};

/// The stack's table names.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    pub(crate) readings: String,
    pub(crate) shards: String,
    pub(crate) rollups: String,
}

/// What the proxies charged over one phase, every key of the three tables.
#[derive(Debug, Default, Clone)]
pub(crate) struct Charges {
    pub(crate) keys: Vec<KeyStats>,
    /// Calls by (table, operation).
    pub(crate) calls: BTreeMap<(String, String), u64>,
}

/// Read and write units of one part of a bill.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Units {
    pub(crate) rcu: f64,
    pub(crate) wcu: f64,
}

impl Units {
    fn usd(self) -> f64 {
        (self.rcu * ON_DEMAND_PRICE_PER_MILLION_READS
            + self.wcu * ON_DEMAND_PRICE_PER_MILLION_WRITES)
            / 1e6
    }

    fn plus(self, other: Units) -> Units {
        Units {
            rcu: self.rcu + other.rcu,
            wcu: self.wcu + other.wcu,
        }
    }

    fn times(self, k: f64) -> Units {
        Units {
            rcu: self.rcu * k,
            wcu: self.wcu * k,
        }
    }

    fn words(self) -> String {
        format!(
            "{:.1} RCU + {:.1} WCU = {}",
            self.rcu,
            self.wcu,
            bill::usd(self.usd())
        )
    }
}

impl Charges {
    /// Units charged to `table`'s keys that `pk` accepts.
    pub(crate) fn units(&self, table: &str, pk: impl Fn(&str) -> bool) -> Units {
        // Folds from +0.0: an empty float sum is -0.0.
        self.keys
            .iter()
            .filter(|k| k.table == table && pk(&k.pk))
            .fold(Units::default(), |u, k| Units {
                rcu: u.rcu + k.rcu_total,
                wcu: u.wcu + k.wcu_total,
            })
    }

    pub(crate) fn table(&self, table: &str) -> Units {
        self.units(table, |_| true)
    }

    pub(crate) fn total(&self) -> Units {
        self.keys.iter().fold(Units::default(), |u, k| Units {
            rcu: u.rcu + k.rcu_total,
            wcu: u.wcu + k.wcu_total,
        })
    }

    fn calls(&self, table: &str, op: &str) -> u64 {
        self.calls
            .get(&(table.to_owned(), op.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn table_calls(&self, table: &str) -> u64 {
        self.calls
            .iter()
            .filter(|((t, _), _)| t == table)
            .map(|(_, n)| n)
            .sum()
    }
}

/// One proxy per table in front of the stand-in, per-key limits lifted: an hour of
/// event time is written in seconds, and the bill does not depend on the rate.
pub(crate) struct Tap {
    proxies: Vec<(String, ProxyHandle)>,
}

impl Tap {
    pub(crate) async fn start(endpoint: &str, tables: &Tables) -> Result<Self> {
        let mut proxies = Vec::new();
        for table in [&tables.readings, &tables.shards, &tables.rollups] {
            let mut pc = ProxyConfig::forward(endpoint)?;
            pc.limits = Limits {
                key_wcu: 1e9,
                key_rcu: 1e9,
                ..Limits::default()
            };
            pc.seed = Some(9);
            proxies.push((table.clone(), Proxy::start(pc).await?));
        }
        Ok(Self { proxies })
    }

    /// The client of each table's proxy: readings, shards, rollups.
    pub(crate) async fn clients(&self) -> [Client; 3] {
        let client = |i: usize| {
            let url = self.proxies[i].1.url();
            async move { Client::new(&stand_in::sdk_config(&url).await) }
        };
        [client(0).await, client(1).await, client(2).await]
    }

    /// Read units charged so far, every table.
    pub(crate) fn read_units(&self) -> f64 {
        self.proxies
            .iter()
            .map(|(_, p)| p.stats().keys.iter().map(|k| k.rcu_total).sum::<f64>())
            .sum()
    }

    pub(crate) async fn finish(self) -> Result<Charges> {
        let mut charges = Charges::default();
        for (table, proxy) in self.proxies {
            let stats = proxy.stats();
            for (op, n) in stats.requests_by_op {
                *charges.calls.entry((table.clone(), op)).or_default() += n;
            }
            charges.keys.extend(stats.keys);
            proxy.shutdown().await?;
        }
        Ok(charges)
    }
}

/// What one fleet's hour cost.
struct Bill {
    fleet: Fleet,
    tables: Tables,
    item_bytes: usize,
    json_bytes: usize,
    events: usize,
    late_marks: u64,
    ingest: Charges,
    ingest_secs: f64,
    seal: Charges,
    seal_secs: f64,
    sealed: RunReport,
    idle: Charges,
}

pub(crate) fn sealer_on(
    tables: &Tables,
    [r, s, l]: [Client; 3],
) -> Sealer<DynamoReadings, DynamoShards, DynamoRollups> {
    Sealer::new(
        DynamoReadings::new(&r, &tables.readings),
        DynamoShards::new(&s, &tables.shards),
        DynamoRollups::new(l, &tables.rollups),
        SealerSettings {
            // The template's IngestTimeout, which it passes to the sealer: a window of
            // slabs closes only once no invocation can still write into it.
            ingest_timeout: Some(Duration::from_secs(30)),
            ..SealerSettings::default()
        },
    )
}

/// The ingest on the three tables' clients, with the template's defaults (hour buckets,
/// N = 8, blocks on) and the rollups table configured; dead letters stay in memory.
pub(crate) fn ingest_on(
    tables: &Tables,
    clients: [Client; 3],
) -> Result<Ingest<DynamoTable, DynamoShards, MemoryQueue, DynamoRollups>> {
    ingest_with(tables, clients, &[])
}

/// [`ingest_on`] with more of the ingest's environment (`extra` overrides).
pub(crate) fn ingest_with(
    tables: &Tables,
    [r, s, l]: [Client; 3],
    extra: &[(&str, &str)],
) -> Result<Ingest<DynamoTable, DynamoShards, MemoryQueue, DynamoRollups>> {
    let mut vars = vec![
        ("TABLE_NAME", tables.readings.as_str()),
        ("SHARD_TABLE_NAME", tables.shards.as_str()),
        ("ROLLUP_TABLE", tables.rollups.as_str()),
        ("BLOCKS", "on"),
    ];
    vars.extend_from_slice(extra);
    let config = common::ingest_config(&vars)?;
    Ok(Ingest::new(
        config,
        DynamoTable::new(&r, &tables.readings),
        DynamoShards::new(&s, &tables.shards),
        MemoryQueue::new(),
    )
    .with_rollups(DynamoRollups::new(l, &tables.rollups)))
}

pub(crate) fn at(ms: i64) -> Result<Timestamp> {
    Ok(Timestamp::from_millis(ms)?)
}

/// What the ingest of the hour did and cost.
struct Ingested {
    charges: Charges,
    secs: f64,
    events: usize,
    late_marks: u64,
}

/// The hour of `fleet` through the ingest handler, each event at its window's end.
async fn ingest_hour(endpoint: &str, tables: &Tables, fleet: &Fleet) -> Result<Ingested> {
    // The ingest: the template's defaults (hour buckets, N = 8, blocks on), the rollups
    // table configured.
    let tap = Tap::start(endpoint, tables).await?;
    let service = ingest_on(tables, tap.clients().await)?;
    let msgs = fleet.messages();
    let events = Fleet::events(&msgs);
    let started = Instant::now();
    let (mut written, mut late_marks) = (0, 0);
    for (i, (now_ms, range)) in events.iter().enumerate() {
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
        late_marks += report.late_marks;
        if i % 500 == 499 {
            eprintln!(
                "item 9: {}: {} of {} events",
                fleet.label,
                i + 1,
                events.len()
            );
        }
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    ensure!(
        written == fleet.readings() as u64,
        "wrote {written} of {} readings",
        fleet.readings()
    );
    Ok(Ingested {
        charges: tap.finish().await?,
        secs: ingest_secs,
        events: events.len(),
        late_marks,
    })
}

/// Ingests `fleet`'s hour and seals it, each through its own proxies.
async fn measure(root: &Path, tools: &stand_in::NodeTools, fleet: &Fleet) -> Result<Bill> {
    let server = stand_in::Dynalite::start(tools)?;
    let endpoint = server.endpoint();
    let provisioned = stand_in::provision_tables(
        &endpoint,
        &root.join("template.yaml"),
        "bench-seal",
        stand_in::Backend::Dynalite,
    )
    .await
    .context("provisioning the template's tables")?;
    let tables = Tables {
        readings: provisioned.name("ReadingsTable")?.to_owned(),
        shards: provisioned.name("ShardsTable")?.to_owned(),
        rollups: provisioned.name("RollupTable")?.to_owned(),
    };
    let (item_bytes, json_bytes) = fleet.reading_sizes()?;
    let ingested = ingest_hour(&endpoint, &tables, fleet).await?;

    // The run before: the first run of a stack seals the hour before this one (empty),
    // which leaves the watermark at this hour's start, as every later run finds it.
    let horizon = i64::try_from(SealerSettings::default().horizon.as_millis())?;
    let direct = Client::new(&stand_in::sdk_config(&endpoint).await);
    let before = sealer_on(&tables, [direct.clone(), direct.clone(), direct])
        .run(at(HOUR + horizon + 60_000)?, None)
        .await?;
    ensure!(
        before.watermark_ms == Some(HOUR),
        "the run before left the watermark at {:?}",
        before.watermark_ms
    );

    // The run that seals the hour: the first one after the lateness horizon.
    let tap = Tap::start(&endpoint, &tables).await?;
    let started = Instant::now();
    let seal_at = HOUR + HOUR_MS + horizon + 60_000;
    let sealed = sealer_on(&tables, tap.clients().await)
        .run(at(seal_at)?, None)
        .await?;
    let seal_secs = started.elapsed().as_secs_f64();
    let seal = tap.finish().await?;
    ensure!(
        sealed.hours_sealed == 1
            && sealed.readings == fleet.readings() as u64
            && sealed.device_hours_written == fleet.devices as u64,
        "the sealing run: {sealed:?}"
    );

    // A run with nothing to seal, as the schedule's other runs of the hour are.
    let tap = Tap::start(&endpoint, &tables).await?;
    let idle_report = sealer_on(&tables, tap.clients().await)
        .run(at(seal_at + 60_000)?, None)
        .await?;
    let idle = tap.finish().await?;
    ensure!(
        idle_report.hours_sealed == 0 && idle_report.device_hours_written == 0,
        "the idle run: {idle_report:?}"
    );
    drop(server);
    Ok(Bill {
        fleet: fleet.clone(),
        tables,
        item_bytes,
        json_bytes,
        events: ingested.events,
        late_marks: ingested.late_marks,
        ingest: ingested.charges,
        ingest_secs: ingested.secs,
        seal,
        seal_secs,
        sealed,
        idle,
    })
}

pub async fn run(root: &Path, devices: usize, results: &mut Results) -> Result<()> {
    let tools = stand_in::ensure_dynalite(root)?;
    for fleet in fleets(devices) {
        eprintln!("item 9: {}", fleet.label);
        let bill = measure(root, &tools, &fleet)
            .await
            .with_context(|| fleet.label.clone())?;
        bill::report(results, &bill);
    }
    results.note(
        "9",
        "the sealer's bill: for each fleet, one hour of readings (2026-06-22 01:00-02:00 UTC) \
             through ingest::Ingest::process in process, with the template's defaults (hour \
             buckets, N = 8, blocks on) and the rollups table configured, into dynalite behind \
             the capacity-proxy in forward mode, one proxy per table, per-key limits lifted \
             (the hour is written in seconds; the units do not depend on the rate). Each \
             message reaches the queue with its last reading (SentTimestamp), an event holds \
             the messages of one 1-s batching window (at most 100), handled at the window's \
             end, so every reading is on time. Then the real sealer (sealer::Sealer, default \
             settings) runs as its schedule would: a run before leaves the watermark at the \
             hour's start, the run 11 minutes after the hour's end seals it, and a run a \
             minute later finds nothing to seal, as the other 59 runs of the hour at \
             rate(1 minute) do. Charges are the proxy's: reads by what they read (4 KB a \
             unit, strongly consistent at full price), writes by the larger of the item \
             before and after (1 KB a unit), failed conditions included (so a strongly \
             consistent read of what was written costs a twentieth of writing it where the \
             writes fill their units: 4 KB a read unit, at a fifth of a write unit's price). \
             Dollars at \
             on-demand prices, us-east-1: $0.625 per million write units \
             (sharding::capacity::ON_DEMAND_PRICE_PER_MILLION_WRITES) and $0.125 per \
             million read units (ON_DEMAND_PRICE_PER_MILLION_READS, crates/bench: the \
             project keeps no read price). The ingest's write bill for the hour is every \
             write unit it caused (the readings table, and the rollups table, where it wrote \
             nothing) but the table layout its first invocation stored once for the table's \
             life (1 WCU in the shard table, shown apart). Shape (b) is the issue's fleet of \
             100,000 devices each sending a reading every 10 s, scaled to fewer devices with \
             the same per-device shape (one reading a message, 360 a device-hour, phases \
             spread over the 10 s, so each event holds one message of each of ~100 \
             devices, as the full fleet's would): its ratio is per device-hour and does not \
             depend on the device count, while the fixed part of the hour (the fleet parts, \
             at most 16 an hour, the watermark, the shard metadata and every run's reads of \
             the 16 late-mark partitions) is shown apart and added at 100,000 devices as \
             measured. Shape (c) is (b)'s devices at one reading a minute (60 a \
             device-hour), the most common fleet. The two-metric reading is items 2 and 8's; the ~500-byte one has the \
             demo publisher's metrics (temp_c, humidity, battery_v) and site tag, 16 more \
             metrics of two decimals, and two more tags (firmware, model). The full fleet's hour is 36 million readings, \
             more than this machine holds.",
    );
    Ok(())
}
