//! `shardline audit`: which partition keys take too many writes, or would.
//!
//! Input is a sample of writes, one per line (`{"pk": ..., "ts": ...}` or a full
//! item), or a scan of a table. The analysis ([`audit`]) is pure: per key it counts
//! writes and WCU (from each item's size, DynamoDB's 1 KB rule), finds the busiest
//! second, and projects how much the key will hold over its life. A key is flagged
//! when
//! - its peak WCU/s (times `--scale`, for growth) passes the partition limit
//!   (`--partition-wcu`, 1,000), or
//! - its projected size passes one partition's ~10 GB: a key without a time bucket
//!   keeps receiving writes for the whole retention, a time-bucketed key
//!   (`OPS_LOG#2026-06-22`, `s07#2026-06-22T13`) only for its bucket. This is seed
//!   004's cardinality-1 finding, with numbers.
//!
//! A day bucket does not lower a key's per-second peak: at 1,500 writes/s today's
//! `OPS_LOG#<day>` is as hot as `OPS_LOG`, and the audit says so.
//!
//! It also counts readings stored twice ([`count_duplicates`]): fan-out keys nest, so a
//! reading written, then redelivered after a raise, can sit under two partition keys
//! with one sort key. Reads show it once; the copies still cost storage and WCU. The
//! count needs each item's sort key (`sk`/`SK` in a sample line, `--sk-attribute` in a
//! scan); a reading is identified by its sort key, qualified by its entity where the
//! sort key does not hold it ([`reading_identity`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Write as _};
use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use clap::Args;
use serde::Serialize;
use serde_json::Value;
use sharding::time::Timestamp;
use store::size::{item_size, write_units};

use crate::env::StackArgs;

/// One partition's write limit, WCU/s.
pub const PARTITION_WCU: f64 = 1000.0;
/// One partition's storage, bytes (~10 GB).
pub const PARTITION_BYTES: f64 = 10.0 * 1024.0 * 1024.0 * 1024.0;

/// One write of the sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The partition key value.
    pub pk: String,
    /// When, epoch milliseconds (unknown for items without a timestamp).
    pub ts_ms: Option<i64>,
    /// Item size in bytes.
    pub bytes: usize,
}

/// One item of the input: its write, and its sort key when the input has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampled {
    /// The write.
    pub write: Write,
    /// The item's sort key (`None`: the input does not carry one).
    pub sk: Option<String>,
}

/// How to judge.
#[derive(Debug, Clone, Serialize)]
pub struct AuditConfig {
    /// Partition write limit, WCU/s.
    pub partition_wcu: f64,
    /// Most bytes one key may grow to (one partition, ~10 GB; also the item-collection
    /// limit of a table with a local secondary index); 0 turns the size check off.
    pub partition_bytes: f64,
    /// How long items are kept, days (a key without a time bucket grows this long).
    pub retention_days: f64,
    /// Growth factor applied to the sample's rates.
    pub scale: f64,
    /// Keys listed in the top table.
    pub top: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            partition_wcu: PARTITION_WCU,
            partition_bytes: PARTITION_BYTES,
            retention_days: 30.0,
            scale: 1.0,
            top: 10,
        }
    }
}

/// A time bucket recognised in a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeBucket {
    /// `YYYY-MM-DDTHH:MM`
    Minute,
    /// `YYYY-MM-DDTHH`
    Hour,
    /// `YYYY-MM-DD`
    Day,
    /// `YYYY-MM`
    Month,
}

impl TimeBucket {
    /// How long a key of this bucket receives writes, seconds.
    pub fn secs(self) -> f64 {
        match self {
            TimeBucket::Minute => 60.0,
            TimeBucket::Hour => 3_600.0,
            TimeBucket::Day => 86_400.0,
            TimeBucket::Month => 31.0 * 86_400.0,
        }
    }

    fn placeholder(self) -> &'static str {
        match self {
            TimeBucket::Minute => "{minute}",
            TimeBucket::Hour => "{hour}",
            TimeBucket::Day => "{day}",
            TimeBucket::Month => "{month}",
        }
    }

    /// The bucket a key segment spells, if any.
    pub fn of_segment(segment: &str) -> Option<Self> {
        let shape: String = segment
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        match shape.as_str() {
            "9999-99-99T99:99" => Some(TimeBucket::Minute),
            "9999-99-99T99" => Some(TimeBucket::Hour),
            "9999-99-99" => Some(TimeBucket::Day),
            "9999-99" => Some(TimeBucket::Month),
            _ => None,
        }
    }

    /// The time bucket of a key: its last `#` segment that spells one.
    pub fn of_key(pk: &str) -> Option<Self> {
        pk.rsplit('#').find_map(Self::of_segment)
    }
}

