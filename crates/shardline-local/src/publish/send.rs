//! The SQS side of `publish`: paced `SendMessageBatch` calls with bounded concurrency,
//! bounded retries of failed entries, and a manifest of what SQS accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use store::queue::MAX_BATCH_ENTRIES;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::generate::{Content, Malformation, Message, ReadingId, Tally};

/// Keep one request under SQS's 256 KiB payload limit.
const MAX_BATCH_BYTES: usize = 200 * 1024;

/// How to send.
#[derive(Debug, Clone, Copy)]
pub struct SendOptions {
    /// `SendMessageBatch` calls in flight at most.
    pub concurrency: usize,
    /// Attempts per entry (the first included) before it counts as a send failure.
    pub max_attempts: u32,
    /// First pause between attempts; doubles each time.
    pub retry_base: Duration,
    /// Hold sending while the queue holds this many messages or more (visible plus in
    /// flight): a local stand-in (moto) spends time proportional to the queue's length
    /// on every message sent and received, so a run that floods it drains
    /// quadratically. `None`: send on the plan's schedule regardless.
    pub max_queued: Option<u64>,
}

impl Default for SendOptions {
    fn default() -> Self {
        Self {
            concurrency: 8,
            max_attempts: 4,
            retry_base: Duration::from_millis(100),
            max_queued: None,
        }
    }
}

/// What `publish` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Messages the plan held.
    pub planned_messages: u64,
    /// What SQS accepted.
    pub sent: Tally,
    /// Messages SQS did not accept after every attempt.
    pub send_failures: u64,
    /// Valid readings in those messages.
    pub failed_readings: u64,
    /// The last send error, if any.
    pub last_error: Option<String>,
    /// `SendMessageBatch` calls, retries included.
    pub calls: u64,
    /// Wall time from the first to the last send.
    pub elapsed_secs: f64,
    /// Valid readings accepted per second of wall time.
    pub achieved_readings_per_sec: f64,
    /// Messages accepted per second of wall time.
    pub achieved_messages_per_sec: f64,
}

impl Summary {
    /// The human summary, several lines.
    pub fn text(&self) -> String {
        let mut s = format!(
            "sent {} messages ({} valid, {} malformed) holding {} readings in {:.1} s: {:.0} readings/s, {:.0} messages/s, {} SendMessageBatch calls\n",
            self.sent.messages,
            self.sent.valid_messages,
            self.sent.malformed_total(),
            self.sent.readings,
            self.elapsed_secs,
            self.achieved_readings_per_sec,
            self.achieved_messages_per_sec,
            self.calls,
        );
        if !self.sent.malformed.is_empty() {
            let kinds: Vec<String> = self
                .sent
                .malformed
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            s.push_str(&format!("malformed by kind: {}\n", kinds.join(", ")));
        }
        s.push_str(&format!(
            "send failures: {} messages ({} readings){}",
            self.send_failures,
            self.failed_readings,
            self.last_error
                .as_deref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        ));
        s
    }
}

/// One manifest line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ManifestLine {
    /// A valid reading SQS accepted: it must end up in the readings table.
    Reading {
        /// SQS message id of the message holding it.
        message_id: String,
        /// Stream position of that message.
        seq: u64,
        /// The reading's device.
        device_id: String,
        /// The reading's event id.
        event_id: String,
        /// Its timestamp, epoch milliseconds.
        ts_ms: i64,
    },
    /// A malformed message SQS accepted: it must end up in the DLQ.
    Malformed {
        /// SQS message id.
        message_id: String,
        /// Stream position.
        seq: u64,
        /// The malformation's name.
        malformation: String,
    },
    /// A message SQS did not accept: it is in neither place.
    Failed {
        /// Stream position.
        seq: u64,
        /// Why.
        error: String,
    },
}

/// A manifest read back: the expected contents of the table and of the DLQ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Every valid reading accepted.
    pub readings: BTreeSet<ReadingId>,
    /// SQS message id of every valid message accepted -> the readings it holds.
    pub valid: BTreeMap<String, BTreeSet<ReadingId>>,
    /// SQS message id of every malformed message accepted -> malformation.
    pub malformed: BTreeMap<String, String>,
    /// Stream positions SQS did not accept.
    pub failed: BTreeSet<u64>,
}

