//! Stage 7: what leaves the batch. Copies of messages (a split message's unwritten
//! readings, a message at its last receive) go back to the queue, refused messages to
//! the DLQ with their reason, and reported messages get their redelivery wait; then
//! each message's fate is logged.

use aws_lambda_events::event::sqs::SqsMessage;
use rand::Rng;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::queue::{DeadLetter, Delay, MAX_DELAY_SECS, Queue, QueueError, Requeue};
use tokio::time::Instant;

use super::record::{
    CopyFlags, copy_of, holds_stored, message_budget, receive_count, requeue_count, seal_of,
    sender, sender_attributes, source_id,
};
use super::report::MessageReport;
use super::{BatchContext, Ingest};
use crate::fate::{CopyBody, Fate, Leave, LeavePolicy, Receipt, Settled, Unmarked, leave};
use crate::front_door::Sender;
use crate::message::{Refusal, to_body};

/// The answers of a queue call for `entries`, or, when `deadline` comes first, a
/// deadline error for each, saying what the call was `doing`.
async fn by_deadline(
    deadline: Instant,
    doing: &'static str,
    entries: usize,
    call: impl Future<Output = Vec<Result<(), QueueError>>>,
) -> Vec<Result<(), QueueError>> {
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or_else(|_| vec![Err(QueueError::Deadline { doing }); entries])
}

/// What [`Ingest::leave_stage`] did.
pub(super) struct Leaving {
    pub(super) fates: Vec<Option<Fate>>,
    pub(super) dead_lettered: u64,
    pub(super) dlq_failures: u64,
    pub(super) requeued: u64,
    pub(super) split: u64,
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Stage 7: what leaves the batch. A split message's unwritten readings, and a
    /// message still failing at its last receive (while it may be requeued), go back to
    /// the queue as fresh copies; refused messages, and those out of requeues, go to the
    /// DLQ with their reason; the stored readings of a failed late mark (`unmarked`,
    /// per message) go back as a copy holding stored readings, never to the DLQ. A
    /// failed send leaves the message reported.
    pub(super) async fn leave_stage<R: Rng + ?Sized>(
        &self,
        settled: Vec<Settled>,
        unmarked: Vec<Option<Unmarked>>,
        cx: &BatchContext<'_>,
        rng: &mut R,
    ) -> Leaving {
        let policy = LeavePolicy {
            can_requeue: self.config.source_queue_url.is_some(),
            counts_copies: self.config.sender_id.is_some(),
            max_receives: self.config.max_receives,
            max_requeues: self.config.max_requeues,
        };
        let own = self.config.sender_id.as_deref();
        let iot = self.config.iot_sender_id.as_deref();
        let mut fates: Vec<Option<Fate>> = Vec::with_capacity(settled.len());
        // Per copy: its message, the fate once sent, and the copy.
        let mut copies: Vec<(usize, Fate, Requeue)> = Vec::new();
        let mut unmarked = unmarked.into_iter();
        for (m, settled) in settled.into_iter().enumerate() {
            let record = &cx.records[m];
            let receipt = Receipt {
                receives: receive_count(record),
                requeues: requeue_count(record, own),
                stored: holds_stored(record, own),
            };
            let fate = match leave(settled, unmarked.next().flatten(), receipt, policy) {
                Leave::Stay(fate) => fate,
                Leave::Copy {
                    body,
                    requeues,
                    stored,
                    wait_after,
                    sent,
                    reason,
                } => {
                    // A remainder is plain readings, already held to their thing; a
                    // whole copy keeps the rule's envelope, and its mark.
                    let (body, front_door) = match body {
                        CopyBody::Readings(readings) => (to_body(&readings), false),
                        CopyBody::Whole => (
                            record.body.clone().unwrap_or_default(),
                            sender(record, own, iot, self.config.front_door_key.keys())
                                == Sender::IotRule,
                        ),
                    };
                    let wait = self.config.redelivery.visibility(wait_after, rng);
                    let delay = u32::try_from(wait.as_secs()).unwrap_or(MAX_DELAY_SECS);
                    let flags = CopyFlags { front_door, stored };
                    let copy = copy_of(record, own, &cx.ids[m], body, requeues, delay, flags);
                    copies.push((m, sent, copy));
                    Fate::Reported { reason }
                }
            };
            fates.push(Some(fate));
        }
        let (dead_lettered, dlq_failures) = self.dead_letter(&mut fates, cx).await;
        let (requeued, split) = self.send_copies(&mut fates, copies, cx).await;
        Leaving {
            fates,
            dead_lettered,
            dlq_failures,
            requeued,
            split,
        }
    }

