//! The model: a fleet's shape to what it uses in a month, line by line. A message's
//! bytes, items and write units come from the store's own encoders
//! (`cost::sample`); what no code can say (a Lambda's duration, the sealer's units, a
//! query's read units) comes from benchmark rows named beside each figure
//! (bench/REPORT.md), and each line says so.

use anyhow::bail;
use serde::Serialize;
use sharding::capacity::MONTH_SECS;

use super::bill::{Basis, Service, Use};
use super::prices::Key;
use super::sample::{STORAGE_OVERHEAD_BYTES, Sample, sample};
use super::slabs::{self, SlabPricing, SlabTiers};

/// The template's `IngestMemorySize` default, MB.
pub const INGEST_MEMORY_MB: u32 = 512;
/// The template's `QueryMemorySize` default, MB.
pub const QUERY_MEMORY_MB: u32 = 1024;
/// The template's `SealerMemorySize` default, MB.
pub const SEALER_MEMORY_MB: u32 = 1024;
/// The template's `IngestBatchSize` default.
pub const BATCH_SIZE: u32 = 100;
/// The template's `BatchingWindow` default, seconds.
pub const BATCHING_WINDOW_SECS: f64 = 1.0;
/// The template's `SlabIngestBatchSize` default: the batch with `Slabs=on`.
pub const SLAB_BATCH_SIZE: u32 = 1_000;
/// The template's `SlabBatchingWindow` default, seconds: the window with `Slabs=on`.
pub const SLAB_BATCHING_WINDOW_SECS: f64 = 5.0;
/// Runs of the sealer an hour at the template's `SealerSchedule`, `rate(1 minute)`.
pub const SEALER_RUNS_AN_HOUR: f64 = 60.0;
/// SQS bills each 64 KB chunk of a request's payload as a request.
pub const SQS_CHUNK_BYTES: usize = 64 * 1024;
/// IoT Core meters messages, rules and actions in 5 KB increments.
pub const IOT_METER_BYTES: usize = 5 * 1024;
/// The largest message IoT Core takes.
pub const IOT_MAX_MESSAGE_BYTES: usize = 128 * 1024;
/// The largest message SQS takes.
pub const SQS_MAX_MESSAGE_BYTES: usize = store::queue::MAX_MESSAGE_BYTES;
/// Most messages a ReceiveMessage or DeleteMessageBatch call takes.
pub const SQS_MESSAGES_A_CALL: f64 = store::queue::MAX_BATCH_ENTRIES as f64;
/// Items a BatchWriteItem call takes, and the ingest's calls at once (`MAX_INFLIGHT`).
const ITEMS_A_ROUND: f64 = 25.0 * 16.0;
/// A GB of storage or logs: 2^30 bytes.
pub(crate) const GB: f64 = 1_073_741_824.0;

/// Which door readings come in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Door {
    /// Devices send to the ingest queue themselves (SQS publishers).
    Sqs,
    /// Things publish to IoT Core's broker topic; the rule forwards to the queue.
    Iot,
    /// Things publish to the rule's Basic Ingest topic (`$aws/rules/<rule>/...`): no
    /// messaging charge for a message that goes only to a rule; rules still charged.
    IotBasicIngest,
}

impl Door {
    /// The flag's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Door::Sqs => "sqs",
            Door::Iot => "iot",
            Door::IotBasicIngest => "iot-basic-ingest",
        }
    }
}

impl Packing {
    /// The flag's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Packing::Items => "items",
            Packing::Blocks => "blocks",
            Packing::Slabs => "slabs",
        }
    }
}

/// How readings are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Packing {
    /// An item a reading (`BLOCKS=off`).
    Items,
    /// A device's readings of a message packed into blocks (`BLOCKS=on`, the default).
    Blocks,
    /// The readings of devices whose share of a batch takes under a write unit in slabs
    /// of many devices, compacted into runs (`SLABS=on`); the others' in blocks.
    Slabs,
}

/// The functions' instruction set (the template's `Architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    Arm64,
    #[value(name = "x86_64")]
    X86_64,
}

