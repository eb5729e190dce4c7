//! What the demo reports: each run's [`RunReport`], the whole [`DemoReport`], and the
//! side-by-side text of both runs.

use std::path::PathBuf;
use std::time::Duration;

use capacity_proxy::StatsSnapshot;
use sharding::capacity::{CapacityPlan, MONTH_SECS, ON_DEMAND_PRICE_PER_MILLION_WRITES};
use store::rollup::HOUR_MS;

use super::dashboard::MAX_POINTS;
use super::{Dashboard, FLEET_DEVICE, QueryResult, RunBill, Scenario, Variant};
use crate::accounting::Accounting;
use crate::publish::Summary;
use crate::query_api::FanoutEpoch;
use crate::run_local::{Stats, ms};

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Which layout.
    pub variant: Variant,
    /// The layout in words.
    pub layout: String,
    /// What the publisher sent.
    pub sent: Summary,
    /// Items in the readings table at the end (distinct readings: one item per key).
    pub written: u64,
    /// Items beyond one per reading: readings stored under two keys (a redelivery re-keyed
    /// after a raise), which every read answers once.
    pub stored_twice: u64,
    /// What became of each message the publisher had accepted: received and stored,
    /// received and dead-lettered, received and neither, never received.
    pub accounting: Accounting,
    /// Write units the proxy charged on the readings table (DynamoDB's rule: every
    /// write of an item, retried or not, pays its started KBs).
    pub write_units: f64,
    /// The runner's counters.
    pub runner: Stats,
    /// The proxy's counters.
    pub proxy: StatsSnapshot,
    /// Distinct messages in the DLQ: by their `source_message_id`, and each one without.
    pub dlq: u64,
    /// DLQ messages read back, copies included.
    pub dlq_copies: u64,
    /// Messages still in the source queue: visible, and in flight or waiting out the
    /// visibility timeout.
    pub queued_visible: u64,
    /// See `queued_visible`.
    pub queued_invisible: u64,
    /// How long the drain took, and whether the queue emptied.
    pub drain: Duration,
    /// True if the queue emptied within the drain period.
    pub drained: bool,
    /// The hot device's range read.
    pub hot_query: QueryResult,
    /// The busiest fleet device's range read ([`FLEET_DEVICE`]).
    pub fleet_query: QueryResult,
    /// The hot device's fan-out epochs.
    pub fanout: Vec<FanoutEpoch>,
    /// Throttled items from the second in which the hot fan-out first grew (planned or
    /// raised).
    pub throttles_after_raise: Option<u64>,
    /// Throttled items before that second.
    pub throttles_before_raise: Option<u64>,
    /// The heatmap PNG.
    pub heatmap: PathBuf,
    /// The heat CSV.
    pub heat_csv: PathBuf,
    /// The run's whole bill a month, counted, beside the model's for its shape; or
    /// why there is none.
    pub bill: Result<RunBill, String>,
    /// Run 2's dashboard (`None` for run 1), or why it could not be built.
    pub dashboard: Option<Result<Dashboard, String>>,
}

impl RunReport {
    /// Throttled items (or single-item calls) in all.
    pub fn throttled(&self) -> u64 {
        self.proxy.throttled_by_reason.values().sum()
    }

    /// Write units charged per reading written (`None` before any is written).
    pub fn write_units_per_reading(&self) -> Option<f64> {
        (self.written > 0).then(|| self.write_units / self.written as f64)
    }

    /// What the run's write units per reading cost a month at the reference 50,000
    /// readings a second, on demand (`sharding::capacity::ON_DEMAND_PRICE_PER_MILLION_WRITES`).
    pub fn monthly_write_bill(&self) -> Option<f64> {
        self.write_units_per_reading().map(|units| {
            units * REFERENCE_READINGS_PER_SEC * MONTH_SECS * ON_DEMAND_PRICE_PER_MILLION_WRITES
                / 1e6
        })
    }
}

/// `81000.4` as `$81,000`.
fn dollars(usd: f64) -> String {
    let whole = format!("{:.0}", usd.max(0.0));
    let mut out = String::with_capacity(whole.len() + whole.len() / 3 + 1);
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    format!("${out}")
}

/// The reference rate the demo prices its write bill at (the reference scenario of docs/local.md's demo).
pub const REFERENCE_READINGS_PER_SEC: f64 = 50_000.0;

