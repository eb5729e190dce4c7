//! Counters behind `GET /__stats` and the per-second heat CSV.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::capacity::ThrottleReason;

/// Per-key consumption, in the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KeyStats {
    /// Table name.
    pub table: String,
    /// Partition key value.
    pub pk: String,
    /// WCU consumed since start.
    pub wcu_total: f64,
    /// RCU consumed since start.
    pub rcu_total: f64,
    /// WCU consumed in the last completed second.
    pub wcu_last_second: f64,
    /// RCU consumed in the last completed second.
    pub rcu_last_second: f64,
    /// WCU consumed so far in the current second.
    pub wcu_current_second: f64,
    /// RCU consumed so far in the current second.
    pub rcu_current_second: f64,
    /// Highest WCU consumed in any one second.
    pub wcu_peak_per_second: f64,
    /// Highest RCU consumed in any one second.
    pub rcu_peak_per_second: f64,
    /// Write items accepted: batch items, single-item writes and transaction actions
    /// that wrote (a failed condition or a condition check is charged, not counted).
    pub items_written: u64,
    /// Items or calls throttled on this key.
    pub throttled: u64,
}

/// Fault counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FaultStats {
    /// Calls delayed by `--latency-ms`/`--jitter-ms`.
    pub latency: u64,
    /// Calls answered with HTTP 500.
    pub error: u64,
    /// Calls throttled as a whole.
    pub throttle: u64,
    /// Connections closed without a reply.
    pub drop: u64,
    /// BatchWriteItem items returned unprocessed by `--unprocessed-rate`.
    pub unprocessed_items: u64,
}

/// The proxy's own time on data-plane calls, measured on the real clock: from the
/// request's headers to its response, and the part of it spent asleep for injected
/// latency. What is left is the proxy's service time (in forward mode it includes the
/// upstream call).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ServiceTime {
    /// Data-plane calls timed.
    pub calls: u64,
    /// Their time in the proxy, summed, in microseconds.
    pub total_micros: u64,
    /// Of that, asleep for injected latency.
    pub asleep_micros: u64,
}

/// A point-in-time copy of all counters (the `/__stats` JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatsSnapshot {
    /// Clock seconds since start.
    pub now_seconds: f64,
    /// Requests by DynamoDB operation (`X-Amz-Target` suffix).
    pub requests_by_op: BTreeMap<String, u64>,
    /// Write items accepted (forwarded or stored in the sink).
    pub items_accepted: u64,
    /// Items (or single-item calls) throttled, by DynamoDB reason.
    pub throttled_by_reason: BTreeMap<String, u64>,
    /// Faults injected.
    pub faults: FaultStats,
    /// The proxy's own time on data-plane calls.
    pub service: ServiceTime,
    /// Distinct keys held by the sink (sink mode).
    pub sink_items: u64,
    /// Number of (table, pk) pairs seen.
    pub key_count: usize,
    /// Keys by total consumption (WCU + RCU), highest first; possibly truncated.
    pub keys: Vec<KeyStats>,
    /// Write units charged since start, by table, over every key (none truncated):
    /// the write bill.
    pub wcu_by_table: BTreeMap<String, f64>,
    /// Read units charged since start, by table, over every key (none truncated).
    #[serde(default)]
    pub rcu_by_table: BTreeMap<String, f64>,
}

#[derive(Debug, Default)]
struct KeyCounters {
    wcu_total: f64,
    rcu_total: f64,
    items_written: u64,
    throttled: u64,
    second: u64,
    wcu_cur: f64,
    rcu_cur: f64,
    prev_second: Option<u64>,
    wcu_prev: f64,
    rcu_prev: f64,
    wcu_peak: f64,
    rcu_peak: f64,
}

impl KeyCounters {
    fn roll(&mut self, second: u64) {
        if second > self.second {
            self.wcu_peak = self.wcu_peak.max(self.wcu_cur);
            self.rcu_peak = self.rcu_peak.max(self.rcu_cur);
            self.prev_second = Some(self.second);
            self.wcu_prev = self.wcu_cur;
            self.rcu_prev = self.rcu_cur;
            self.second = second;
            self.wcu_cur = 0.0;
            self.rcu_cur = 0.0;
        }
    }
}

