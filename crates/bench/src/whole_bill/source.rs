//! The fleet's messages and the event source of item 10: each message sent to moto's
//! queue with its own SendMessage, as a device sends it, and a poller that does what
//! Lambda's SQS event source does with them, every call a real one to moto.
//!
//! The poller: when a message reaches the empty queue (a long poll returns it), a
//! batching window of the template's `BatchingWindow` opens. While it is open the poller
//! receives in calls of up to 10 (ReceiveMessage's limit): a call as soon as ten
//! messages wait, the last one when the window closes; the batch closes early at the
//! template's `IngestBatchSize`. The batch is one invocation, handed to the ingest at the
//! window's close, and its messages are then deleted with one DeleteMessageBatch per 10.
//! That is the event source's behaviour the cost model prices (receives of up to 10, a
//! batch of what one window gathers, deletes of up to 10); its idle long polls of an empty
//! queue are not priced and not made. Time is simulated: a message is sent when the
//! poller's clock reaches its moment, so an hour of a fleet runs in minutes, and each
//! record carries that moment as its `SentTimestamp` (moto would stamp the wall clock).

use anyhow::{Context, Result, bail, ensure};
use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use sharding::time::Timestamp;

use crate::common;

/// ReceiveMessage's and DeleteMessageBatch's most messages a call.
const A_CALL: usize = store::queue::MAX_BATCH_ENTRIES;

/// One message of the fleet: when it reaches the queue, and its body.
#[derive(Debug, Clone)]
pub(super) struct Msg {
    pub(super) sent_ms: i64,
    pub(super) body: String,
}

/// `devices` devices, each sending one reading a message every `every_ms` from `start_ms`
/// for `span_ms`, phases spread evenly over one interval; in the order they are sent.
/// Each reading is the cost model's sample reading (`shardline::cost::sample`): a
/// thirteen-character device id, a 36-character event id, an RFC 3339 time, two metrics
/// of four significant digits.
pub(super) fn fleet(
    devices: usize,
    every_ms: i64,
    start_ms: i64,
    span_ms: i64,
) -> Result<Vec<Msg>> {
    let per_device = span_ms / every_ms;
    let mut msgs = Vec::with_capacity(devices * per_device as usize);
    for d in 0..devices {
        for j in 0..per_device {
            let ts = start_ms + d as i64 * every_ms / devices as i64 + j * every_ms;
            // Four significant digits, written as the sample's are (21.37), not as a
            // sum of floats prints (20.310000000000002).
            let metric = |base: i64, k: i64| -> Result<serde_json::Value> {
                Ok(serde_json::from_str(&format!(
                    "{}.{:02}",
                    base + k % 8,
                    10 + k % 89
                ))?)
            };
            let body = serde_json::json!({
                "device_id": format!("device-{d:06}"),
                "event_id": format!("{j:08x}-0000-4000-8000-{d:012x}"),
                "ts": Timestamp::from_millis(ts)?.to_rfc3339(),
                "metrics": {
                    "temperature": metric(20, j)?,
                    "humidity": metric(40, d as i64)?,
                },
            })
            .to_string();
            msgs.push(Msg { sent_ms: ts, body });
        }
    }
    msgs.sort_by_key(|m| m.sent_ms);
    Ok(msgs)
}

/// One invocation's messages and the moment the window closed (the handler's clock).
pub(super) struct Batch {
    pub(super) now_ms: i64,
    pub(super) records: Vec<SqsMessage>,
}

/// The queue on moto and the event source's settings.
pub(super) struct Source<'a> {
    pub(super) sqs: &'a aws_sdk_sqs::Client,
    pub(super) url: String,
    pub(super) window_ms: i64,
    pub(super) batch_size: usize,
}

impl Source<'_> {
    /// Sends the messages of the next batching window from `msgs[*next..]` and receives
    /// them; `None` once every message was sent and received.
    pub(super) async fn next_batch(&self, msgs: &[Msg], next: &mut usize) -> Result<Option<Batch>> {
        let Some(first) = msgs.get(*next) else {
            return Ok(None);
        };
        let closes = first.sent_ms + self.window_ms;
        let mut batch = Batch {
            now_ms: closes,
            records: Vec::new(),
        };
        loop {
            // What reaches the queue before the next receive: ten messages, or the
            // window's last, or what fills the batch.
            let room = (self.batch_size - batch.records.len()).min(A_CALL);
            let n = msgs[*next..]
                .iter()
                .take(room)
                .take_while(|m| m.sent_ms < closes)
                .count();
            if n == 0 {
                break;
            }
            let group = &msgs[*next..*next + n];
            *next += n;
            self.send(group).await?;
            batch.records.extend(self.receive(group).await?);
            if batch.records.len() == self.batch_size {
                batch.now_ms = group[n - 1].sent_ms;
                break;
            }
        }
        Ok(Some(batch))
    }

    /// Each message with a SendMessage of its own, as a device sends it.
    async fn send(&self, group: &[Msg]) -> Result<()> {
        let sends = group.iter().map(|m| {
            self.sqs
                .send_message()
                .queue_url(&self.url)
                .message_body(&m.body)
                .send()
        });
        futures::future::try_join_all(sends)
            .await
            .context("SendMessage to moto")?;
        Ok(())
    }

    /// `group`, now in the queue, in ReceiveMessage calls of up to ten (one, unless moto
    /// returns fewer than asked), each as Lambda's record.
    async fn receive(&self, group: &[Msg]) -> Result<Vec<SqsMessage>> {
        let mut records = Vec::with_capacity(group.len());
        for _attempt in 0..20 {
            if records.len() == group.len() {
                return Ok(records);
            }
            let want = i32::try_from((group.len() - records.len()).min(A_CALL))?;
            let out = self
                .sqs
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(want)
                .wait_time_seconds(0)
                .send()
                .await
                .context("ReceiveMessage from moto")?;
            for m in out.messages() {
                let body = m.body().context("a message without a body")?;
                let sent = group
                    .iter()
                    .find(|g| g.body == body)
                    .context("received a message not sent in this window")?;
                let mut record = common::record(
                    m.message_id().context("no message id")?.to_owned(),
                    body.to_owned(),
                );
                record.receipt_handle = m.receipt_handle().map(str::to_owned);
                record
                    .attributes
                    .insert("SentTimestamp".to_owned(), sent.sent_ms.to_string());
                record
                    .attributes
                    .insert("ApproximateReceiveCount".to_owned(), "1".to_owned());
                records.push(record);
            }
        }
        bail!(
            "received {} of the window's {} messages in 20 calls",
            records.len(),
            group.len()
        )
    }

    /// The batch's messages deleted, one DeleteMessageBatch per ten.
    pub(super) async fn delete(&self, batch: &Batch) -> Result<()> {
        for chunk in batch.records.chunks(A_CALL) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(r.receipt_handle.clone().unwrap_or_default())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .sqs
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .context("DeleteMessageBatch at moto")?;
            ensure!(
                out.failed().is_empty(),
                "deletes failed: {:?}",
                out.failed()
            );
        }
        Ok(())
    }
}
