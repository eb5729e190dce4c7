//! Item 2: one device jumping from nothing to 2x and to 20x a key's write limit, for
//! 60 s, through the proxy, with the template's default fan-out settings.
//!
//! Time is simulated: the proxy's clock, the handler's `now` and the readings' timestamps
//! all follow one [`SimClock`], which runs at real speed while work is under way and
//! jumps over the gaps when nothing is due. So token buckets refill during real retries
//! and back-offs, but idle waiting costs no wall time.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use capacity_proxy::{Clock, Proxy, ProxyConfig, ProxyHandle};
use futures::StreamExt;
use ingest::handler::SOURCE_ID_ATTRIBUTE;
use ingest::{Fate, Requeue};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::common::{self, Gen};
use crate::report::Results;

const DEVICE: &str = "sensor-alpha-001";
/// The template's IngestQueueVisibilityTimeout default: a reported message comes back
/// after it when the handler could not set its own redelivery wait.
const VISIBILITY: Duration = Duration::from_secs(185);
/// The DLQ's maxReceiveCount (the handler's MAX_RECEIVES default).
const MAX_RECEIVES: u32 = 5;
/// The source queue's URL as the handler is configured with it; the simulated queue
/// applies the delays and copies it asks for.
const SOURCE_QUEUE_URL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/ingest";
/// Most messages in one invocation, and how long a part batch waits for more (the
/// template's IngestBatchSize and BatchingWindow defaults).
const BATCH_SIZE: usize = common::TEMPLATE_BATCH_SIZE;
const BATCH_WINDOW: Duration = Duration::from_secs(1);
/// Concurrent invocations (the template's IngestMaxConcurrency default).
const CONCURRENCY: usize = 20;

/// Real time while busy, jumps while idle.
#[derive(Debug)]
struct SimClock {
    origin: Instant,
    skipped: Mutex<Duration>,
}

