//! The event source mapping's side of the runner: workers that gather batches from the
//! queue and hand each to an invocation, the watch that stops an idle runner, and the
//! task that waits for them all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use store::queue::MAX_BATCH_ENTRIES;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::invoke::invoke;
use super::received::ReceivedLog;
use super::{Service, Settings, Stats};

/// Shared by the workers, the idle watch and the runner.
pub(super) struct Shared {
    pub(super) settings: Settings,
    pub(super) sqs: aws_sdk_sqs::Client,
    pub(super) ingest: Arc<Service>,
    pub(super) queue_arn: String,
    pub(super) region: String,
    pub(super) stats: Arc<Mutex<Stats>>,
    pub(super) last_activity: Mutex<Instant>,
    pub(super) in_flight: AtomicUsize,
    /// Where each received message's id is appended, if anywhere.
    pub(super) received: Option<ReceivedLog>,
}

impl Shared {
    pub(super) fn touch(&self) {
        *self.last_activity.lock() = Instant::now();
    }
}

/// Starts `max_concurrency` workers (and the idle watch when the settings ask for
/// one); the task returned ends when they all did, after the query server (if any)
/// stopped too. A failed worker stops the others.
pub(super) fn spawn_all(
    shared: Arc<Shared>,
    (stop_tx, stop_rx): (watch::Sender<bool>, watch::Receiver<bool>),
    server: Option<JoinHandle<()>>,
) -> JoinHandle<anyhow::Result<()>> {
    let mut workers = JoinSet::new();
    for _ in 0..shared.settings.max_concurrency {
        workers.spawn(worker(shared.clone(), stop_rx.clone()));
    }
    if let Some(idle) = shared.settings.exit_when_idle {
        tokio::spawn(idle_watch(shared.clone(), idle, stop_tx.clone()));
    }
    tokio::spawn(async move {
        let mut first_error = None;
        while let Some(done) = workers.join_next().await {
            if let Err(e) = done {
                first_error.get_or_insert_with(|| anyhow!("a worker failed: {e}"));
                // One broken worker ends the run rather than silently shrinking it.
                stop_tx.send_replace(true);
            }
        }
        stop_tx.send_replace(true);
        if let Some(server) = server {
            server.await.context("the query server failed")?;
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// Stops the runner once nothing arrived for `idle` and no batch is in flight.
async fn idle_watch(shared: Arc<Shared>, idle: Duration, stop: watch::Sender<bool>) {
    let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        tokio::time::sleep(tick).await;
        if *stop.borrow() {
            return;
        }
        let quiet = shared.last_activity.lock().elapsed() >= idle;
        if quiet && shared.in_flight.load(Ordering::SeqCst) == 0 {
            tracing::info!(idle_secs = idle.as_secs_f64(), "idle: stopping");
            stop.send_replace(true);
            return;
        }
    }
}

/// One of the mapping's concurrent pollers: gathers a batch, invokes the handler on it,
/// until stopped.
async fn worker(shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
        }
        let messages = gather(&shared, &stop).await;
        if messages.is_empty() {
            continue;
        }
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        invoke(&shared, messages).await;
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        shared.touch();
    }
}

/// Receives up to `batch_size` messages: the first receive long-polls; once a
/// message is held, receives continue until the batch is full or the window closed.
/// Returns what it holds when asked to stop (those are processed, not dropped).
async fn gather(shared: &Shared, stop: &watch::Receiver<bool>) -> Vec<Message> {
    let settings = &shared.settings;
    let mut held: Vec<Message> = Vec::new();
    let mut window_end: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            return held;
        }
        let want = (settings.batch_size - held.len()).min(MAX_BATCH_ENTRIES);
        let wait = match window_end {
            None => settings.poll_wait_secs,
            Some(end) => {
                let left = end.saturating_duration_since(Instant::now()).as_secs();
                i32::try_from(left)
                    .unwrap_or(20)
                    .min(settings.poll_wait_secs)
            }
        };
        let received = shared
            .sqs
            .receive_message()
            .queue_url(&settings.queue_url)
            .max_number_of_messages(i32::try_from(want).unwrap_or(MAX_BATCH_ENTRIES as i32))
            .wait_time_seconds(wait)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await;
        match received {
            Ok(out) => {
                let got = out.messages.unwrap_or_default();
                if !got.is_empty() {
                    shared.touch();
                    window_end.get_or_insert_with(|| Instant::now() + settings.batching_window);
                    shared.stats.lock().messages += got.len() as u64;
                    if let Some(log) = &shared.received
                        && let Err(e) = log.record(&got)
                    {
                        // The messages are still processed; the accounting will name
                        // them as never received, and this count says why.
                        shared.stats.lock().received_log_errors += 1;
                        tracing::error!(error = %format!("{e:#}"), "the received log");
                    }
                }
                held.extend(got);
            }
            Err(e) => {
                shared.stats.lock().receive_errors += 1;
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "ReceiveMessage failed");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let window_closed = window_end.is_some_and(|end| Instant::now() >= end);
        if held.is_empty() || held.len() >= settings.batch_size || window_closed {
            return held;
        }
    }
}