/// One heat CSV row.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatRow {
    /// Clock second.
    pub second: u64,
    /// Table name.
    pub table: String,
    /// Partition key value.
    pub pk: String,
    /// WCU consumed in that second.
    pub wcu: f64,
    /// Items throttled in that second.
    pub throttled_items: u64,
}

impl HeatRow {
    /// `second,table,pk,wcu,throttled_items` with CSV quoting where needed.
    pub fn to_csv_line(&self) -> String {
        format!(
            "{},{},{},{},{}\n",
            self.second,
            csv_field(&self.table),
            csv_field(&self.pk),
            self.wcu,
            self.throttled_items
        )
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Why a heat CSV line does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct HeatCsvError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

impl HeatRow {
    /// The header line of the heat CSV.
    pub const HEADER: &'static str = "second,table,pk,wcu,throttled_items\n";

    /// Reads a heat CSV back (what [`HeatRow::to_csv_line`] wrote; a header line and
    /// blank lines are skipped).
    pub fn parse_csv(text: &str) -> Result<Vec<HeatRow>, HeatCsvError> {
        let mut rows = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || (n == 0 && line.starts_with("second")) {
                continue;
            }
            let error = |problem: String| HeatCsvError {
                line: n + 1,
                problem,
            };
            let fields = split_csv(line).map_err(|p| error(p.to_owned()))?;
            let [second, table, pk, wcu, throttled] = fields.as_slice() else {
                return Err(error(format!(
                    "expected second,table,pk,wcu,throttled_items, got {} fields",
                    fields.len()
                )));
            };
            let wcu: f64 = wcu
                .parse()
                .map_err(|e| error(format!("wcu {wcu:?}: {e}")))?;
            if !(wcu.is_finite() && wcu >= 0.0) {
                return Err(error("wcu must be a non-negative number".to_owned()));
            }
            rows.push(HeatRow {
                second: second
                    .parse()
                    .map_err(|e| error(format!("second {second:?}: {e}")))?,
                table: table.clone(),
                pk: pk.clone(),
                wcu,
                throttled_items: throttled
                    .parse()
                    .map_err(|e| error(format!("throttled_items {throttled:?}: {e}")))?,
            });
        }
        Ok(rows)
    }
}

/// One CSV line's fields, quotes undone (the inverse of `csv_field`).
fn split_csv(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (_, c) => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote");
    }
    fields.push(field);
    Ok(fields)
}

/// (table, pk) -> (WCU, throttled items) within one second.
type HeatCells = HashMap<(String, String), (f64, u64)>;

/// Mutable counters; owned by the proxy behind a mutex. Time comes in as `now`.
#[derive(Debug, Default)]
pub struct Stats {
    requests_by_op: BTreeMap<String, u64>,
    items_accepted: u64,
    throttled_by_reason: BTreeMap<String, u64>,
    faults: FaultStats,
    service: ServiceTime,
    keys: HashMap<(String, String), KeyCounters>,
    heat_enabled: bool,
    heat: BTreeMap<u64, HeatCells>,
}

impl Stats {
    /// Counters; `heat` keeps per-second rows for the heat CSV.
    pub fn new(heat: bool) -> Self {
        Self {
            heat_enabled: heat,
            ..Self::default()
        }
    }

    /// Counts one request of `op`.
    pub fn request(&mut self, op: &str) {
        *self.requests_by_op.entry(op.to_owned()).or_default() += 1;
    }

    /// One data-plane call's time in the proxy, and the part of it asleep.
    pub fn served(&mut self, total: Duration, asleep: Duration) {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.service.calls += 1;
        self.service.total_micros = self.service.total_micros.saturating_add(micros(total));
        self.service.asleep_micros = self.service.asleep_micros.saturating_add(micros(asleep));
    }

    /// Mutable fault counters.
    pub fn faults_mut(&mut self) -> &mut FaultStats {
        &mut self.faults
    }