/// The pattern of a key: time buckets and digit runs replaced, so `OPS_LOG#2026-06-22`
/// and `OPS_LOG#2026-06-23` share `OPS_LOG#{day}`, `dev-00042` is `dev-N`.
pub fn key_pattern(pk: &str) -> String {
    pk.split('#')
        .map(|segment| match TimeBucket::of_segment(segment) {
            Some(bucket) => bucket.placeholder().to_owned(),
            None => {
                let mut out = String::new();
                let mut in_digits = false;
                for c in segment.chars() {
                    if c.is_ascii_digit() {
                        if !in_digits {
                            out.push('N');
                        }
                        in_digits = true;
                    } else {
                        out.push(c);
                        in_digits = false;
                    }
                }
                out
            }
        })
        .collect::<Vec<_>>()
        .join("#")
}

/// One key's findings.
#[derive(Debug, Clone, Serialize)]
pub struct KeyReport {
    /// The key.
    pub pk: String,
    /// Writes in the sample.
    pub writes: u64,
    /// Share of the sample's writes.
    pub share: f64,
    /// WCU consumed in the sample.
    pub wcu: u64,
    /// Busiest second's WCU, times the scale (none without timestamps).
    pub peak_wcu_per_sec: Option<f64>,
    /// That second, epoch seconds.
    pub peak_second: Option<i64>,
    /// The time bucket in the key, if any.
    pub bucket: Option<TimeBucket>,
    /// How long the key receives writes, days.
    pub lifetime_days: f64,
    /// Bytes it will hold at the end of its life, at the sample's rate times the scale.
    pub projected_bytes: f64,
    /// Why it is flagged (empty: it passes).
    pub flags: Vec<String>,
}

/// One key pattern's cardinality.
#[derive(Debug, Clone, Serialize)]
pub struct PatternReport {
    /// The pattern.
    pub pattern: String,
    /// Distinct keys of it.
    pub cardinality: u64,
    /// Writes to it.
    pub writes: u64,
    /// Share of the sample's writes.
    pub share: f64,
}

/// The audit.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// What it was judged against.
    pub config: AuditConfig,
    /// Writes in the sample.
    pub writes: u64,
    /// Writes without a timestamp.
    pub writes_without_ts: u64,
    /// Distinct keys.
    pub cardinality: u64,
    /// Seconds from the first to the last timestamp.
    pub span_secs: f64,
    /// The table's busiest second, WCU (times the scale).
    pub table_peak_wcu_per_sec: Option<f64>,
    /// Average item size, bytes.
    pub avg_item_bytes: f64,
    /// Keys by share of writes, at most `top`.
    pub top: Vec<KeyReport>,
    /// Every flagged key, by peak WCU/s then size.
    pub flagged: Vec<KeyReport>,
    /// Key patterns by writes.
    pub patterns: Vec<PatternReport>,
    /// Readings stored under more than one partition key; `None` when the input has
    /// no sort keys (set by [`AuditReport::with_duplicates`]).
    pub duplicates: Option<DuplicateReport>,
}

/// Readings stored under more than one partition key, from the items' sort keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DuplicateReport {
    /// Distinct stored items (partition key, reading) whose sort key names a reading.
    pub items: u64,
    /// Distinct readings among them.
    pub readings: u64,
    /// Readings stored under more than one partition key.
    pub duplicated: u64,
    /// Items beyond each reading's first (what de-duplicating reads leave out).
    pub extra_copies: u64,
}

