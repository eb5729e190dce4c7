//! The simulated SQS source queue: its messages with their receive counts and
//! visibility, the event source mapping's batching of them into invocations, and what
//! the handler's answers do to them (redelivery waits, requeued copies, the DLQ).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use ingest::handler::SOURCE_ID_ATTRIBUTE;
use ingest::{Fate, MemoryQueue, Requeue};

use super::rig::Schedule;
use super::{MAX_RECEIVES, VISIBILITY};
use crate::common;

/// One message in the simulated source queue: the device's message or a copy the
/// handler requeued (all of a message, or the unwritten part of one).
pub(super) struct Pending {
    /// The body it carries.
    body: Arc<str>,
    /// How many readings the body holds.
    readings: usize,
    /// This copy's message id.
    id: String,
    /// Receives so far (SQS's `ApproximateReceiveCount`).
    receives: u32,
    /// Message attributes (a requeued copy's requeue count and first id).
    attributes: HashMap<String, SqsMessageAttribute>,
    /// When the queue received it (its `SentTimestamp`), simulated.
    sent_at: Duration,
    visible_at: Duration,
}

impl Pending {
    /// Message `n` as first sent: never received, visible at `visible_at`.
    fn fresh(n: usize, body: Arc<str>, readings: usize, visible_at: Duration) -> Self {
        Pending {
            body,
            readings,
            id: format!("m{n}"),
            receives: 0,
            attributes: HashMap::new(),
            sent_at: visible_at,
            visible_at,
        }
    }

    /// The record of its next receive, as Lambda delivers it.
    fn receive(&mut self, body: &str) -> SqsMessage {
        self.receives += 1;
        let mut m = common::record(self.id.clone(), body.to_owned());
        m.receipt_handle = Some(self.receipt_handle());
        m.attributes.insert(
            "ApproximateReceiveCount".to_owned(),
            self.receives.to_string(),
        );
        m.attributes.insert(
            "SentTimestamp".to_owned(),
            (common::T0_MS + self.sent_at.as_millis() as i64).to_string(),
        );
        m.message_attributes = self.attributes.clone();
        m
    }

    /// The handle of the latest receive.
    fn receipt_handle(&self) -> String {
        format!("{}#{}", self.id, self.receives)
    }

    /// A copy the handler sent back to the source queue, visible after its delay.
    fn copy(n: usize, copy: Requeue, now: Duration) -> Result<Pending> {
        copy.attributes
            .get(SOURCE_ID_ATTRIBUTE)
            .context("a requeued copy without its source message id")?;
        let body: serde_json::Value =
            serde_json::from_str(&copy.body).context("a requeued copy's body")?;
        let readings = body["readings"].as_array().map_or(1, Vec::len);
        let attributes = copy
            .attributes
            .into_iter()
            .map(|(name, (data_type, value))| {
                let mut a = SqsMessageAttribute::default();
                a.data_type = Some(data_type);
                a.string_value = Some(value);
                (name, a)
            })
            .collect();
        Ok(Pending {
            body: copy.body.into(),
            readings,
            id: format!("c{n}"),
            receives: 0,
            attributes,
            sent_at: now,
            visible_at: now + Duration::from_secs(copy.delay_secs.into()),
        })
    }
}

/// The event source mapping's batching of ready messages into invocations.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batching {
    /// Most messages in one invocation.
    pub(super) size: usize,
    /// How long a part batch waits for more.
    pub(super) window: Duration,
}

impl Batching {
    /// Takes from `queue` the messages that go to invocations at `now`: every full batch
    /// of the visible ones, and the part batch too once its oldest message has been
    /// visible for the window. The rest stays queued.
    pub(super) fn take_ready(&self, queue: &mut VecDeque<Pending>, now: Duration) -> Vec<Pending> {
        let (mut ready, waiting): (Vec<Pending>, Vec<Pending>) =
            queue.drain(..).partition(|p| p.visible_at <= now);
        let window_over = ready
            .iter()
            .map(|p| p.visible_at)
            .min()
            .is_some_and(|oldest| oldest + self.window <= now);
        if !window_over {
            let full = ready.len() / self.size * self.size;
            queue.extend(ready.drain(full..));
        }
        queue.extend(waiting);
        ready
    }

    /// When a queued message next matters: when it becomes visible, or, visible in a
    /// part batch, when the window of that batch ends.
    fn due(&self, p: &Pending, now: Duration) -> Duration {
        if p.visible_at <= now {
            p.visible_at + self.window
        } else {
            p.visible_at
        }
    }
}

/// The ready messages as SQS events of at most `size` records, each message received.
pub(super) fn events_of(ready: Vec<Pending>, size: usize) -> Vec<(Vec<Pending>, SqsEvent)> {
    let mut events = Vec::new();
    let mut ready = ready.into_iter().peekable();
    while ready.peek().is_some() {
        let mut batch: Vec<Pending> = ready.by_ref().take(size).collect();
        let mut event = SqsEvent::default();
        event.records = batch
            .iter_mut()
            .map(|p| {
                let body = p.body.clone();
                p.receive(&body)
            })
            .collect();
        events.push((batch, event));
    }
    events
}

