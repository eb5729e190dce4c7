//! `shardline-bench`: the measurements of `bench/REPORT.md`, run by `cargo xtask bench`.
//!
//! Runs items 1-4 and 6-10, reads item 5's criterion estimate, prints one table and writes
//! the Markdown report. Figures only: nothing here asserts a goal.

mod adaptive;
mod block_reads;
mod blocks;
mod common;
mod hot;
mod lambda;
mod query;
mod report;
mod sealer_bill;
mod slabs;
mod splice;
mod spread;
mod summaries;
mod throughput;
mod whole_bill;
mod worst;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;

use crate::report::{Results, at_most};
use crate::splice::Run;

/// The ingest binary's allocator, so the handler measured in process here (items 1
/// and 2) allocates as it does in its Lambda.
#[global_allocator]
static GLOBAL: ingest::Allocator = ingest::Allocator;

#[derive(Debug, Parser)]
#[command(
    name = "shardline-bench",
    about = "Shardline benchmarks (bench/REPORT.md)"
)]
struct Args {
    /// Reduced sizes and durations.
    #[arg(long)]
    quick: bool,
    /// Where to write the Markdown report.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The command line to name in the report.
    #[arg(long, default_value = "cargo xtask bench")]
    command: String,
    /// Directory holding the release binaries `ingest` and `query`.
    #[arg(long)]
    release_dir: Option<PathBuf>,
    /// Criterion's output directory (item 5's estimate is read from it).
    #[arg(long)]
    criterion_dir: Option<PathBuf>,
    /// Run only these items (1 to 11, repeatable); all of them when absent. A report
    /// written from a partial run says which items it holds.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=11))]
    only: Vec<u8>,
    /// Days of one device's readings, one a second, that item 4's stats figure reads
    /// page by page (default 4, 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=31))]
    stats_days: Option<u16>,
}

impl Args {
    fn wants(&self, item: u8) -> bool {
        self.only.is_empty() || self.only.contains(&item)
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!(
        "{cores} cores ({cpu}), {:.1} GiB memory (/proc/meminfo MemTotal), load average \
         {load} at the start",
        mem_kb as f64 / 1_048_576.0
    )
}

fn mode(args: &Args) -> String {
    let size = if args.quick {
        "quick (reduced sizes)"
    } else {
        "full"
    };
    if args.only.is_empty() {
        size.to_owned()
    } else {
        let items: Vec<String> = args.only.iter().map(u8::to_string).collect();
        format!("{size}, items {} only", items.join(", "))
    }
}

/// The commit measured, and whether the tree differed from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown commit".to_owned();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head} (and uncommitted changes)"),
    }
}

fn today() -> String {
    // No date crate here: `date` is on every machine this runs on.
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown date".to_owned())
}

/// Criterion's mean for one function of a cost bench's group (`cost`, or `cost_system`
/// under the system allocator), in ns per reading (each iteration handles 1,000).
fn criterion_ns_per_reading(dir: &std::path::Path, group: &str, function: &str) -> Result<f64> {
    let path = dir.join(format!("{group}/{function}/new/estimates.json"));
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{} (run cargo bench -p shardline-bench --bench {group})",
            path.display()
        )
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let per_iter = v["mean"]["point_estimate"]
        .as_f64()
        .with_context(|| format!("{} has no mean.point_estimate", path.display()))?;
    Ok(per_iter / 1_000.0)
}

/// How item 5's figures were obtained.
const COST_NOTE: &str = "crates/bench/benches/cost.rs: 1,000 single-reading message bodies (2 metrics, 1 tag) \
     per iteration through ingest::parse_body (parse + validate), sharding::write_key \
     (hour buckets, N = 64) and store::ReadingItem::marshal (the typed encoder: the SDK \
     attribute map built directly and sized as it is built, held equal to serde_dynamo's \
     and to store::size::item_size by a property test); criterion's mean per iteration / \
     1,000. Each stage is also timed alone, over what the stage before it produced (the \
     marshal with a copy of each key, which the whole path moves in). The figures held to the \
     goal run under the ingest binary's global allocator (ingest::Allocator, mimalloc); \
     benches/cost_system.rs runs the same under the system allocator wrapped by \
     stats_alloc, which counts allocations (and reallocations) over one pass of each. \
     The blocks row: the same 1,000 readings' shape as 20 message bodies of 50 readings \
     of one device each (100 ms apart, time-ordered ids), for hour buckets with the \
     default block layout, through ingest::parse_body, store::pack::pack and \
     store::pack::encode_unkeyed (each write's item encoded once, under a placeholder \
     key, whose size the observe stage measures a device's rate by), then \
     sharding::write_key of each write's first member, store::pack::item_key and \
     store::pack::with_key, as the ingest's stages do. The reference row is a fixed \
     workload timed by the same bench in the same run (FNV-1a over the bytes of the \
     1,000 bodies, four rounds), which no change to the project changes: the path's \
     figures are also given as ratios to it, so a machine that runs slower makes both \
     slower and leaves the ratio, and a slower path raises the ratio.";