/// The identity of the reading a Shardline item holds, from its keys: a sort key
/// `{entity}#{ts}#{event_id}` (time-bucket layouts) names it whole; `{ts}#{event_id}`
/// names it within one entity, the partition key's first `#` segment (`{entity}` or
/// `{entity}#{r}`). `None` for a sort key of neither shape (not a reading).
#[must_use]
pub fn reading_identity(pk: &str, sk: &str) -> Option<String> {
    let parts: Vec<&str> = sk.split('#').collect();
    let is_ts = |s: &str| Timestamp::parse(s).is_ok();
    match parts.as_slice() {
        [entity, ts, event] if !entity.is_empty() && is_ts(ts) && !event.is_empty() => {
            Some(sk.to_owned())
        }
        [ts, event] if is_ts(ts) && !event.is_empty() => {
            let entity = pk.split('#').next().unwrap_or(pk);
            Some(format!("{entity}#{sk}"))
        }
        _ => None,
    }
}

/// Counts the readings stored under more than one partition key among `items`
/// (partition key, sort key), in any order; an item seen twice (a write repeated on
/// one key) counts once. Memory: one entry per distinct reading.
pub fn count_duplicates<'a>(
    items: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> DuplicateReport {
    let mut pks_of: HashMap<String, HashSet<&'a str>> = HashMap::new();
    for (pk, sk) in items {
        if let Some(identity) = reading_identity(pk, sk) {
            pks_of.entry(identity).or_default().insert(pk);
        }
    }
    let items: u64 = pks_of.values().map(|pks| pks.len() as u64).sum();
    let readings = pks_of.len() as u64;
    DuplicateReport {
        items,
        readings,
        duplicated: pks_of.values().filter(|pks| pks.len() > 1).count() as u64,
        extra_copies: items - readings,
    }
}

/// Audits a sample whose items may carry sort keys: [`audit`] on the writes, with the
/// duplicate count when any item has a sort key.
pub fn audit_sampled(sample: &[Sampled], config: &AuditConfig) -> AuditReport {
    let keyed = sample
        .iter()
        .filter_map(|s| s.sk.as_deref().map(|sk| (s.write.pk.as_str(), sk)));
    let duplicates = sample
        .iter()
        .any(|s| s.sk.is_some())
        .then(|| count_duplicates(keyed));
    let report = audit(sample.iter().map(|s| s.write.clone()), config);
    match duplicates {
        Some(d) => report.with_duplicates(d),
        None => report,
    }
}

#[derive(Default)]
struct Acc {
    writes: u64,
    wcu: u64,
    bytes: u64,
    per_second: HashMap<i64, u64>,
}