impl SimClock {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            skipped: Mutex::new(Duration::ZERO),
        }
    }

    fn jump_to(&self, to: Duration) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.origin.elapsed() + *skipped;
        if to > now {
            *skipped += to - now;
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.origin.elapsed() + *self.skipped.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One message in the simulated source queue: the device's message or a copy the
/// handler requeued (all of a message, or the unwritten part of one).
struct Pending {
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

/// (sim time, items accepted, items throttled) so far.
type Sample = (Duration, u64, u64);

fn sample(proxy: &ProxyHandle, clock: &SimClock) -> Sample {
    let s = proxy.stats();
    (
        clock.now(),
        s.items_accepted,
        s.throttled_by_reason.values().sum(),
    )
}

/// What the simulated source queue saw of the handler's answers.
#[derive(Debug, Default)]
struct Tally {
    /// Readings in messages the handler dead-lettered with a reason.
    dead_lettered: usize,
    /// Readings in messages still reported at the last receive, which the redrive
    /// policy moves to the DLQ without a reason.
    redriven: usize,
    /// Messages the handler requeued as fresh copies.
    requeued: usize,
    /// Messages the handler split: stored readings acknowledged, the rest requeued.
    split: usize,
    /// Items given back by a raise and re-keyed.
    rekeyed: u64,
    /// Redelivery waits the handler set.
    delayed: usize,
    raises: u64,
}

/// What one rate produced.
#[derive(Debug)]
struct Outcome {
    first_clean_window: Option<u64>,
    throttled_after: f64,
    /// Distinct readings stored (by sort key), and items stored.
    stored: usize,
    items: usize,
    /// Item writes the proxy accepted.
    accepted: u64,
    generated: usize,
    tally: Tally,
    /// The hot device's fan-out epochs at the end.
    fanout: String,
    wall_seconds: f64,
    sim_end: f64,
}

/// DynamoDB's write limit of one partition key, WCU/s.
const KEY_WCU: u32 = 1_000;
/// The template's RAISE_AHEAD_WCU default, as a share of [`KEY_WCU`].
const KEY_RATE_SHARE: f64 = 0.1;

/// The event source mapping's batching of ready messages into invocations.
#[derive(Debug, Clone, Copy)]
struct Batching {
    /// Most messages in one invocation.
    size: usize,
    /// How long a part batch waits for more.
    window: Duration,
}

impl Batching {
    /// Takes from `queue` the messages that go to invocations at `now`: every full batch
    /// of the visible ones, and the part batch too once its oldest message has been
    /// visible for the window. The rest stays queued.
    fn take_ready(&self, queue: &mut VecDeque<Pending>, now: Duration) -> Vec<Pending> {
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

/// One of item 2's runs.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// Readings per second from 0 s.
    rate: usize,
    /// Write limit of one key, WCU/s.
    key_wcu: u32,
    /// Readings per message: 50 or 1. Either way the ingest measures the device's rate
    /// by when its messages arrived (their `SentTimestamp`), over at least the batching
    /// window, or over a full batch's own span when the device has at least
    /// `sharding::fanout::MIN_RATE_SAMPLE` messages in it.
    per_message: usize,
    /// Most messages in one invocation (the template's default is [`BATCH_SIZE`]).
    batch: usize,
    /// How long a part batch waits for more (the template's default is
    /// [`BATCH_WINDOW`]).
    window: Duration,
    /// Goal for the start of the first 10-s window without a throttle, seconds; `None`
    /// for a run with a setting other than the template's, reported as context.
    window_goal: Option<u64>,
}

/// Item 2's runs. 20x a key at DynamoDB's 1,000 WCU/s is 20,000 readings/s, more than
/// this machine ingests in real time (item 1); so the 20x runs scale the key limit, and
/// with it the key rate, down by 10. Two runs change one setting, as context: batches
/// of 10 single-reading messages, where no rate shows and only key-range throttles
/// raise; and a 5-s batching window, where one invocation lands 5,000 readings of the
/// device on its keys at once.
const RUNS: [Run; 6] = [
    Run {
        rate: 2_000,
        key_wcu: KEY_WCU,
        per_message: 50,
        batch: BATCH_SIZE,
        window: BATCH_WINDOW,
        window_goal: Some(5),
    },
    Run {
        rate: 2_000,
        key_wcu: KEY_WCU,
        per_message: 1,
        batch: BATCH_SIZE,
        window: BATCH_WINDOW,
        window_goal: Some(5),
    },
    Run {
        rate: 2_000,
        key_wcu: KEY_WCU / 10,
        per_message: 50,
        batch: BATCH_SIZE,
        window: BATCH_WINDOW,
        window_goal: Some(15),
    },
    Run {
        rate: 2_000,
        key_wcu: KEY_WCU / 10,
        per_message: 1,
        batch: BATCH_SIZE,
        window: BATCH_WINDOW,
        window_goal: Some(15),
    },
    Run {
        rate: 2_000,
        key_wcu: KEY_WCU / 10,
        per_message: 1,
        batch: 10,
        window: BATCH_WINDOW,
        window_goal: None,
    },
    Run {
        rate: 2_000,
        key_wcu: KEY_WCU / 10,
        per_message: 50,
        batch: BATCH_SIZE,
        window: Duration::from_secs(5),
        window_goal: None,
    },
];

/// The hot device's message bodies: `total` readings `gap_ms` apart, `per_message` a
/// message; message j is sent when its last reading has been taken.
fn hot_bodies(total: usize, per_message: usize, gap_ms: f64) -> Vec<Arc<str>> {
    (0..total.div_ceil(per_message))
        .map(|j| {
            let readings: Vec<serde_json::Value> = (j * per_message
                ..((j + 1) * per_message).min(total))
                .map(|i| {
                    Gen {
                        device: DEVICE.to_owned(),
                        event: format!("hot-{i:09}"),
                        ts_ms: common::T0_MS + (i as f64 * gap_ms) as i64,
                        temperature: 20.0,
                    }
                    .json()
                })
                .collect();
            serde_json::json!({ "readings": readings })
                .to_string()
                .into()
        })
        .collect()
}

/// The ready messages as SQS events of at most `size` records, each message received.
fn events_of(ready: Vec<Pending>, size: usize) -> Vec<(Vec<Pending>, SqsEvent)> {
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

/// Invokes the handler on each event, `CONCURRENCY` at once; invocation `base + i` gets
/// its own seeded RNG.
async fn invoke(
    service: &common::Service,
    clock: &SimClock,
    events: Vec<(Vec<Pending>, SqsEvent)>,
    base: u64,
) -> Vec<Result<(Vec<Pending>, ingest::Report)>> {
    futures::stream::iter(events.into_iter().enumerate())
        .map(|(i, (batch, ev))| async move {
            let mut rng = ChaCha8Rng::seed_from_u64(base + i as u64);
            let now = common::ts(clock.now().as_millis() as i64)?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let report = service.process(&ev, now, deadline, &mut rng).await;
            anyhow::Ok((batch, report))
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

impl Tally {
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
        self.rekeyed += report.rekeyed;
        for (mut p, m) in batch.into_iter().zip(report.messages) {
            let readings = p.readings;
            match m.fate {
                Fate::Written { .. } => {}
                // Acknowledged; its unwritten rest came back through `requeued`.
                Fate::Split { .. } => self.split += 1,
                Fate::DeadLettered { .. } => self.dead_lettered += readings,
                // Deleted from the queue; its copy came back through `requeued`.
                Fate::Requeued { .. } => self.requeued += 1,
                Fate::Reported { .. } if p.receives >= MAX_RECEIVES => {
                    self.redriven += readings;
                }
                Fate::Reported { .. } => {
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

/// From the proxy's samples (sorted by time), per simulated second of `n`: the items
/// attempted and throttled; returns the first second from which 10 seconds pass
/// without a throttle, and the share of attempts throttled from then on.
fn clean_window(samples: &[Sample], n: usize) -> (Option<usize>, f64) {
    let mut attempted = vec![0u64; n];
    let mut throttled = vec![0u64; n];
    for pair in samples.windows(2) {
        let (t, a1, th1) = pair[1];
        let (_, a0, th0) = pair[0];
        let sec = t.as_secs() as usize;
        if sec < n {
            attempted[sec] += a1.saturating_sub(a0) + th1.saturating_sub(th0);
            throttled[sec] += th1.saturating_sub(th0);
        }
    }
    let first_clean_window =
        (0..=n.saturating_sub(10)).find(|&s| throttled[s..(s + 10).min(n)].iter().all(|&t| t == 0));
    let throttled_after = match first_clean_window {
        Some(s) => {
            let a: u64 = attempted[s..].iter().sum();
            let t: u64 = throttled[s..].iter().sum();
            if a == 0 { 0.0 } else { t as f64 / a as f64 }
        }
        None => f64::NAN,
    };
    (first_clean_window, throttled_after)
}

/// The hot device's fan-out epochs, as `k=2 from 14 s, ...` (seconds of the run).
async fn fanout_text(service: &common::Service, clock: &SimClock) -> Result<String> {
    Ok(service
        .directory()
        .fanout(DEVICE, common::ts(clock.now().as_millis() as i64)?)
        .await?
        .epochs()
        .iter()
        .map(|e| {
            let at = (e.effective_from.as_millis() - common::T0_MS) as f64 / 1000.0;
            format!("k={} from {at:.0} s", e.value)
        })
        .collect::<Vec<_>>()
        .join(", "))
}

/// Samples the proxy's counters every 50 ms of wall time until `stop`.
async fn sample_until(
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    clock: Arc<SimClock>,
    proxy: Arc<ProxyHandle>,
) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let s = sample(&proxy, &clock);
        samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
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
}

/// One run for `seconds` against keys of `key_wcu` WCU/s each. Every fan-out setting is
/// the template's default; only the key rate follows a scaled-down key limit
/// (RAISE_AHEAD_WCU is a tenth of a key's limit by default).
async fn one(run: Run, seconds: u64) -> Result<Outcome> {
    let Run {
        rate,
        key_wcu,
        per_message,
        batch,
        window,
        ..
    } = run;
    let batching = Batching {
        size: batch,
        window,
    };
    let clock = Arc::new(SimClock::new());
    let mut pc = ProxyConfig::sink();
    pc.seed = Some(2);
    pc.clock = clock.clone();
    pc.limits.key_wcu = f64::from(key_wcu);
    let proxy = Arc::new(Proxy::start(pc).await?);
    let key_rate = (f64::from(key_wcu) * KEY_RATE_SHARE).to_string();
    let (batch_size, window_secs) = (batch.to_string(), window.as_secs_f64().to_string());
    let config = common::ingest_config(&[
        ("BATCH_SIZE", &batch_size),
        ("BATCHING_WINDOW_SECS", &window_secs),
        ("SHARDS", "8"),
        ("BUCKET", "hour"),
        ("RETENTION_DAYS", "30"),
        ("RAISE_AHEAD_WCU", &key_rate),
        ("SOURCE_QUEUE_URL", SOURCE_QUEUE_URL),
    ])?;
    let service = common::service(&proxy.url(), config).await;

    let total = rate * seconds as usize;
    let gap_ms = 1000.0 / rate as f64;
    let bodies = hot_bodies(total, per_message, gap_ms);
    let due = |j: usize| {
        let last = ((j + 1) * per_message).min(total) - 1;
        Duration::from_millis((last as f64 * gap_ms) as u64 + 1)
    };
    let sizes = |j: usize| ((j + 1) * per_message).min(total) - j * per_message;

    let samples = Arc::new(Mutex::new(vec![sample(&proxy, &clock)]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn(sample_until(
        samples.clone(),
        stop.clone(),
        clock.clone(),
        proxy.clone(),
    ));

    let wall = Instant::now();
    let queue_port = service.queue().clone();
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut next = 0usize;
    let mut copies = 0usize;
    let mut tally = Tally::default();
    let mut invocation = 0u64;
    let mut progress = Instant::now();
    loop {
        let now = clock.now();
        if progress.elapsed() >= Duration::from_secs(15) {
            progress = Instant::now();
            eprintln!(
                "  {rate}/s: {:.0} s simulated, {:.0} s wall: {next} of {} messages sent, {} \
                 queued, {} item writes accepted (a redelivery rewrites its items), {} raises",
                now.as_secs_f64(),
                wall.elapsed().as_secs_f64(),
                bodies.len(),
                queue.len(),
                proxy.stats().items_accepted,
                tally.raises,
            );
        }
        while next < bodies.len() && due(next) <= now {
            queue.push_back(Pending::fresh(
                next,
                bodies[next].clone(),
                sizes(next),
                due(next),
            ));
            next += 1;
        }
        let ready = batching.take_ready(&mut queue, now);
        if ready.is_empty() {
            let upcoming = queue
                .iter()
                .map(|p| batching.due(p, now))
                .chain((next < bodies.len()).then(|| due(next)))
                .min();
            match upcoming {
                Some(t) => {
                    let s = sample(&proxy, &clock);
                    samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                    clock.jump_to(t);
                    continue;
                }
                None => break,
            }
        }
        let events = events_of(ready, batching.size);
        let base = invocation;
        invocation += events.len() as u64;
        let outcomes = invoke(&service, &clock, events, base).await;
        // What the handler asked of the source queue in this poll: redelivery waits
        // by receipt handle, and fresh copies.
        let now = clock.now();
        let (delays, requeued) = queue_port.take_redeliveries();
        let waits: HashMap<String, u32> = delays
            .into_iter()
            .map(|d| (d.receipt_handle, d.visibility_secs))
            .collect();
        tally.delayed += waits.len();
        for copy in requeued {
            queue.push_back(Pending::copy(copies, copy, now)?);
            copies += 1;
        }
        for outcome in outcomes {
            let (batch, report) = outcome?;
            tally.settle(batch, report, &waits, now, &mut queue);
        }
    }
    let fanout = fanout_text(&service, &clock).await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.await?;
    let wall_seconds = wall.elapsed().as_secs_f64();
    let sim_end = clock.now().as_secs_f64();
    let mut samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    samples.push(sample(&proxy, &clock));
    samples.sort_by_key(|s| s.0);

    let (first_clean_window, throttled_after) = clean_window(&samples, seconds as usize);
    let keys = proxy.sink_keys();
    let items = keys.len();
    // A reading stored under two partition keys (across a raise) is one reading: its
    // sort key names it.
    let stored: BTreeSet<Option<String>> = keys.into_iter().map(|k| k.sk).collect();
    let accepted = proxy.stats().items_accepted;
    if let Ok(proxy) = Arc::try_unwrap(proxy) {
        proxy.shutdown().await?;
    }
    Ok(Outcome {
        first_clean_window: first_clean_window.map(|s| s as u64),
        throttled_after,
        stored: stored.len(),
        items,
        accepted,
        generated: total,
        tally,
        fanout,
        wall_seconds,
        sim_end,
    })
}

/// Item 2 at 2x and 20x a key's limit.
pub async fn run(seconds: u64, results: &mut Results) -> Result<()> {
    for run in RUNS {
        let outcome = one(run, seconds).await?;
        report_run(results, run, seconds, &outcome);
    }
    results.note(
        "2",
        format!(
            "one device ({DEVICE}) going from nothing to the offered rate at 0 s for {seconds} s, \
             its readings batched 50 to a message or sent one to a message. The ingest measures \
             the device's rate by when its messages reached the queue (SentTimestamp, simulated), \
             over at least the batching window, or over a full batch's own span when the device \
             has at least 20 messages in it, and raises before keying; in batches of 10 no device \
             has 20 messages, and only key-range throttles raise. \
             into the capacity-proxy sink (no burst, no injected latency). Every fan-out setting \
             is the template's default (CACHE_TTL_SECS 60, MAX_FUTURE_SECS 300, \
             PROPAGATION_SLACK_SECS 5, FANOUT_COOLDOWN_SECS 2, FANOUT_JITTER_SECS 1, FANOUT_MAX \
             32, FANOUT_SHRINK_AFTER_SECS 900). 2x runs at DynamoDB's 1,000 WCU/s per key and \
             RAISE_AHEAD_WCU 100 (the defaults); 20x at 20,000 readings/s is beyond what this \
             machine ingests in real time (item 1c), so the 20x runs scale the per-key limit to \
             100 WCU/s and RAISE_AHEAD_WCU with it to 10 (a tenth of a key, as the default is), and \
             offers 2,000 readings/s. The ingest handler runs in process (events of up to \
             {BATCH_SIZE} messages, a part batch once its oldest message has been visible for \
             {} s: the template's IngestBatchSize and BatchingWindow defaults; up to \
             {CONCURRENCY} invocations at once), shard metadata in memory \
             (MemoryShards through the real ShardDirectory, each invocation's cache shared as \
             one warm Lambda instance's is). The simulated source queue behaves as SQS does for \
             the handler: receive counts and receipt handles; a reported message comes back \
             after the redelivery wait the handler set (REDELIVERY_BASE_SECS 30 doubling, \
             jittered), or after the queue's visibility timeout ({} s) when it set none; copies \
             the handler requeues (a message at its last receive, or the unwritten part of a \
             split message) come back after their delay with a fresh receive count; a message \
             still reported at its {MAX_RECEIVES}th receive is redriven to the DLQ. One \
             simulated clock for the proxy, the handler's `now` and the readings' ts: real \
             speed while busy, jumps while idle. Throttles are counted per item by the proxy and \
             binned by simulated second. Lost = generated readings whose sort key has no item \
             in the sink after the queue drained; readings stored twice = items minus distinct \
             sort keys (reads de-duplicate them by sort key); item writes = items the proxy \
             accepted.",
            BATCH_WINDOW.as_secs(),
            VISIBILITY.as_secs()
        ),
    );
    Ok(())
}

/// One run's rows of item 2.
fn report_run(results: &mut Results, run: Run, seconds: u64, o: &Outcome) {
    let Run {
        rate,
        key_wcu,
        per_message,
        batch,
        window,
        window_goal,
    } = run;
    let times = rate / key_wcu as usize;
    let mut batches = String::new();
    if batch != BATCH_SIZE {
        batches += &format!(", batches of {batch}, not the default {BATCH_SIZE}");
    }
    if window != BATCH_WINDOW {
        batches += &format!(
            ", a {} s batching window, not the default {} s",
            window.as_secs(),
            BATCH_WINDOW.as_secs()
        );
    }
    let label = format!(
        "{times}x a key ({rate} readings/s in messages of {per_message}{batches}, {key_wcu} \
         WCU/s per key) x {seconds} s"
    );
    let window = match o.first_clean_window {
        Some(s) => format!("{s} s"),
        None => format!("none within {seconds} s"),
    };
    let window_label = format!("{label}: first 10-s window without a throttle starts at");
    match window_goal {
        Some(goal) => results.goal(
            "2",
            &window_label,
            window,
            &format!("at most {goal} s"),
            match o.first_clean_window {
                Some(s) if s <= goal => "met".to_owned(),
                Some(s) => format!("missed by {} s", s - goal),
                None => "missed: no clean window".to_owned(),
            },
        ),
        None => results.figure("2", &window_label, window),
    }
    results.goal(
        "2",
        &format!("{label}: throttled fraction after that"),
        if o.throttled_after.is_nan() {
            "n/a (no clean window)".to_owned()
        } else {
            format!("{:.4}", o.throttled_after)
        },
        "0",
        if o.throttled_after.is_nan() {
            "missed: no clean window".to_owned()
        } else if o.throttled_after == 0.0 {
            "met".to_owned()
        } else {
            format!("missed by {:.2}%", o.throttled_after * 100.0)
        },
    );
    let lost = o.generated.saturating_sub(o.stored);
    let t = &o.tally;
    results.goal(
        "2",
        &format!("{label}: readings lost (not stored); dead-lettered"),
        format!(
            "{lost} of {}; {} ({} in messages dead-lettered with a reason, {} redriven \
             without one)",
            o.generated,
            t.dead_lettered + t.redriven,
            t.dead_lettered,
            t.redriven
        ),
        "0; 0",
        if lost == 0 && t.dead_lettered + t.redriven == 0 {
            "met".to_owned()
        } else {
            format!(
                "missed by {lost} lost, {} dead-lettered",
                t.dead_lettered + t.redriven
            )
        },
    );
    let per_reading = o.accepted as f64 / o.generated as f64;
    results.goal(
        "2",
        &format!("{label}: item writes per reading"),
        format!("{per_reading:.3} ({} item writes accepted)", o.accepted),
        "at most 1.1",
        if per_reading <= 1.1 {
            "met".to_owned()
        } else {
            format!("missed by {:.3}", per_reading - 1.1)
        },
    );
    results.figure(
        "2",
        &format!("{label}: readings stored twice (under two keys)"),
        format!(
            "{} ({} items for {} readings)",
            o.items - o.stored,
            o.items,
            o.stored
        ),
    );
    results.figure(
        "2",
        &format!(
            "{label}: redelivery waits set; messages requeued; messages split; items re-keyed"
        ),
        format!("{}; {}; {}; {}", t.delayed, t.requeued, t.split, t.rekeyed),
    );
    if o.wall_seconds > seconds as f64 {
        results.note(
            "2",
            format!(
                "at {times}x the run took {:.0} simulated seconds in {:.0} wall seconds: \
                 more wall time than the {seconds} s offered, so this machine could not \
                 process the offered rate in real time (compare item 1c); the simulated \
                 clock ran at real speed while a backlog was worked off, and the figures \
                 of this run reflect the machine's CPU as well as the key capacity.",
                o.sim_end, o.wall_seconds
            ),
        );
    }
    results.figure(
        "2",
        &format!("{label}: fan-out raises; simulated / wall time"),
        format!(
            "{} raises ({}); {:.0} s simulated in {:.0} s wall",
            t.raises, o.fanout, o.sim_end, o.wall_seconds
        ),
    );
}
