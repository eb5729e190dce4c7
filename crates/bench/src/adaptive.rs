//! Item 3, over time: the reference scenario with Zipf skew and the fan-out loop in it.
//!
//! Simulated second by second. Each second the fleet's readings (and the ones a throttle
//! held back the second before) are keyed with `sharding::write_key` and the fan-out in
//! force, and every partition key takes at most its limit; the rest is throttled and
//! written again the next second, keyed anew. The loop is the ingest's: the real
//! `ShardDirectory` over the in-memory metadata port, with the template's default
//! policy, hears the measured rate of every device whose messages are dense enough to
//! show one and, per throttled key, a key-range throttle for each device holding at least a
//! tenth of the key's writes, as the ingest's throttle listener brings them.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::capacity::{PlanInput, plan_capacity};
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::{Arrived, BatchArrival, MIN_RATE_SAMPLE, Signal, Throttle, arrival_rate};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::directory::{FanoutChange, ShardDirectory};
use store::memory::MemoryShards;

use crate::common;
use crate::report::Results;
use crate::spread::{DEVICES, GLOBAL_WPS, HOT, HOT_WPS, Zipf};

/// DynamoDB's write limit of one partition key, WCU/s (1 KB readings: one WCU each).
const KEY_WCU: usize = sharding::capacity::PARTITION_WCU as usize;
/// The ingest's share of a throttled key's writes that makes a device one of its owners.
const OWNER_SHARE: usize = 10;
/// Seconds at the end over which busiest/mean is taken.
const WINDOW: usize = 10;

/// One reading: device rank (`None` for the hot sensor), event number, timestamp.
type Reading = (Option<usize>, u64, Timestamp);

fn device_id(device: Option<usize>) -> String {
    device.map_or_else(|| HOT.to_owned(), |rank| format!("dev-{rank:07}"))
}

/// What one simulated second did to the keys.
#[derive(Debug, Default)]
struct Second {
    /// Writes asked of the busiest key (accepted + throttled).
    busiest_attempted: usize,
    /// Readings throttled.
    throttled: usize,
    /// Accepted writes per partition key.
    accepted: HashMap<String, usize>,
}

/// One second's writes: what the keys did, the readings throttled, and the devices to
/// bring to the directory with the fan-out their throttled keys were made with.
struct Written {
    second: Second,
    throttled: Vec<Reading>,
    owners: Vec<(String, u32)>,
}

/// What one simulation did, second by second.
struct Simulated {
    history: Vec<Second>,
    raises: u64,
    fanouts: HashMap<String, FanoutHistory>,
}

/// Item 3 over time, `seconds` simulated seconds: the template's defaults (the goals),
/// then two context runs that each change one of them.
pub async fn run(seconds: usize, results: &mut Results) -> Result<()> {
    let plan = plan_capacity(&PlanInput::new(GLOBAL_WPS as f64, HOT_WPS as f64, 500))?;
    let n = NonZeroU32::new(plan.table_shards).unwrap_or(NonZeroU32::MIN);
    let layout = Layout::time_bucket(Bucket::Hour, n);
    let defaults = common::ingest_config(&[])?.directory_config();
    let policy = defaults.policy;
    let cold_wps = GLOBAL_WPS - HOT_WPS;
    let run = simulate(seconds, layout, &[]).await?;
    report(&run, n, plan.hot_entity_fanout, results);

    let contexts = [
        (
            "sub-shards on keys of their own (SUB_SHARDS=dedicated)",
            Layout::time_bucket_dedicated(Bucket::Hour, n),
            None,
        ),
        (
            "RAISE_AHEAD_WCU 500 (half a key)",
            Layout::time_bucket(Bucket::Hour, n),
            Some("500"),
        ),
    ];
    for (what, layout, key_rate) in contexts {
        let extra: Vec<(&str, &str)> = key_rate
            .map(|r| ("RAISE_AHEAD_WCU", r))
            .into_iter()
            .collect();
        let context = simulate(seconds, layout, &extra).await?;
        let (ratio, busiest, mean, keys) = busiest_over_mean(&context.history);
        results.figure(
            "3",
            &format!("over time, context: {what}: busiest / mean PK load, last {WINDOW} s; no key over its limit from"),
            format!(
                "{ratio:.2} (busiest {busiest:.0} w/s, mean {mean:.1} w/s over {keys} PKs); {}",
                clean_from(&context.history).map_or_else(|| "never".to_owned(), |s| format!("{s} s"))
            ),
        );
    }
    results.note(
        "3",
        format!(
            "over time: {seconds} simulated seconds of the reference scenario from a standing \
             start ({cold_wps} readings/s over {DEVICES} devices drawn Zipf (s = 0.8) plus {HOT} \
             at {HOT_WPS}/s, N = {n} hour buckets as planned with sub-shards on base shards, no \
             fan-out planned ahead). Each \
             second every reading, and every reading throttled the second before, is keyed \
             with sharding::write_key and the fan-out in force; a key takes {KEY_WCU} writes a \
             second (no burst) and throttles the rest, which are written again the next \
             second under the key in force then. The loop: the real ShardDirectory (in-memory \
             metadata) with the template's default policy (cooldown {} s + up to {} s jitter, \
             FANOUT_MAX {}, RAISE_AHEAD_WCU {}) hears each second the rate of every device \
             whose messages show one (a message per device and second or per 50 readings; \
             one of at least {MIN_RATE_SAMPLE} readings shows a rate), and after each second a key-range throttle for every device holding at least 1/{OWNER_SHARE} \
             of a throttled key's writes. Writers' caches are taken as fresh (a throttle \
             re-reads them). Busiest / mean = accepted writes of the busiest key over the mean \
             of keys with any write, over the last {WINDOW} s. The context runs change one \
             default each and run the same stream.",

            policy.cooldown.as_secs(),
            policy.jitter.as_secs(),
            policy.max_fanout,
            policy.key_rate,
        ),
    );
    Ok(())
}