/// Audits a sample of writes.
pub fn audit(writes: impl IntoIterator<Item = Write>, config: &AuditConfig) -> AuditReport {
    let mut keys: HashMap<String, Acc> = HashMap::new();
    let mut table_seconds: HashMap<i64, u64> = HashMap::new();
    let (mut total, mut without_ts, mut bytes) = (0u64, 0u64, 0u64);
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for w in writes {
        let wcu = write_units(w.bytes) as u64;
        let acc = keys.entry(w.pk).or_default();
        acc.writes += 1;
        acc.wcu += wcu;
        acc.bytes += w.bytes as u64;
        total += 1;
        bytes += w.bytes as u64;
        match w.ts_ms {
            Some(ms) => {
                let second = ms.div_euclid(1000);
                *acc.per_second.entry(second).or_default() += wcu;
                *table_seconds.entry(second).or_default() += wcu;
                first = first.min(ms);
                last = last.max(ms);
            }
            None => without_ts += 1,
        }
    }
    let span_secs = if first <= last {
        ((last - first) as f64 / 1000.0).max(1.0)
    } else {
        0.0
    };
    let retention_secs = config.retention_days * 86_400.0;
    let share = |n: u64| {
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    };

    let mut reports: Vec<KeyReport> = keys
        .iter()
        .map(|(pk, acc)| {
            let peak = acc
                .per_second
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(s, w)| (*s, *w as f64 * config.scale));
            let bucket = TimeBucket::of_key(pk);
            let lifetime = bucket.map_or(retention_secs, |b| b.secs().min(retention_secs));
            // The rate while the key is written: over the whole sample for a key that
            // lives for ever, over at most its bucket for a time-bucketed one.
            let window = if span_secs > 0.0 {
                bucket.map_or(span_secs, |b| span_secs.min(b.secs()))
            } else {
                0.0
            };
            let projected = if window > 0.0 {
                acc.bytes as f64 / window * config.scale * lifetime
            } else {
                0.0
            };
            let mut flags = Vec::new();
            if let Some((second, wcu)) = peak
                && wcu > config.partition_wcu
            {
                flags.push(format!(
                    "peak {wcu:.0} WCU/s (second {second}) > {:.0} WCU/s partition limit",
                    config.partition_wcu
                ));
            }
            if config.partition_bytes > 0.0 && projected > config.partition_bytes {
                flags.push(format!(
                    "projected {} over its {:.1}-day life > {} per partition",
                    human_bytes(projected),
                    lifetime / 86_400.0,
                    human_bytes(config.partition_bytes)
                ));
            }
            KeyReport {
                pk: pk.clone(),
                writes: acc.writes,
                share: share(acc.writes),
                wcu: acc.wcu,
                peak_wcu_per_sec: peak.map(|p| p.1),
                peak_second: peak.map(|p| p.0),
                bucket,
                lifetime_days: lifetime / 86_400.0,
                projected_bytes: projected,
                flags,
            }
        })
        .collect();
    reports.sort_by(|a, b| b.writes.cmp(&a.writes).then_with(|| a.pk.cmp(&b.pk)));
    let mut flagged: Vec<KeyReport> = reports
        .iter()
        .filter(|r| !r.flags.is_empty())
        .cloned()
        .collect();
    flagged.sort_by(|a, b| {
        b.peak_wcu_per_sec
            .unwrap_or(0.0)
            .total_cmp(&a.peak_wcu_per_sec.unwrap_or(0.0))
            .then(b.projected_bytes.total_cmp(&a.projected_bytes))
            .then_with(|| a.pk.cmp(&b.pk))
    });

    let mut patterns: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (pk, acc) in &keys {
        let entry = patterns.entry(key_pattern(pk)).or_default();
        entry.0 += 1;
        entry.1 += acc.writes;
    }
    let mut patterns: Vec<PatternReport> = patterns
        .into_iter()
        .map(|(pattern, (cardinality, writes))| PatternReport {
            pattern,
            cardinality,
            writes,
            share: share(writes),
        })
        .collect();
    patterns.sort_by(|a, b| {
        b.writes
            .cmp(&a.writes)
            .then_with(|| a.pattern.cmp(&b.pattern))
    });

    AuditReport {
        config: config.clone(),
        writes: total,
        writes_without_ts: without_ts,
        cardinality: keys.len() as u64,
        span_secs,
        table_peak_wcu_per_sec: table_seconds
            .values()
            .max()
            .map(|w| *w as f64 * config.scale),
        avg_item_bytes: if total == 0 {
            0.0
        } else {
            bytes as f64 / total as f64
        },
        top: reports.into_iter().take(config.top).collect(),
        flagged,
        patterns,
        duplicates: None,
    }
}

fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

impl AuditReport {
    /// The report with its duplicate count.
    #[must_use]
    pub fn with_duplicates(mut self, duplicates: DuplicateReport) -> Self {
        self.duplicates = Some(duplicates);
        self
    }

    /// The duplicates line: readings stored under more than one partition key.
    fn duplicates_line(&self) -> String {
        match &self.duplicates {
            Some(d) => format!(
                "duplicates: {} of {} readings stored under more than one partition key ({} extra items; reads show each reading once)\n",
                d.duplicated, d.readings, d.extra_copies
            ),
            None => "duplicates: not counted (the input has no sort keys)\n".to_owned(),
        }
    }

