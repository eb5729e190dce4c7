//! Item 10: the whole bill of a fleet, counted, beside `shardline cost`'s model for the
//! same shape. A fleet the model describes exactly (every device a reading a minute,
//! one reading a message, through the SQS door, the template's defaults: blocks, hour
//! buckets, N = 8) sends an hour of readings to moto's queue, one SendMessage a message;
//! a poller that does what Lambda's event source does (`source`) receives and deletes
//! them and hands each batch to the real ingest handler in process; the real sealer runs
//! an hour of its schedule (59 idle runs and the one that seals the hour). DynamoDB is
//! dynalite behind the capacity-proxy (one proxy per table, item 9's `Tap`). What was
//! called is counted where it was served: SQS requests at moto
//! (`stand_in::SqsRequests`), units at the proxies, invocations and their durations in
//! process, the tables' bytes by a scan. `shardline::cost::measured` prices the counts
//! as a month; the model prices the shape; each service's two figures are compared.

mod rows;
mod source;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::Client;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shardline::cost::measured::{self, Counts, FunctionCount};
use shardline::cost::model::{
    BATCH_SIZE, BATCHING_WINDOW_SECS, INGEST_MEMORY_MB, SEALER_MEMORY_MB,
};
use shardline::cost::{Arch, Door, Packing, PriceTable, Reads, Service, Shape, bill, model};
use stand_in::SqsRequests;
use store::rollup::HOUR_MS;

use crate::report::Results;
use crate::sealer_bill::{Charges, HOUR, Tables, Tap, at, ingest_on, sealer_on};
use source::{Msg, Source};

/// Between two readings of a device.
const EVERY_MS: i64 = 60_000;
/// The services the run counts; the rest of the bill (logs, the schedule) is the model's.
const COUNTED: [Service; 3] = [Service::Sqs, Service::Lambda, Service::DynamoDb];
/// The goal: each counted service within this fraction of the model's figure.
const WITHIN: f64 = 0.10;
/// The template's `RetentionDays` default.
const RETENTION_DAYS: f64 = 30.0;

/// How item 10's figures were obtained.
const NOTE: &str = "the whole bill, counted against the model: `shardline cost --devices \
    1000 --interval-secs 60 --door sqs --layout blocks` beside the same fleet run for an hour \
    of readings (2026-06-22 01:00-02:00 UTC, simulated: each message is sent when the run's \
    clock reaches it, so the hour takes minutes). Every device sends each reading (the cost \
    model's sample reading: two metrics, about the same bytes) with its own SendMessage to \
    a queue on moto (infra/local/moto_launch.py), phases spread evenly over the minute. A \
    poller stands for Lambda's event source (crates/bench/src/whole_bill/source.rs): a \
    message reaching the empty queue opens a batching window of the template's \
    BatchingWindow (1 s); within it the poller calls ReceiveMessage for up to ten as soon as \
    ten wait and once more when the window closes, the batch closing early at \
    IngestBatchSize (100); the batch goes to the real ingest handler (ingest::Ingest, \
    the template's defaults: blocks on, hour buckets, N = 8, the rollups table configured) \
    in process, its clock the window's close, and its messages are then deleted by \
    DeleteMessageBatch, ten a call. That is what the model prices of the event source; its \
    idle long polls are priced by neither. The real sealer (sealer::Sealer, default \
    settings) then runs an hour of its rate(1 minute) schedule: 59 runs with nothing to \
    seal and the one that seals the hour (a run before, not counted, leaves the watermark \
    where a running stack's is). DynamoDB is dynalite behind the capacity-proxy in forward \
    mode, one proxy per table (item 9's), every call charged as DynamoDB bills it. \
    Counted: SQS requests at moto (GET /_shardline/sqs-requests, per 64 KB, the requests \
    of the hour's sends, receives and deletes), each invocation's time in process in this \
    release build (in-process durations stand in for Lambda's, each rounded up to a \
    millisecond, at the template's 512 MB for the ingest and 1,024 MB for the sealer), the \
    proxies' units, the readings and rollups tables' bytes at the end (each item's size \
    plus 100, a 24th of a day of each, kept the 30 days of RetentionDays). \
    shardline::cost::measured makes them a month (x 720); the logs and the sealer's \
    schedule are the model's lines in both. Goal: each counted service within 10% of the \
    model's figure. Each service's lines, counted and modelled, and the figures they \
    follow from:";

