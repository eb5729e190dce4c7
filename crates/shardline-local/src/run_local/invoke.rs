//! One invocation, as the event source mapping makes it: the Lambda event for a batch,
//! the ingest handler under the function timeout, the counters, then the deletes of
//! what the handler settled.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use ingest::{Fate, Invocation, Report};
use store::queue::MAX_BATCH_ENTRIES;

use super::worker::Shared;

/// The Lambda event for `messages`, as the event source mapping builds it.
pub fn sqs_event(messages: &[Message], queue_arn: &str, region: &str) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|m| {
            let mut record = SqsMessage::default();
            record.message_id = m.message_id.clone();
            record.receipt_handle = m.receipt_handle.clone();
            record.body = m.body.clone();
            record.md5_of_body = m.md5_of_body.clone();
            record.md5_of_message_attributes = m.md5_of_message_attributes.clone();
            record.attributes = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            record.message_attributes = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| {
                            let mut attr = SqsMessageAttribute::default();
                            attr.string_value = v.string_value.clone();
                            attr.string_list_values = v.string_list_values().to_vec();
                            attr.data_type = Some(v.data_type().to_owned());
                            (k.clone(), attr)
                        })
                        .collect()
                })
                .unwrap_or_default();
            record.event_source_arn = Some(queue_arn.to_owned());
            record.event_source = Some("aws:sqs".to_owned());
            record.aws_region = Some(region.to_owned());
            record
        })
        .collect();
    event
}

/// One invocation: the handler in its own task (a panic fails the invocation, not
/// the runner) under the function timeout, then deletes.
pub(super) async fn invoke(shared: &Arc<Shared>, messages: Vec<Message>) {
    let Some(report) = run_handler(shared, &messages).await else {
        return;
    };
    let failed = reported_failures(&report);
    shared
        .stats
        .lock()
        .record_invocation(&report, failed.is_none());
    if let Some(failed) = failed {
        delete_settled(shared, &messages, &report, &failed).await;
    }
}

/// The handler's report on `messages`; `None` (counted) when the invocation did not
/// finish: no clock, a panic, or the function timeout.
async fn run_handler(shared: &Arc<Shared>, messages: &[Message]) -> Option<Report> {
    let event = sqs_event(messages, &shared.queue_arn, &shared.region);
    // The same start as the Lambda binary's: the clock read once, the deadline, an RNG.
    let mut invocation = match Invocation::start(shared.settings.function_timeout) {
        Ok(invocation) => invocation,
        Err(e) => {
            tracing::error!(error = %e, "no clock; the batch is left to come back");
            shared.stats.lock().failed_invocations += 1;
            return None;
        }
    };
    let (now, deadline) = (invocation.now, invocation.deadline);
    // Billed as Lambda bills: from the handler's start to its end or its timeout.
    let started = std::time::Instant::now();
    let ingest = shared.ingest.clone();
    let runtime = tokio::runtime::Handle::current();
    // The handler's future is not `Send` (so `tokio::spawn` refuses it); a blocking
    // thread driving it with `Handle::block_on` isolates a panic all the same.
    let mut task = tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            ingest
                .process(&event, now, deadline, &mut invocation.rng)
                .await
        })
    });
    let outcome = tokio::time::timeout_at(deadline, &mut task).await;
    shared.stats.lock().bill("ingest", started.elapsed());
    match outcome {
        Ok(Ok(report)) => Some(report),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the handler panicked; the batch is left to come back");
            let mut stats = shared.stats.lock();
            stats.batches += 1;
            stats.failed_invocations += 1;
            None
        }
        Err(_) => {
            // The handler keeps its own deadline and ends soon after; its result is
            // ignored, as Lambda ignores a timed-out invocation.
            tracing::warn!("the handler overran its timeout; the batch is left to come back");
            let mut stats = shared.stats.lock();
            stats.batches += 1;
            stats.failed_invocations += 1;
            stats.timeouts += 1;
            None
        }
    }
}

/// The ids of the messages the handler reported in `batchItemFailures`; `None` when
/// the invocation failed as a whole (then nothing of it is deleted).
fn reported_failures(report: &Report) -> Option<HashSet<String>> {
    match (report.all_failed(), report.response()) {
        (None, Ok(response)) => Some(
            response
                .batch_item_failures
                .into_iter()
                .map(|f| f.item_identifier)
                .collect(),
        ),
        (Some(e), _) | (None, Err(e)) => {
            tracing::warn!(error = %e, "the invocation failed as a whole");
            None
        }
    }
}

/// Deletes the messages not in `failed`, and records the write lag of each written
/// one deleted: from its `SentTimestamp` to now, by the wall clock.
async fn delete_settled(
    shared: &Shared,
    messages: &[Message],
    report: &Report,
    failed: &HashSet<String>,
) {
    let written: HashSet<&str> = report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Written { .. }))
        .map(|m| m.message_id.as_str())
        .collect();
    let done: Vec<&Message> = messages
        .iter()
        .filter(|m| {
            m.message_id
                .as_deref()
                .is_some_and(|id| !failed.contains(id))
        })
        .collect();
    let deleted = delete(shared, &done).await;
    // A clock that cannot be read counts the lags as 0.
    let now_ms =
        store::clock::wall_clock().map_or(0, |now| u64::try_from(now.as_millis()).unwrap_or(0));
    let mut stats = shared.stats.lock();
    for m in deleted {
        stats.deleted += 1;
        let sent = m
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
            .and_then(|s| s.parse::<u64>().ok());
        if let (Some(sent), Some(id)) = (sent, m.message_id.as_deref())
            && written.contains(id)
        {
            stats.write_lags_ms.push(now_ms.saturating_sub(sent));
        }
    }
}

/// Deletes `messages` in batches of ten, retrying failed entries twice; returns the
/// ones deleted. A message not deleted comes back after the visibility timeout.
async fn delete<'a>(shared: &Shared, messages: &[&'a Message]) -> Vec<&'a Message> {
    let mut deleted = Vec::with_capacity(messages.len());
    let mut failures = 0;
    for chunk in messages.chunks(MAX_BATCH_ENTRIES) {
        let mut pending: Vec<(usize, &'a Message)> = chunk.iter().copied().enumerate().collect();
        for attempt in 0..3u32 {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
            let entries: Vec<DeleteMessageBatchRequestEntry> = pending
                .iter()
                .filter_map(|(i, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                        .build()
                        .ok()
                })
                .collect();
            match shared
                .sqs
                .delete_message_batch()
                .queue_url(&shared.settings.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => {
                    let ok: HashSet<&str> = out.successful().iter().map(|s| s.id()).collect();
                    pending.retain(|(i, m)| {
                        if ok.contains(i.to_string().as_str()) {
                            deleted.push(*m);
                            false
                        } else {
                            true
                        }
                    });
                }
                Err(e) => tracing::warn!(
                    error = %aws_sdk_sqs::error::DisplayErrorContext(&e),
                    "DeleteMessageBatch failed"
                ),
            }
        }
        failures += pending.len();
    }
    shared.stats.lock().delete_failures += failures as u64;
    deleted
}