impl Manifest {
    /// Reads a JSONL manifest file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read manifest {}", path.display()))?;
        let mut out = Self::default();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let line: ManifestLine = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a manifest line", path.display(), n + 1))?;
            match line {
                ManifestLine::Reading {
                    message_id,
                    device_id,
                    event_id,
                    ts_ms,
                    ..
                } => {
                    let reading = ReadingId {
                        device_id,
                        event_id,
                        ts_ms,
                    };
                    out.valid
                        .entry(message_id)
                        .or_default()
                        .insert(reading.clone());
                    out.readings.insert(reading);
                }
                ManifestLine::Malformed {
                    message_id,
                    malformation,
                    ..
                } => {
                    out.malformed.insert(message_id, malformation);
                }
                ManifestLine::Failed { seq, .. } => {
                    out.failed.insert(seq);
                }
            }
        }
        Ok(out)
    }
}

fn manifest_lines(message: &Message, outcome: &Result<String, String>) -> Vec<ManifestLine> {
    match (outcome, &message.content) {
        (Err(error), _) => vec![ManifestLine::Failed {
            seq: message.seq,
            error: error.clone(),
        }],
        (Ok(id), Content::Valid(readings)) => readings
            .iter()
            .map(|r| ManifestLine::Reading {
                message_id: id.clone(),
                seq: message.seq,
                device_id: r.device_id.clone(),
                event_id: r.event_id.clone(),
                ts_ms: r.ts_ms,
            })
            .collect(),
        (Ok(id), Content::Malformed(kind)) => vec![ManifestLine::Malformed {
            message_id: id.clone(),
            seq: message.seq,
            malformation: Malformation::name(*kind).to_owned(),
        }],
    }
}

type Sent = (Vec<(Message, Result<String, String>)>, u64);