/// What one function did: its invocations and each one's time, ms.
#[derive(Debug, Default)]
struct Timed {
    ms: Vec<f64>,
}

impl Timed {
    fn count(&self, name: &str, memory_mb: u32) -> FunctionCount {
        FunctionCount {
            name: format!("{name} (in-process durations stand in for Lambda's)"),
            memory_mb,
            invocations: self.ms.len() as u64,
            // Lambda bills each invocation's duration rounded up to a millisecond.
            billed_ms: self.ms.iter().map(|ms| ms.ceil() as u64).sum(),
        }
    }

    fn mean(&self) -> f64 {
        self.ms.iter().sum::<f64>() / self.ms.len().max(1) as f64
    }
}

/// What the run counted.
struct Run {
    messages: usize,
    body_bytes: usize,
    ingest: Timed,
    sealer: Timed,
    sqs: SqsRequests,
    charges: Charges,
    readings_bytes: f64,
    rollups_bytes: f64,
    tables: Tables,
    wall_secs: f64,
}

/// The shape of `devices` for `shardline cost`.
fn shape(devices: usize) -> Shape {
    Shape {
        devices: devices as f64,
        interval_secs: EVERY_MS as f64 / 1000.0,
        readings_a_message: 1,
        metrics: 2,
        reading_bytes: None,
        door: Door::Sqs,
        packing: Packing::Blocks,
        slab_groups: sharding::slab::DEFAULT_GROUPS,
        batching_window_secs: BATCHING_WINDOW_SECS,
        batch_size: BATCH_SIZE,
        retention_days: RETENTION_DAYS,
        reads: Reads::default(),
        arch: Arch::Arm64,
        sqs_free_tier: false,
    }
}

/// Bytes of `table` as DynamoDB bills storage: each item's size plus 100.
async fn stored_bytes(dynamo: &Client, table: &str) -> Result<f64> {
    let items = store::scan::scan_items(dynamo.scan().table_name(table))
        .await
        .with_context(|| format!("scanning {table}"))?;
    Ok(items
        .iter()
        .map(|i| store::size::item_size(i) + shardline::cost::sample::STORAGE_OVERHEAD_BYTES)
        .sum::<usize>() as f64)
}

/// The hour's messages through moto and the ingest, each batch timed.
async fn ingest_hour(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    tap: &Tap,
    tables: &Tables,
    msgs: &[Msg],
) -> Result<Timed> {
    let service = ingest_on(tables, tap.clients().await)?;
    let source = Source {
        sqs,
        url: url.to_owned(),
        window_ms: (BATCHING_WINDOW_SECS * 1000.0) as i64,
        batch_size: BATCH_SIZE as usize,
    };
    let (mut next, mut timed, mut written) = (0, Timed::default(), 0);
    while let Some(batch) = source.next_batch(msgs, &mut next).await? {
        let mut event = SqsEvent::default();
        event.records.clone_from(&batch.records);
        let mut rng = ChaCha8Rng::seed_from_u64(timed.ms.len() as u64);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let started = Instant::now();
        let report = service
            .process(&event, at(batch.now_ms)?, deadline, &mut rng)
            .await;
        timed.ms.push(started.elapsed().as_secs_f64() * 1000.0);
        ensure!(
            report.dead_lettered == 0 && report.response()?.batch_item_failures.is_empty(),
            "invocation {}: {} dead-lettered, some messages reported",
            timed.ms.len(),
            report.dead_lettered
        );
        written += report.readings_written;
        source.delete(&batch).await?;
        if timed.ms.len() % 500 == 0 {
            eprintln!("item 10: {next} of {} messages", msgs.len());
        }
    }
    ensure!(
        written == msgs.len() as u64,
        "wrote {written} of {}",
        msgs.len()
    );
    Ok(timed)
}

/// An hour of the sealer's schedule, rate(1 minute): 59 runs with nothing to seal and
/// the one that seals the hour, each timed. A run before (not counted) seals the empty
/// hour before, leaving the watermark where a running stack's is.
async fn seal_hour(direct: &Client, tap: &Tap, tables: &Tables, readings: u64) -> Result<Timed> {
    let horizon = i64::try_from(sealer::Settings::default().horizon.as_millis())?;
    let before = sealer_on(tables, [direct.clone(), direct.clone(), direct.clone()])
        .run(at(HOUR + horizon + 60_000)?, None)
        .await?;
    ensure!(
        before.watermark_ms == Some(HOUR),
        "the run before: {before:?}"
    );
    let mut timed = Timed::default();
    let mut sealed = 0;
    for k in 2..=61 {
        let sealer = sealer_on(tables, tap.clients().await);
        let started = Instant::now();
        let report = sealer.run(at(HOUR + horizon + 60_000 * k)?, None).await?;
        timed.ms.push(started.elapsed().as_secs_f64() * 1000.0);
        sealed += report.readings;
    }
    ensure!(sealed == readings, "the runs sealed {sealed} of {readings}");
    Ok(timed)
}

