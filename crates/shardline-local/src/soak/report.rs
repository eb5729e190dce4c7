//! The outcome of a soak: the [`Report`] of what was sent, stored, dead-lettered,
//! injected and read, with every broken promise, and its human summary.

use std::collections::BTreeMap;

use capacity_proxy::StatsSnapshot;
use serde::Serialize;

use super::slabs::SlabFigures;
use super::{HOT_DEVICE, ReaderStats};
use crate::accounting::Accounting;
use crate::publish;

/// The outcome of a soak.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub messages_sent: u64,
    pub valid_messages: u64,
    pub readings_sent: u64,
    pub malformed_sent: u64,
    pub send_failures: u64,
    /// Readings the table's items hold (a block's members each, a copy again), and
    /// distinct (device, event) among them.
    pub table_items: u64,
    pub table_distinct: u64,
    /// Items of the table that are blocks (many readings of one device).
    pub table_blocks: u64,
    /// Readings stored more than once, and the copies beyond each one's first.
    pub stored_again: u64,
    pub extra_copies: u64,
    pub missing: u64,
    pub unexpected: u64,
    /// DLQ messages, those naming a malformed message, and those with a reason.
    pub dlq_messages: u64,
    pub dlq_malformed: u64,
    pub dlq_with_reason: u64,
    /// DLQ messages repeating a source_message_id already there (crash between the
    /// handler's DLQ send and the delete).
    pub dlq_repeated_copies: u64,
    /// What became of each message the publisher had accepted, by run-local's received
    /// log, the table and the DLQ.
    pub accounting: Accounting,
    /// The DynamoDB the soak ran on (behind the proxy), in words.
    pub dynamodb: String,
    /// SIGKILLs delivered and run-local starts.
    pub kills: u32,
    pub starts: u32,
    /// When each SIGKILL came, in order.
    pub kill_moments: Vec<KillMoment>,
    /// Fan-out changes recorded in the shard table.
    pub fanout_raises: u64,
    /// Entities with a fan-out above 1.
    pub fanned_out_entities: u64,
    /// The proxy's counters (all runs of run-local together).
    pub proxy_requests: BTreeMap<String, u64>,
    pub proxy_unprocessed_items: u64,
    pub proxy_errors: u64,
    pub proxy_throttled: BTreeMap<String, u64>,
    /// The last run-local's own counters (killed runs lose theirs), JSON.
    pub last_run_local: Option<serde_json::Value>,
    pub reader: ReaderStats,
    /// Whether the soak ran in slab mode, and what its slab checks counted.
    pub slab_mode: bool,
    pub slabs: SlabFigures,
    /// Hot device: readings in the table and in the final paged read.
    pub hot_device_table: u64,
    pub hot_device_read: u64,
    pub publish_secs: f64,
    pub drain_secs: f64,
    /// The final paged read of the hot device, through the API.
    pub final_read_secs: f64,
    pub duration_secs: f64,
    /// Every broken promise, described; empty = the soak passed.
    pub violations: Vec<String>,
}

/// When a SIGKILL of run-local came: how far into publishing, on the clock and in
/// messages sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KillMoment {
    /// Seconds since the publisher started.
    pub secs: f64,
    /// Messages the publisher had sent.
    pub sent: u64,
}

/// `count` per 10,000 of `of`, to two decimals (`-` of nothing).
fn per_10k(count: u64, of: u64) -> String {
    if of == 0 {
        return "-".to_owned();
    }
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let rate = count as f64 * 10_000.0 / of as f64;
    format!("{rate:.2}")
}

impl Report {
    /// Extra copies of readings in the table per 10,000 valid messages sent: how often
    /// a message's readings were stored again.
    pub fn copies_per_10k_messages(&self) -> String {
        per_10k(self.extra_copies, self.valid_messages)
    }

    /// When the kills came, as "; killed at 9.8 s (26% sent), ... of publishing's 31.8 s"
    /// (nothing without kills): spread over the publishing, not bunched at its start.
    fn kill_moments_text(&self) -> String {
        if self.kill_moments.is_empty() {
            return String::new();
        }
        let moments: Vec<String> = self
            .kill_moments
            .iter()
            .map(|kill| {
                let percent = (kill.sent * 100)
                    .checked_div(self.messages_sent)
                    .unwrap_or(0);
                format!("{:.1} s ({percent}% sent)", kill.secs)
            })
            .collect();
        format!(
            "; killed at {} of publishing's {:.1} s",
            moments.join(", "),
            self.publish_secs
        )
    }

    /// The last run-local's own counters, when it reported them.
    fn last_run_local_text(&self) -> Option<String> {
        let stats = self.last_run_local.as_ref()?;
        Some(format!(
            "last run-local: write calls {}, retries {}, unprocessed {}, fan-out raises {}, messages {} (reported {}, requeued {})",
            stats["write_calls"],
            stats["write_retries"],
            stats["unprocessed_items"],
            stats["fanout_raises"],
            stats["messages"],
            stats["failures_reported"],
            stats["requeued"]
        ))
    }