/// Requests a day of each query route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Reads {
    /// `GET /devices/{id}/readings`: a page of 100 over 6 hours.
    pub device_readings: f64,
    /// `GET /devices/{id}/readings/{event_id}`.
    pub point: f64,
    /// `GET /devices/{id}/stats`: a month of hourly stats from the sealed summaries.
    pub device_stats: f64,
}

/// A fleet's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shape {
    pub devices: f64,
    pub interval_secs: f64,
    pub readings_a_message: u32,
    pub metrics: u32,
    /// One reading's JSON as sent; `None`: the sample reading's own size.
    pub reading_bytes: Option<usize>,
    pub door: Door,
    pub packing: Packing,
    /// Slab groups, where `packing` is slabs (`SLAB_GROUPS`).
    pub slab_groups: u32,
    /// The event source's batching window, seconds (the template's `BatchingWindow`).
    pub batching_window_secs: f64,
    /// Most messages a batch (the template's `IngestBatchSize`).
    pub batch_size: u32,
    pub retention_days: f64,
    pub reads: Reads,
    pub arch: Arch,
    /// Count SQS's free tier (the first million requests a month).
    pub sqs_free_tier: bool,
}

/// The figures a bill follows from, printed beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub readings_a_month: f64,
    pub messages_a_month: f64,
    /// One message, sent and stored (`cost::sample`).
    pub message: Sample,
    pub write_units_a_reading: f64,
    /// Bytes DynamoDB bills as stored a reading, its items' overhead included.
    pub stored_bytes_a_reading: f64,
    pub messages_an_invocation: f64,
    pub ingest_invocations_a_month: f64,
    /// An ingest invocation's billed duration, ms.
    pub ingest_ms_an_invocation: f64,
    /// Where `packing` is slabs: the slabs and runs, or why blocks instead.
    pub slabs: Option<SlabPricing>,
}

impl Figures {
    /// The slab and run tiers, where the fleet is priced as slabs.
    #[must_use]
    pub fn slab_tiers(&self) -> Option<&SlabTiers> {
        match &self.slabs {
            Some(SlabPricing::Slabs(tiers)) => Some(tiers),
            _ => None,
        }
    }
}

/// A Lambda function's line items.
struct Function<'a> {
    name: &'a str,
    memory_mb: u32,
    invocations: f64,
    billed_ms_each: f64,
    basis: String,
}