/// Waits until the queue holds fewer than `max` messages (visible plus in flight).
/// An unreadable depth does not hold sending up: the plan's pace then applies.
async fn wait_below(client: &Client, queue_url: &str, max: u64) {
    use aws_sdk_sqs::types::QueueAttributeName as Name;
    loop {
        let Ok(out) = client
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(Name::ApproximateNumberOfMessages)
            .attribute_names(Name::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
        else {
            return;
        };
        let count = |name: Name| {
            out.attributes()
                .and_then(|a| a.get(&name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if count(Name::ApproximateNumberOfMessages)
            + count(Name::ApproximateNumberOfMessagesNotVisible)
            < max
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends one batch, retrying the entries SQS did not take (except sender faults) with
/// doubling pauses; returns each message's SQS id or last error, and the calls made.
async fn send_batch(
    client: Client,
    queue_url: Arc<str>,
    batch: Vec<Message>,
    options: SendOptions,
) -> Sent {
    let mut pending: BTreeMap<String, Message> =
        batch.into_iter().map(|m| (m.seq.to_string(), m)).collect();
    let mut done: Vec<(Message, Result<String, String>)> = Vec::new();
    let mut calls = 0;
    let mut last_error: BTreeMap<String, String> = BTreeMap::new();
    for attempt in 0..options.max_attempts.max(1) {
        if pending.is_empty() {
            break;
        }
        if attempt > 0 {
            tokio::time::sleep(
                options
                    .retry_base
                    .saturating_mul(1 << (attempt - 1).min(10)),
            )
            .await;
        }
        let mut entries = Vec::with_capacity(pending.len());
        for (id, message) in &pending {
            match SendMessageBatchRequestEntry::builder()
                .id(id)
                .message_body(&message.body)
                .build()
            {
                Ok(entry) => entries.push(entry),
                Err(e) => {
                    last_error.insert(id.clone(), e.to_string());
                }
            }
        }
        calls += 1;
        match client
            .send_message_batch()
            .queue_url(queue_url.as_ref())
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => {
                for ok in out.successful() {
                    if let Some(message) = pending.remove(ok.id()) {
                        done.push((message, Ok(ok.message_id().to_owned())));
                    }
                }
                for failed in out.failed() {
                    let why = format!(
                        "{}: {}",
                        failed.code(),
                        failed.message().unwrap_or("no message")
                    );
                    if failed.sender_fault() {
                        // The request itself is wrong: sending it again cannot help.
                        if let Some(message) = pending.remove(failed.id()) {
                            done.push((message, Err(why)));
                        }
                    } else {
                        last_error.insert(failed.id().to_owned(), why);
                    }
                }
            }
            Err(e) => {
                let why = aws_sdk_sqs::error::DisplayErrorContext(&e).to_string();
                for id in pending.keys() {
                    last_error.insert(id.clone(), why.clone());
                }
            }
        }
    }
    for (id, message) in pending {
        let why = last_error
            .remove(&id)
            .unwrap_or_else(|| "not accepted".to_owned());
        done.push((message, Err(why)));
    }
    (done, calls)
}

/// Collects results as they finish.
struct Collector<'p, 'm> {
    summary: Summary,
    progress: &'p ProgressBar,
    manifest: Option<&'m mut (dyn Write + Send)>,
}

impl Collector<'_, '_> {
    fn absorb(&mut self, (results, calls): Sent) -> anyhow::Result<()> {
        self.summary.calls += calls;
        for (message, outcome) in results {
            match &outcome {
                Ok(_) => self.summary.sent.add(&message),
                Err(e) => {
                    self.summary.send_failures += 1;
                    self.summary.failed_readings += message.readings() as u64;
                    self.summary.last_error = Some(e.clone());
                }
            }
            if let Some(out) = self.manifest.as_mut() {
                for line in manifest_lines(&message, &outcome) {
                    serde_json::to_writer(&mut *out, &line).context("cannot write the manifest")?;
                    out.write_all(b"\n").context("cannot write the manifest")?;
                }
            }
            self.progress.inc(1);
        }
        self.progress.set_message(format!(
            "{} readings, {} malformed, {} failed",
            self.summary.sent.readings,
            self.summary.sent.malformed_total(),
            self.summary.send_failures
        ));
        Ok(())
    }
}

/// Sends `messages` at their offsets from now, `MAX_BATCH_ENTRIES` per call, at most
/// `options.concurrency` calls in flight. Writes one manifest line per accepted
/// reading, accepted malformed message and failed message.
pub async fn send_all(
    client: &Client,
    queue_url: &str,
    messages: impl IntoIterator<Item = Message>,
    options: SendOptions,
    progress: &ProgressBar,
    manifest: Option<&mut (dyn Write + Send)>,
) -> anyhow::Result<Summary> {
    let queue_url: Arc<str> = Arc::from(queue_url);
    let permits = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let mut tasks: JoinSet<Sent> = JoinSet::new();
    let mut collector = Collector {
        summary: Summary::default(),
        progress,
        manifest,
    };
    let start = Instant::now();
    let mut batch: Vec<Message> = Vec::new();
    let mut batch_bytes = 0;

    let flush = async |batch: &mut Vec<Message>,
                       tasks: &mut JoinSet<Sent>,
                       collector: &mut Collector<'_, '_>|
           -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(max) = options.max_queued {
            wait_below(client, &queue_url, max).await;
        }
        // Waiting for a permit here is the back-pressure that bounds concurrency.
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .context("the send semaphore closed")?;
        let work = send_batch(
            client.clone(),
            queue_url.clone(),
            std::mem::take(batch),
            options,
        );
        tasks.spawn(async move {
            let sent = work.await;
            drop(permit);
            sent
        });
        while let Some(done) = tasks.try_join_next() {
            collector.absorb(done.context("a send task failed")?)?;
        }
        Ok(())
    };

    for message in messages {
        collector.summary.planned_messages += 1;
        let due = start + message.offset;
        if due > Instant::now() {
            // Nothing more is due now: send what is gathered before waiting.
            flush(&mut batch, &mut tasks, &mut collector).await?;
            tokio::time::sleep_until(due).await;
        }
        if batch.len() == MAX_BATCH_ENTRIES || batch_bytes + message.body.len() > MAX_BATCH_BYTES {
            flush(&mut batch, &mut tasks, &mut collector).await?;
        }
        if batch.is_empty() {
            batch_bytes = 0;
        }
        batch_bytes += message.body.len();
        batch.push(message);
    }
    flush(&mut batch, &mut tasks, &mut collector).await?;
    while let Some(done) = tasks.join_next().await {
        collector.absorb(done.context("a send task failed")?)?;
    }
    let mut summary = collector.summary;
    let elapsed = start.elapsed().as_secs_f64();
    summary.elapsed_secs = elapsed;
    if elapsed > 0.0 {
        summary.achieved_readings_per_sec = summary.sent.readings as f64 / elapsed;
        summary.achieved_messages_per_sec = summary.sent.messages as f64 / elapsed;
    }
    Ok(summary)
}