/// Item 5's criterion estimates: the whole path per reading, where it goes, the
/// marshal through `serde_dynamo` beside the typed encoder, and allocations per reading.
fn cost_per_reading(dir: &std::path::Path, results: &mut Results) -> Result<()> {
    let allocations: BTreeMap<String, f64> = {
        let path = dir.join("cost/allocations.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{} (written by the cost bench)", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
    };
    let allocs = |function: &str| {
        allocations.get(function).map_or_else(
            || "allocations not counted".to_owned(),
            |n| format!("{n:.1} allocations/reading"),
        )
    };
    let ns = criterion_ns_per_reading(dir, "cost", "parse_validate_key_marshal")?;
    // The fixed reference workload of the same run: the path's figures as ratios to it
    // read the same on a slow machine and a fast one.
    let reference = criterion_ns_per_reading(dir, "cost", "reference")?;
    results.goal(
        "5",
        "parse + validate + key + marshal, criterion mean",
        format!(
            "{ns:.0} ns/reading ({:.2} us, {:.2}x the reference); {}",
            ns / 1000.0,
            ns / reference,
            allocs("parse_validate_key_marshal")
        ),
        "<= 1.5 us",
        at_most(ns, 1_500.0),
    );
    blocks_cost(dir, results, ns, reference, &allocs("blocks_of_50"))?;
    results.figure(
        "5",
        "reference: a fixed workload in the same run (FNV-1a over the 1,000 bodies' bytes, \
         4 rounds; no code of the project, no allocation), criterion mean",
        format!("{reference:.0} ns/reading"),
    );
    for (function, stage) in [
        (
            "parse_validate",
            "stage: parse + validate (ingest::parse_body)",
        ),
        ("key", "stage: key (sharding::write_key)"),
        (
            "marshal_size",
            "stage: marshal + size (the typed encoder, which sizes the item as it builds it)",
        ),
    ] {
        let stage_ns = criterion_ns_per_reading(dir, "cost", function)?;
        results.figure(
            "5",
            stage,
            format!(
                "{stage_ns:.0} ns/reading ({:.0}% of the whole); {}",
                100.0 * stage_ns / ns,
                allocs(function)
            ),
        );
    }
    let system = criterion_ns_per_reading(dir, "cost_system", "parse_validate_key_marshal")?;
    let system_marshal = criterion_ns_per_reading(dir, "cost_system", "marshal_size")?;
    results.figure(
        "5",
        "context: the same path under the system allocator (glibc malloc, counting), same run",
        format!(
            "{system:.0} ns/reading, {:.2}x the ingest's allocator; marshal + size {system_marshal:.0} ns/reading",
            system / ns
        ),
    );
    let typed = criterion_ns_per_reading(dir, "cost", "marshal_size")?;
    let serde = criterion_ns_per_reading(dir, "cost", "marshal_size_serde_dynamo")?;
    results.figure(
        "5",
        "context: marshal + size through serde_dynamo (the encoder before), same run",
        format!(
            "{serde:.0} ns/reading, {:.1}x the typed encoder; {}",
            serde / typed,
            allocs("marshal_size_serde_dynamo")
        ),
    );
    results.note("5", COST_NOTE);
    Ok(())
}

/// Item 5's blocks row: the ingest's path with blocks, per reading, beside `item_ns`
/// (the item-a-reading path of the same run) and `reference` (the fixed workload's).
fn blocks_cost(
    dir: &std::path::Path,
    results: &mut Results,
    item_ns: f64,
    reference: f64,
    allocations: &str,
) -> Result<()> {
    let blocks = criterion_ns_per_reading(dir, "cost", "blocks_of_50")?;
    results.goal(
        "5",
        "blocks on (a new table's default), messages of 50 readings of one device: parse + \
         validate + pack and encode (the rate's size) + key, criterion mean",
        format!(
            "{blocks:.0} ns/reading ({:.2} us, {:.2}x the item-a-reading path above, \
             {:.2}x the reference); {allocations}",
            blocks / 1000.0,
            blocks / item_ns,
            blocks / reference,
        ),
        "<= 1.26 us",
        at_most(blocks, 1_260.0),
    );
    Ok(())
}

async fn run(args: &Args, results: &mut Results) -> Result<()> {
    let root = stand_in::repo_root()?;
    let release_dir = args
        .release_dir
        .clone()
        .unwrap_or_else(|| root.join("target/release"));
    let criterion_dir = args
        .criterion_dir
        .clone()
        .unwrap_or_else(|| root.join("target/criterion"));
    let quick = args.quick;

    if args.wants(3) {
        eprintln!("item 3: write spread");
        if let Err(e) = spread::run(if quick { 2 } else { 10 }, results) {
            results.note("3", format!("NOT MEASURED: {e:#}"));
        }
        if let Err(e) = adaptive::run(if quick { 20 } else { 60 }, results).await {
            results.note("3", format!("over time: NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(1) || args.wants(5) {
        // Item 5's call counts come from item 1's writers.
        eprintln!("item 1: ingest throughput");
        let settings = throughput::Settings {
            readings: if quick { 10_000 } else { 50_000 },
            put_item_seconds: if quick { 3.0 } else { 15.0 },
        };
        if let Err(e) = throughput::run(&root, settings, results).await {
            results.note("1", format!("NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(2) {
        eprintln!("item 2: hot sensor");
        if let Err(e) = hot::run(if quick { 20 } else { 60 }, results).await {
            results.note("2", format!("NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(4) {
        eprintln!("item 4: queries");
        let qs = query::Settings {
            devices: if quick { 16 } else { 64 },
            iterations: if quick { 20 } else { 100 },
            stats_days: args
                .stats_days
                .map_or(if quick { 1 } else { query::STATS_DAYS }, i64::from),
        };
        if let Err(e) = query::run(&root, qs, results).await {
            results.note("4", format!("NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(5) {
        eprintln!("item 5: cost per reading");
        if let Err(e) = cost_per_reading(&criterion_dir, results) {
            results.note("5", format!("criterion figure NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(7) {
        eprintln!("item 7: worst cases");
        if let Err(e) = worst::run(&root, results).await {
            results.note("7", format!("NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(8) {
        eprintln!("item 8: the write bill of blocks");
        if let Err(e) = blocks::run(results).await {
            results.note("8", format!("NOT MEASURED: {e:#}"));
        }
        if let Err(e) = block_reads::run(&root, results).await {
            results.note("8", format!("reads NOT MEASURED: {e:#}"));
        }
    }
    bills(&root, quick, args, results).await;
    if args.wants(6) {
        eprintln!("item 6: Lambda size and start");
        if let Err(e) = lambda::run(&root, &release_dir, results).await {
            results.note("6", format!("NOT MEASURED: {e:#}"));
        }
    }
    Ok(())
}

/// Items 9, 10 and 11: bills of a fleet's hour, each through the real functions on
/// dynalite behind the capacity-proxy.
async fn bills(root: &std::path::Path, quick: bool, args: &Args, results: &mut Results) {
    let devices = if quick { 100 } else { 1_000 };
    if args.wants(9) {
        eprintln!("item 9: the sealer's bill");
        if let Err(e) = sealer_bill::run(root, devices, results).await {
            results.note("9", format!("NOT MEASURED: {e:#}"));
        }
        if let Err(e) = summaries::run(root, results).await {
            results.note("9", format!("the month of summaries NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(10) {
        eprintln!("item 10: the whole bill, counted against the model");
        if let Err(e) = whole_bill::run(root, devices, results).await {
            results.note("10", format!("NOT MEASURED: {e:#}"));
        }
    }
    if args.wants(11) {
        eprintln!("item 11: one-reading fleets in slabs");
        if let Err(e) = slabs::run(root, devices, results).await {
            results.note("11", format!("NOT MEASURED: {e:#}"));
        }
        if let Err(e) = slabs::readable(root, results).await {
            results.note("11", format!("time to readable NOT MEASURED: {e:#}"));
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // What was measured, named as the run starts: the tree may move while it runs.
    let (measured, started, machine) = (commit(), today(), machine());
    let mut results = Results::default();
    rt.block_on(run(&args, &mut results))?;
    results.rows.sort_by(|a, b| a.item.cmp(&b.item));
    results.notes.sort_by(|a, b| a.0.cmp(&b.0));
    let table = results.table();
    println!("{table}");
    for (item, note) in &results.notes {
        if note.contains("NOT MEASURED") {
            println!("item {item}: {note}");
        }
    }
    if let Some(path) = &args.report {
        let run = Run {
            command: args.command.clone(),
            commit: measured,
            date: started,
            machine,
            mode: mode(&args),
        };
        // The report keeps what this run did not measure, each row naming its run.
        let earlier = match std::fs::read_to_string(path) {
            Ok(text) => splice::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => splice::Earlier::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        std::fs::write(path, splice::splice(&earlier, &run, &args.only, &results))
            .with_context(|| format!("writing {}", path.display()))?;
        let history = path.with_file_name("HISTORY.md");
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&history)
            .with_context(|| format!("opening {}", history.display()))?;
        std::io::Write::write_all(&mut log, run.history_entry().as_bytes())
            .with_context(|| format!("writing {}", history.display()))?;
        eprintln!(
            "wrote {} and added this run to {}: say there what it found",
            path.display(),
            history.display()
        );
    }
    Ok(())
}
