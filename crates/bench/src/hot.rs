//! Item 2: one device jumping from nothing to 2x and to 20x a key's write limit, for
//! 60 s, through the proxy, with the template's default fan-out settings.
//!
//! Time is simulated: the proxy's clock, the handler's `now` and the readings' timestamps
//! all follow one [`clock::SimClock`], which runs at real speed while work is under way and
//! jumps over the gaps when nothing is due. So token buckets refill during real retries
//! and back-offs, but idle waiting costs no wall time.
//!
//! One run ([`one`]) starts its [`Rig`] (the proxy's sink and the ingest service), sends
//! the device's messages on their [`Schedule`] through a simulated source queue
//! ([`queue`]) to the handler until the queue drains, samples the proxy's counters as it
//! goes ([`samples`]), and reports its figures ([`rows`]).

mod clock;
mod queue;
mod rig;
mod rows;
mod samples;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use capacity_proxy::Clock;

use crate::common;
use crate::report::Results;
use queue::{SourceQueue, Tally, events_of};
use rig::{Rig, Schedule};
use samples::{Sampler, clean_window};

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

/// DynamoDB's write limit of one partition key, WCU/s.
const KEY_WCU: u32 = sharding::capacity::PARTITION_WCU as u32;
/// The template's RAISE_AHEAD_WCU default, as a share of [`KEY_WCU`].
const KEY_RATE_SHARE: f64 = 0.1;

/// What one rate produced.
#[derive(Debug)]
struct Outcome {
    first_clean_window: Option<u64>,
    throttled_after: f64,
    /// Distinct readings stored, and items stored. `None` where they cannot be
    /// counted (see [`one`]).
    stored: Option<usize>,
    items: usize,
    /// Item writes the proxy accepted.
    accepted: u64,
    /// Write units the proxy charged.
    wcu: f64,
    /// Items the proxy throttled over the whole run.
    throttled: u64,
    generated: usize,
    tally: Tally,
    /// The hot device's fan-out epochs at the end, and the largest k.
    fanout: String,
    largest_k: u32,
    wall_seconds: f64,
    sim_end: f64,
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
    /// Whether the ingest packs a message's readings into blocks (`BLOCKS=on`, a new
    /// table's default); the other runs measure the item-a-reading layout.
    blocks: bool,
}

impl Run {
    /// A run of 2,000 readings/s in the template's batches.
    const fn batched(key_wcu: u32, per_message: usize, window_goal: Option<u64>) -> Self {
        Run {
            rate: 2_000,
            key_wcu,
            per_message,
            batch: BATCH_SIZE,
            window: BATCH_WINDOW,
            window_goal,
            blocks: false,
        }
    }
}

/// Item 2's runs. 20x a key at DynamoDB's 1,000 WCU/s is 20,000 readings/s, more than
/// this machine ingests in real time (item 1); so the 20x runs scale the key limit, and
/// with it the key rate, down by 10. Two runs change one setting, as context: batches
/// of 10 single-reading messages, where no rate shows and only key-range throttles
/// raise; and a 5-s batching window, where one invocation lands 5,000 readings of the
/// device on its keys at once. The last two runs are 20x a key with blocks on, the
/// default layout of a new table, in messages of 50 and of 1 (the ingest packs a
/// device's messages of a batch together): their goals are no throttle at all and a
/// fan-out of at most 2.
const RUNS: [Run; 8] = [
    Run::batched(KEY_WCU, 50, Some(5)),
    Run::batched(KEY_WCU, 1, Some(5)),
    Run::batched(KEY_WCU / 10, 50, Some(15)),
    Run::batched(KEY_WCU / 10, 1, Some(15)),
    Run {
        batch: 10,
        ..Run::batched(KEY_WCU / 10, 1, None)
    },
    Run {
        window: Duration::from_secs(5),
        ..Run::batched(KEY_WCU / 10, 50, None)
    },
    Run {
        blocks: true,
        ..Run::batched(KEY_WCU / 10, 50, Some(0))
    },
    Run {
        blocks: true,
        ..Run::batched(KEY_WCU / 10, 1, Some(0))
    },
];