/// The whole demo.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The scenario.
    pub scenario: Scenario,
    /// The planner's answer.
    pub plan: CapacityPlan,
    /// Run 1.
    pub naive: RunReport,
    /// Run 2.
    pub adaptive: RunReport,
    /// The one-reading fleet's phase, when the scenario has it.
    pub one_reading: Option<Result<super::one_reading::OneReadingFleet, String>>,
    /// Wall time of both runs.
    pub elapsed: Duration,
}

/// The side-by-side report.
pub fn report_text(report: &DemoReport) -> String {
    let mut s = report_heading(report);
    s.push_str(&side_by_side(&report_rows(report)));
    s.push_str(&report_footer(report));
    s.push_str("\n\n");
    s.push_str(&super::bill::text(
        &report.scenario,
        [
            ("naive", &report.naive.bill),
            ("adaptive", &report.adaptive.bill),
        ],
    ));
    if let Some(dashboard) = &report.adaptive.dashboard {
        s.push_str("\n\n");
        s.push_str(&match dashboard {
            Ok(d) => dashboard_text(d, &report.adaptive),
            Err(why) => format!("Dashboard of run 2: not built: {why}"),
        });
    }
    if let Some(phase) = &report.one_reading {
        s.push_str("\n\n");
        s.push_str(&super::one_reading::text(phase));
    }
    s
}

/// The report's first line: the scenario.
fn report_heading(report: &DemoReport) -> String {
    format!(
        "Shardline demo: {} Zipf devices at {} readings/s + {} at {} readings/s for {} s, {}% malformed; per-key limit {} WCU/s\n\n",
        report.scenario.devices,
        report.scenario.fleet_rate,
        report.scenario.hot_device,
        report.scenario.hot_rate,
        report.scenario.duration.as_secs_f64(),
        report.scenario.bad_rate * 100.0,
        report.scenario.key_wcu,
    )
}

/// One row of the report: a label, then the naive run's cell and the adaptive run's.
type Row = (String, String, String);

/// The report's rows as they are built, a cell of each run per row.
struct Rows<'a> {
    runs: (&'a RunReport, &'a RunReport),
    rows: Vec<Row>,
}

impl Rows<'_> {
    /// A row labelled `label`, `cell` of each run.
    fn row(&mut self, label: &str, cell: impl Fn(&RunReport) -> String) {
        let (a, b) = self.runs;
        self.rows.push((label.to_owned(), cell(a), cell(b)));
    }
}

/// The report's rows, from what was sent to how the reads went.
fn report_rows(report: &DemoReport) -> Vec<Row> {
    let mut rows = Rows {
        runs: (&report.naive, &report.adaptive),
        rows: Vec::new(),
    };
    sent_and_written(&mut rows);
    throttles(&mut rows);
    writer_and_queue(&mut rows);
    reads_and_raises(&mut rows, &report.scenario);
    rows.rows
}

/// What the publisher sent, and what the table holds of it.
fn sent_and_written(rows: &mut Rows<'_>) {
    rows.row("layout", |r| r.layout.clone());
    rows.row("readings sent (valid)", |r| {
        r.sent.sent.readings.to_string()
    });
    rows.row("malformed messages sent", |r| {
        r.sent.sent.malformed_total().to_string()
    });
    rows.row("readings written (distinct in table)", |r| {
        r.written.to_string()
    });
    rows.row("  stored twice (one sort key)", |r| {
        r.stored_twice.to_string()
    });
    rows.row("  not (yet) written", |r| {
        r.sent.sent.readings.saturating_sub(r.written).to_string()
    });
}

/// The proxy's throttled items, in all and by each reason either run saw, beside the
/// write bill.
fn throttles(rows: &mut Rows<'_>) {
    rows.row("write units charged (proxy)", |r| {
        format!("{:.0}", r.write_units)
    });
    rows.row("  per reading written", |r| {
        r.write_units_per_reading()
            .map_or_else(|| "-".to_owned(), |u| format!("{u:.3}"))
    });
    rows.row("  a month at 50,000 readings/s", |r| {
        r.monthly_write_bill()
            .map_or_else(|| "-".to_owned(), dollars)
    });
    rows.row("throttled items (proxy)", |r| r.throttled().to_string());
    let (a, b) = rows.runs;
    let mut reasons: Vec<&String> = a
        .proxy
        .throttled_by_reason
        .keys()
        .chain(b.proxy.throttled_by_reason.keys())
        .collect();
    reasons.sort();
    reasons.dedup();
    for reason in reasons {
        rows.row(&format!("  {reason}"), |r| {
            r.proxy
                .throttled_by_reason
                .get(reason)
                .copied()
                .unwrap_or(0)
                .to_string()
        });
    }
}

