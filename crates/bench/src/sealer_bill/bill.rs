//! Item 9's bill by part, and its rows.

use super::{Bill, FULL_FLEET, GOAL_PERCENT, RUNS_PER_HOUR, Units};
use crate::report::{Results, at_most};

/// The sealer's bill of one hour, by part.
struct Breakdown {
    /// The readings, each read once (strongly consistent Queries).
    readings: Units,
    device_hours: Units,
    summaries: Units,
    directory: Units,
    /// The fleet parts' Queries of their device-hours.
    part_reads: Units,
    part_writes: Units,
    watermark: Units,
    metadata: Units,
    /// The sealing run's Queries of the late marks' partitions.
    marks: Units,
    /// The hour's other runs, each reading the watermark and the marks' partitions.
    idle_runs: Units,
    /// Anything charged that no part above names (0 when the parts are complete).
    other: Units,
}

impl Breakdown {
    fn of(bill: &Bill) -> Self {
        let t = &bill.tables;
        let seal = &bill.seal;
        let rollup = |pred: &dyn Fn(&str) -> bool| seal.units(&t.rollups, pred);
        let dh = rollup(&|pk| pk.starts_with("dh#"));
        let parts = Self {
            readings: seal.table(&t.readings),
            device_hours: Units { rcu: 0.0, ..dh },
            summaries: rollup(&|pk| pk.starts_with("dev#")),
            directory: rollup(&|pk| pk == store::rollup::DIRECTORY_PK),
            part_reads: Units { wcu: 0.0, ..dh },
            part_writes: rollup(&|pk| pk.starts_with("fleet#")),
            watermark: rollup(&|pk| pk == store::rollup::keys::watermark().pk),
            metadata: seal.table(&t.shards),
            marks: rollup(&|pk| pk.starts_with("late#")),
            idle_runs: bill.idle.total().times(RUNS_PER_HOUR - 1.0),
            other: Units::default(),
        };
        let named = parts.variable().plus(parts.fixed_of_run());
        let total = seal.total();
        Self {
            other: Units {
                rcu: total.rcu - named.rcu,
                wcu: total.wcu - named.wcu,
            },
            ..parts
        }
    }

    /// What grows with the devices: each device-hour's reads and writes.
    fn variable(&self) -> Units {
        self.readings
            .plus(self.device_hours)
            .plus(self.summaries)
            .plus(self.directory)
            .plus(self.part_reads)
    }

    /// What the sealing run spends whatever the fleet (up to the 16 parts).
    fn fixed_of_run(&self) -> Units {
        self.part_writes
            .plus(self.watermark)
            .plus(self.metadata)
            .plus(self.marks)
    }

    /// Fixed per hour: the sealing run's and the hour's other runs'.
    fn fixed(&self) -> Units {
        self.fixed_of_run().plus(self.idle_runs).plus(self.other)
    }
}

/// `x` dollars with three significant digits.
pub(super) fn usd(x: f64) -> String {
    if x <= 0.0 {
        return "$0".to_owned();
    }
    let digits = (2 - x.log10().floor() as i64).clamp(2, 12) as usize;
    format!("${x:.digits$}")
}

fn percent(part: f64, whole: f64) -> f64 {
    100.0 * part / whole
}

/// Item 9's rows of one fleet.
pub(super) fn report(results: &mut Results, bill: &Bill) {
    ingest_rows(results, bill);
    let b = Breakdown::of(bill);
    ratio_rows(results, bill, &b);
    breakdown_rows(results, bill, &b);
    results.figure(
        "9",
        &format!(
            "{}: wall time on dynalite: the ingest's hour; the sealing run",
            bill.fleet.label
        ),
        format!("{:.1} s; {:.1} s", bill.ingest_secs, bill.seal_secs),
    );
}

/// The shard metadata table's item of the table layout, which the first writer of a
/// table stores once for the table's life (`store::dynamo`'s `LAYOUT_PK`).
const LAYOUT_PK: &str = "layout";

/// The write units the ingest caused for the hour: every table's, but the table
/// layout the first invocation stored once for the table's life.
fn ingest_writes(bill: &Bill) -> Units {
    let layout = bill.ingest.units(&bill.tables.shards, |pk| pk == LAYOUT_PK);
    Units {
        rcu: 0.0,
        wcu: bill.ingest.total().wcu - layout.wcu,
    }
}

/// The ingest's write units per reading, and its charges on the rollups table.
fn ingest_rows(results: &mut Results, bill: &Bill) {
    let f = &bill.fleet;
    let t = &bill.tables;
    let n = f.readings() as f64;
    let label = &f.label;
    let ingest = &bill.ingest;
    let ingest_writes = ingest_writes(bill);
    let goal_units = if f.per_message >= 50 { 0.04 } else { 1.0 };
    results.goal(
        "9",
        &format!(
            "{label}: the ingest's write units per reading, on-time readings, the proxy's charge on every table"
        ),
        format!(
            "{:.3} ({:.0} WCU for {} readings in {} events: readings table {:.0}, shard metadata {:.0} and the layout stored once {:.0}, rollups {:.0}); a reading is a {}-byte item alone, {} bytes as sent",
            ingest_writes.wcu / n,
            ingest_writes.wcu,
            f.readings(),
            bill.events,
            ingest.table(&t.readings).wcu,
            ingest.table(&t.shards).wcu - ingest.units(&t.shards, |pk| pk == LAYOUT_PK).wcu,
            ingest.units(&t.shards, |pk| pk == LAYOUT_PK).wcu,
            ingest.table(&t.rollups).wcu,
            bill.item_bytes,
            bill.json_bytes,
        ),
        &format!("at most {goal_units}"),
        at_most(ingest_writes.wcu / n, goal_units),
    );
    let rollups = ingest.table(&t.rollups);
    let rollup_calls = ingest.table_calls(&t.rollups);
    results.goal(
        "9",
        &format!(
            "{label}: the ingest's charges on the rollups table (late marks; the published \
             lateness horizon's reads, store::rollup::horizon)"
        ),
        format!(
            "{:.0} WCU, {:.0} RCU, {rollup_calls} calls; {} late marks",
            rollups.wcu, rollups.rcu, bill.late_marks
        ),
        "0 WCU (every reading on time); at most one read a minute",
        // The hour's minutes: the ingest reads the horizon at most once a minute.
        if rollups.wcu == 0.0 && rollup_calls <= 60 && bill.late_marks == 0 {
            "met".to_owned()
        } else {
            "missed".to_owned()
        },
    );
}