    /// The human report: a `duplicates:` line, then one `FLAG` line per flagged key, or
    /// one `PASS` line.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} writes over {:.0} s, {} distinct partition keys, average item {:.0} bytes ({} WCU per write), table peak {}\n",
            self.writes,
            self.span_secs,
            self.cardinality,
            self.avg_item_bytes,
            write_units(self.avg_item_bytes.round() as usize).max(1),
            self.table_peak_wcu_per_sec
                .map_or("n/a".to_owned(), |w| format!("{w:.0} WCU/s")),
        );
        if self.config.scale != 1.0 {
            s.push_str(&format!(
                "rates scaled by {} for projection\n",
                self.config.scale
            ));
        }
        if self.writes_without_ts > 0 {
            s.push_str(&format!(
                "{} writes have no timestamp and count only for shares and size\n",
                self.writes_without_ts
            ));
        }
        s.push_str(&self.duplicates_line());
        s.push_str("key patterns (cardinality, share of writes):\n");
        for p in self.patterns.iter().take(self.config.top) {
            s.push_str(&format!(
                "  {:<40} {:>8} {:>6.1}%\n",
                p.pattern,
                p.cardinality,
                p.share * 100.0
            ));
        }
        s.push_str(&format!(
            "top keys by share of writes (limit {:.0} WCU/s per key):\n",
            self.config.partition_wcu
        ));
        s.push_str(&format!(
            "  {:<40} {:>10} {:>7} {:>14} {:>12}\n",
            "pk", "writes", "share", "peak WCU/s", "projected"
        ));
        for k in &self.top {
            s.push_str(&format!(
                "  {:<40} {:>10} {:>6.1}% {:>14} {:>12}\n",
                k.pk,
                k.writes,
                k.share * 100.0,
                k.peak_wcu_per_sec
                    .map_or("n/a".to_owned(), |w| format!("{w:.0}")),
                human_bytes(k.projected_bytes),
            ));
        }
        if self.flagged.is_empty() {
            s.push_str(&format!(
                "PASS: no key passes {:.0} WCU/s{}",
                self.config.partition_wcu,
                if self.config.partition_bytes > 0.0 {
                    format!(
                        " or grows past {}",
                        human_bytes(self.config.partition_bytes)
                    )
                } else {
                    String::new()
                }
            ));
        } else {
            let lines: Vec<String> = self
                .flagged
                .iter()
                .map(|k| format!("FLAG {}: {}", k.pk, k.flags.join("; ")))
                .collect();
            s.push_str(&lines.join("\n"));
        }
        s
    }
}

fn field<'a>(o: &'a serde_json::Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| o.get(*n)).map(|v| match v {
        // DynamoDB JSON: {"S": "..."} / {"N": "..."}.
        Value::Object(typed) if typed.len() == 1 => {
            typed.get("S").or_else(|| typed.get("N")).unwrap_or(v)
        }
        _ => v,
    })
}

fn json_ts(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => Timestamp::parse(s).ok().map(Timestamp::as_millis),
        _ => None,
    }
}

/// DynamoDB's size of a JSON value (approximately, for samples of full items).
fn json_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 1,
        Value::Number(n) => n.to_string().len().div_ceil(2) + 1,
        Value::String(s) => s.len(),
        Value::Array(a) => 3 + a.iter().map(|x| 1 + json_size(x)).sum::<usize>(),
        Value::Object(o) => {
            3 + o
                .iter()
                .map(|(k, x)| 1 + k.len() + json_size(x))
                .sum::<usize>()
        }
    }
}

/// Parses one JSONL line: `pk`/`PK`, `ts`/`ts_ms`/`timestamp` (RFC 3339 or epoch ms),
/// and `bytes`/`size` or, for a full item, its estimated size; a line with only keys
/// and a timestamp counts `default_bytes`.
pub fn parse_line(line: &str, default_bytes: usize) -> Result<Write, String> {
    parse_sampled(line, default_bytes).map(|s| s.write)
}

/// [`parse_line`], with the item's sort key (`sk`/`SK`) when the line has one.
pub fn parse_sampled(line: &str, default_bytes: usize) -> Result<Sampled, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(o) = value else {
        return Err("not a JSON object".into());
    };
    let pk = match field(&o, &["pk", "PK"]) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err("no \"pk\" string".into()),
    };
    let ts_ms = field(&o, &["ts_ms", "ts", "timestamp"]).and_then(json_ts);
    let sk = match field(&o, &["sk", "SK"]) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let explicit = field(&o, &["bytes", "size"]).and_then(|v| match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    });
    let key_only = o.keys().all(|k| {
        matches!(
            k.as_str(),
            "pk" | "PK" | "sk" | "SK" | "ts" | "ts_ms" | "timestamp"
        )
    });
    let bytes = match explicit {
        Some(b) => usize::try_from(b).unwrap_or(usize::MAX),
        None if key_only => default_bytes,
        None => o.iter().map(|(k, v)| k.len() + json_size(v)).sum(),
    };
    Ok(Sampled {
        write: Write { pk, ts_ms, bytes },
        sk,
    })
}

/// Reads a JSONL sample; blank lines are skipped, a bad line is an error naming it.
pub fn read_sample(reader: impl BufRead, default_bytes: usize) -> anyhow::Result<Vec<Sampled>> {
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.context("cannot read the sample")?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_sampled(&line, default_bytes).map_err(|e| anyhow!("line {}: {e}", n + 1))?);
    }
    Ok(out)
}

