//! The dead-letter path: refused messages go to the DLQ at once, with their reason.
//!
//! A permanent error is sent straight to the dead-letter queue rather than reported as
//! a failure, so SQS does not redeliver it five times before the redrive does the same.
//! Only a failed send is reported, so the message comes back and nothing is lost.

use std::future::Future;
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

/// At most 10 entries per `SendMessageBatch`.
const MAX_ENTRIES: usize = 10;
/// Keep each `SendMessageBatch` request under SQS's 256 KiB payload limit.
const MAX_BATCH_BYTES: usize = 200 * 1024;

/// A refused message on its way to the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The source message's id.
    pub message_id: String,
    /// The body, unchanged, so it can be inspected and replayed.
    pub body: String,
    /// The refused field (`body` for the message as a whole).
    pub field: String,
    /// The rule it broke.
    pub rule: String,
}

impl DeadLetter {
    /// `field: rule`.
    pub fn reason(&self) -> String {
        format!("{}: {}", self.field, self.rule)
    }
}

/// The port: send dead letters; one result per letter, in order.
pub trait DeadLetters: Send + Sync {
    /// Sends `letters`; `Err(why)` for each one that was not accepted.
    fn send(&self, letters: &[DeadLetter]) -> impl Future<Output = Vec<Result<(), String>>> + Send;
}

/// The DLQ over SQS `SendMessageBatch`; the reason travels as message attributes
/// `reason`, `field`, `rule` and `source_message_id`.
#[derive(Debug, Clone)]
pub struct SqsDeadLetters {
    client: Client,
    queue_url: String,
}

impl SqsDeadLetters {
    /// An adapter sending to `queue_url`.
    pub fn new(client: &Client, queue_url: impl Into<String>) -> Self {
        Self {
            client: client.clone(),
            queue_url: queue_url.into(),
        }
    }
}

fn attribute(value: &str) -> Result<MessageAttributeValue, String> {
    // SQS refuses empty attribute values.
    let value = if value.is_empty() { "-" } else { value };
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| e.to_string())
}

fn entry(id: usize, letter: &DeadLetter) -> Result<SendMessageBatchRequestEntry, String> {
    SendMessageBatchRequestEntry::builder()
        .id(format!("m{id}"))
        .message_body(&letter.body)
        .message_attributes("reason", attribute(&letter.reason())?)
        .message_attributes("field", attribute(&letter.field)?)
        .message_attributes("rule", attribute(&letter.rule)?)
        .message_attributes("source_message_id", attribute(&letter.message_id)?)
        .build()
        .map_err(|e| e.to_string())
}

fn groups(letters: &[DeadLetter]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for (i, letter) in letters.iter().enumerate() {
        let size = letter.body.len() + letter.reason().len() * 2 + letter.message_id.len() + 128;
        match out.last_mut() {
            Some(group) if group.len() < MAX_ENTRIES && bytes + size <= MAX_BATCH_BYTES => {
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

impl DeadLetters for SqsDeadLetters {
    #[tracing::instrument(skip_all, fields(letters = letters.len()))]
    async fn send(&self, letters: &[DeadLetter]) -> Vec<Result<(), String>> {
        let mut results: Vec<Result<(), String>> = vec![Ok(()); letters.len()];
        for group in groups(letters) {
            let mut entries = Vec::with_capacity(group.len());
            for &i in &group {
                match entry(i, &letters[i]) {
                    Ok(e) => entries.push(e),
                    Err(e) => results[i] = Err(e),
                }
            }
            if entries.is_empty() {
                continue;
            }
            match self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(output) => {
                    for failed in output.failed() {
                        let index = failed
                            .id()
                            .strip_prefix('m')
                            .and_then(|n| n.parse::<usize>().ok());
                        if let Some(i) = index.filter(|i| *i < results.len()) {
                            results[i] = Err(format!(
                                "{}: {}",
                                failed.code(),
                                failed.message().unwrap_or("refused by SQS")
                            ));
                        }
                    }
                }
                Err(e) => {
                    let why = format!(
                        "SendMessageBatch failed: {}",
                        aws_sdk_sqs::error::DisplayErrorContext(&e)
                    );
                    for &i in &group {
                        if results[i].is_ok() {
                            results[i] = Err(why.clone());
                        }
                    }
                }
            }
        }
        results
    }
}

/// An in-memory DLQ for tests; clones share the queue.
#[derive(Debug, Clone, Default)]
pub struct MemoryDeadLetters {
    state: Arc<Mutex<(Vec<DeadLetter>, bool)>>,
}

impl MemoryDeadLetters {
    /// An empty queue that accepts every letter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every send fail (`true`) or succeed again.
    pub fn set_failing(&self, failing: bool) {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1 = failing;
    }

    /// The letters accepted so far.
    pub fn letters(&self) -> Vec<DeadLetter> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
            .clone()
    }
}

impl DeadLetters for MemoryDeadLetters {
    async fn send(&self, letters: &[DeadLetter]) -> Vec<Result<(), String>> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.1 {
            return vec![Err("injected DLQ failure".to_owned()); letters.len()];
        }
        state.0.extend_from_slice(letters);
        vec![Ok(()); letters.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(body_len: usize) -> DeadLetter {
        DeadLetter {
            message_id: "id".into(),
            body: "x".repeat(body_len),
            field: "body".into(),
            rule: "must be valid JSON".into(),
        }
    }

    #[test]
    fn groups_respect_count_and_size() {
        let letters: Vec<DeadLetter> = (0..23).map(|_| letter(10)).collect();
        let sizes: Vec<usize> = groups(&letters).iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 3]);
        let big: Vec<DeadLetter> = (0..3).map(|_| letter(150 * 1024)).collect();
        assert_eq!(groups(&big).len(), 3);
    }
}
