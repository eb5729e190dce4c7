//! `shardline plan`: the capacity planner of the `sharding` crate on the command line.

use std::io::Write as _;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use sharding::capacity::{
    CapacityPlan, DEFAULT_RAISE_AHEAD_WCU, DEFAULT_SAFETY, MONTH_SECS,
    ON_DEMAND_PRICE_PER_MILLION_WRITES, PARTITION_WCU, PlanInput, WriteCost, plan_capacity,
    write_costs,
};
use sharding::layout::SubShards;

/// Where a raised entity's sub-shards live, as the table layout (`SUB_SHARDS`) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// On base shards `(s + j) mod N`, keys that carry the table's mean load too (new
    /// tables).
    Base,
    /// On keys of their own, `{s}.{j}` (tables created before base placement).
    Dedicated,
}

impl From<Placement> for SubShards {
    fn from(p: Placement) -> Self {
        match p {
            Placement::Base => SubShards::Base,
            Placement::Dedicated => SubShards::Dedicated,
        }
    }
}

/// Flags of `shardline plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Peak writes per second over all entities.
    #[arg(long)]
    pub global_wps: f64,
    /// Peak writes per second of the hottest single entity.
    #[arg(long)]
    pub peak_entity_wps: f64,
    /// Size of one reading item in bytes.
    #[arg(long)]
    pub item_bytes: u64,
    /// Plan each partition key for partition-wcu / safety.
    #[arg(long, default_value_t = DEFAULT_SAFETY)]
    pub safety: f64,
    /// Write limit of one partition, WCU/s.
    #[arg(long, default_value_t = PARTITION_WCU)]
    pub partition_wcu: f64,
    /// Evaluate this table-level shard count instead of choosing one.
    #[arg(long)]
    pub table_shards: Option<u32>,
    /// Where a raised entity's sub-shards live (the table layout's, `SUB_SHARDS`).
    #[arg(long, value_enum, default_value_t = Placement::Base)]
    pub sub_shards: Placement,
    /// WCU/s the ingest's raise leaves on each key of a hot entity (its RAISE_AHEAD_WCU,
    /// default 100): with base placement, on top of the table's load on that key.
    #[arg(long, default_value_t = DEFAULT_RAISE_AHEAD_WCU)]
    pub raise_ahead_wcu: f64,
    /// Mean readings per second over a month, for the write cost (default: the peak,
    /// --global-wps).
    #[arg(long)]
    pub mean_wps: Option<f64>,
    /// US dollars per million write request units (default: on-demand, standard table
    /// class, us-east-1).
    #[arg(long, default_value_t = ON_DEMAND_PRICE_PER_MILLION_WRITES)]
    pub price_per_million_writes: f64,
    /// Write units one reading costs where the ingest packs readings into blocks
    /// (BLOCKS=on, a new table's default): a block's write units over its readings. Take
    /// it from `cargo xtask bench --only 8` for your message size, or from a deployed
    /// table (ConsumedWriteCapacityUnits over the ingest's ReadingsWritten). Without
    /// it, one item a reading.
    #[arg(long)]
    pub write_units_per_reading: Option<f64>,
    /// The table's block window (BLOCK_WINDOW_SECS) for the read-back trade-off
    /// printed beside a plan with --write-units-per-reading.
    #[arg(long, default_value_t = sharding::block::DEFAULT_WINDOW_SECS)]
    pub block_window_secs: u32,
    /// The query function's QUERY_MAX_EVALUATED, the read-back is weighed against.
    #[arg(long, default_value_t = sharding::read_plan::DEFAULT_MAX_EVALUATED)]
    pub query_max_evaluated: u64,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
}

impl PlanArgs {
    fn mean_wps(&self) -> f64 {
        self.mean_wps.unwrap_or(self.global_wps)
    }

    fn input(&self) -> PlanInput {
        PlanInput {
            global_wps: self.global_wps,
            peak_entity_wps: self.peak_entity_wps,
            item_bytes: self.item_bytes,
            safety: self.safety,
            partition_wcu: self.partition_wcu,
            table_shards: self.table_shards,
            sub_shards: self.sub_shards.into(),
            raise_ahead_wcu: self.raise_ahead_wcu,
            write_units_per_reading: self.write_units_per_reading,
        }
    }

    /// What reading back the block window costs, where readings are packed.
    fn read_back(&self) -> Option<ReadBack> {
        self.write_units_per_reading.map(|w| {
            let readings = self.global_wps * f64::from(self.block_window_secs);
            // A block costs at least one write unit: it is at most `readings * w` items.
            let items = (readings * w).ceil();
            ReadBack {
                window_secs: self.block_window_secs,
                items,
                share_of_budget: items / self.query_max_evaluated.max(1) as f64,
                query_max_evaluated: self.query_max_evaluated,
            }
        })
    }
}