fn item_ts(item: &HashMap<String, AttributeValue>, ts_attribute: &str) -> Option<i64> {
    match item.get(ts_attribute)? {
        AttributeValue::N(n) => n.parse().ok(),
        AttributeValue::S(s) => Timestamp::parse(s).ok().map(Timestamp::as_millis),
        _ => None,
    }
}

/// Names of the attributes a scan reads.
#[derive(Debug, Clone, Copy)]
pub struct ScanAttributes<'a> {
    /// The partition key.
    pub pk: &'a str,
    /// The sort key (for the duplicate count); items without it still count as writes.
    pub sk: &'a str,
    /// The timestamp (number of epoch ms or RFC 3339 string).
    pub ts: &'a str,
}

/// Scans a table into writes: the key attribute, the sort key, a timestamp attribute
/// and each item's size.
pub async fn scan_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    attributes: ScanAttributes<'_>,
    limit: Option<u64>,
) -> anyhow::Result<Vec<Sampled>> {
    let mut out = Vec::new();
    // Page by page, so a sample stops reading at its limit.
    let mut pages = client.scan().table_name(table).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            anyhow!(
                "cannot scan {table}: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(&e)
            )
        })?;
        for item in page.items() {
            let Some(AttributeValue::S(pk)) = item.get(attributes.pk) else {
                continue;
            };
            let sk = match item.get(attributes.sk) {
                Some(AttributeValue::S(sk)) => Some(sk.clone()),
                _ => None,
            };
            out.push(Sampled {
                write: Write {
                    pk: pk.clone(),
                    ts_ms: item_ts(item, attributes.ts),
                    bytes: item_size(item),
                },
                sk,
            });
            if limit.is_some_and(|l| out.len() as u64 >= l) {
                return Ok(out);
            }
        }
    }
    Ok(out)
}

/// Flags of `shardline audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// A JSONL sample of writes (`-` for stdin).
    #[arg(long, conflicts_with = "table")]
    pub sample: Option<PathBuf>,
    /// Scan this table instead.
    #[arg(long)]
    pub table: Option<String>,
    #[command(flatten)]
    pub stack: StackArgs,
    /// Partition key attribute of the scanned table.
    #[arg(long, default_value = "PK")]
    pub pk_attribute: String,
    /// Sort key attribute of the scanned table (readings stored under two keys are
    /// counted by it).
    #[arg(long, default_value = "SK")]
    pub sk_attribute: String,
    /// Timestamp attribute of the scanned table (epoch ms number or RFC 3339 string).
    #[arg(long, default_value = "ts_ms")]
    pub ts_attribute: String,
    /// Stop the scan after this many items.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Item size for sample lines that carry only a key and a timestamp, bytes.
    #[arg(long, default_value_t = 500)]
    pub item_bytes: usize,
    /// Partition write limit, WCU/s.
    #[arg(long, default_value_t = PARTITION_WCU)]
    pub partition_wcu: f64,
    /// Item retention, days: a key without a time bucket grows this long.
    #[arg(long, default_value_t = 30.0)]
    pub retention_days: f64,
    /// Multiply the sample's rates by this (projected growth).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Flag keys projected to hold more than this many GiB over their life (0: off).
    #[arg(long, default_value_t = 10.0)]
    pub max_key_gb: f64,
    /// Keys and patterns to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The command. Exit status 0 also with flags: the `FLAG` lines say it.
