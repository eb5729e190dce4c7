//! `shardline cost`: what a fleet costs on AWS in a month, by service and line item,
//! from one price table (`prices`). A fleet's shape becomes what it uses (`model`,
//! from the store's own encoders and named benchmark rows); what it uses becomes a bill
//! (`bill`), the same way for counts measured in a run (the demo's, the bench's).
//!
//! - [`prices`]: the price table, built in or from `--prices FILE`;
//! - [`model`]: the fleet's shape to each line's quantity a month;
//! - [`sample`]: one message of the shape, as sent and as the store writes it;
//! - [`slabs`]: a table of slabs' slabs and runs, and what they use;
//! - [`measured`]: a run's counts as the same line items, scaled to a month;
//! - [`bill`]: quantities priced, by service, as a table or JSON.

pub mod bill;
pub mod measured;
pub mod model;
pub mod prices;
pub mod sample;
pub mod slabs;

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

pub use bill::{Basis, Bill, Service, Use, bill};
pub use model::{Arch, Door, Figures, Packing, Reads, Shape, model};
pub use prices::{Key, PriceTable};

/// What `shardline cost` leaves out, printed under every bill.
pub const NOT_PRICED: &str = "Not priced: CloudWatch metrics, alarms and dashboard; \
    Secrets Manager (the cursor key, the seal key); data transfer; the event source's idle \
    long polls of an empty queue; retries, redeliveries and dead letters (a run without \
    faults); free tiers other than SQS's.";

/// The layout readings are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// An item a reading (BLOCKS=off).
    Items,
    /// A device's readings of a message packed into blocks (BLOCKS=on, a new table's
    /// default).
    Blocks,
    /// The readings of devices whose share of a batch takes under a write unit in slabs
    /// of many devices, compacted into runs (SLABS=on).
    Slabs,
}

/// Flags of `shardline cost`.
#[derive(Debug, Args)]
#[command(
    after_long_help = "Every figure is either modelled (from the fleet's shape: the \
    store's own encoders size each item and block; a Lambda's duration, the sealer's units \
    and a query's read units come from the bench rows each line names, bench/REPORT.md) or \
    measured (in a run: the demo's and the bench's bills); each line says which.\n\n\
    Prices: us-east-1, on demand, as the project recorded them on 2026-11-29 \
    (crates/shardline/prices/us-east-1.json, each with the AWS page it is documented on). \
    This tool cannot fetch live prices: check them before relying on a bill, and pass \
    --prices FILE (the same JSON shape) for another region or date.\n\n\
    Doors: sqs (devices send to the ingest queue), iot (things publish to IoT Core's broker \
    topic; the rule forwards to the queue), iot-basic-ingest (things publish to the rule's \
    Basic Ingest topic: no messaging charge for a message to a rule; rules and actions still \
    charged).\n\n\
    A month is 30 days. Every device is taken as connected all month and sending evenly."
)]
pub struct CostArgs {
    /// Devices in the fleet.
    #[arg(long)]
    pub devices: f64,
    /// Seconds between a device's readings.
    #[arg(long)]
    pub interval_secs: f64,
    /// Readings a message (1 to 500): a device sends a message every
    /// interval x this many seconds.
    #[arg(long, default_value_t = 1)]
    pub readings_a_message: u32,
    /// Metrics a reading (1 to 64).
    #[arg(long, default_value_t = 2)]
    pub metrics: u32,
    /// Bytes of one reading's JSON as sent (default: the sample reading's own, about 140
    /// bytes for two metrics).
    #[arg(long)]
    pub reading_bytes: Option<usize>,
    /// The front door.
    #[arg(long, value_enum, default_value_t = Door::Sqs)]
    pub door: Door,
    /// How readings are stored: items, blocks (the default of a new table), or slabs.
    #[arg(long, value_enum, default_value_t = LayoutArg::Blocks)]
    pub layout: LayoutArg,
    /// Slab groups of a table of slabs (SLAB_GROUPS).
    #[arg(long, default_value_t = sharding::slab::DEFAULT_GROUPS)]
    pub slab_groups: u32,
    /// The event source's batching window, seconds, 1 to 300 (default: the template's,
    /// BatchingWindow's 1 s, or SlabBatchingWindow's 5 s with --layout slabs).
    #[arg(long)]
    pub batching_window_secs: Option<f64>,
    /// Most messages an ingest invocation, 1 to 10,000 (default: the template's,
    /// IngestBatchSize's 100, or SlabIngestBatchSize's 1,000 with --layout slabs).
    #[arg(long)]
    pub batch_size: Option<u32>,
    /// Days readings are kept (the template's RetentionDays).
    #[arg(long, default_value_t = 30.0)]
    pub retention_days: f64,
    /// Requests a day of GET /devices/{id}/readings (a page of 100 over 6 hours).
    #[arg(long, default_value_t = 0.0)]
    pub device_readings_a_day: f64,
    /// Requests a day of GET /devices/{id}/readings/{event_id}.
    #[arg(long, default_value_t = 0.0)]
    pub point_reads_a_day: f64,
    /// Requests a day of GET /devices/{id}/stats (a month of hourly stats).
    #[arg(long, default_value_t = 0.0)]
    pub device_stats_a_day: f64,
    /// The functions' instruction set (the template's Architecture).
    #[arg(long, value_enum, default_value_t = Arch::Arm64)]
    pub arch: Arch,
    /// Count SQS's free tier (the first million requests a month); off by default.
    #[arg(long)]
    pub sqs_free_tier: bool,
    /// A price table to use instead of the built-in one.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl CostArgs {
    /// The fleet's shape, or why not.
    pub fn shape(&self) -> anyhow::Result<Shape> {
        let packing = match self.layout {
            LayoutArg::Items => Packing::Items,
            LayoutArg::Blocks => Packing::Blocks,
            LayoutArg::Slabs => Packing::Slabs,
        };
        Ok(Shape {
            devices: self.devices,
            interval_secs: self.interval_secs,
            readings_a_message: self.readings_a_message,
            metrics: self.metrics,
            reading_bytes: self.reading_bytes,
            door: self.door,
            packing,
            slab_groups: self.slab_groups,
            batching_window_secs: self.batching_window_secs.unwrap_or(match packing {
                Packing::Slabs => model::SLAB_BATCHING_WINDOW_SECS,
                Packing::Items | Packing::Blocks => model::BATCHING_WINDOW_SECS,
            }),
            batch_size: self.batch_size.unwrap_or(match packing {
                Packing::Slabs => model::SLAB_BATCH_SIZE,
                Packing::Items | Packing::Blocks => model::BATCH_SIZE,
            }),
            retention_days: self.retention_days,
            reads: Reads {
                device_readings: self.device_readings_a_day,
                point: self.point_reads_a_day,
                device_stats: self.device_stats_a_day,
            },
            arch: self.arch,
            sqs_free_tier: self.sqs_free_tier,
        })
    }
}

