//! The human report of an audit: the sample in one line, the duplicates, the key
//! patterns, the top keys, then one `FLAG` line per flagged key or one `PASS` line.

use store::size::write_units;

use super::analysis::AuditReport;
use super::duplicates::DuplicateReport;

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

/// Bytes in the largest binary unit that keeps the number at least 1, e.g. `10.0 GB`.
pub(super) fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}