/// What `shape` uses in a month, and the figures it follows from.
pub fn model(shape: &Shape) -> anyhow::Result<(Figures, Vec<Use>)> {
    check(shape)?;
    let interval_ms = (shape.interval_secs * 1000.0).round() as i64;
    let message = sample(
        shape.readings_a_message,
        shape.metrics,
        shape.reading_bytes,
        interval_ms,
        shape.packing,
    )?;
    let sqs_body = match shape.door {
        Door::Sqs => message.message_bytes,
        Door::Iot | Door::IotBasicIngest => message.rule_output_bytes,
    };
    if sqs_body > SQS_MAX_MESSAGE_BYTES {
        bail!("a message reaches SQS as {sqs_body} bytes, over SQS's {SQS_MAX_MESSAGE_BYTES}");
    }
    if shape.door != Door::Sqs && message.message_bytes > IOT_MAX_MESSAGE_BYTES {
        bail!(
            "a message of {} bytes is over IoT Core's {IOT_MAX_MESSAGE_BYTES}",
            message.message_bytes
        );
    }
    let r = f64::from(shape.readings_a_message);
    let readings = shape.devices * MONTH_SECS / shape.interval_secs;
    let messages = readings / r;
    let message_rate = messages / MONTH_SECS;
    // A batch holds what one batching window gathers, one message at least, the
    // template's IngestBatchSize at most. The window opens with a message and lasts
    // BatchingWindow: with messages arriving evenly, it holds the rate times the window
    // rounded up (16.7 a second: 17, the first and the 16 that follow within the
    // second; bench item 10 counted 17 at moto), not rounded down.
    let per_invocation = (message_rate * shape.batching_window_secs)
        .ceil()
        .clamp(1.0, f64::from(shape.batch_size));
    let invocations = messages / per_invocation;
    let slabs = match shape.packing {
        Packing::Slabs => Some(slabs::price(shape, per_invocation, invocations)?),
        Packing::Items | Packing::Blocks => None,
    };
    let own_stored = (message.item_bytes + STORAGE_OVERHEAD_BYTES * message.items) as f64;
    let (write_units_a_reading, stored_bytes_a_reading, items_inv) = match &slabs {
        Some(SlabPricing::Slabs(tiers)) => (
            tiers.write_units_a_reading(readings, invocations),
            tiers.stored_bytes_a_reading(),
            tiers.slab_items_an_invocation,
        ),
        _ => (
            message.write_units as f64 / r,
            own_stored / r,
            per_invocation * message.items as f64,
        ),
    };
    // Fitted to bench item 1c: 137.80 ms for 100 x 40 readings (10 rounds of 16 x 25
    // items at a 10-ms round trip), 16.78 ms for 10 x 40 (one round): 2 ms to start, 10
    // ms a round, 0.01 ms a reading. Lambda bills whole milliseconds.
    let ingest_ms =
        (2.0 + 10.0 * (items_inv / ITEMS_A_ROUND).ceil() + 0.01 * per_invocation * r).ceil();
    let figures = Figures {
        readings_a_month: readings,
        messages_a_month: messages,
        write_units_a_reading,
        stored_bytes_a_reading,
        messages_an_invocation: per_invocation,
        ingest_invocations_a_month: invocations,
        ingest_ms_an_invocation: ingest_ms,
        message,
        slabs,
    };
    let mut uses = front_door(shape, &figures, sqs_body);
    uses.extend(queue(shape, &figures, sqs_body));
    let instances = (invocations / MONTH_SECS * ingest_ms / 1000.0)
        .ceil()
        .max(1.0);
    let mut functions = vec![Function {
        name: "ingest",
        memory_mb: INGEST_MEMORY_MB,
        invocations,
        billed_ms_each: ingest_ms,
        basis: format!(
            "from bench item 1c: {} ms an invocation of {per_invocation} messages",
            ingest_ms
        ),
    }];
    let sealer = Sealer::of(shape, &figures);
    functions.push(sealer.function());
    let queries = Queries::of(shape);
    functions.push(queries.function());
    for f in &functions {
        uses.extend(lambda(shape.arch, f));
    }
    uses.extend(dynamodb(shape, &figures, &sealer, &queries, instances));
    uses.extend(rest(&functions, &queries, sealer.runs));
    Ok((figures, uses))
}

fn check(shape: &Shape) -> anyhow::Result<()> {
    if !(shape.devices.is_finite() && shape.devices >= 1.0) {
        bail!("--devices must be at least 1");
    }
    if !(shape.interval_secs.is_finite() && shape.interval_secs >= 0.001) {
        bail!("--interval-secs must be at least 0.001");
    }
    if !(shape.retention_days.is_finite() && shape.retention_days >= 0.0) {
        bail!("--retention-days must be at least 0");
    }
    if !(1.0..=300.0).contains(&shape.batching_window_secs) {
        bail!(
            "--batching-window-secs must be 1 to 300 (the template's BatchingWindow), got {}",
            shape.batching_window_secs
        );
    }
    if !(1..=10_000).contains(&shape.batch_size) {
        bail!(
            "--batch-size must be 1 to 10000 (the template's IngestBatchSize), got {}",
            shape.batch_size
        );
    }
    if shape.slab_groups == 0 {
        bail!("--slab-groups must be at least 1");
    }
    Ok(())
}

fn modelled(s: &str) -> Basis {
    Basis::Modelled(s.to_owned())
}