    fn key(&mut self, table: &str, pk: &str, now: Duration) -> &mut KeyCounters {
        let k = self
            .keys
            .entry((table.to_owned(), pk.to_owned()))
            .or_default();
        k.roll(now.as_secs());
        k
    }

    fn heat_cell(&mut self, table: &str, pk: &str, now: Duration) -> Option<&mut (f64, u64)> {
        if !self.heat_enabled {
            return None;
        }
        Some(
            self.heat
                .entry(now.as_secs())
                .or_default()
                .entry((table.to_owned(), pk.to_owned()))
                .or_default(),
        )
    }

    /// Records an accepted write of `wcu` (one item).
    pub fn write(&mut self, table: &str, pk: &str, wcu: f64, now: Duration) {
        self.items_accepted += 1;
        self.key(table, pk, now).items_written += 1;
        self.write_units(table, pk, wcu, now);
    }

    /// Records `wcu` charged without an item written: a failed condition, a
    /// transaction's condition check, a cancelled transaction.
    pub fn write_units(&mut self, table: &str, pk: &str, wcu: f64, now: Duration) {
        let k = self.key(table, pk, now);
        k.wcu_total += wcu;
        k.wcu_cur += wcu;
        if let Some(cell) = self.heat_cell(table, pk, now) {
            cell.0 += wcu;
        }
    }

    /// Records a completed read of `rcu`.
    pub fn read(&mut self, table: &str, pk: &str, rcu: f64, now: Duration) {
        let k = self.key(table, pk, now);
        k.rcu_total += rcu;
        k.rcu_cur += rcu;
    }

    /// Records `items` throttled for `reason` (`pk` when known).
    pub fn throttled(
        &mut self,
        table: &str,
        pk: Option<&str>,
        reason: ThrottleReason,
        items: u64,
        now: Duration,
    ) {
        *self
            .throttled_by_reason
            .entry(reason.as_str().to_owned())
            .or_default() += items;
        if let Some(pk) = pk {
            self.key(table, pk, now).throttled += items;
            if let Some(cell) = self.heat_cell(table, pk, now) {
                cell.1 += items;
            }
        }
    }

    /// Heat rows of every second before `before_second` (all when `None`), removed.
    pub fn drain_heat(&mut self, before_second: Option<u64>) -> Vec<HeatRow> {
        let keep = match before_second {
            Some(s) => self.heat.split_off(&s),
            None => BTreeMap::new(),
        };
        let done = std::mem::replace(&mut self.heat, keep);
        let mut rows = Vec::new();
        for (second, cells) in done {
            let mut cells: Vec<_> = cells.into_iter().collect();
            cells.sort_by(|a, b| a.0.cmp(&b.0));
            rows.extend(cells.into_iter().map(|((table, pk), (wcu, t))| HeatRow {
                second,
                table,
                pk,
                wcu,
                throttled_items: t,
            }));
        }
        rows
    }