/// The reference scenario for `seconds` with the fan-out loop in it, on `layout`, with
/// the template's defaults and `extra` ingest variables on top.
async fn simulate(seconds: usize, layout: Layout, extra: &[(&str, &str)]) -> Result<Simulated> {
    let table = TableHistory::new(layout.clone());
    let mut config = common::ingest_config(extra)?.directory_config();
    config.initial_layout = layout;
    let directory = ShardDirectory::new(MemoryShards::new(), config);

    let zipf = Zipf::new(DEVICES);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let cold_wps = GLOBAL_WPS - HOT_WPS;
    let mut fanouts: HashMap<String, FanoutHistory> = HashMap::new();
    let mut backlog: Vec<Reading> = Vec::new();
    let mut history: Vec<Second> = Vec::with_capacity(seconds);
    let mut raises = 0u64;
    let mut next_event = 0u64;
    for s in 0..seconds {
        let now = common::ts((s * 1000) as i64)?;
        let mut readings = std::mem::take(&mut backlog);
        let carried = readings.len();
        for i in 0..cold_wps {
            let ts = common::ts((s * 1000 + i * 1000 / cold_wps) as i64)?;
            readings.push((Some(zipf.sample(&mut rng)), next_event, ts));
            next_event += 1;
        }
        for i in 0..HOT_WPS {
            let ts = common::ts((s * 1000 + i * 1000 / HOT_WPS) as i64)?;
            readings.push((None, next_event, ts));
            next_event += 1;
        }
        // Every device sends a message per second or per 50 readings, whichever comes
        // first; one of at least MIN_RATE_SAMPLE readings shows the device's rate.
        for (id, rate) in shown_rates(&readings[carried..]) {
            let signal = Signal {
                throttle: Throttle::Other,
                keyed: 0,
                rate: Some(rate),
            };
            let change = directory.on_signal(&id, signal, now, &mut rng).await?;
            raises += u64::from(matches!(change, FanoutChange::Raised(_)));
            fanouts.insert(id.clone(), directory.fanout(&id, now).await?);
        }

        let written = write_second(&readings, &table, &fanouts, now)?;
        backlog = written.throttled;
        for (entity, keyed) in written.owners {
            let signal = Signal {
                throttle: Throttle::KeyRange,
                keyed,
                rate: None,
            };
            let change = directory.on_signal(&entity, signal, now, &mut rng).await?;
            raises += u64::from(matches!(change, FanoutChange::Raised(_)));
            let fanout = directory.fanout(&entity, now).await?;
            fanouts.insert(entity, fanout);
        }
        history.push(written.second);
    }
    Ok(Simulated {
        history,
        raises,
        fanouts,
    })
}

/// The rates one second's fresh readings show to the ingest: each device's messages
/// hold at most 50 readings and arrive over the second, gathered in a batching window
/// of one second, so a device of at least [`MIN_RATE_SAMPLE`] readings shows its rate
/// ([`arrival_rate`]).
fn shown_rates(readings: &[Reading]) -> Vec<(String, f64)> {
    let second = Duration::from_secs(1);
    let batch = BatchArrival {
        window: second,
        full_span: None,
    };
    let mut counts: HashMap<Option<usize>, u64> = HashMap::new();
    for (device, _, _) in readings {
        *counts.entry(*device).or_default() += 1;
    }
    let mut shown: Vec<(String, f64)> = counts
        .into_iter()
        .filter_map(|(device, n)| {
            arrival_rate(Arrived::small(n, n.div_ceil(50), second), &batch)
                .map(|rate| (device_id(device), rate))
        })
        .collect();
    shown.sort_by(|a, b| a.0.cmp(&b.0));
    shown
}