/// Item 2 at 2x and 20x a key's limit.
pub async fn run(seconds: u64, results: &mut Results) -> Result<()> {
    for run in RUNS {
        let outcome = one(run, seconds).await?;
        rows::report_run(results, run, seconds, &outcome);
    }
    rows::note(results, seconds);
    Ok(())
}

/// One run for `seconds` against keys of `key_wcu` WCU/s each. Every fan-out setting is
/// the template's default; only the key rate follows a scaled-down key limit
/// (RAISE_AHEAD_WCU is a tenth of a key's limit by default).
async fn one(run: Run, seconds: u64) -> Result<Outcome> {
    let rig = Rig::start(run).await?;
    let total = run.rate * seconds as usize;
    let schedule = Schedule::new(total, run.per_message, run.rate);
    let mut sampler = Sampler::start(&rig);

    let wall = Instant::now();
    let tally = drive(&rig, &schedule, &sampler, run.rate, wall).await?;
    let (fanout, largest_k) = rig.fanout_text().await?;
    sampler.stop().await?;
    let wall_seconds = wall.elapsed().as_secs_f64();
    let sim_end = rig.clock.now().as_secs_f64();
    let samples = sampler.finish(&rig);

    let (first_clean_window, throttled_after) = clean_window(&samples, seconds as usize);
    let keys = rig.proxy.sink_keys();
    let items = keys.len();
    // A reading stored under two partition keys (across a raise) is one reading: its
    // sort key names it. A block's key names its first member only, so with blocks the
    // readings stored are the handler's count, exact while no message was handled
    // twice (no redelivery wait, requeue, split or redrive).
    let stored = if run.blocks {
        tally
            .each_message_once()
            .then(|| usize::try_from(tally.readings_written).unwrap_or(usize::MAX))
    } else {
        let distinct: BTreeSet<Option<String>> = keys.into_iter().map(|k| k.sk).collect();
        Some(distinct.len())
    };
    let stats = rig.proxy.stats();
    let accepted = stats.items_accepted;
    let wcu = stats.wcu_by_table.values().sum();
    let throttled = stats.throttled_by_reason.values().sum();
    rig.shutdown().await?;
    Ok(Outcome {
        first_clean_window: first_clean_window.map(|s| s as u64),
        throttled_after,
        stored,
        items,
        accepted,
        wcu,
        throttled,
        generated: total,
        tally,
        fanout,
        largest_k,
        wall_seconds,
        sim_end,
    })
}

/// Sends the device's messages on `schedule` through the simulated source queue to the
/// handler until the queue drains, jumping the clock over idle gaps (sampling the
/// proxy's counters before each jump); what the queue saw of the handler's answers.
async fn drive(
    rig: &Rig,
    schedule: &Schedule,
    sampler: &Sampler,
    rate: usize,
    wall: Instant,
) -> Result<Tally> {
    let mut queue = SourceQueue::default();
    let mut progress = Instant::now();
    loop {
        let now = rig.clock.now();
        if progress.elapsed() >= Duration::from_secs(15) {
            progress = Instant::now();
            eprintln!(
                "  {rate}/s: {:.0} s simulated, {:.0} s wall: {} of {} messages sent, {} \
                 queued, {} item writes accepted (a redelivery rewrites its items), {} raises",
                now.as_secs_f64(),
                wall.elapsed().as_secs_f64(),
                queue.sent,
                schedule.len(),
                queue.pending.len(),
                rig.proxy.stats().items_accepted,
                queue.tally.raises,
            );
        }
        queue.send_due(schedule, now);
        let ready = rig.batching.take_ready(&mut queue.pending, now);
        if ready.is_empty() {
            match queue.upcoming(&rig.batching, schedule, now) {
                Some(t) => {
                    sampler.record(rig.sample());
                    rig.clock.jump_to(t);
                    continue;
                }
                None => break,
            }
        }
        let events = events_of(ready, rig.batching.size);
        let base = queue.invocations;
        queue.invocations += events.len() as u64;
        let outcomes = rig.invoke(events, base).await;
        let now = rig.clock.now();
        queue.take_answers(rig.service.queue(), outcomes, now)?;
    }
    Ok(queue.tally)
}