/// IoT Core's lines (none for SQS publishers).
fn front_door(shape: &Shape, f: &Figures, rule_output: usize) -> Vec<Use> {
    let m = f.messages_a_month;
    let meter = |bytes: usize| bytes.div_ceil(IOT_METER_BYTES) as f64;
    let published = meter(f.message.message_bytes);
    match shape.door {
        Door::Sqs => Vec::new(),
        Door::Iot | Door::IotBasicIngest => {
            let (messaging, why) = if shape.door == Door::Iot {
                (m * published, "each message a 5-KB increment at a time")
            } else {
                (
                    0.0,
                    "Basic Ingest: no messaging charge for a message to a rule",
                )
            };
            vec![
                Use::new(
                    Service::IotCore,
                    "messaging",
                    messaging,
                    Key::IotMessages,
                    modelled(why),
                ),
                Use::new(
                    Service::IotCore,
                    "rules triggered",
                    m * published,
                    Key::IotRulesTriggered,
                    modelled("one rule a message, per 5 KB of it"),
                ),
                Use::new(
                    Service::IotCore,
                    "actions applied (SQS)",
                    m * meter(rule_output),
                    Key::IotActionsApplied,
                    modelled("one action a message, per 5 KB of the rule's output (base64)"),
                ),
                Use::new(
                    Service::IotCore,
                    "connectivity",
                    shape.devices * MONTH_SECS / 60.0,
                    Key::IotConnectionMinutes,
                    modelled("every device connected the whole month"),
                ),
            ]
        }
    }
}

/// SQS's lines: the sends (the devices' or the rule's), the event source's receives
/// and deletes, and the free tier.
fn queue(shape: &Shape, f: &Figures, body: usize) -> Vec<Use> {
    let chunks = |bytes: f64| (bytes / SQS_CHUNK_BYTES as f64).ceil().max(1.0);
    let m = f.messages_a_month;
    let per_call = f.messages_an_invocation.min(SQS_MESSAGES_A_CALL);
    let calls_an_invocation = (f.messages_an_invocation / SQS_MESSAGES_A_CALL).ceil();
    let sends = m * chunks(body as f64);
    let receives =
        f.ingest_invocations_a_month * calls_an_invocation * chunks(per_call * body as f64);
    let deletes = f.ingest_invocations_a_month * calls_an_invocation;
    let sender = match shape.door {
        Door::Sqs => "SendMessage (devices)",
        Door::Iot | Door::IotBasicIngest => "SendMessage (the IoT rule)",
    };
    let mut uses = vec![
        Use::new(
            Service::Sqs,
            sender,
            sends,
            Key::SqsStandardRequests,
            modelled("a message, per 64 KB of it"),
        ),
        Use::new(
            Service::Sqs,
            "ReceiveMessage (the event source)",
            receives,
            Key::SqsStandardRequests,
            modelled("up to 10 messages a call, per 64 KB returned"),
        ),
        Use::new(
            Service::Sqs,
            "DeleteMessageBatch (the event source)",
            deletes,
            Key::SqsStandardRequests,
            modelled("up to 10 messages a call"),
        ),
    ];
    let free = if shape.sqs_free_tier {
        -(sends + receives + deletes).min(1_000_000.0)
    } else {
        0.0
    };
    uses.push(Use::new(
        Service::Sqs,
        "free tier (first 1,000,000 requests a month)",
        free,
        Key::SqsStandardRequests,
        modelled(if shape.sqs_free_tier {
            "counted (--sqs-free-tier)"
        } else {
            "not counted (off by default; --sqs-free-tier)"
        }),
    ));
    uses
}

/// A function's invocations and GB-seconds.
fn lambda(arch: Arch, f: &Function<'_>) -> Vec<Use> {
    let (price, arch_name) = match arch {
        Arch::Arm64 => (Key::LambdaGbSecondArm64, "arm64"),
        Arch::X86_64 => (Key::LambdaGbSecondX86_64, "x86_64"),
    };
    let gb_seconds = f.invocations * f.billed_ms_each / 1000.0 * f64::from(f.memory_mb) / 1024.0;
    vec![
        Use::new(
            Service::Lambda,
            &format!("{}: invocations", f.name),
            f.invocations,
            Key::LambdaRequests,
            modelled(&f.basis),
        ),
        Use::new(
            Service::Lambda,
            &format!("{}: GB-seconds ({} MB, {arch_name})", f.name, f.memory_mb),
            gb_seconds,
            price,
            modelled(&f.basis),
        ),
    ]
}

