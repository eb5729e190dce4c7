//! The audit of a sample, pure: per key, writes and WCU (from each item's size,
//! DynamoDB's 1 KB rule), the busiest second, and how much the key will hold over its
//! life; the keys flagged against the partition limits; and the key patterns.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use sharding::capacity::PARTITION_WCU;
use store::scan::Tier;
use store::size::write_units;

use super::duplicates::{DuplicateReport, count_duplicates};
use super::keys::{TimeBucket, key_pattern};
use super::report::human_bytes;

/// One partition's storage, bytes (~10 GB).
pub const PARTITION_BYTES: f64 = 10.0 * 1024.0 * 1024.0 * 1024.0;

/// Seconds in a day.
const DAY_SECS: f64 = 86_400.0;

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
    /// Where the item is a block, slab or run, its members' own sort keys (a scan reads
    /// them; a sample's lines carry none).
    pub members: Vec<String>,
    /// What kind of item it is (a sample's lines are read as a device's own).
    pub tier: Tier,
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
    /// Readings held by more than one item; `None` when the input has
    /// no sort keys (set by [`AuditReport::with_duplicates`]).
    pub duplicates: Option<DuplicateReport>,
}

/// Audits a sample whose items may carry sort keys: [`audit`] on the writes, with the
/// duplicate count when any item has a sort key.
pub fn audit_sampled(sample: &[Sampled], config: &AuditConfig) -> AuditReport {
    let duplicates = sample
        .iter()
        .any(|s| s.sk.is_some())
        .then(|| count_duplicates(sample));
    let report = audit(sample.iter().map(|s| s.write.clone()), config);
    match duplicates {
        Some(d) => report.with_duplicates(d),
        None => report,
    }
}

/// Audits a sample of writes: tallies them per key, judges each key, ranks the keys
/// and the flagged ones, and groups the keys by pattern.
pub fn audit(writes: impl IntoIterator<Item = Write>, config: &AuditConfig) -> AuditReport {
    let tally = Tally::of(writes);
    let span_secs = tally.span_secs();
    let mut reports: Vec<KeyReport> = tally
        .keys
        .iter()
        .map(|(pk, acc)| judge_key(pk, acc, &tally, span_secs, config))
        .collect();
    reports.sort_by(|a, b| b.writes.cmp(&a.writes).then_with(|| a.pk.cmp(&b.pk)));
    let flagged = flagged(&reports);
    AuditReport {
        config: config.clone(),
        writes: tally.total,
        writes_without_ts: tally.without_ts,
        cardinality: tally.keys.len() as u64,
        span_secs,
        table_peak_wcu_per_sec: tally
            .table_seconds
            .values()
            .max()
            .map(|w| *w as f64 * config.scale),
        avg_item_bytes: if tally.total == 0 {
            0.0
        } else {
            tally.bytes as f64 / tally.total as f64
        },
        top: reports.into_iter().take(config.top).collect(),
        flagged,
        patterns: patterns(&tally),
        duplicates: None,
    }
}

/// One key's writes in the sample.
#[derive(Default)]
struct Acc {
    writes: u64,
    wcu: u64,
    bytes: u64,
    /// WCU per epoch second.
    per_second: HashMap<i64, u64>,
}

/// The sample, counted per key and per second.
struct Tally {
    keys: HashMap<String, Acc>,
    /// The table's WCU per epoch second.
    table_seconds: HashMap<i64, u64>,
    total: u64,
    without_ts: u64,
    bytes: u64,
    /// The first and last timestamps, epoch ms (`first > last`: none).
    first: i64,
    last: i64,
}

