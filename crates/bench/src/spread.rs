//! Item 3: busiest-PK load over mean-PK load per strategy, pure `sharding::write_key`.

use std::collections::HashMap;
use std::num::NonZeroU32;

use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sharding::capacity::{PlanInput, plan_capacity};
use sharding::epoch::{Epoch, FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::Timestamp;

use crate::common::{self, T0_MS};
use crate::report::Results;

/// The reference scenario: writes per second of the fleet, of its hot sensor, and its
/// size.
pub(crate) const GLOBAL_WPS: usize = 50_000;
pub(crate) const HOT_WPS: usize = 2_000;
pub(crate) const DEVICES: usize = 1_000_000;
/// With s = 1.0 the Zipf head alone (1/H(1,000,000) of 48,000 w/s, about 3,300 w/s)
/// would be hotter than the scenario's hottest sensor; 0.8 puts it near 640 w/s.
const ZIPF_S: f64 = 0.8;
pub(crate) const HOT: &str = "sensor-alpha-001";

/// Device ranks drawn Zipf (s = [`ZIPF_S`]) by inverse CDF.
pub(crate) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub(crate) fn new(devices: usize) -> Self {
        let mut acc = 0.0;
        let cdf = (1..=devices)
            .map(|rank| {
                acc += 1.0 / (rank as f64).powf(ZIPF_S);
                acc
            })
            .collect();
        Self { cdf }
    }

    /// A rank, 1 to the number of devices.
    pub(crate) fn sample<R: Rng>(&self, rng: &mut R) -> usize {
        let total = self.cdf.last().copied().unwrap_or(0.0);
        let u = rng.random::<f64>() * total;
        self.cdf.partition_point(|&c| c < u) + 1
    }
}

/// Item 3 over `seconds` of the reference scenario.
pub fn run(seconds: usize, results: &mut Results) -> Result<()> {
    let plan = plan_capacity(&PlanInput::new(GLOBAL_WPS as f64, HOT_WPS as f64, 500))?;
    let n = NonZeroU32::new(plan.table_shards).unwrap_or(NonZeroU32::MIN);
    let k = plan.hot_entity_fanout.max(1);

    let zipf = Zipf::new(DEVICES);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let cold_wps = GLOBAL_WPS - HOT_WPS;
    let mut readings: Vec<(String, String, Timestamp)> = Vec::with_capacity(GLOBAL_WPS * seconds);
    for s in 0..seconds {
        for i in 0..cold_wps {
            let rank = zipf.sample(&mut rng) - 1;
            let ms = (s * 1000 + i * 1000 / cold_wps) as i64;
            readings.push((
                format!("dev-{rank:07}"),
                format!("c-{s}-{i}"),
                common::ts(ms)?,
            ));
        }
        for i in 0..HOT_WPS {
            let ms = (s * 1000 + i * 1000 / HOT_WPS) as i64;
            readings.push((HOT.to_owned(), format!("h-{s}-{i}"), common::ts(ms)?));
        }
    }

    let hot_fanout = FanoutHistory::from_epochs(vec![Epoch {
        effective_from: Timestamp::from_millis(T0_MS - 1)?,
        value: k,
    }])?;
    let strategies: Vec<(String, Layout, bool)> = vec![
        (
            "unsharded (PK = device)".to_owned(),
            Layout::unsharded(),
            false,
        ),
        (format!("random suffix, N = {n}"), Layout::random(n), false),
        (
            format!("calculated suffix (event_id), N = {n}"),
            Layout::calculated("event_id", n),
            false,
        ),
        (
            format!("time bucket (hour), N = {n}"),
            Layout::time_bucket(sharding::time::Bucket::Hour, n),
            false,
        ),
        (
            format!("time bucket (hour), N = {n}, hot sensor fan-out k = {k}"),
            Layout::time_bucket(sharding::time::Bucket::Hour, n),
            true,
        ),
    ];
    let none = FanoutHistory::new();
    for (name, layout, fan) in strategies {
        let table = TableHistory::new(layout);
        let mut load: HashMap<String, u64> = HashMap::new();
        for (device, event, ts) in &readings {
            let fanout = if fan && device == HOT {
                &hot_fanout
            } else {
                &none
            };
            let key = write_key(&ReadingRef::new(device, event, *ts), &table, fanout, *ts)?.key;
            *load.entry(key.pk).or_default() += 1;
        }
        let busiest = load.values().copied().max().unwrap_or(0) as f64 / seconds as f64;
        let mean = readings.len() as f64 / load.len().max(1) as f64 / seconds as f64;
        results.figure(
            "3",
            &format!("busiest / mean PK load, {name}"),
            format!(
                "{:.1} (busiest {busiest:.0} w/s, mean {mean:.2} w/s over {} PKs)",
                busiest / mean,
                load.len()
            ),
        );
    }
    results.note(
        "3",
        format!(
            "{seconds} s of the reference scenario, computed with sharding::write_key only: \
             {cold_wps} readings/s over {DEVICES} devices drawn Zipf (s = {ZIPF_S}) plus {HOT} \
             at {HOT_WPS}/s. N = {n} and k = {k} are what sharding::plan_capacity gives for \
             50,000 w/s, a 2,000 w/s entity and 500-byte items. Mean = all writes / PKs that \
             received at least one. The exponent keeps the busiest Zipf device (about 640 w/s) \
             below the hot sensor, as in the scenario (s = 1.0 would put it at about 3,300 w/s). \
             Random and calculated suffixes are per device \
             (`device#r`), as the seeds use them; a busiest PK above 1,000 w/s is throttled."
        ),
    );
    Ok(())
}