    /// The human summary.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "sent: {} messages ({} valid with {} readings, {} malformed), {} send failures",
            self.messages_sent,
            self.valid_messages,
            self.readings_sent,
            self.malformed_sent,
            self.send_failures
        ));
        line(format!(
            "table: {} readings held ({} blocks), {} distinct readings, {} stored more than once ({} extra copies, one sort key each), {} missing, {} unexpected",
            self.table_items,
            self.table_blocks,
            self.table_distinct,
            self.stored_again,
            self.extra_copies,
            self.missing,
            self.unexpected
        ));
        line(format!(
            "stored copies: {} per 10,000 messages, {} per 10,000 readings (a retry or redelivery packed into another block, a re-key after a crash; reads answer each reading once)",
            self.copies_per_10k_messages(),
            per_10k(self.extra_copies, self.readings_sent)
        ));
        line(format!(
            "dlq: {} messages, {} of them malformed messages sent, {} with a reason, {} repeated copies",
            self.dlq_messages, self.dlq_malformed, self.dlq_with_reason, self.dlq_repeated_copies
        ));
        line(format!("messages: {}", self.accounting.text()));
        line(format!("DynamoDB: {}; SQS: moto", self.dynamodb));
        line(format!(
            "crashes: {} SIGKILLs, {} starts of run-local{}",
            self.kills,
            self.starts,
            self.kill_moments_text()
        ));
        line(format!(
            "faults injected by the proxy: {} unprocessed items, {} HTTP 500s; throttled {:?}",
            self.proxy_unprocessed_items, self.proxy_errors, self.proxy_throttled
        ));
        line(format!("proxy requests: {:?}", self.proxy_requests));
        if let Some(last) = self.last_run_local_text() {
            line(last);
        }
        line(format!(
            "fan-out raises (shard table): {} over {} entities",
            self.fanout_raises, self.fanned_out_entities
        ));
        line(format!(
            "reader: {} ranges, {} pages (mean {}, slowest {} ms), {} items; {} connection errors, {} 5xx, {} 4xx",
            self.reader.ranges,
            self.reader.pages,
            crate::run_local::ms(self.reader.mean_page_ms()),
            self.reader.slowest_page_ms,
            self.reader.items,
            self.reader.connection_errors,
            self.reader.server_errors,
            self.reader.client_errors
        ));
        if self.slab_mode {
            line(self.slabs.text());
        } else {
            line(format!(
                "hot device {HOT_DEVICE}: {} in the table, {} read back through the API",
                self.hot_device_table, self.hot_device_read
            ));
        }
        line(format!(
            "duration: {:.1} s (publish {:.1} s, drain {:.1} s, final read of {} {:.1} s)",
            self.duration_secs,
            self.publish_secs,
            self.drain_secs,
            if self.slab_mode {
                "the fleet"
            } else {
                HOT_DEVICE
            },
            self.final_read_secs
        ));
        if self.violations.is_empty() {
            line("result: PASS".to_owned());
        } else {
            line(format!(
                "result: FAIL ({} violations)",
                self.violations.len()
            ));
            for v in self.violations.iter().take(20) {
                line(format!("  - {v}"));
            }
        }
        s
    }

    /// What the publisher sent; a message SQS did not accept is a violation.
    pub(super) fn record_sent(&mut self, summary: &publish::Summary) {
        self.messages_sent = summary.sent.messages;
        self.valid_messages = summary.sent.valid_messages;
        self.readings_sent = summary.sent.readings;
        self.malformed_sent = summary.sent.malformed_total();
        self.send_failures = summary.send_failures;
        if summary.send_failures > 0 {
            self.violations.push(format!(
                "{} messages were not accepted by SQS",
                summary.send_failures
            ));
        }
    }

    /// What the proxy counted.
    pub(super) fn record_proxy(&mut self, stats: &StatsSnapshot) {
        self.proxy_requests = stats.requests_by_op.clone();
        self.proxy_unprocessed_items = stats.faults.unprocessed_items;
        self.proxy_errors = stats.faults.error;
        self.proxy_throttled = stats.throttled_by_reason.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_copies_are_counted_per_10000_messages_and_readings() {
        let report = Report {
            valid_messages: 200,
            readings_sent: 2_000,
            extra_copies: 3,
            ..Report::default()
        };
        assert_eq!(report.copies_per_10k_messages(), "150.00");
        assert!(
            report
                .text()
                .contains("stored copies: 150.00 per 10,000 messages, 15.00 per 10,000 readings"),
            "{}",
            report.text()
        );
        assert_eq!(Report::default().copies_per_10k_messages(), "-");
    }

    #[test]
    fn the_kills_are_told_with_how_far_publishing_had_come() {
        let report = Report {
            messages_sent: 200,
            publish_secs: 31.84,
            kills: 2,
            starts: 3,
            kill_moments: vec![
                KillMoment {
                    secs: 9.81,
                    sent: 52,
                },
                KillMoment {
                    secs: 21.0,
                    sent: 131,
                },
            ],
            ..Report::default()
        };
        assert!(
            report.text().contains(
                "crashes: 2 SIGKILLs, 3 starts of run-local; killed at 9.8 s (26% sent), 21.0 s (65% sent) of publishing's 31.8 s\n"
            ),
            "{}",
            report.text()
        );
        assert!(
            Report::default()
                .text()
                .contains("crashes: 0 SIGKILLs, 0 starts of run-local\n")
        );
    }
}