impl Tally {
    fn of(writes: impl IntoIterator<Item = Write>) -> Self {
        let mut tally = Tally {
            keys: HashMap::new(),
            table_seconds: HashMap::new(),
            total: 0,
            without_ts: 0,
            bytes: 0,
            first: i64::MAX,
            last: i64::MIN,
        };
        for w in writes {
            let wcu = write_units(w.bytes) as u64;
            let acc = tally.keys.entry(w.pk).or_default();
            acc.writes += 1;
            acc.wcu += wcu;
            acc.bytes += w.bytes as u64;
            tally.total += 1;
            tally.bytes += w.bytes as u64;
            match w.ts_ms {
                Some(ms) => {
                    let second = ms.div_euclid(1000);
                    *acc.per_second.entry(second).or_default() += wcu;
                    *tally.table_seconds.entry(second).or_default() += wcu;
                    tally.first = tally.first.min(ms);
                    tally.last = tally.last.max(ms);
                }
                None => tally.without_ts += 1,
            }
        }
        tally
    }

    /// Seconds from the first timestamp to the last, at least 1 when there is any;
    /// 0 without timestamps.
    fn span_secs(&self) -> f64 {
        if self.first <= self.last {
            ((self.last - self.first) as f64 / 1000.0).max(1.0)
        } else {
            0.0
        }
    }

    /// `n` writes as a share of the sample's.
    fn share(&self, n: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            n as f64 / self.total as f64
        }
    }
}

/// One key's report: its peak second, its life and projected size, and its flags.
fn judge_key(
    pk: &str,
    acc: &Acc,
    tally: &Tally,
    span_secs: f64,
    config: &AuditConfig,
) -> KeyReport {
    let retention_secs = config.retention_days * DAY_SECS;
    let peak = acc
        .per_second
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(s, w)| (*s, *w as f64 * config.scale));
    let bucket = TimeBucket::of_key(pk);
    let lifetime = bucket.map_or(retention_secs, |b| b.secs().min(retention_secs));
    // The rate while the key is written: over the whole sample for a key that lives
    // for ever, over at most its bucket for a time-bucketed one.
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
    KeyReport {
        pk: pk.to_owned(),
        writes: acc.writes,
        share: tally.share(acc.writes),
        wcu: acc.wcu,
        peak_wcu_per_sec: peak.map(|p| p.1),
        peak_second: peak.map(|p| p.0),
        bucket,
        lifetime_days: lifetime / DAY_SECS,
        projected_bytes: projected,
        flags: flags(peak, projected, lifetime, config),
    }
}

/// Why a key fails: its peak second (epoch second, WCU/s) over the partition limit,
/// or its `projected` bytes over its `lifetime` (seconds) past one partition's size.
fn flags(
    peak: Option<(i64, f64)>,
    projected: f64,
    lifetime: f64,
    config: &AuditConfig,
) -> Vec<String> {
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
            lifetime / DAY_SECS,
            human_bytes(config.partition_bytes)
        ));
    }
    flags
}

/// The flagged keys of `reports`, by peak WCU/s, then projected size, then key.
fn flagged(reports: &[KeyReport]) -> Vec<KeyReport> {
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
    flagged
}

/// The keys grouped by [`key_pattern`], by writes, then pattern.
fn patterns(tally: &Tally) -> Vec<PatternReport> {
    let mut by_pattern: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (pk, acc) in &tally.keys {
        let entry = by_pattern.entry(key_pattern(pk)).or_default();
        entry.0 += 1;
        entry.1 += acc.writes;
    }
    let mut patterns: Vec<PatternReport> = by_pattern
        .into_iter()
        .map(|(pattern, (cardinality, writes))| PatternReport {
            pattern,
            cardinality,
            writes,
            share: tally.share(writes),
        })
        .collect();
    patterns.sort_by(|a, b| {
        b.writes
            .cmp(&a.writes)
            .then_with(|| a.pattern.cmp(&b.pattern))
    });
    patterns
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use crate::audit::sample::parse_sampled;

    fn sampled(pk: &str, sk: &str) -> Sampled {
        Sampled {
            write: Write {
                pk: pk.into(),
                ts_ms: Some(1_782_086_400_000),
                bytes: 500,
            },
            sk: Some(sk.into()),
            members: Vec::new(),
            tier: Tier::Own,
        }
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
