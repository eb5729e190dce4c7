//! `shardline blocks`: turn blocks on (or off) for an existing table.
//!
//! A table's layout says whether writers pack one device's readings into blocks
//! (docs/design-blocks.md). A new table's layout packs them (`BLOCKS`, default on); a
//! stored layout is never changed by the writers' settings, so an existing table
//! switches here: the next layout, the latest with blocks on or off, is scheduled as a
//! table-layout epoch under the margin rule, through the shard directory the writers
//! read. Every writer's cache holds it before it is in force; a reading takes the
//! layout in force at its own timestamp, and readers read back the block window only
//! over spans whose layout packs blocks, so a read across the switch is exact.
//!
//! A stack with a sealer (`ROLLUP_TABLE` set) refuses to schedule a layout the sealer
//! cannot read (`sealer::layout`: a strategy other than time buckets keeps what it
//! was), since from that epoch on no hour would be sealed; `--without-sealing` schedules
//! it anyway.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use sharding::block::BlockLayout;
use sharding::layout::Layout;
use sharding::time::Timestamp;
use store::clock::wall_clock;
use store::config::{Vars, WriterSettings};
use store::directory::layout::ScheduledLayout;
use store::directory::{ShardDirectory, ShardStore};
use store::dynamo::DynamoShards;

use crate::env::StackArgs;

/// Flags of `shardline blocks`.
#[derive(Debug, Args)]
pub struct BlocksArgs {
    /// `on` packs one device's readings into blocks from the switch on; `off` writes an
    /// item a reading again.
    #[arg(value_parser = ["on", "off"])]
    pub switch: String,
    /// A block's longest span, seconds (1 to 3600): what a range read reads back.
    #[arg(long, default_value_t = 60)]
    pub window_secs: u32,
    /// Schedule the layout even when the stack's sealer cannot read it: from its epoch
    /// on, the sealer seals no hour (its runs fail, and `SealerLayoutAlarm` fires).
    #[arg(long)]
    pub without_sealing: bool,
    /// The stack; the env file's margin applies, so the switch is in force only once
    /// every writer's cache can hold it.
    #[command(flatten)]
    pub stack: StackArgs,
}

/// Runs the command and prints what it scheduled.
pub async fn run(args: &BlocksArgs) -> anyhow::Result<()> {
    let blocks = match args.switch.as_str() {
        "on" => Some(
            BlockLayout {
                window_ms: args.window_secs.saturating_mul(1000),
                ..BlockLayout::default()
            }
            .checked()
            .context("bad --window-secs")?,
        ),
        _ => None,
    };
    let change = move |latest: &Layout| Layout {
        blocks,
        ..latest.clone()
    };
    let what = format!("blocks {}", args.switch);
    switch(&args.stack, args.without_sealing, &what, change).await
}

/// Schedules the layout `change` makes of the latest as the stack's next table-layout
/// epoch, and prints what it scheduled, `what` naming the switch (`blocks on`): the one
/// way `shardline blocks` and `shardline slabs` change a table.
pub async fn switch(
    stack: &StackArgs,
    without_sealing: bool,
    what: &str,
    change: impl Fn(&Layout) -> Layout,
) -> anyhow::Result<()> {
    let env = stack.env()?;
    let settings = WriterSettings::parse(&Vars(|name: &str| env.get(name)))
        .context("the writers' shard settings")?;
    let dynamo =
        aws_sdk_dynamodb::Client::new(&env.sdk_config(stack.endpoint_url.as_deref()).await);
    let directory = ShardDirectory::new(
        DynamoShards::new(&dynamo, &settings.shard_table_name),
        settings.directory,
    );
    // The stack's sealer reads every layout from its watermark on.
    let sealed = env.get("ROLLUP_TABLE").is_some_and(|t| !t.is_empty()) && !without_sealing;
    let said = match schedule_change(&directory, change, sealed, wall_clock()?).await? {
        ScheduledLayout::Scheduled(epoch) => format!(
            "{what} from {} (layout {})",
            epoch.effective_from, epoch.value
        ),
        ScheduledLayout::Already(layout) => {
            format!("{what}: already so (layout {layout}), nothing scheduled")
        }
    };
    writeln!(std::io::stdout().lock(), "{said}").context("cannot write to stdout")?;
    Ok(())
}

/// Schedules the latest layout with `blocks` as the table's next epoch. With `sealed`
/// (the stack has a sealer), refuses a layout the sealer cannot read, with
/// [`sealer::layout::UnsealableLayout`] as the error's source, before writing anything.
pub async fn schedule<S: ShardStore>(
    directory: &ShardDirectory<S>,
    blocks: Option<BlockLayout>,
    sealed: bool,
    now: Timestamp,
) -> anyhow::Result<ScheduledLayout> {
    let change = |latest: &Layout| Layout {
        blocks,
        ..latest.clone()
    };
    schedule_change(directory, change, sealed, now).await
}

/// Schedules the layout `change` makes of the latest as the table's next epoch, refusing
/// one the sealer cannot read when `sealed`, as [`schedule`] does.
pub async fn schedule_change<S: ShardStore>(
    directory: &ShardDirectory<S>,
    change: impl Fn(&Layout) -> Layout,
    sealed: bool,
    now: Timestamp,
) -> anyhow::Result<ScheduledLayout> {
    // Read first: no command changes the strategy, so the layout scheduled below keeps
    // the one read here, however many switches race.
    let history = directory.layout(now).await?;
    let next = change(history.latest());
    if sealed && &next != history.latest() && !sealer::layout::sealable(&next) {
        let from = now.saturating_add(directory.config().policy.propagation_margin);
        let refused = sealer::layout::UnsealableLayout {
            layout: next,
            effective_from: Some(from),
            first_hour_ms: store::rollup::hour_of(from.as_millis()),
        };
        return Err(anyhow::Error::new(refused).context(
            "refused: the stack's sealer cannot read this layout; switch the table to a \
             time-bucket layout first, or pass --without-sealing to schedule it with no \
             hour sealed from its epoch on",
        ));
    }
    Ok(directory.schedule_layout(change, now).await?)
}
