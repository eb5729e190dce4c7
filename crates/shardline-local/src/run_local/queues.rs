//! What the runner, the demo and the soak read from SQS besides the batches: a queue's
//! attributes (its ARN, its message counts), the messages of a dead-letter queue, and
//! the SenderId SQS gives this process's own sends.

use std::collections::HashMap;

use anyhow::anyhow;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

/// The queue's attributes `names`; a missing one is absent from the map.
async fn queue_attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    names: &[QueueAttributeName],
) -> anyhow::Result<HashMap<QueueAttributeName, String>> {
    let mut request = sqs.get_queue_attributes().queue_url(url);
    for name in names {
        request = request.attribute_names(name.clone());
    }
    let out = request.send().await.map_err(|e| {
        anyhow!(
            "cannot read the queue {url}: {}",
            aws_sdk_sqs::error::DisplayErrorContext(&e)
        )
    })?;
    Ok(out.attributes.unwrap_or_default())
}

/// The queue's ARN, as the event source mapping names it in each record (empty when
/// SQS does not say).
pub(super) async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<String> {
    let mut attributes = queue_attributes(sqs, url, &[QueueAttributeName::QueueArn]).await?;
    Ok(attributes
        .remove(&QueueAttributeName::QueueArn)
        .unwrap_or_default())
}

/// A queue's messages: visible, and not visible (in flight, or delayed like a requeued
/// copy). Both at zero means the queue holds nothing.
pub async fn queue_counts(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<(u64, u64)> {
    let attributes = queue_attributes(
        sqs,
        url,
        &[
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ],
    )
    .await?;
    let get = |name: QueueAttributeName| {
        attributes
            .get(&name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            + get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

/// One message read back from a dead-letter queue, with the attributes the ingest's
/// DLQ send sets.
#[derive(Debug, Clone)]
pub struct DeadLetterCopy {
    /// `source_message_id`: the refused message's own id.
    pub source: Option<String>,
    /// `reason`: the field and the rule.
    pub reason: Option<String>,
    /// The refused body, unchanged.
    pub body: String,
}

/// Receives every message of a dead-letter queue (kept invisible while reading, so each
/// is read once), until three polls come back empty.
pub async fn drain_dlq(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> anyhow::Result<Vec<DeadLetterCopy>> {
    let mut out = Vec::new();
    let mut empty = 0;
    while empty < 3 {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(store::queue::MAX_BATCH_ENTRIES as i32)
            .wait_time_seconds(1)
            .visibility_timeout(3600)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| anyhow!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?
            .messages
            .unwrap_or_default();
        if got.is_empty() {
            empty += 1;
        }
        for m in got {
            let attr = |name: &str| {
                m.message_attributes()
                    .and_then(|a| a.get(name))
                    .and_then(|v| v.string_value())
                    .map(str::to_owned)
            };
            out.push(DeadLetterCopy {
                source: attr("source_message_id"),
                reason: attr("reason"),
                body: m.body().unwrap_or_default().to_owned(),
            });
        }
    }
    Ok(out)
}

/// The SenderId SQS reports for this runner's own sends, from one message to a scratch
/// queue deleted after; `None` (logged) if that fails: the handler then honours no
/// message's requeue count and dead-letters rather than requeues at the last receive.
pub(super) async fn own_sender_id(sqs: &aws_sdk_sqs::Client) -> Option<String> {
    let name = format!("shardline-sender-probe-{}", std::process::id());
    let probe = async {
        let url = sqs
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .ok()?
            .queue_url?;
        let sent = sqs
            .send_message()
            .queue_url(&url)
            .message_body("sender probe")
            .send()
            .await;
        let received = match sent {
            Ok(_) => sqs
                .receive_message()
                .queue_url(&url)
                .message_system_attribute_names(MessageSystemAttributeName::SenderId)
                .send()
                .await
                .ok(),
            Err(_) => None,
        };
        let _ = sqs.delete_queue().queue_url(&url).send().await;
        received?
            .messages?
            .into_iter()
            .next()?
            .attributes?
            .remove(&MessageSystemAttributeName::SenderId)
    };
    let id = probe.await;
    if id.is_none() {
        tracing::warn!(
            "no SenderId learnt: requeue counts are not read, the last receive dead-letters"
        );
    }
    id
}