/// The writer's retries, the messages' fates, the fan-out, the queue at the end.
fn writer_and_queue(rows: &mut Rows<'_>) {
    rows.row("write calls retried", |r| {
        r.runner.write_retries.to_string()
    });
    rows.row("items returned unprocessed", |r| {
        r.runner.unprocessed_items.to_string()
    });
    rows.row("messages reported for redelivery", |r| {
        r.runner.failures_reported.to_string()
    });
    rows.row("sent to the DLQ (messages in DLQ)", |r| {
        if r.dlq_copies > r.dlq {
            format!("{} ({} copies)", r.dlq, r.dlq_copies)
        } else {
            r.dlq.to_string()
        }
    });
    rows.row("fan-out raises", |r| r.runner.fanout_raises.to_string());
    rows.row("hot device fan-out epochs", |r| {
        if r.fanout.is_empty() {
            "-".to_owned()
        } else {
            r.fanout
                .iter()
                .map(|e| format!("k={} from {}", e.k, short_time(&e.effective_from)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    });
    rows.row("still queued (visible / in flight)", |r| {
        format!("{} / {}", r.queued_visible, r.queued_invisible)
    });
    rows.row("messages SQS accepted", |r| {
        r.accounting.accepted.to_string()
    });
    rows.row("  received and stored", |r| r.accounting.stored.to_string());
    rows.row("  received and dead-lettered", |r| {
        r.accounting.dead_lettered.to_string()
    });
    rows.row("  received, neither (queued)", |r| {
        r.accounting.unsettled.len().to_string()
    });
    rows.row("  never received (stand-in)", |r| {
        r.accounting.never_received.len().to_string()
    });
    rows.row("drain after publishing", |r| {
        if r.drained {
            format!("emptied in {:.1} s", r.drain.as_secs_f64())
        } else {
            format!(
                "stopped after {:.1} s (the rest waits out the 185 s visibility timeout)",
                r.drain.as_secs_f64()
            )
        }
    });
    rows.row("write lag p50 / p99", |r| {
        format!(
            "{} / {}",
            ms(r.runner.write_lag_p50_ms),
            ms(r.runner.write_lag_p99_ms)
        )
    });
}

/// The range reads through the API, the throttles around the hot fan-out's first
/// growth, and where the heatmap is.
fn reads_and_raises(rows: &mut Rows<'_>, scenario: &Scenario) {
    let window = format!(
        "{} s from t+{} s",
        scenario.query_window.as_secs_f64(),
        (scenario.duration / 4).as_secs_f64()
    );
    rows.row(&format!("query: hot device, {window}"), |r| {
        r.hot_query.cell()
    });
    rows.row(&format!("query: {FLEET_DEVICE}, {window}"), |r| {
        r.fleet_query.cell()
    });
    rows.row("throttles before the hot fan-out first grew", |r| {
        r.throttles_before_raise
            .map_or_else(|| "-".to_owned(), |n| n.to_string())
    });
    rows.row("throttles after it", |r| {
        r.throttles_after_raise
            .map_or_else(|| "-".to_owned(), |n| n.to_string())
    });
    rows.row("heatmap", |r| r.heatmap.display().to_string());
}

/// `rows` as two columns side by side under the runs' names, long cells wrapped
/// within their column.
fn side_by_side(rows: &[Row]) -> String {
    let w0 = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let w1 = rows
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(20, CELL_WIDTH);
    let mut s = String::new();
    s.push_str(&format!(
        "{:<w0$}  {:<w1$}  {}\n",
        "", "(1) naive", "(2) adaptive hybrid"
    ));
    for (label, x, y) in rows {
        // Long cells wrap within their column, so the two runs stay side by side.
        let (x, y) = (wrap(x, w1), wrap(y, CELL_WIDTH));
        for line in 0..x.len().max(y.len()) {
            let label = if line == 0 { label.as_str() } else { "" };
            let x = x.get(line).map_or("", String::as_str);
            let y = y.get(line).map_or("", String::as_str);
            s.push_str(format!("{label:<w0$}  {x:<w1$}  {y}").trim_end());
            s.push('\n');
        }
    }
    s
}

/// The notes under the table: what the rows mean, where the heatmaps are, how long
/// it took.
fn report_footer(report: &DemoReport) -> String {
    let (a, b) = (&report.naive, &report.adaptive);
    format!(
        "\nThe hot fan-out first grows with the ingest's first raise (or, with --planned, the planned k), \
         in force at once: readings not yet written, the backlog included, take the new k. Throttles \
         after that: the fan-out was still too small (it is raised again after the cooldown, to what \
         the measured rate needs), or a writer's first throttle on a key the raise already replaced \
         (it re-reads the fan-out and re-keys what it has not written).\n\
         Query times are dynalite's through capacity-proxy: dynalite keeps each partition's items \
         in key order, so a Query reads one key's range, as DynamoDB does (moto, which serves the \
         queues, would scan the whole table for each Query).\n\
         Heatmaps (rows = partition keys, columns = seconds, red = over {} WCU/s or throttled):\n  {}\n  {}\n\
         Heat CSVs: {}, {}\nBoth runs took {:.0} s.",
        report.scenario.key_wcu,
        a.heatmap.display(),
        b.heatmap.display(),
        a.heat_csv.display(),
        b.heat_csv.display(),
        report.elapsed.as_secs_f64()
    )
}

/// Run 2's dashboard: how it was sealed, then what the API and the sealer's items
/// answer, and where the series is.
fn dashboard_text(d: &Dashboard, run: &RunReport) -> String {
    let t = &d.timings;
    let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let mut s = "Dashboard of run 2:\n".to_owned();
    push_wrapped(
        &mut s,
        &format!(
            "Built in {} once the run's readings were written: the reseal {} (beside it, the \
             hot device's raw readings {}), then GET /devices and the latest readings {}, the \
             fleet parts {}, the device-hours and the picture {}.",
            secs(t.total),
            secs(t.reseal),
            secs(t.raw),
            secs(t.api),
            secs(t.fleet),
            secs(t.series),
        ),
    );
    push_wrapped(&mut s, &sealed_text(d, run));
    push_latest(&mut s, d);
    push_fleet(&mut s, d);
    push_wrapped(&mut s, &series_text(d));
    s.trim_end().to_owned()
}

/// `text` wrapped at 94 characters, indented two spaces, four after its first line.
fn push_wrapped(s: &mut String, text: &str) {
    for (i, line) in wrap(text, 94).into_iter().enumerate() {
        s.push_str(if i == 0 { "  " } else { "    " });
        s.push_str(&line);
        s.push('\n');
    }
}

/// Why and how the run's hours were sealed.
fn sealed_text(d: &Dashboard, run: &RunReport) -> String {
    let hours = d
        .hours
        .iter()
        .map(|&h| format!("{}-{}", clock(h, "%H:%M"), clock(h + HOUR_MS, "%H:%M")))
        .collect::<Vec<_>>()
        .join(", ");
    let r = &d.reseal;
    format!(
        "Sealed by a reseal: the run's readings are stamped now, so their hour ({hours} UTC) \
         has not ended, and the scheduled sealer seals an hour only {} min after it ends. \
         Sealer::reseal (the rebuild path) read its {} readings, each once{}, and wrote {} \
         device-hours with their summaries, {} directory entries and {} fleet parts, leaving \
         the watermark {}.",
        d.horizon.as_secs() / 60,
        r.readings,
        if r.readings == run.written {
            " (as many as the table holds)".to_owned()
        } else {
            format!(" (the table holds {} distinct at the end)", run.written)
        },
        r.device_hours_written,
        r.directory_written,
        r.parts_written,
        r.watermark_ms.map_or_else(
            || "unset (no hour sealed by the schedule yet)".to_owned(),
            |w| format!("at {} (the schedule's)", clock(w, "%Y-%m-%dT%H:%M:%SZ")),
        ),
    )
}

/// The latest readings, then the device count.
fn push_latest(s: &mut String, d: &Dashboard) {
    s.push_str("  Latest reading (GET /devices/{id}/latest):\n");
    let w = d.latest.iter().map(|l| l.device.len()).max().unwrap_or(0);
    for l in &d.latest {
        let answer = match &l.answer {
            Ok(r) => {
                let metric = r
                    .metric
                    .as_ref()
                    .map_or_else(String::new, |(m, v)| format!("  {m} {v}"));
                format!("{}  event {}{metric}", r.ts, r.event_id)
            }
            Err(why) => format!("refused: {why}"),
        };
        let took = match l.attempts {
            1 => format!("{} ms", l.elapsed.as_millis()),
            n => format!("{} ms, {n} requests", l.elapsed.as_millis()),
        };
        let line = format!("{:<w$}  {answer}  ({took})", l.device);
        // A refusal's message wraps; a reading's line keeps its columns.
        let lines = if line.chars().count() <= 92 {
            vec![line]
        } else {
            wrap(&line, 92)
        };
        for (i, part) in lines.into_iter().enumerate() {
            s.push_str(if i == 0 { "    " } else { "      " });
            s.push_str(&part);
            s.push('\n');
        }
    }
    let dev = &d.devices;
    s.push_str(&format!(
        "  Devices (GET /devices, {} page{} to the end): {}, as_of {}\n",
        dev.pages,
        if dev.pages == 1 { "" } else { "s" },
        dev.devices,
        dev.as_of.as_deref().map_or_else(
            || "none (the watermark: no hour sealed by the schedule yet)".to_owned(),
            |w| format!("{w} (the watermark, which the reseal leaves)"),
        ),
    ));
}

/// The fleet's minutes, then its hours, from the fleet parts.
fn push_fleet(s: &mut String, d: &Dashboard) {
    let parts = d
        .hours
        .iter()
        .map(|&h| format!("fleet#{}", store::rollup::hour_label(h)))
        .collect::<Vec<_>>()
        .join(", ");
    push_wrapped(
        s,
        &format!(
            "Fleet readings per minute: the minute cells of the {} fleet parts of {parts}, \
             merged (GET /stats answers only hours before the watermark, which a reseal does \
             not move):",
            d.fleet_parts
        ),
    );
    let row = |label: String, readings: u64, devices: u64| {
        format!("    {label:<12}  {readings:>9}  {devices:>7}\n")
    };
    s.push_str(&format!(
        "    {:<12}  {:>9}  {:>7}\n",
        "minute (UTC)", "readings", "devices"
    ));
    for m in &d.fleet {
        s.push_str(&row(clock(m.start_ms, "%H:%M"), m.readings, m.devices));
    }
    for h in &d.fleet_hours {
        let label = format!("hour {}", clock(h.start_ms, "%H:%M"));
        s.push_str(&row(label, h.readings, h.devices));
    }
}

/// Where the series is and what it draws.
fn series_text(d: &Dashboard) -> String {
    let series = &d.series;
    format!(
        "Series: {} draws {}'s {} at one-minute rollups ({} minute cell{} of its device-hour \
         item{}, {} readings: average line, min-max band) over its {} raw readings{}, read in \
         process by the readings route's merge (query::exec, {} Queries) from dynalite.",
        series.path.display(),
        series.device,
        series.metric,
        series.minutes,
        if series.minutes == 1 { "" } else { "s" },
        if d.hours.len() == 1 { "" } else { "s" },
        series.sealed_readings,
        series.points,
        if series.capped {
            format!(" (the first ones: the read stops at {MAX_POINTS})")
        } else {
            String::new()
        },
        series.queries,
    )
}

/// `ms` in `format`, UTC.
fn clock(ms: i64, format: &str) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| format!("{ms} ms"), |t| t.format(format).to_string())
}

/// Widest a report cell prints before it wraps.
const CELL_WIDTH: usize = 44;

/// `text` in lines of at most `width` characters, broken at spaces (a longer word, such
/// as a path, keeps a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// `2026-06-22T01:05:07.123Z` -> `01:05:07.123`.
fn short_time(rfc3339: &str) -> &str {
    rfc3339
        .split_once('T')
        .map_or(rfc3339, |(_, t)| t.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bill_reads_in_thousands() {
        assert_eq!(dollars(81_000.4), "$81,000");
        assert_eq!(dollars(162_000.0), "$162,000");
        assert_eq!(dollars(999.0), "$999");
        assert_eq!(dollars(1_234_567.0), "$1,234,567");
    }

    use super::*;

    #[test]
    fn cells_wrap_at_spaces_within_their_width() {
        assert_eq!(
            wrap("stopped after 20.3 s (the rest waits out the timeout)", 20),
            [
                "stopped after 20.3 s",
                "(the rest waits out",
                "the timeout)"
            ]
        );
        assert_eq!(wrap("short", 20), ["short"]);
        assert_eq!(wrap("", 20), [""]);
        // A word longer than the width keeps a line of its own, unbroken.
        assert_eq!(
            wrap("at /a/very/long/path/to/heat.png now", 10),
            ["at", "/a/very/long/path/to/heat.png", "now"]
        );
    }
}