/// The sealer's month, modelled from bench item 9 (the sealer's bill).
struct Sealer {
    runs: f64,
    read_units: f64,
    write_units: f64,
    billed_ms: f64,
    /// Bytes of the rollups it keeps, per device-hour.
    device_hour_bytes: f64,
}

impl Sealer {
    fn of(shape: &Shape, f: &Figures) -> Self {
        let hours = MONTH_SECS / 3600.0;
        let device_hours = shape.devices * hours;
        let per_hour = 3600.0 / shape.interval_secs;
        let m = f64::from(shape.metrics);
        // Item 9: the device-hour item's minute cells, stored compressed
        // (`store::rollup::stored`), 0.15 + 0.675 WCU a metric for a device writing more
        // often than once a minute (1.5 at two metrics, 13 at 19), 0.41 + 0.295 a metric
        // at once a minute or less (1 and 6).
        let cells = if per_hour > 60.0 {
            0.15 + 0.675 * m
        } else {
            0.41 + 0.295 * m
        };
        // With slabs, the seal reads a device's readings in its group's runs.
        let item_bytes = f.slab_tiers().map_or_else(
            || f.message.item_bytes as f64 / f64::from(shape.readings_a_message),
            SlabTiers::run_bytes_a_reading,
        );
        // Each reading read once, strongly consistent (4 KB a unit); the directory's
        // GetItem; the fleet parts' reads of the device-hour item (4 KB a unit).
        let reads_dh = per_hour * item_bytes / 4096.0 + 1.0 + cells / 4.0;
        // The cells (a mean over the device-hours), the summary (1 unit, cells / 20
        // rounded up), the directory's PutItem.
        let writes_dh = cells + (cells / 20.0).ceil() + 1.0;
        let parts = shape.devices.min(16.0);
        // The hour's fixed part: each part read and written (compressed, 0.62 WCU a
        // metric less 0.24, at least 1: 1 at two metrics, 11 to 12 at 19), the
        // watermark, the layout, the late-mark Queries, 59 idle runs of 12 read units
        // each.
        let reads_fixed = parts + 2.0 + 4.0 + 8.0 + (SEALER_RUNS_AN_HOUR - 1.0) * 12.0;
        let writes_fixed = parts * (0.62 * m - 0.24).max(1.0) + 1.0;
        // Item 9's sealing runs on dynalite: 17.6 ms a device-hour of 360 readings, 6.4
        // of 60: 4.2 ms and 0.037 ms a reading; an idle run taken as 100 ms (not
        // measured).
        let sealing_ms = shape.devices * (4.2 + 0.037 * per_hour);
        let runs = SEALER_RUNS_AN_HOUR * hours;
        Self {
            runs,
            read_units: device_hours * reads_dh + hours * reads_fixed,
            write_units: device_hours * writes_dh + hours * writes_fixed,
            billed_ms: hours * (sealing_ms + (SEALER_RUNS_AN_HOUR - 1.0) * 100.0) / runs,
            device_hour_bytes: cells * 1024.0,
        }
    }

    fn function(&self) -> Function<'static> {
        Function {
            name: "sealer",
            memory_mb: SEALER_MEMORY_MB,
            invocations: self.runs,
            billed_ms_each: self.billed_ms.ceil(),
            basis: "from bench item 9: a run a minute, the sealing run's time from its rows, an \
                    idle run's taken as 100 ms"
                .to_owned(),
        }
    }
}

/// The query routes' month, modelled from bench items 8 and 9 (read units and p50 on
/// dynalite).
struct Queries {
    requests: f64,
    read_units: f64,
    billed_ms: f64,
}

