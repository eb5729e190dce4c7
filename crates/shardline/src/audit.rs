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

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write as _};
use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use clap::Args;
use serde::Serialize;
use serde_json::Value;
use sharding::time::Timestamp;
use store::size::{item_size, write_units};

use crate::env::EnvLookup;

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
    /// The human report; one `FLAG` line per flagged key, or one `PASS` line.
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
/// and `bytes`/`size` or, for a full item, its estimated size; a line with only a key
/// and a timestamp counts `default_bytes`.
pub fn parse_line(line: &str, default_bytes: usize) -> Result<Write, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(o) = value else {
        return Err("not a JSON object".into());
    };
    let pk = match field(&o, &["pk", "PK"]) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err("no \"pk\" string".into()),
    };
    let ts_ms = field(&o, &["ts_ms", "ts", "timestamp"]).and_then(json_ts);
    let explicit = field(&o, &["bytes", "size"]).and_then(|v| match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    });
    let key_only = o
        .keys()
        .all(|k| matches!(k.as_str(), "pk" | "PK" | "ts" | "ts_ms" | "timestamp"));
    let bytes = match explicit {
        Some(b) => usize::try_from(b).unwrap_or(usize::MAX),
        None if key_only => default_bytes,
        None => o.iter().map(|(k, v)| k.len() + json_size(v)).sum(),
    };
    Ok(Write { pk, ts_ms, bytes })
}

/// Reads a JSONL sample; blank lines are skipped, a bad line is an error naming it.
pub fn read_sample(reader: impl BufRead, default_bytes: usize) -> anyhow::Result<Vec<Write>> {
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.context("cannot read the sample")?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(&line, default_bytes).map_err(|e| anyhow!("line {}: {e}", n + 1))?);
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

/// Scans a table into writes: the key attribute, a timestamp attribute (`ts_ms` by
/// default, number of epoch ms or RFC 3339 string) and each item's size.
pub async fn scan_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk_attribute: &str,
    ts_attribute: &str,
    limit: Option<u64>,
) -> anyhow::Result<Vec<Write>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| {
                anyhow!(
                    "cannot scan {table}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                )
            })?;
        for item in page.items() {
            let Some(AttributeValue::S(pk)) = item.get(pk_attribute) else {
                continue;
            };
            out.push(Write {
                pk: pk.clone(),
                ts_ms: item_ts(item, ts_attribute),
                bytes: item_size(item),
            });
            if limit.is_some_and(|l| out.len() as u64 >= l) {
                return Ok(out);
            }
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(out);
        }
    }
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
    /// DynamoDB endpoint of the scan (default: AWS_ENDPOINT_URL).
    #[arg(long)]
    pub endpoint_url: Option<String>,
    /// Env file to read (default: .local/stack.env when present).
    #[arg(long)]
    pub env_file: Option<PathBuf>,
    /// Partition key attribute of the scanned table.
    #[arg(long, default_value = "PK")]
    pub pk_attribute: String,
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
    let writes = match (&args.sample, &args.table) {
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
            let env = EnvLookup::load(args.env_file.as_deref())?;
            let sdk = env.sdk_config(args.endpoint_url.as_deref()).await;
            let client = aws_sdk_dynamodb::Client::new(&sdk);
            scan_table(
                &client,
                table,
                &args.pk_attribute,
                &args.ts_attribute,
                args.limit,
            )
            .await?
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
    let report = audit(writes, &config);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("cannot encode the report")?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", report.text())?;
    }
    Ok(())
}