/// Runs `shardline cost`: the bill to stdout.
pub fn run(args: &CostArgs) -> anyhow::Result<()> {
    let shape = args.shape()?;
    let prices = match &args.prices {
        Some(path) => PriceTable::read(path)?,
        None => PriceTable::built_in()?,
    };
    let (figures, uses) = model(&shape)?;
    let bill = bill(&uses, &prices);
    let text = if args.json {
        serde_json::to_string_pretty(&serde_json::json!({
            "shape": shape,
            "figures": figures,
            "bill": bill,
            "not_priced": NOT_PRICED,
        }))
        .context("cannot encode the bill")?
    } else {
        format!(
            "{}\n{}\n{}\n{}",
            heading(&shape, &figures),
            bill::table(&bill),
            bill.prices_note,
            NOT_PRICED
        )
    };
    writeln!(std::io::stdout().lock(), "{text}").context("cannot write to stdout")?;
    Ok(())
}

/// The shape and the figures the bill follows from.
fn heading(shape: &Shape, f: &Figures) -> String {
    let g = bill::grouped;
    let slabs = match &f.slabs {
        None => String::new(),
        Some(slabs::SlabPricing::Blocks { device_share_bytes }) => format!(
            "\x20 priced as blocks: a device's share of a batch takes {device_share_bytes} \
             bytes, over a write unit, so the ingest keeps its blocks\n"
        ),
        Some(slabs::SlabPricing::Slabs(t)) => format!(
            "\x20 slabs: a batch's readings in {:.2} of {} groups{}, {:.2} readings a slab, \
             stored as {} item(s) of {} bytes, {} write unit(s)\n\
             \x20 runs: a group's {} readings of a window in {} item(s) of {} bytes, {} write \
             unit(s), the first its marker; {:.0} group-windows a month, {} read unit(s) each to \
             compact\n",
            t.groups_a_batch,
            t.groups,
            if t.shared {
                " (each under half an item: one shared slab)"
            } else {
                ""
            },
            t.readings_a_slab,
            t.slab.items,
            t.slab.bytes,
            t.slab.write_units,
            t.run_readings,
            t.run.items,
            t.run.bytes,
            t.run.write_units,
            t.group_windows_a_month,
            t.compaction_read_units,
        ),
    };
    let text = format!(
        "A month (30 days) of {} devices, a reading every {} s, {} a message, {} metrics, \
         by {}, stored as {}:\n\
         \x20 {} readings in {} messages; a reading {} bytes as sent, a message {} bytes\n\
         \x20 a message stored as {} item(s) of {} bytes, {} write units: {:.4} a reading, \
         {:.1} bytes stored a reading (the store's encoders)\n\
         \x20 {} messages an ingest invocation, {} invocations of {} ms\n",
        g(shape.devices, 0),
        shape.interval_secs,
        shape.readings_a_message,
        shape.metrics,
        shape.door.name(),
        shape.packing.name(),
        g(f.readings_a_month, 0),
        g(f.messages_a_month, 0),
        f.message.reading_bytes,
        f.message.message_bytes,
        f.message.items,
        f.message.item_bytes,
        f.message.write_units,
        f.write_units_a_reading,
        f.stored_bytes_a_reading,
        f.messages_an_invocation,
        g(f.ingest_invocations_a_month, 0),
        f.ingest_ms_an_invocation,
    );
    text + &slabs
}
