//! Item 2's rows: per run, the first clean window and the throttles after it, readings
//! lost and item writes per reading against their goals, and the queue's and fan-out's
//! context; then the note on how the runs were made.

use super::{
    BATCH_SIZE, BATCH_WINDOW, CONCURRENCY, DEVICE, MAX_RECEIVES, Outcome, Run, VISIBILITY,
};
use crate::report::Results;

/// One run's rows of item 2.
pub(super) fn report_run(results: &mut Results, run: Run, seconds: u64, o: &Outcome) {
    let label = label(run, seconds);
    window_rows(results, &label, run.window_goal, seconds, o);
    loss_rows(results, &label, run.blocks, o);
    context_rows(results, &label, run.rate / run.key_wcu as usize, seconds, o);
}

/// The run's name in its rows: its rate, messages and key limit, and any setting other
/// than the template's.
fn label(run: Run, seconds: u64) -> String {
    let Run {
        rate,
        key_wcu,
        per_message,
        batch,
        window,
        blocks,
        ..
    } = run;
    let times = rate / key_wcu as usize;
    let mut batches = String::new();
    if blocks {
        batches += ", blocks on (a new table's default)";
    }
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
    format!(
        "{times}x a key ({rate} readings/s in messages of {per_message}{batches}, {key_wcu} \
         WCU/s per key) x {seconds} s"
    )
}

/// The first 10-s window without a throttle (against `window_goal` when the run has
/// one), and the share throttled after it.
fn window_rows(
    results: &mut Results,
    label: &str,
    window_goal: Option<u64>,
    seconds: u64,
    o: &Outcome,
) {
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
}

/// Readings lost or dead-lettered, and item writes (with blocks, write units) per
/// reading; with blocks, the throttles of the whole run and the largest fan-out.
fn loss_rows(results: &mut Results, label: &str, blocks: bool, o: &Outcome) {
    let t = &o.tally;
    let dead = t.dead_lettered + t.redriven;
    let dead_text = format!(
        "{dead} ({} in messages dead-lettered with a reason, {} redriven without one)",
        t.dead_lettered, t.redriven
    );
    let loss_label = format!("{label}: readings lost (not stored); dead-lettered");
    match o.stored {
        Some(stored) => {
            let lost = o.generated.saturating_sub(stored);
            results.goal(
                "2",
                &loss_label,
                format!("{lost} of {}; {dead_text}", o.generated),
                "0; 0",
                if lost == 0 && dead == 0 {
                    "met".to_owned()
                } else {
                    format!("missed by {lost} lost, {dead} dead-lettered")
                },
            );
        }
        None => results.goal(
            "2",
            &loss_label,
            format!(
                "not counted (a message was handled twice, and a block's key names only its                  first reading); {dead_text}"
            ),
            "0; 0",
            "not measured".to_owned(),
        ),
    }
    if blocks {
        return block_rows(results, label, o);
    }
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
}

/// A blocks run's goals: no throttle over the whole run, a fan-out of at most 2, and
/// the write units per reading the proxy charged.
fn block_rows(results: &mut Results, label: &str, o: &Outcome) {
    results.goal(
        "2",
        &format!("{label}: items throttled over the whole run"),
        o.throttled.to_string(),
        "0",
        if o.throttled == 0 {
            "met".to_owned()
        } else {
            format!("missed by {}", o.throttled)
        },
    );
    results.goal(
        "2",
        &format!("{label}: the device's largest fan-out k"),
        o.largest_k.to_string(),
        "at most 2",
        if o.largest_k <= 2 {
            "met".to_owned()
        } else {
            format!("missed by {}", o.largest_k - 2)
        },
    );
    let per_reading = o.wcu / o.generated as f64;
    results.goal(
        "2",
        &format!("{label}: write units per reading, the proxy's charge"),
        format!(
            "{per_reading:.3} ({:.0} WCU, {} items accepted)",
            o.wcu, o.accepted
        ),
        "at most 0.04",
        if per_reading <= 0.04 {
            "met".to_owned()
        } else {
            format!("missed by {:.3}", per_reading - 0.04)
        },
    );
}

/// Context: readings stored twice, what the handler asked of the queue, the fan-out
/// raises and the run's simulated and wall time (with a note when the machine fell
/// behind the offered rate, `times` a key's).
fn context_rows(results: &mut Results, label: &str, times: usize, seconds: u64, o: &Outcome) {
    let t = &o.tally;
    // With blocks an item holds many readings: the row is for runs of one a reading.
    if let Some(stored) = o.stored.filter(|&stored| o.items >= stored) {
        results.figure(
            "2",
            &format!("{label}: readings stored twice (under two keys)"),
            format!(
                "{} ({} items for {} readings)",
                o.items - stored,
                o.items,
                stored
            ),
        );
    }
    results.figure(
        "2",
        &format!(
            "{label}: redelivery waits set; messages requeued; messages split; items re-keyed"
        ),
        format!("{}; {}; {}; {}", t.delayed, t.requeued, t.split, t.stale),
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

/// The note on how item 2's runs were made.
pub(super) fn note(results: &mut Results, seconds: u64) {
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
             is the template's default (SHARD_CACHE_TTL_SECS 60, MAX_FUTURE_SECS 300, \
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
             accepted. The last two runs pack blocks (BLOCKS=on, a new table's default; the \
             others run BLOCKS=off), the ingest packing the device's messages of a batch \
             together: a block's key names only its first reading, so their readings \
             stored are the handler's ReadingsWritten, exact because no message was handled \
             twice, and their write units are the proxy's charge. Their k goal of 2 is the \
             issue's; the raise keeps each of a device's keys at RAISE_AHEAD_WCU (10 here, \
             a tenth of a key), so k is the device's write units a second over 10.",
            BATCH_WINDOW.as_secs(),
            VISIBILITY.as_secs()
        ),
    );
}