impl Queries {
    fn of(shape: &Shape) -> Self {
        let days = MONTH_SECS / 86_400.0;
        // Slab layouts are priced at blocks' read units: what a read of a device's open
        // slabs adds is not measured yet.
        let blocks = shape.packing != Packing::Items;
        // (requests a day, read units, ms): item 8's device read over 6 hours (1.5 RCU
        // and 19.4 ms with blocks, 3.5 and 18.4 without) and point read (1.0 and 15.0,
        // 0.5 and 12.6); item 9's month of hourly stats from summaries (26.5, 30 ms).
        let routes = [
            (
                shape.reads.device_readings,
                if blocks { 1.5 } else { 3.5 },
                if blocks { 20.0 } else { 19.0 },
            ),
            (
                shape.reads.point,
                if blocks { 1.0 } else { 0.5 },
                if blocks { 15.0 } else { 13.0 },
            ),
            (shape.reads.device_stats, 26.5, 30.0),
        ];
        let requests: f64 = routes.iter().map(|r| r.0 * days).sum();
        Self {
            requests,
            read_units: routes.iter().map(|r| r.0 * days * r.1).sum(),
            billed_ms: if requests > 0.0 {
                routes.iter().map(|r| r.0 * days * r.2).sum::<f64>() / requests
            } else {
                0.0
            },
        }
    }

    fn function(&self) -> Function<'static> {
        Function {
            name: "query",
            memory_mb: QUERY_MEMORY_MB,
            invocations: self.requests,
            billed_ms_each: self.billed_ms.ceil(),
            basis: "from bench items 8 and 9: a request's p50 on dynalite".to_owned(),
        }
    }
}

/// The ingest's reads of shard metadata a month: each instance reads a device's fan-out
/// when its cached copy is older than the cache's TTL (one read unit, strongly
/// consistent, an item under 4 KB or none): once a message for a device heard from less
/// often than the TTL, else once a TTL an instance.
///
/// With slabs, the ingest keys a slab by its group, whose fan-out it reads instead of
/// its devices': once a TTL an instance, at most once a batch that has the group.
fn shard_metadata_reads(shape: &Shape, f: &Figures, instances: f64) -> f64 {
    let ttl = store::config::DEFAULT_SHARD_CACHE_TTL_SECS as f64;
    let a_ttl = MONTH_SECS / ttl * instances;
    match f.slab_tiers() {
        Some(t) => {
            // The partitions whose fan-out the ingest reads: the groups', or the
            // shared one's.
            let g = if t.shared { 1.0 } else { f64::from(t.groups) };
            g * a_ttl.min(f.ingest_invocations_a_month * t.partitions_a_batch / g)
        }
        None => shape.devices * a_ttl.min(f.messages_a_month / shape.devices),
    }
}

