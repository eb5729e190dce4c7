//! [`SqsQueue`]: the queue port ([`crate::queue::Queue`]) over SQS.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};

use aws_sdk_sqs::types::BatchResultErrorEntry;

use crate::queue::{
    Attributes, DeadLetter, Delay, MAX_BATCH_ENTRIES, MAX_DELAY_SECS, Queue, QueueError, Requeue,
    message_bytes,
};

/// Keep each `SendMessageBatch` request under SQS's 256 KiB payload limit.
const MAX_BATCH_BYTES: usize = 200 * 1024;

/// The queue port over SQS: `SendMessageBatch` to the DLQ, where the reason travels as
/// message attributes `reason`, `field`, `rule` and `source_message_id`
/// (`queue::DeadLetter`); and
/// `ChangeMessageVisibilityBatch` on the source queue, when its URL is known.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    dlq_url: String,
    source_url: Option<String>,
}

impl SqsQueue {
    /// An adapter sending dead letters to `dlq_url` and delaying redeliveries on
    /// `source_url` (without one, every delay fails and messages keep the queue's
    /// timeout).
    pub fn new(client: &Client, dlq_url: impl Into<String>, source_url: Option<String>) -> Self {
        Self {
            client: client.clone(),
            dlq_url: dlq_url.into(),
            source_url,
        }
    }

    /// Sends one message per entry to `queue_url`, in `SendMessageBatch` calls grouped
    /// by the entries' estimated `sizes`; one result per entry (an entry that could not
    /// be built fails alone).
    async fn send_all(
        &self,
        queue_url: &str,
        entries: Vec<Result<SendMessageBatchRequestEntry, QueueError>>,
        sizes: impl IntoIterator<Item = usize>,
    ) -> Vec<Result<(), QueueError>> {
        let mut results: Vec<Result<(), QueueError>> = vec![Ok(()); entries.len()];
        let mut entries: Vec<Option<Result<SendMessageBatchRequestEntry, QueueError>>> =
            entries.into_iter().map(Some).collect();
        for group in groups(sizes) {
            let mut batch = Vec::with_capacity(group.len());
            for &i in &group {
                match entries[i].take() {
                    Some(Ok(e)) => batch.push(e),
                    Some(Err(e)) => results[i] = Err(e),
                    None => {}
                }
            }
            if batch.is_empty() {
                continue;
            }
            let answer = self
                .client
                .send_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(batch))
                .send()
                .await;
            let failed = answer
                .as_ref()
                .map(|output| output.failed())
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string());
            record_answer(&mut results, &group, "SendMessageBatch", failed);
        }
        results
    }
}

/// One entry per message: `body` with `attributes`, as they are (the caller held them
/// to SQS's rules: `queue::DeadLetter::new`, `queue::with_attributes`).
fn message_entry(
    id: usize,
    body: &str,
    attributes: &Attributes,
    delay_secs: Option<u32>,
) -> Result<SendMessageBatchRequestEntry, QueueError> {
    let mut entry = SendMessageBatchRequestEntry::builder()
        .id(format!("m{id}"))
        .message_body(body)
        .set_delay_seconds(delay_secs.map(|d| i32::try_from(d.min(MAX_DELAY_SECS)).unwrap_or(0)));
    for (name, (data_type, value)) in attributes {
        let value = MessageAttributeValue::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
            .map_err(|e| QueueError::Invalid(e.to_string()))?;
        entry = entry.message_attributes(name, value);
    }
    entry
        .build()
        .map_err(|e| QueueError::Invalid(e.to_string()))
}

/// Indices of messages of these estimated sizes, grouped into `SendMessageBatch` calls.
fn groups(sizes: impl IntoIterator<Item = usize>) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for (i, size) in sizes.into_iter().enumerate() {
        match out.last_mut() {
            Some(group) if group.len() < MAX_BATCH_ENTRIES && bytes + size <= MAX_BATCH_BYTES => {
                group.push(i);
                bytes += size;
            }
            _ => {
                out.push(vec![i]);
                bytes = size;
            }
        }
    }
    out
}