    /// A snapshot with at most `top` keys (all when `None`).
    pub fn snapshot(&self, now: Duration, top: Option<usize>, sink_items: u64) -> StatsSnapshot {
        let now_s = now.as_secs();
        let mut keys: Vec<KeyStats> = self
            .keys
            .iter()
            .map(|((table, pk), k)| {
                let (cur_w, cur_r) = if k.second == now_s {
                    (k.wcu_cur, k.rcu_cur)
                } else {
                    (0.0, 0.0)
                };
                let (last_w, last_r) = if now_s > 0 && k.second == now_s - 1 {
                    (k.wcu_cur, k.rcu_cur)
                } else if now_s > 0 && k.prev_second == Some(now_s - 1) {
                    (k.wcu_prev, k.rcu_prev)
                } else {
                    (0.0, 0.0)
                };
                KeyStats {
                    table: table.clone(),
                    pk: pk.clone(),
                    wcu_total: k.wcu_total,
                    rcu_total: k.rcu_total,
                    wcu_last_second: last_w,
                    rcu_last_second: last_r,
                    wcu_current_second: cur_w,
                    rcu_current_second: cur_r,
                    wcu_peak_per_second: k.wcu_peak.max(k.wcu_cur),
                    rcu_peak_per_second: k.rcu_peak.max(k.rcu_cur),
                    items_written: k.items_written,
                    throttled: k.throttled,
                }
            })
            .collect();
        keys.sort_by(|a, b| {
            (b.wcu_total + b.rcu_total)
                .total_cmp(&(a.wcu_total + a.rcu_total))
                .then_with(|| (&a.table, &a.pk).cmp(&(&b.table, &b.pk)))
        });
        let key_count = keys.len();
        let mut wcu_by_table: BTreeMap<String, f64> = BTreeMap::new();
        let mut rcu_by_table: BTreeMap<String, f64> = BTreeMap::new();
        for key in &keys {
            *wcu_by_table.entry(key.table.clone()).or_default() += key.wcu_total;
            *rcu_by_table.entry(key.table.clone()).or_default() += key.rcu_total;
        }
        if let Some(top) = top {
            keys.truncate(top);
        }
        StatsSnapshot {
            now_seconds: now.as_secs_f64(),
            requests_by_op: self.requests_by_op.clone(),
            items_accepted: self.items_accepted,
            throttled_by_reason: self.throttled_by_reason.clone(),
            faults: self.faults.clone(),
            service: self.service.clone(),
            sink_items,
            key_count,
            keys,
            wcu_by_table,
            rcu_by_table,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn per_second_windows_and_peaks() {
        let mut st = Stats::new(true);
        for _ in 0..5 {
            st.write("t", "a", 1.0, s(0));
        }
        for _ in 0..3 {
            st.write("t", "a", 2.0, s(1));
        }
        st.throttled(
            "t",
            Some("a"),
            ThrottleReason::TableWriteKeyRangeThroughputExceeded,
            4,
            s(1),
        );
        st.read("t", "b", 0.5, s(1));
        let snap = st.snapshot(s(2), None, 0);
        let a = snap.keys.iter().find(|k| k.pk == "a").expect("key a");
        assert_eq!(a.wcu_total, 11.0);
        assert_eq!(a.wcu_last_second, 6.0);
        assert_eq!(a.wcu_peak_per_second, 6.0);
        assert_eq!(a.items_written, 8);
        assert_eq!(a.throttled, 4);
        assert_eq!(snap.items_accepted, 8);
        assert_eq!(
            snap.throttled_by_reason["TableWriteKeyRangeThroughputExceeded"],
            4
        );
        assert_eq!(snap.keys[0].pk, "a");
        assert_eq!(st.snapshot(s(2), Some(1), 0).keys.len(), 1);
        // Two seconds later nothing is "last second".
        assert_eq!(st.snapshot(s(4), None, 0).keys[0].wcu_last_second, 0.0);

        let rows = st.drain_heat(Some(1));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].to_csv_line(), "0,t,a,5,0\n");
        let rows = st.drain_heat(None);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].to_csv_line(), "1,t,a,6,4\n");
        assert!(st.drain_heat(None).is_empty());
    }

    #[test]
    fn a_written_row_reads_back_the_same() {
        for pk in ["a", "a,\"b\"", "line\nbreak", "", "\"", "é,€"] {
            let row = HeatRow {
                second: 7,
                table: "t,1".to_owned(),
                pk: pk.to_owned(),
                wcu: 12.25,
                throttled_items: 3,
            };
            let text = format!("{}{}", HeatRow::HEADER, row.to_csv_line());
            if pk.contains('\n') {
                // A line break inside a key is quoted, but the reader reads line by
                // line: it must refuse rather than misread.
                assert!(HeatRow::parse_csv(&text).is_err(), "{pk:?}");
            } else {
                assert_eq!(HeatRow::parse_csv(&text), Ok(vec![row]), "{pk:?}");
            }
        }
    }

    #[test]
    fn csv_quotes_awkward_keys() {
        let row = HeatRow {
            second: 3,
            table: "t".into(),
            pk: "a,\"b\"".into(),
            wcu: 1.5,
            throttled_items: 0,
        };
        assert_eq!(row.to_csv_line(), "3,t,\"a,\"\"b\"\"\",1.5,0\n");
    }
}
