//! The runner's counters: what it received, what the handler did with each message,
//! what was deleted, and the write lag.

use std::collections::BTreeMap;

use ingest::{Fate, Report};
use serde::Serialize;

/// What the runner did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Handler invocations.
    pub batches: u64,
    /// Messages received (redeliveries counted again).
    pub messages: u64,
    /// Messages whose readings were all written.
    pub written_messages: u64,
    /// Readings written (each distinct item the batch writer stored counts its readings:
    /// one, or a block's members).
    pub readings_written: u64,
    /// Messages the handler sent to the DLQ itself.
    pub dead_lettered: u64,
    /// Messages reported in `batchItemFailures` (they come back).
    pub failures_reported: u64,
    /// Messages sent back to the queue as fresh copies at their last receive (the
    /// original is deleted, the copy comes back).
    pub requeued: u64,
    /// Messages split: their stored readings acknowledged, the unwritten rest (or the
    /// readings whose late marks failed) sent back as a fresh copy.
    #[serde(default)]
    pub split: u64,
    /// Invocations that failed as a whole (every message failed, a panic, a timeout):
    /// nothing of them was deleted.
    pub failed_invocations: u64,
    /// Of those, invocations that overran `--function-timeout`.
    pub timeouts: u64,
    /// Messages deleted from the queue.
    pub deleted: u64,
    /// Deletes that failed after retries (those messages come back).
    pub delete_failures: u64,
    /// ReceiveMessage calls that failed.
    pub receive_errors: u64,
    /// Receives whose ids could not be appended to the received log.
    #[serde(default)]
    pub received_log_errors: u64,
    /// `BatchWriteItem` calls, retries, unprocessed items.
    pub write_calls: u64,
    /// Retried write calls.
    pub write_retries: u64,
    /// Items returned unprocessed.
    pub unprocessed_items: u64,
    /// Throttled write calls by reason.
    pub throttles: BTreeMap<String, u64>,
    /// Fan-out raises won.
    pub fanout_raises: u64,
    /// Fan-out shrinks won.
    #[serde(default)]
    pub fanout_shrinks: u64,
    /// Items a raise made stale: given back unwritten by the writer, to be keyed again.
    #[serde(default)]
    pub stale: u64,
    /// DLQ sends that failed (those messages were reported).
    pub dlq_failures: u64,
    /// Milliseconds from a message's `SentTimestamp` to its deletion after a
    /// successful write, over written messages.
    #[serde(skip)]
    pub write_lags_ms: Vec<u64>,
    /// p50 of the write lag, milliseconds.
    pub write_lag_p50_ms: Option<u64>,
    /// p99 of the write lag, milliseconds.
    pub write_lag_p99_ms: Option<u64>,
    /// Each function's invocations and billed milliseconds, by name (`ingest`, `query`,
    /// `sealer`): what Lambda would bill, timed in process (a local duration stands in
    /// for Lambda's).
    #[serde(default)]
    pub functions: BTreeMap<String, Billed>,
}

/// One function's invocations and their durations, each rounded up to a whole
/// millisecond as Lambda bills them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Billed {
    pub invocations: u64,
    pub billed_ms: u64,
}

impl Billed {
    /// Counts one invocation that took `elapsed`.
    pub fn add(&mut self, elapsed: std::time::Duration) {
        self.invocations += 1;
        self.billed_ms += u64::try_from(elapsed.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    }
}

impl Stats {
    /// Counts an invocation of `function` that took `elapsed`.
    pub fn bill(&mut self, function: &str, elapsed: std::time::Duration) {
        self.functions
            .entry(function.to_owned())
            .or_default()
            .add(elapsed);
    }

    /// The write lag's percentiles, from the lags gathered so far.
    pub(super) fn finish(&mut self) {
        let mut lags = self.write_lags_ms.clone();
        lags.sort_unstable();
        let pick = |q: f64| {
            (!lags.is_empty()).then(|| {
                let i = ((lags.len() as f64 * q).ceil() as usize).clamp(1, lags.len()) - 1;
                lags[i]
            })
        };
        self.write_lag_p50_ms = pick(0.50);
        self.write_lag_p99_ms = pick(0.99);
    }

    /// The human summary, several lines.
    pub fn text(&self) -> String {
        let throttles: u64 = self.throttles.values().sum();
        format!(
            "batches {}, messages {} (written {}, dead-lettered {}, reported {}, requeued {}, split {}), failed invocations {} ({} timeouts)\n\
             deleted {}, delete failures {}, receive errors {}\n\
             readings written {}, write calls {} ({} retries, {} unprocessed items, {} throttled calls), fan-out raises {} (items re-keyed {}), shrinks {}, DLQ send failures {}\n\
             write lag p50 {}, p99 {}",
            self.batches,
            self.messages,
            self.written_messages,
            self.dead_lettered,
            self.failures_reported,
            self.requeued,
            self.split,
            self.failed_invocations,
            self.timeouts,
            self.deleted,
            self.delete_failures,
            self.receive_errors,
            self.readings_written,
            self.write_calls,
            self.write_retries,
            self.unprocessed_items,
            throttles,
            self.fanout_raises,
            self.stale,
            self.fanout_shrinks,
            self.dlq_failures,
            ms(self.write_lag_p50_ms),
            ms(self.write_lag_p99_ms),
        )
    }

    /// Counts a finished invocation's `report`; `whole_failure` when the invocation
    /// failed as a whole (nothing of it is deleted).
    pub(super) fn record_invocation(&mut self, report: &Report, whole_failure: bool) {
        self.batches += 1;
        self.readings_written += report.readings_written;
        self.write_calls += report.writes.calls;
        self.write_retries += report.writes.retries;
        self.unprocessed_items += report.writes.unprocessed;
        for (reason, n) in &report.writes.throttles {
            *self.throttles.entry(reason.clone()).or_default() += n;
        }
        self.fanout_raises += report.fanout_raises;
        self.fanout_shrinks += report.fanout_shrinks;
        self.stale += report.stale;
        self.dlq_failures += report.dlq_failures;
        for m in &report.messages {
            match m.fate {
                Fate::Written { .. } => self.written_messages += 1,
                Fate::DeadLettered { .. } => self.dead_lettered += 1,
                Fate::Reported { .. } => self.failures_reported += 1,
                Fate::Requeued { .. } => self.requeued += 1,
                // Stored, and some of its readings sent back for their late marks.
                Fate::Split { .. } | Fate::Unmarked { .. } => self.split += 1,
            }
        }
        if whole_failure {
            self.failed_invocations += 1;
        }
    }
}

/// A duration in milliseconds, or `-` when there is none.
pub(crate) fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v} ms"))
}