pub async fn run(args: &AuditArgs) -> anyhow::Result<()> {
    if !(args.partition_wcu > 0.0 && args.scale > 0.0 && args.retention_days > 0.0) {
        bail!("--partition-wcu, --scale and --retention-days must be positive");
    }
    if !(args.max_key_gb >= 0.0 && args.max_key_gb.is_finite()) {
        bail!("--max-key-gb must be a non-negative number");
    }
    let sample = match (&args.sample, &args.table) {
        (Some(path), _) if path.as_os_str() == "-" => {
            read_sample(std::io::stdin().lock(), args.item_bytes)?
        }
        (Some(path), _) => read_sample(
            std::io::BufReader::new(
                std::fs::File::open(path)
                    .with_context(|| format!("cannot open {}", path.display()))?,
            ),
            args.item_bytes,
        )?,
        (None, Some(table)) => {
            let env = args.stack.env()?;
            let sdk = args.stack.sdk_config(&env).await;
            let client = aws_sdk_dynamodb::Client::new(&sdk);
            let attributes = ScanAttributes {
                pk: &args.pk_attribute,
                sk: &args.sk_attribute,
                ts: &args.ts_attribute,
            };
            scan_table(&client, table, attributes, args.limit).await?
        }
        (None, None) => bail!("give --sample FILE or --table NAME"),
    };
    let config = AuditConfig {
        partition_wcu: args.partition_wcu,
        partition_bytes: args.max_key_gb * 1024.0 * 1024.0 * 1024.0,
        retention_days: args.retention_days,
        scale: args.scale,
        top: args.top,
    };
    let report = audit_sampled(&sample, &config);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("cannot encode the report")?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", report.text())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    fn sampled(pk: &str, sk: &str) -> Sampled {
        Sampled {
            write: Write {
                pk: pk.into(),
                ts_ms: Some(1_782_086_400_000),
                bytes: 500,
            },
            sk: Some(sk.into()),
        }
    }

    #[test]
    fn a_reading_is_named_by_its_sort_key_and_entity() {
        let at = "2026-06-22T00:00:00.007Z";
        let bucket_sk = format!("dev-1#{at}#e1");
        assert_eq!(
            reading_identity("1#2026-06-22T00", &bucket_sk),
            reading_identity("1.3#2026-06-22T00", &bucket_sk)
        );
        let plain_sk = format!("{at}#e1");
        assert_eq!(
            reading_identity("dev-1#0", &plain_sk),
            reading_identity("dev-1#2", &plain_sk)
        );
        // One sort key under two entities: two readings.
        assert_ne!(
            reading_identity("dev-1#0", &plain_sk),
            reading_identity("dev-2#0", &plain_sk)
        );
        assert_eq!(reading_identity("OPS_LOG", "METADATA"), None);
    }

    #[test]
    fn readings_under_two_keys_are_counted_in_the_report() {
        let at = "2026-06-22T00:00:00.007Z";
        let sample = vec![
            // e1 under the cold key and a sub-shard, e2 written twice to one key, e3
            // once; dev-1's and dev-2's e9 are two readings.
            sampled("1#2026-06-22T00", &format!("dev-1#{at}#e1")),
            sampled("1.3#2026-06-22T00", &format!("dev-1#{at}#e1")),
            sampled("1#2026-06-22T00", &format!("dev-1#{at}#e2")),
            sampled("1#2026-06-22T00", &format!("dev-1#{at}#e2")),
            sampled("1.2#2026-06-22T00", &format!("dev-1#{at}#e3")),
            sampled("dev-1#0", &format!("{at}#e9")),
            sampled("dev-1#3", &format!("{at}#e9")),
            sampled("dev-2#3", &format!("{at}#e9")),
        ];
        let report = audit_sampled(&sample, &AuditConfig::default());
        let want = DuplicateReport {
            items: 7,
            readings: 5,
            duplicated: 2,
            extra_copies: 2,
        };
        assert_eq!(report.duplicates, Some(want));
        assert_eq!(report.writes, 8);
        assert!(
            report.text().contains(
                "duplicates: 2 of 5 readings stored under more than one partition key (2 extra items"
            ),
            "{}",
            report.text()
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["duplicates"]["duplicated"], 2);
        assert_eq!(json["duplicates"]["extra_copies"], 2);
    }

    #[test]
    fn without_sort_keys_duplicates_are_not_counted() {
        let line = r#"{"pk":"OPS_LOG","ts":"2026-06-22T10:00:00Z"}"#;
        let sample = vec![parse_sampled(line, 500).unwrap()];
        let report = audit_sampled(&sample, &AuditConfig::default());
        assert_eq!(report.duplicates, None);
        assert!(report.text().contains("duplicates: not counted"));
        let keyed = parse_sampled(r#"{"pk":"a","sk":"x","ts":1000}"#, 500).unwrap();
        assert_eq!(keyed.sk.as_deref(), Some("x"));
        assert_eq!(keyed.write.bytes, 500, "keys and a timestamp only");
    }
}