/// The sealer's bill over the ingest's write bill.
fn ratio_rows(results: &mut Results, bill: &Bill, b: &Breakdown) {
    let f = &bill.fleet;
    let label = &f.label;
    let devices = f.devices as f64;
    let ingest_usd = ingest_writes(bill).usd();
    let all = b.variable().plus(b.fixed());
    if f.devices == 1 {
        let ratio = percent(all.usd(), ingest_usd);
        results.goal(
            "9",
            &format!("{label}: the sealer's bill for the sealed hour / the ingest's write bill for it"),
            format!(
                "{ratio:.1}% ({} / {}; the device-hour's part alone {:.1}%, the hour's fixed part {:.1}%)",
                usd(all.usd()),
                usd(ingest_usd),
                percent(b.variable().usd(), ingest_usd),
                percent(b.fixed().usd(), ingest_usd),
            ),
            &format!("at most {GOAL_PERCENT}%"),
            at_most(ratio, GOAL_PERCENT),
        );
    } else {
        let per_dh = b.variable().times(1.0 / devices);
        let ingest_dh = ingest_usd / devices;
        let ratio = percent(per_dh.usd(), ingest_dh);
        results.goal(
            "9",
            &format!(
                "{label}: the sealer's bill per device-hour / the ingest's write bill per device-hour"
            ),
            format!(
                "{ratio:.2}% ({} / {} per device-hour, {} readings)",
                usd(per_dh.usd()),
                usd(ingest_dh),
                f.per_device()
            ),
            &format!("at most {GOAL_PERCENT}%"),
            at_most(ratio, GOAL_PERCENT),
        );
        let full = per_dh.times(FULL_FLEET).plus(b.fixed()).usd();
        results.figure(
            "9",
            &format!(
                "{label}: with the hour's fixed part, measured at {} devices; at 100,000 devices (per device-hour x 100,000 + the fixed part)",
                super::fleet::thousands(f.devices)
            ),
            format!(
                "{:.2}% ({} / {}); {:.2}% ({} / {} an hour)",
                percent(all.usd(), ingest_usd),
                usd(all.usd()),
                usd(ingest_usd),
                percent(full, ingest_dh * FULL_FLEET),
                usd(full),
                usd(ingest_dh * FULL_FLEET),
            ),
        );
    }
}

/// What the sealer's bill is made of.
fn breakdown_rows(results: &mut Results, bill: &Bill, b: &Breakdown) {
    let f = &bill.fleet;
    let t = &bill.tables;
    let label = &f.label;
    let devices = f.devices as f64;
    let seal = &bill.seal;
    let per = |u: Units| {
        if f.devices == 1 {
            u.words()
        } else {
            u.times(1.0 / devices).words()
        }
    };
    let dh_kb = b.device_hours.wcu / devices;
    results.figure(
        "9",
        &format!(
            "{label}: the sealer's bill {}: readings read ({} strongly consistent Queries{}); device-hour writes; summary writes; directory (GetItem + PutItem); fleet parts' reads of their device-hours",
            if f.devices == 1 { "for the device-hour" } else { "per device-hour" },
            seal.calls(&t.readings, "Query"),
            if f.devices == 1 { String::new() } else { format!(" for {} devices", super::fleet::thousands(f.devices)) },
        ),
        format!(
            "{}; {} (one item of ~{dh_kb:.0} KB: minute cells); {}; {}; {}",
            per(b.readings),
            per(b.device_hours),
            per(b.summaries),
            per(b.directory),
            per(b.part_reads),
        ),
    );
    let parts = bill.sealed.parts_written;
    results.figure(
        "9",
        &format!(
            "{label}: the sealer's fixed part of the hour: fleet part writes; watermark; shard metadata reads; late-mark Queries of the sealing run; the other {} runs of the hour (rate(1 minute)){}",
            RUNS_PER_HOUR - 1.0,
            if b.other.rcu.abs() + b.other.wcu.abs() > 0.0 { "; charges no part names" } else { "" },
        ),
        format!(
            "{} ({parts} {}); {}; {}; {}; {} ({} each: {} calls){}",
            b.part_writes.words(),
            if parts == 1 { "part" } else { "parts" },
            b.watermark.words(),
            b.metadata.words(),
            b.marks.words(),
            b.idle_runs.words(),
            bill.idle.total().words(),
            bill.idle.calls.values().sum::<u64>(),
            if b.other.rcu.abs() + b.other.wcu.abs() > 0.0 {
                format!("; {}", b.other.words())
            } else {
                String::new()
            },
        ),
    );
}