/// Keys one second's readings and caps every key at [`KEY_WCU`].
fn write_second(
    readings: &[Reading],
    table: &TableHistory,
    fanouts: &HashMap<String, FanoutHistory>,
    now: Timestamp,
) -> Result<Written> {
    let none = FanoutHistory::new();
    let mut by_key: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
    for (i, (device, event, ts)) in readings.iter().enumerate() {
        let id = device_id(*device);
        let fanout = fanouts.get(&id).unwrap_or(&none);
        let event = format!("e{event}");
        let key = write_key(&ReadingRef::new(&id, &event, *ts), table, fanout, now)?.key;
        let k = fanout.for_write(*ts, now).unwrap_or(1);
        by_key.entry(key.pk).or_default().push((i, k));
    }
    let mut second = Second::default();
    let mut throttled = Vec::new();
    let mut owners: BTreeSet<(String, u32)> = BTreeSet::new();
    for (pk, items) in by_key {
        second.busiest_attempted = second.busiest_attempted.max(items.len());
        second.accepted.insert(pk, items.len().min(KEY_WCU));
        if items.len() <= KEY_WCU {
            continue;
        }
        throttled.extend(items[KEY_WCU..].iter().map(|(i, _)| readings[*i]));
        let mut counts: HashMap<(Option<usize>, u32), usize> = HashMap::new();
        for (i, k) in &items {
            *counts.entry((readings[*i].0, *k)).or_default() += 1;
        }
        owners.extend(
            counts
                .into_iter()
                .filter(|(_, c)| c * OWNER_SHARE >= items.len())
                .map(|((device, k), _)| (device_id(device), k)),
        );
    }
    second.throttled = throttled.len();
    Ok(Written {
        second,
        throttled,
        owners: owners.into_iter().collect(),
    })
}

/// The first second from which no key is asked for more than its limit.
fn clean_from(history: &[Second]) -> Option<usize> {
    (0..history.len()).find(|&s| {
        history[s..]
            .iter()
            .all(|second| second.busiest_attempted <= KEY_WCU)
    })
}

/// Busiest / mean accepted writes per key over the last [`WINDOW`] seconds: the ratio,
/// the busiest and the mean in writes a second, and the number of keys with any write.
fn busiest_over_mean(history: &[Second]) -> (f64, f64, f64, usize) {
    let window = &history[history.len().saturating_sub(WINDOW)..];
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for second in window {
        for (pk, n) in &second.accepted {
            *per_key.entry(pk).or_default() += n;
        }
    }
    let seconds = window.len().max(1) as f64;
    let busiest = per_key.values().copied().max().unwrap_or(0) as f64 / seconds;
    let mean = per_key.values().sum::<usize>() as f64 / per_key.len().max(1) as f64 / seconds;
    (
        busiest / mean.max(f64::MIN_POSITIVE),
        busiest,
        mean,
        per_key.len(),
    )
}

fn report(run: &Simulated, n: NonZeroU32, planned_k: u32, results: &mut Results) {
    let Simulated {
        history,
        raises,
        fanouts,
    } = run;
    let seconds = history.len();
    let clean_from = clean_from(history);
    results.goal(
        "3",
        &format!("over time, N = {n}, fan-out by the loop: no key over its limit from"),
        match clean_from {
            Some(s) => format!("{s} s"),
            None => format!("never within {seconds} s"),
        },
        "at most 15 s",
        match clean_from {
            Some(s) if s <= 15 => "met".to_owned(),
            Some(s) => format!("missed by {} s", s - 15),
            None => "missed".to_owned(),
        },
    );
    let (ratio, busiest, mean, keys) = busiest_over_mean(history);
    results.goal(
        "3",
        &format!(
            "over time, N = {n}, fan-out by the loop: busiest / mean PK load, last {WINDOW} s"
        ),
        format!("{ratio:.2} (busiest {busiest:.0} w/s, mean {mean:.1} w/s over {keys} PKs)"),
        "at most 1.5",
        if ratio <= 1.5 {
            "met".to_owned()
        } else {
            format!("missed by {:.2}", ratio - 1.5)
        },
    );
    let throttled: usize = history.iter().map(|s| s.throttled).sum();
    let raised: Vec<String> = {
        let mut raised: Vec<(&String, u32)> = fanouts
            .iter()
            .filter_map(|(e, h)| h.latest().map(|l| (e, l.value)))
            .collect();
        raised.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        raised
            .iter()
            .take(5)
            .map(|(e, k)| format!("{e} k={k}"))
            .collect()
    };
    results.figure(
        "3",
        "over time: raises; devices raised (largest k first); readings throttled",
        format!(
            "{raises} raises over {} devices ({}{}); {throttled} throttled (the planner's \
             hot-entity k is {planned_k})",
            fanouts.values().filter(|h| h.ever_fanned_out()).count(),
            raised.join(", "),
            if fanouts.len() > 5 { ", ..." } else { "" },
        ),
    );
}