/// The read-back of blocks: a block that starts up to the window before a range can
/// hold readings inside it, so reads look that far back.
#[derive(Debug, Clone, serde::Serialize)]
struct ReadBack {
    window_secs: u32,
    /// Most extra items the read over every device through the time index evaluates
    /// per request: the window's readings at the peak rate, packed.
    items: f64,
    /// `items` over the query's budget of items evaluated.
    share_of_budget: f64,
    query_max_evaluated: u64,
}

impl ReadBack {
    fn text(&self) -> String {
        format!(
            "Reading back the block window ({} s, BLOCK_WINDOW_SECS): a read of one device \
             costs one more Query a key (its blocks' lane, from the window before its \
             range); the read over every device through the time index evaluates up to {} \
             more items a request at the peak rate, {:.0}% of QUERY_MAX_EVALUATED ({}). A \
             shorter window reads back less and packs fewer readings a block.",
            self.window_secs,
            group(self.items),
            self.share_of_budget * 100.0,
            group(self.query_max_evaluated as f64),
        )
    }
}

/// `x` rounded, with thousands separated: `72,000`.
fn group(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Runs the planner and prints its answer to stdout.
pub fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let plan = plan_capacity(&args.input()).context("cannot plan capacity")?;
    let costs = write_costs(
        plan.wcu_per_reading,
        args.mean_wps(),
        args.price_per_million_writes,
    )
    .context("cannot estimate the write cost")?;
    let text = if args.json {
        let mut value = serde_json::to_value(&plan).context("cannot encode the plan")?;
        value["write_costs"] = serde_json::to_value(&costs).context("cannot encode the costs")?;
        if let Some(back) = args.read_back() {
            value["read_back"] =
                serde_json::to_value(&back).context("cannot encode the read-back")?;
        }
        serde_json::to_string_pretty(&value).context("cannot encode the plan")?
    } else {
        let mut text = format!("{}\n{}", summary(args, &plan), costs_text(args, &costs));
        if let Some(back) = args.read_back() {
            text = format!("{text}\n{}", back.text());
        }
        text
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").context("cannot write to stdout")?;
    Ok(())
}

fn summary(args: &PlanArgs, plan: &CapacityPlan) -> String {
    let chosen = if args.table_shards.is_some() {
        "given"
    } else {
        "planned"
    };
    let (placement, hot_keys) = match plan.sub_shards {
        SubShards::Base => (
            format!(
                "base (raised at {} WCU/s a key, onto base shards)",
                args.raise_ahead_wcu
            ),
            format!(
                "{} (each of its keys at ~{:.0} of the table + ~{:.0} of its own WCU/s)",
                plan.hot_entity_fanout, plan.mean_pk_wcu, plan.hot_share_wcu
            ),
        ),
        SubShards::Dedicated => (
            "dedicated (keys of their own)".to_owned(),
            format!(
                "{} (each of its keys at ~{:.0} WCU/s of its own)",
                plan.hot_entity_fanout, plan.hot_share_wcu
            ),
        ),
    };
    let rows = [
        (
            format!("table shards N ({chosen})"),
            plan.table_shards.to_string(),
        ),
        ("sub-shard placement".to_owned(), placement),
        ("hot-entity fan-out k".to_owned(), hot_keys),
        ("WCU per item".to_owned(), plan.wcu_per_item.to_string()),
        (
            "write units per reading".to_owned(),
            per_reading(args, plan),
        ),
        (
            "budget per PK".to_owned(),
            format!(
                "{:.0} WCU/s ({:.0} / safety {})",
                plan.budget_per_pk, plan.partition_wcu, args.safety
            ),
        ),
        (
            "busiest PK (expected peak)".to_owned(),
            format!("{:.0} WCU/s", plan.max_pk_wcu),
        ),
    ];
    let mut s = format!(
        "Shard plan for {} writes/s ({} writes/s on the hottest entity), {}-byte items\n",
        args.global_wps, args.peak_entity_wps, args.item_bytes
    );
    for (label, value) in rows {
        s.push_str(&format!("  {:<29}{value}\n", format!("{label}:")));
    }
    if plan.warnings.is_empty() {
        s.push_str("No warnings.");
    } else {
        s.push_str("Warnings:");
        for w in &plan.warnings {
            s.push_str("\n  - ");
            s.push_str(w);
        }
    }
    s
}

/// Write units per reading, and where the figure comes from.
fn per_reading(args: &PlanArgs, plan: &CapacityPlan) -> String {
    match args.write_units_per_reading {
        Some(_) => format!("{} (packed into blocks)", plan.wcu_per_reading),
        None => format!("{} (one item a reading)", plan.wcu_per_reading),
    }
}

/// The write cost of each time-index choice, one line each.
fn costs_text(args: &PlanArgs, costs: &[WriteCost]) -> String {
    let mut s = format!(
        "Write cost of a {:.0}-day month at a mean {} readings/s, ${} per million write units:",
        MONTH_SECS / 86_400.0,
        args.mean_wps(),
        args.price_per_million_writes
    );
    for c in costs {
        s.push_str(&format!(
            "\n  {:<20} {} WCU per reading, ${:.0} a month: {}",
            c.option, c.wcu_per_reading, c.monthly_usd, c.buys
        ));
    }
    s
}