    /// Sends the dead-lettered messages to the DLQ at once; a failed send is reported
    /// instead. Returns the sends accepted and failed. Each letter is one SQS accepts
    /// whatever the refusal echoes (`DeadLetter::new`): its reason in attributes cut to
    /// SQS's character set and 256 characters, the seal of a message read as the IoT
    /// rule's, the sender's attributes as far as SQS's 10 allow, and a body too large to
    /// take them wrapped with its digest.
    async fn dead_letter(&self, fates: &mut [Option<Fate>], cx: &BatchContext<'_>) -> (u64, u64) {
        let own = self.config.sender_id.as_deref();
        let iot = self.config.iot_sender_id.as_deref();
        let keys = self.config.front_door_key.keys();
        let letters: Vec<(usize, DeadLetter)> = fates
            .iter()
            .enumerate()
            .filter_map(|(m, fate)| match fate {
                Some(Fate::DeadLettered { reason }) => {
                    let Refusal { field, rule } = reason;
                    let record = &cx.records[m];
                    let body = record.body.as_deref().unwrap_or_default();
                    // A letter of the rule's message carries the seal that makes it the
                    // rule's again when redriven (`crate::seal`).
                    let from = sender(record, own, iot, keys);
                    Some((
                        m,
                        DeadLetter::with_body_attributes(
                            &source_id(record, own, &cx.ids[m]),
                            body,
                            field,
                            rule,
                            seal_of(body, from, keys),
                            &sender_attributes(record),
                            message_budget(record),
                        ),
                    ))
                }
                _ => None,
            })
            .collect();
        if letters.is_empty() {
            return (0, 0);
        }
        let batch: Vec<DeadLetter> = letters.iter().map(|(_, l)| l.clone()).collect();
        let results = by_deadline(
            cx.deadline,
            "sending to the DLQ",
            batch.len(),
            self.queue.dead_letter(&batch),
        )
        .await;
        let (mut sent, mut failed) = (0, 0);
        for ((m, letter), result) in letters.iter().zip(results) {
            match result {
                Ok(()) => sent += 1,
                Err(why) => {
                    failed += 1;
                    fates[*m] = Some(Fate::Reported {
                        reason: format!(
                            "DLQ send failed ({why}) for refused message: {}",
                            letter.reason()
                        ),
                    });
                }
            }
        }
        (sent, failed)
    }

    /// Sends the copies; each sent one gives its message the fate it carries, a failed
    /// one leaves the message reported. Returns the requeued and split messages.
    async fn send_copies(
        &self,
        fates: &mut [Option<Fate>],
        copies: Vec<(usize, Fate, Requeue)>,
        cx: &BatchContext<'_>,
    ) -> (u64, u64) {
        if copies.is_empty() {
            return (0, 0);
        }
        let batch: Vec<Requeue> = copies.iter().map(|(_, _, c)| c.clone()).collect();
        let results = by_deadline(
            cx.deadline,
            "requeueing",
            batch.len(),
            self.queue.requeue(&batch),
        )
        .await;
        let (mut requeued, mut split) = (0, 0);
        for ((m, sent, _), result) in copies.into_iter().zip(results) {
            match result {
                Ok(()) => {
                    // A copy for late marks is counted by the report's mark failures.
                    match sent {
                        Fate::Split { .. } => split += 1,
                        Fate::Requeued { .. } => requeued += 1,
                        _ => {}
                    }
                    fates[m] = Some(sent);
                }
                Err(why) => {
                    tracing::warn!(message_id = %cx.ids[m], error = %why, "requeue failed; the message stays reported");
                }
            }
        }
        (requeued, split)
    }

    /// Stage 8's log line per message, and the reports.
    pub(super) fn log_fates(
        &self,
        fates: Vec<Option<Fate>>,
        cx: &BatchContext<'_>,
    ) -> Vec<MessageReport> {
        fates
            .into_iter()
            .zip(&cx.ids)
            .zip(&cx.spans)
            .map(|((fate, message_id), span)| {
                let fate = fate.unwrap_or(Fate::Reported {
                    reason: "no outcome recorded".to_owned(),
                });
                span.in_scope(|| match &fate {
                    Fate::Written { readings } => tracing::debug!(readings, "written"),
                    Fate::DeadLettered { reason } => tracing::info!(%reason, "dead-lettered"),
                    Fate::Reported { reason } => tracing::warn!(%reason, "reported for redelivery"),
                    Fate::Requeued { reason } => {
                        tracing::warn!(%reason, "requeued as a fresh copy")
                    }
                    Fate::Split {
                        written,
                        requeued,
                        reason,
                    } => {
                        tracing::info!(written, requeued, %reason, "unwritten readings requeued")
                    }
                    Fate::Unmarked {
                        written,
                        requeued: 0,
                        reason,
                    } => tracing::error!(
                        written,
                        %reason,
                        "readings stored but their late mark is not written, and no queue to \
                         send them back to: `shardline seal` over their hour counts them"
                    ),
                    Fate::Unmarked {
                        written,
                        requeued,
                        reason,
                    } => {
                        tracing::warn!(written, requeued, %reason, "stored readings requeued for their late marks")
                    }
                });
                MessageReport {
                    message_id: message_id.clone(),
                    fate,
                }
            })
            .collect()
    }

    /// Gives each reported message with a receipt handle the redelivery wait of its
    /// receive count (`ApproximateReceiveCount`, 1 when absent). Returns how many were
    /// delayed and how many changes failed; nothing when no source queue is configured.
    pub(super) async fn delay_reported<R: Rng + ?Sized>(
        &self,
        records: &[SqsMessage],
        fates: &[Option<Fate>],
        deadline: Instant,
        rng: &mut R,
    ) -> (u64, u64) {
        if self.config.source_queue_url.is_none() {
            return (0, 0);
        }
        let delays: Vec<Delay> = records
            .iter()
            .zip(fates)
            .filter(|(_, fate)| matches!(fate, Some(Fate::Reported { .. }) | None))
            .filter_map(|(record, _)| {
                let receipt_handle = record.receipt_handle.clone()?;
                let wait = self
                    .config
                    .redelivery
                    .visibility(receive_count(record), rng);
                Some(Delay {
                    receipt_handle,
                    visibility_secs: u32::try_from(wait.as_secs()).unwrap_or(u32::MAX),
                })
            })
            .collect();
        if delays.is_empty() {
            return (0, 0);
        }
        let results = by_deadline(
            deadline,
            "delaying redeliveries",
            delays.len(),
            self.queue.delay(&delays),
        )
        .await;
        let failed: Vec<&QueueError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        if let Some(first) = failed.first() {
            tracing::warn!(
                failed = failed.len(),
                error = %first,
                "redelivery delay not set; those messages come back after the queue's timeout"
            );
        }
        let failed = failed.len() as u64;
        (delays.len() as u64 - failed, failed)
    }
}