/// What the simulated source queue saw of the handler's answers.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Readings in messages the handler dead-lettered with a reason.
    pub(super) dead_lettered: usize,
    /// Readings in messages still reported at the last receive, which the redrive
    /// policy moves to the DLQ without a reason.
    pub(super) redriven: usize,
    /// Messages the handler requeued as fresh copies.
    pub(super) requeued: usize,
    /// Messages the handler split: stored readings acknowledged, the rest requeued.
    pub(super) split: usize,
    /// Items a raise made stale: given back unwritten by the writer, to be keyed again.
    pub(super) stale: u64,
    /// Redelivery waits the handler set.
    pub(super) delayed: usize,
    /// Messages reported back to the queue, with a wait set or not.
    pub(super) reported: usize,
    pub(super) raises: u64,
    /// Readings the handler reported written (a block's members each), summed over
    /// invocations: a message handled twice counts twice.
    pub(super) readings_written: u64,
}

impl Tally {
    /// Whether every message was handled once: none waited for a redelivery, was
    /// requeued, split or redriven.
    pub(super) fn each_message_once(&self) -> bool {
        self.delayed + self.reported + self.requeued + self.split + self.redriven == 0
    }

    /// Counts one invocation's fates; a reported message goes back on `queue`, visible
    /// after the wait the handler asked for (`waits`, by receipt handle).
    fn settle(
        &mut self,
        batch: Vec<Pending>,
        report: ingest::Report,
        waits: &HashMap<String, u32>,
        now: Duration,
        queue: &mut VecDeque<Pending>,
    ) {
        self.raises += report.fanout_raises;
        self.stale += report.stale;
        self.readings_written += report.readings_written;
        for (mut p, m) in batch.into_iter().zip(report.messages) {
            let readings = p.readings;
            match m.fate {
                Fate::Written { .. } => {}
                // Acknowledged; its unwritten rest came back through `requeued`.
                // Its unwritten rest, or its unmarked readings, came back through `requeued`.
                Fate::Split { .. } | Fate::Unmarked { .. } => self.split += 1,
                Fate::DeadLettered { .. } => self.dead_lettered += readings,
                // Deleted from the queue; its copy came back through `requeued`.
                Fate::Requeued { .. } => self.requeued += 1,
                Fate::Reported { .. } if p.receives >= MAX_RECEIVES => {
                    self.reported += 1;
                    self.redriven += readings;
                }
                Fate::Reported { .. } => {
                    self.reported += 1;
                    let wait = waits
                        .get(&p.receipt_handle())
                        .map_or(VISIBILITY, |s| Duration::from_secs((*s).into()));
                    p.visible_at = now + wait;
                    queue.push_back(p);
                }
            }
        }
    }
}

/// The source queue as one run drives it.
#[derive(Default)]
pub(super) struct SourceQueue {
    /// The messages queued, visible or not.
    pub(super) pending: VecDeque<Pending>,
    /// The device's messages sent so far.
    pub(super) sent: usize,
    /// The copies the handler requeued so far.
    copies: usize,
    /// Invocations so far; invocation `i` gets its own seeded RNG.
    pub(super) invocations: u64,
    pub(super) tally: Tally,
}

impl SourceQueue {
    /// Queues the device's messages due by `now`.
    pub(super) fn send_due(&mut self, schedule: &Schedule, now: Duration) {
        while self.sent < schedule.len() && schedule.due(self.sent) <= now {
            self.pending.push_back(Pending::fresh(
                self.sent,
                schedule.body(self.sent),
                schedule.readings(self.sent),
                schedule.due(self.sent),
            ));
            self.sent += 1;
        }
    }

    /// When something next happens with nothing ready: a queued message matters or the
    /// device's next message is due; `None` once all is sent and the queue is empty.
    pub(super) fn upcoming(
        &self,
        batching: &Batching,
        schedule: &Schedule,
        now: Duration,
    ) -> Option<Duration> {
        self.pending
            .iter()
            .map(|p| batching.due(p, now))
            .chain((self.sent < schedule.len()).then(|| schedule.due(self.sent)))
            .min()
    }

    /// Takes in one poll's invocations: what the handler asked of the source queue
    /// (`port`: redelivery waits by receipt handle, and fresh copies), then each
    /// message's fate.
    pub(super) fn take_answers(
        &mut self,
        port: &MemoryQueue,
        outcomes: Vec<Result<(Vec<Pending>, ingest::Report)>>,
        now: Duration,
    ) -> Result<()> {
        let (delays, requeued) = port.take_redeliveries();
        let waits: HashMap<String, u32> = delays
            .into_iter()
            .map(|d| (d.receipt_handle, d.visibility_secs))
            .collect();
        self.tally.delayed += waits.len();
        for copy in requeued {
            self.pending
                .push_back(Pending::copy(self.copies, copy, now)?);
            self.copies += 1;
        }
        for outcome in outcomes {
            let (batch, report) = outcome?;
            self.tally
                .settle(batch, report, &waits, now, &mut self.pending);
        }
        Ok(())
    }
}