async fn measure(root: &Path, devices: usize) -> Result<Run> {
    let wall = Instant::now();
    let dynalite = stand_in::Dynalite::start(&stand_in::ensure_dynalite(root)?)?;
    let moto = stand_in::Moto::start(&stand_in::ensure_venv(root)?)?;
    let endpoint = dynalite.endpoint();
    let provisioned = stand_in::provision_tables(
        &endpoint,
        &root.join("template.yaml"),
        "bench-bill",
        stand_in::Backend::Dynalite,
    )
    .await
    .context("provisioning the template's tables")?;
    let tables = Tables {
        readings: provisioned.name("ReadingsTable")?.to_owned(),
        shards: provisioned.name("ShardsTable")?.to_owned(),
        rollups: provisioned.name("RollupTable")?.to_owned(),
    };
    let sqs = aws_sdk_sqs::Client::new(&stand_in::sdk_config(&moto.endpoint()).await);
    let url = sqs
        .create_queue()
        .queue_name("bench-bill-ingest")
        .send()
        .await
        .context("creating the queue on moto")?
        .queue_url
        .context("no queue url")?;
    let msgs = source::fleet(devices, EVERY_MS, HOUR, HOUR_MS)?;
    let before = SqsRequests::read(&moto.endpoint())?;
    let tap = Tap::start(&endpoint, &tables).await?;
    let ingest = ingest_hour(&sqs, &url, &tap, &tables, &msgs).await?;
    let sqs_counts = SqsRequests::read(&moto.endpoint())?.since(&before);
    let direct = Client::new(&stand_in::sdk_config(&endpoint).await);
    let sealer = seal_hour(&direct, &tap, &tables, msgs.len() as u64).await?;
    let charges = tap.finish().await?;
    Ok(Run {
        messages: msgs.len(),
        body_bytes: msgs.iter().map(|m| m.body.len()).sum(),
        ingest,
        sealer,
        sqs: sqs_counts,
        charges,
        readings_bytes: stored_bytes(&direct, &tables.readings).await?,
        rollups_bytes: stored_bytes(&direct, &tables.rollups).await?,
        tables,
        wall_secs: wall.elapsed().as_secs_f64(),
    })
}

/// The run's counts for `shardline::cost::measured`: an hour, scaled to a month.
fn counts(run: &Run) -> Counts {
    Counts {
        run_secs: HOUR_MS as f64 / 1000.0,
        sqs_source: "the requests moto answered (infra/local/moto_launch.py)".to_owned(),
        sqs_sends: run.sqs.sends(),
        sqs_receives: run.sqs.receives(),
        sqs_deletes: run.sqs.deletes(),
        functions: vec![
            run.ingest.count("ingest", INGEST_MEMORY_MB),
            run.sealer.count("sealer", SEALER_MEMORY_MB),
        ],
        write_units: run.charges.total().wcu,
        read_units: run.charges.total().rcu,
        // The readings of an hour and the rollups of its device-hours, both kept for the
        // retention: an hour is a 24th of a day of each.
        stored_bytes: run.readings_bytes + run.rollups_bytes,
        retention_days: RETENTION_DAYS,
        stored_days: 1.0 / 24.0,
    }
}

pub async fn run(root: &Path, devices: usize, results: &mut Results) -> Result<()> {
    eprintln!("item 10: {devices} devices, an hour of readings through moto and the ingest");
    let run = measure(root, devices).await?;
    let prices = PriceTable::built_in()?;
    let (figures, modelled) = model(&shape(devices))?;
    let mut uses = measured::uses(&counts(&run), Arch::Arm64);
    uses.extend(
        modelled
            .iter()
            .filter(|u| !COUNTED.contains(&u.service))
            .cloned(),
    );
    let counted = bill(&uses, &prices);
    let model_bill = bill(&modelled, &prices);
    rows::rows(results, devices, &run, &figures, &counted, &model_bill);
    Ok(())
}
