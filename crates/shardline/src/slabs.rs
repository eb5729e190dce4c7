//! `shardline slabs`: write one-reading devices' readings into slabs of many devices
//! (or stop) for an existing table (docs/design-slabs.md).
//!
//! As `shardline blocks` does, the switch is the table's next layout, the latest with
//! slabs on or off, scheduled as a table-layout epoch under the margin rule through the
//! shard directory the writers read: a reading takes the layout in force at its own
//! timestamp, and readers read a device's slabs and runs only over spans whose layout
//! writes them.

use anyhow::Context as _;
use clap::Args;
use sharding::layout::Layout;
use sharding::slab::{
    DEFAULT_ACCEPT_SECS, DEFAULT_EXPIRY_HOURS, DEFAULT_GROUPS, DEFAULT_RUN_MINUTES,
    DEFAULT_WINDOW_MINUTES, SlabLayout,
};

use crate::blocks::switch;
use crate::env::StackArgs;

/// Flags of `shardline slabs`.
#[derive(Debug, Args)]
pub struct SlabsArgs {
    /// `on` writes the readings of devices whose share of a batch would not fill a write
    /// unit into slabs from the switch on; `off` writes them to their devices' items.
    #[arg(value_parser = ["on", "off"])]
    pub switch: String,
    /// Slab groups: more make a device's read of its open windows cheaper and each
    /// slab hold fewer readings.
    #[arg(long, default_value_t = DEFAULT_GROUPS)]
    pub groups: u32,
    /// Minutes of a window (a divisor of 60): the readings compacted together.
    #[arg(long, default_value_t = DEFAULT_WINDOW_MINUTES)]
    pub window_minutes: u32,
    /// How old a reading may be, by the ingest's clock, to go to a slab.
    #[arg(long, default_value_t = DEFAULT_ACCEPT_SECS)]
    pub accept_secs: u32,
    /// Hours after its window that a slab expires (compaction lag must stay under half).
    #[arg(long, default_value_t = DEFAULT_EXPIRY_HOURS)]
    pub expiry_hours: u32,
    /// Minutes of a run partition (a divisor of 60, a multiple of the window): a
    /// device's read of a few windows passes the partition's other windows' items.
    #[arg(long, default_value_t = DEFAULT_RUN_MINUTES)]
    pub run_minutes: u32,
    /// Schedule the layout even when the stack's sealer cannot read it.
    #[arg(long)]
    pub without_sealing: bool,
    /// The stack; the env file's margin applies.
    #[command(flatten)]
    pub stack: StackArgs,
}

/// Runs the command and prints what it scheduled.
pub async fn run(args: &SlabsArgs) -> anyhow::Result<()> {
    let slabs = match args.switch.as_str() {
        "on" => Some(slab_layout(args)?),
        _ => None,
    };
    let change = move |latest: &Layout| Layout {
        slabs,
        ..latest.clone()
    };
    let what = format!("slabs {}", args.switch);
    switch(&args.stack, args.without_sealing, &what, change).await
}

/// The slab layout the flags ask for, or the bound it breaks.
pub fn slab_layout(args: &SlabsArgs) -> anyhow::Result<SlabLayout> {
    let groups = std::num::NonZeroU32::new(args.groups).context("--groups must be at least 1")?;
    SlabLayout {
        groups,
        window_minutes: args.window_minutes,
        accept_secs: args.accept_secs,
        expiry_hours: args.expiry_hours,
        run_minutes: args.run_minutes,
        ..SlabLayout::default()
    }
    .checked()
    .context("bad slab settings")
}
