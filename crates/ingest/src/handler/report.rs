//! What one invocation did: every message's fate, the writer's counters and the
//! fan-out changes, the partial-batch response made of it, and its EMF lines.

use std::collections::BTreeSet;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use sharding::time::Timestamp;
use store::batch::WriteStats;

use super::IngestError;
use crate::emf::{self, Metric};
use crate::fate::Fate;

/// One message's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageReport {
    /// The SQS message id (empty when the record had none).
    pub message_id: String,
    /// Its fate.
    pub fate: Fate,
}

/// Everything one invocation did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// One entry per record, in order.
    pub messages: Vec<MessageReport>,
    /// The batch writer's counters (in items: a block is one).
    pub writes: WriteStats,
    /// Readings stored: each written item's readings (a block's members each), each
    /// stored key once.
    pub readings_written: u64,
    /// Fan-out raises this invocation won.
    pub fanout_raises: u64,
    /// Fan-out shrinks this invocation won.
    pub fanout_shrinks: u64,
    /// Items a raise made stale: given back unwritten by the writer, to be keyed again
    /// with the raised fan-out (and written, if the invocation's time allows).
    pub stale: u64,
    /// Messages the DLQ accepted.
    pub dead_lettered: u64,
    /// Messages whose DLQ send failed (they are reported instead).
    pub dlq_failures: u64,
    /// Messages whose processing panicked (they are reported).
    pub panics: u64,
    /// Reported messages given a longer visibility timeout before redelivery.
    pub delayed: u64,
    /// Reported messages whose visibility change failed (they come back after the
    /// queue's own timeout).
    pub delay_failures: u64,
    /// Messages sent back to the queue as fresh copies at their last receive.
    pub requeued: u64,
    /// Messages split: their unwritten readings sent back as a fresh copy.
    pub split: u64,
    /// Late marks written (one per device-hour of the written late readings).
    pub late_marks: u64,
    /// Late marks whose write failed (the readings of the messages holding them go back
    /// to the queue as copies holding stored readings, `Fate::Unmarked`).
    pub late_mark_failures: u64,
}

impl Report {
    /// The partial-batch response: the ids of the reported messages, each once.
    pub fn response(&self) -> Result<SqsBatchResponse, IngestError> {
        let mut response = SqsBatchResponse::default();
        let mut seen = BTreeSet::new();
        for m in &self.messages {
            if let Fate::Reported { .. } = m.fate {
                if m.message_id.is_empty() {
                    return Err(IngestError::MissingMessageId);
                }
                if seen.insert(m.message_id.as_str()) {
                    response.add_failure(m.message_id.clone());
                }
            }
        }
        Ok(response)
    }

    /// The error to return when every message was reported.
    pub fn all_failed(&self) -> Option<IngestError> {
        let mut reasons = self.messages.iter().map(|m| match &m.fate {
            Fate::Reported { reason } => Some(reason.clone()),
            _ => None,
        });
        let first = reasons.next()??;
        reasons
            .all(|r| r.is_some())
            .then_some(IngestError::AllFailed {
                messages: self.messages.len(),
                first,
            })
    }

    /// The EMF lines of this invocation.
    pub fn emf_lines(&self, now: Timestamp) -> Vec<String> {
        let count =
            |f: fn(&Fate) -> bool| self.messages.iter().filter(|m| f(&m.fate)).count() as u64;
        let dims = [("Function", "ingest")];
        let mut lines = vec![emf::line(
            now.as_millis(),
            &dims,
            &[
                Metric::count("Messages", self.messages.len() as u64),
                Metric::count("ReadingsWritten", self.readings_written),
                Metric::count("ItemsWritten", self.writes.written),
                Metric::count(
                    "BatchFailures",
                    count(|f| matches!(f, Fate::Reported { .. })),
                ),
                Metric::count("DeadLettered", self.dead_lettered),
                Metric::count("DlqSendFailures", self.dlq_failures),
                Metric::count("WriteCalls", self.writes.calls),
                Metric::count("Retries", self.writes.retries),
                Metric::count("UnprocessedItems", self.writes.unprocessed),
                Metric::count("TransientErrors", self.writes.transient_errors),
                Metric::count("LargeItems", self.writes.large_items),
                Metric::count("DuplicateItems", self.writes.duplicates),
                Metric::count("FanoutRaises", self.fanout_raises),
                Metric::count("FanoutShrinks", self.fanout_shrinks),
                Metric::count("StaleItems", self.stale),
                Metric::count("SplitRequeues", self.split),
                Metric::count("Panics", self.panics),
                Metric::count("RedeliveriesDelayed", self.delayed),
                Metric::count("DelayFailures", self.delay_failures),
                Metric::count("Requeued", self.requeued),
                Metric::count("LateMarks", self.late_marks),
                Metric::count("LateMarkFailures", self.late_mark_failures),
                // 1 when the handler fails this invocation on purpose (every message
                // failed transiently, so that Lambda backs off): the errors alarm
                // subtracts these from Lambda's Errors.
                Metric::count("BackoffInvocations", u64::from(self.all_failed().is_some())),
            ],
        )];
        for (reason, n) in &self.writes.throttles {
            lines.push(emf::line(
                now.as_millis(),
                &[("Function", "ingest"), ("Reason", reason)],
                &[Metric::count("Throttles", *n)],
            ));
        }
        lines
    }
}