/// DynamoDB's lines: the ingest's writes and reads, the sealer's, the queries', the
/// storage.
fn dynamodb(
    shape: &Shape,
    f: &Figures,
    sealer: &Sealer,
    queries: &Queries,
    instances: f64,
) -> Vec<Use> {
    let hours = MONTH_SECS / 3600.0;
    let rollups_gb = shape.devices * 24.0 * shape.retention_days * sealer.device_hour_bytes / GB;
    let mut uses = match f.slab_tiers() {
        Some(tiers) => {
            let mut uses = tiers.uses(shape, f.ingest_invocations_a_month);
            uses.push(Use::new(
                Service::DynamoDb,
                "ingest: read units (compaction progress)",
                instances * MONTH_SECS / 60.0,
                Key::DynamodbReadRequestUnits,
                modelled("a strongly consistent read a minute a warm instance"),
            ));
            uses
        }
        None => own_items(shape, f),
    };
    let query_basis = match shape.packing {
        Packing::Slabs => {
            "from bench items 8 and 9, at blocks' read units: not yet priced for slabs (a \
             device's read also reads its group's open slabs; bench item 11)"
        }
        Packing::Items | Packing::Blocks => "from bench items 8 and 9",
    };
    uses.extend([
        Use::new(
            Service::DynamoDb,
            "ingest: read units (shard metadata)",
            shard_metadata_reads(shape, f, instances),
            Key::DynamodbReadRequestUnits,
            modelled(if f.slab_tiers().is_some() {
                "a strongly consistent read of a slab group's fan-out by each instance, at \
                 most once a SHARD_CACHE_TTL_SECS (60 s), at most once a batch with the group"
            } else {
                "a strongly consistent read of a device's fan-out by each instance that \
                 meets it, at most once a SHARD_CACHE_TTL_SECS (60 s), at most once a message"
            }),
        ),
        Use::new(
            Service::DynamoDb,
            "ingest: read units (lateness horizon)",
            instances * hours * 30.0,
            Key::DynamodbReadRequestUnits,
            modelled("from bench item 9: 30 an hour a warm instance"),
        ),
        Use::new(
            Service::DynamoDb,
            "sealer: read units",
            sealer.read_units,
            Key::DynamodbReadRequestUnits,
            modelled("from bench item 9"),
        ),
        Use::new(
            Service::DynamoDb,
            "sealer: write units (rollups table)",
            sealer.write_units,
            Key::DynamodbWriteRequestUnits,
            modelled("from bench item 9"),
        ),
        Use::new(
            Service::DynamoDb,
            "query: read units",
            queries.read_units,
            Key::DynamodbReadRequestUnits,
            modelled(query_basis),
        ),
        Use::new(
            Service::DynamoDb,
            "storage: device-hour rollups (retention's worth)",
            rollups_gb,
            Key::DynamodbStorageGbMonth,
            modelled("from bench item 9: a device-hour item's size"),
        ),
    ]);
    uses
}

/// The ingest's writes and storage of readings in their devices' own items or blocks.
fn own_items(shape: &Shape, f: &Figures) -> Vec<Use> {
    let days = MONTH_SECS / 86_400.0;
    let readings_gb =
        f.readings_a_month / days * shape.retention_days * f.stored_bytes_a_reading / GB;
    let basis = match &f.slabs {
        Some(SlabPricing::Blocks { device_share_bytes }) => format!(
            "the store's encoders: each item's started KBs; blocks, not slabs: a device's \
             share of a batch takes {device_share_bytes} bytes, over a write unit"
        ),
        _ => "the store's encoders: each item's started KBs".to_owned(),
    };
    vec![
        Use::new(
            Service::DynamoDb,
            "ingest: write units (readings table)",
            f.readings_a_month * f.write_units_a_reading,
            Key::DynamodbWriteRequestUnits,
            modelled(&basis),
        ),
        Use::new(
            Service::DynamoDb,
            "storage: readings (retention's worth)",
            readings_gb,
            Key::DynamodbStorageGbMonth,
            modelled("the store's encoders' item bytes + 100 bytes an item"),
        ),
    ]
}

/// API Gateway, CloudWatch Logs and EventBridge.
fn rest(functions: &[Function<'_>], queries: &Queries, sealer_runs: f64) -> Vec<Use> {
    // What each invocation logs: Lambda's START, END and REPORT lines (about 400 bytes)
    // and the function's own: the ingest's EMF line of 23 counts (about 1.3 KB); the
    // sealer's run and a query's lines are taken as 600 bytes (not measured).
    let log_bytes = |name: &str| match name {
        "ingest" => 1_700.0,
        _ => 1_000.0,
    };
    let logs: f64 = functions
        .iter()
        .map(|f| f.invocations * log_bytes(f.name))
        .sum();
    vec![
        Use::new(
            Service::ApiGateway,
            "HTTP API requests",
            queries.requests,
            Key::ApiGatewayHttpRequests,
            modelled("one a query"),
        ),
        Use::new(
            Service::CloudWatchLogs,
            "logs ingested",
            logs / GB,
            Key::CloudwatchLogsIngestedGb,
            modelled("1,700 bytes an ingest invocation, 1,000 a sealer run or query"),
        ),
        Use::new(
            Service::EventBridge,
            "the sealer's schedule",
            sealer_runs,
            Key::EventbridgeScheduledInvocations,
            modelled("a scheduled rule's invocations are free"),
        ),
    ]
}