/// Writes a batch call's answer into `results`: each entry SQS refused gets its code
/// and message (entry ids are `m{i}`); when the call failed as a whole, every entry of
/// `group` still without an error gets the call's.
fn record_answer(
    results: &mut [Result<(), QueueError>],
    group: &[usize],
    call: &'static str,
    answer: Result<&[BatchResultErrorEntry], String>,
) {
    match answer {
        Ok(failed) => {
            for f in failed {
                let index = f
                    .id()
                    .strip_prefix('m')
                    .and_then(|n| n.parse::<usize>().ok());
                if let Some(result) = index.and_then(|i| results.get_mut(i)) {
                    *result = Err(QueueError::Refused {
                        code: f.code().to_owned(),
                        message: f.message().unwrap_or("refused by SQS").to_owned(),
                    });
                }
            }
        }
        Err(reason) => {
            for &i in group {
                if let Some(result) = results.get_mut(i).filter(|r| r.is_ok()) {
                    *result = Err(QueueError::CallFailed {
                        call,
                        reason: reason.clone(),
                    });
                }
            }
        }
    }
}

impl Queue for SqsQueue {
    #[tracing::instrument(skip_all, fields(letters = letters.len()))]
    async fn dead_letter(&self, letters: &[DeadLetter]) -> Vec<Result<(), QueueError>> {
        let entries = letters
            .iter()
            .enumerate()
            .map(|(i, l)| message_entry(i, &l.body, &l.attributes, None))
            .collect();
        let sizes = letters
            .iter()
            .map(|l| message_bytes(&l.body, &l.attributes) + 64);
        self.send_all(&self.dlq_url, entries, sizes).await
    }

    #[tracing::instrument(skip_all, fields(delays = delays.len()))]
    async fn delay(&self, delays: &[Delay]) -> Vec<Result<(), QueueError>> {
        let Some(source_url) = &self.source_url else {
            return vec![Err(QueueError::NoSourceQueue); delays.len()];
        };
        let mut results: Vec<Result<(), QueueError>> = vec![Ok(()); delays.len()];
        let indices: Vec<usize> = (0..delays.len()).collect();
        for group in indices.chunks(MAX_BATCH_ENTRIES) {
            let mut entries = Vec::with_capacity(group.len());
            for &i in group {
                let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .receipt_handle(&delays[i].receipt_handle)
                    .visibility_timeout(
                        i32::try_from(delays[i].visibility_secs).unwrap_or(i32::MAX),
                    )
                    .build();
                match entry {
                    Ok(e) => entries.push(e),
                    Err(e) => results[i] = Err(QueueError::Invalid(e.to_string())),
                }
            }
            if entries.is_empty() {
                continue;
            }
            let answer = self
                .client
                .change_message_visibility_batch()
                .queue_url(source_url)
                .set_entries(Some(entries))
                .send()
                .await;
            let failed = answer
                .as_ref()
                .map(|output| output.failed())
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string());
            record_answer(&mut results, group, "ChangeMessageVisibilityBatch", failed);
        }
        results
    }

    #[tracing::instrument(skip_all, fields(copies = copies.len()))]
    async fn requeue(&self, copies: &[Requeue]) -> Vec<Result<(), QueueError>> {
        let Some(source_url) = &self.source_url else {
            return vec![Err(QueueError::NoSourceQueue); copies.len()];
        };
        let entries = copies
            .iter()
            .enumerate()
            .map(|(i, c)| message_entry(i, &c.body, &c.attributes, Some(c.delay_secs)))
            .collect();
        let sizes = copies
            .iter()
            .map(|c| message_bytes(&c.body, &c.attributes) + 64);
        self.send_all(source_url, entries, sizes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(body_len: usize) -> DeadLetter {
        DeadLetter::new(
            "id",
            &"x".repeat(body_len),
            "body",
            "must be valid JSON",
            &Attributes::new(),
            crate::queue::MAX_MESSAGE_BYTES,
        )
    }

    #[test]
    fn groups_respect_count_and_size() {
        let letters: Vec<DeadLetter> = (0..23).map(|_| letter(10)).collect();
        let size = |l: &DeadLetter| l.body.len() + 128;
        let sizes: Vec<usize> = groups(letters.iter().map(size))
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [10, 10, 3]);
        let big: Vec<DeadLetter> = (0..3).map(|_| letter(150 * 1024)).collect();
        assert_eq!(groups(big.iter().map(size)).len(), 3);
    }
}
