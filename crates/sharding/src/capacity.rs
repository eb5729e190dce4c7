//! Capacity planner: table-level N and hot-entity fan-out k from the expected write rates,
//! with the hot entity's sub-shards on the keys the table layout puts them on.

use serde::{Deserialize, Serialize};

use crate::fanout::needed_fanout;
use crate::layout::SubShards;

/// DynamoDB's write limit of one partition, in WCU/s.
pub const PARTITION_WCU: f64 = 1000.0;
/// Default safety factor: plan each PK for half the partition limit.
pub const DEFAULT_SAFETY: f64 = 2.0;
/// Largest DynamoDB item, in bytes.
pub const MAX_ITEM_BYTES: u64 = 400 * 1024;
/// Bytes per write capacity unit.
pub const WCU_BYTES: u64 = 1024;
/// Above this N, a cross-entity read of one bucket costs more queries than is sensible.
pub const LARGE_TABLE_SHARDS: u32 = 1000;
/// What the ingest's raise leaves on each key of a hot entity by default: a tenth of the
/// partition limit, the ingest's `RAISE_AHEAD_WCU` default (100 of 1,000). The ingest
/// raises an entity to the k at which each key takes at most that ([`needed_fanout`]).
pub const DEFAULT_RAISE_AHEAD_WCU: f64 = PARTITION_WCU / 10.0;

/// Why the planner refused its input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlannerError {
    /// NaN, infinite, negative or otherwise impossible input.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending input.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The plan needs more table shards (or sub-shards) than fit a u32.
    #[error("the rates need more than {} table shards or sub-shards", u32::MAX)]
    TooManyShards,
}

/// Expected load and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanInput {
    /// Peak writes per second over all entities.
    pub global_wps: f64,
    /// Peak writes per second of the hottest single entity.
    pub peak_entity_wps: f64,
    /// Size of one item in bytes.
    pub item_bytes: u64,
    /// Each PK is planned for `partition_wcu / safety` (default 2.0).
    pub safety: f64,
    /// Partition write limit in WCU/s (default 1,000).
    pub partition_wcu: f64,
    /// Evaluate this N instead of choosing one.
    pub table_shards: Option<u32>,
    /// Where the hot entity's sub-shards live (default `Base`, what new tables get). On
    /// base shards each of its keys also carries the rest of the table's mean load.
    #[serde(default = "base_placement")]
    pub sub_shards: SubShards,
    /// WCU/s the ingest's raise leaves on each of the hot entity's keys, its
    /// `RAISE_AHEAD_WCU`: by default a tenth of `partition_wcu`, 100 of the 1,000 limit
    /// ([`DEFAULT_RAISE_AHEAD_WCU`]). Planned with `Base` placement, where it must be below
    /// the budget `partition_wcu / safety`; `Dedicated` plans keep their own arithmetic.
    #[serde(default = "default_raise_ahead")]
    pub raise_ahead_wcu: f64,
    /// Write units one reading costs where the ingest packs readings into blocks
    /// (`BLOCKS=on`): a block's write units over its readings, as measured (bench item
    /// 8, or `ConsumedWriteCapacityUnits` over the ingest's `ReadingsWritten`). `None`:
    /// one item a reading, `ceil(item_bytes / 1024)` each. The rates, the raise and the
    /// bill are planned in these units.
    #[serde(default)]
    pub write_units_per_reading: Option<f64>,
}

const fn base_placement() -> SubShards {
    SubShards::Base
}

const fn default_raise_ahead() -> f64 {
    DEFAULT_RAISE_AHEAD_WCU
}

impl PlanInput {
    /// Input with the default safety factor, partition limit, placement (`Base`) and
    /// raise-ahead share.
    #[must_use]
    pub const fn new(global_wps: f64, peak_entity_wps: f64, item_bytes: u64) -> Self {
        PlanInput {
            global_wps,
            peak_entity_wps,
            item_bytes,
            safety: DEFAULT_SAFETY,
            partition_wcu: PARTITION_WCU,
            table_shards: None,
            sub_shards: SubShards::Base,
            raise_ahead_wcu: DEFAULT_RAISE_AHEAD_WCU,
            write_units_per_reading: None,
        }
    }
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityPlan {
    /// Table-level shard count N.
    pub table_shards: u32,
    /// Fan-out k of the hottest entity (1 = no fan-out): with `Base` placement the k the
    /// ingest raises it to (`peak*w / raise_ahead_wcu`, rounded up), with `Dedicated` the
    /// fewest keys within the budget (`peak*w / budget`, rounded up).
    pub hot_entity_fanout: u32,
    /// Where the hot entity's sub-shards were placed.
    pub sub_shards: SubShards,
    /// WCU per item write: `ceil(item_bytes / 1024)`.
    pub wcu_per_item: u32,
    /// Write units one reading costs: the input's `write_units_per_reading` where
    /// readings are packed into blocks, else `wcu_per_item`. Every rate is planned in
    /// these units.
    pub wcu_per_reading: f64,
    /// Expected peak WCU/s of a PK from the table's other writes: `(global - peak)*w/N`
    /// with `Base`, `global*w/N` with `Dedicated`.
    pub mean_pk_wcu: f64,
    /// Expected peak WCU/s the hottest entity puts on each of its keys: `peak*w/k`.
    pub hot_share_wcu: f64,
    /// Expected peak WCU/s of each of the hottest entity's keys: the mean plus its share
    /// with `Base` (its keys are base shards), its share alone with `Dedicated`.
    pub hot_pk_wcu: f64,
    /// Expected peak WCU/s on the busiest PK: `max(mean_pk_wcu, hot_pk_wcu)`.
    pub max_pk_wcu: f64,
    /// Planned WCU/s per PK: `partition_wcu / safety`.
    pub budget_per_pk: f64,
    /// Partition write limit used, WCU/s.
    pub partition_wcu: f64,
    /// Findings a human should read, each with its numbers.
    pub warnings: Vec<String>,
}

fn finite(field: &'static str, value: f64) -> Result<f64, PlannerError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(PlannerError::InvalidInput {
            field,
            reason: format!("{value} is not a finite number"),
        })
    }
}

fn validate(input: &PlanInput) -> Result<(), PlannerError> {
    let invalid = |field, reason: String| Err(PlannerError::InvalidInput { field, reason });
    if finite("global_wps", input.global_wps)? <= 0.0 {
        return invalid("global_wps", format!("{} must be > 0", input.global_wps));
    }
    let peak = finite("peak_entity_wps", input.peak_entity_wps)?;
    if peak < 0.0 {
        return invalid("peak_entity_wps", format!("{peak} must be >= 0"));
    }
    if peak > input.global_wps {
        return invalid(
            "peak_entity_wps",
            format!("{peak} exceeds global_wps {}", input.global_wps),
        );
    }
    if input.item_bytes == 0 || input.item_bytes > MAX_ITEM_BYTES {
        return invalid(
            "item_bytes",
            format!("{} must be in 1..={MAX_ITEM_BYTES}", input.item_bytes),
        );
    }
    if finite("safety", input.safety)? < 1.0 {
        return invalid("safety", format!("{} must be >= 1", input.safety));
    }
    if finite("partition_wcu", input.partition_wcu)? <= 0.0 {
        return invalid(
            "partition_wcu",
            format!("{} must be > 0", input.partition_wcu),
        );
    }
    if input.table_shards == Some(0) {
        return invalid("table_shards", "must be >= 1".to_owned());
    }
    if let Some(w) = input.write_units_per_reading {
        let w = finite("write_units_per_reading", w)?;
        if w <= 0.0 || w > (MAX_ITEM_BYTES / WCU_BYTES) as f64 {
            return invalid(
                "write_units_per_reading",
                format!(
                    "{w} must be above 0 and at most {}",
                    MAX_ITEM_BYTES / WCU_BYTES
                ),
            );
        }
    }
    let raise = finite("raise_ahead_wcu", input.raise_ahead_wcu)?;
    if raise <= 0.0 {
        return invalid("raise_ahead_wcu", format!("{raise} must be > 0"));
    }
    let budget = input.partition_wcu / input.safety;
    if input.sub_shards == SubShards::Base && raise >= budget {
        return invalid(
            "raise_ahead_wcu",
            format!(
                "{raise} must be below the budget of {} WCU/s per PK (partition_wcu {} / \
                 safety {}): with base placement each raised key carries it on top of the \
                 table's own load",
                num(budget),
                num(input.partition_wcu),
                num(input.safety),
            ),
        );
    }
    Ok(())
}

/// Smallest count c >= 1 with `fits(c)`, starting from `estimate` (rounded up), which
/// `fits` only corrects for rounding.
fn smallest_count(estimate: f64, fits: impl Fn(f64) -> bool) -> Result<u32, PlannerError> {
    let estimate = estimate.ceil().max(1.0);
    if estimate.is_nan() || estimate > f64::from(u32::MAX) {
        return Err(PlannerError::TooManyShards);
    }
    // In range by the check above; the cast truncates an already integral value.
    let mut count = estimate as u32;
    while !fits(f64::from(count)) {
        count = count.checked_add(1).ok_or(PlannerError::TooManyShards)?;
    }
    Ok(count)
}

/// Smallest count c >= 1 with `load / c <= budget`.
fn shards_for(load: f64, budget: f64) -> Result<u32, PlannerError> {
    // The guarantee is load / count <= budget, whatever the rounding of the estimate.
    smallest_count(load / budget, |c| load / c <= budget)
}

/// Formats a rate for humans: `3,125`, or `0.5` below 10.
fn num(x: f64) -> String {
    if x.abs() < 10.0 {
        let s = format!("{x:.2}");
        return s.trim_end_matches('0').trim_end_matches('.').to_owned();
    }
    let rounded = format!("{:.0}", x.round());
    let (sign, digits) = rounded
        .strip_prefix('-')
        .map_or(("", rounded.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// The input's rates in WCU/s and the budget of one PK.
struct Rates {
    budget: f64,
    global: f64,
    hot: f64,
}

/// What the keys carry at N table shards with the hottest entity at fan-out k.
struct Placed {
    shards: u32,
    fanout: u32,
    mean: f64,
    share: f64,
    hot_key: f64,
}

/// The loads of N keys and of the hottest entity's k keys under the input's placement.
/// With `Base` its sub-shard j lives on base shard `(s + j) mod N` for j < N
/// (`SubShards::home`), a key that carries the rest of the table's mean load too. At
/// N = 1 its sub-shards are keys of their own (j >= N), and counting the mean on them
/// only overstates.
fn placed(input: &PlanInput, r: &Rates, shards: u32, fanout: u32) -> Placed {
    let share = r.hot / f64::from(fanout);
    let (mean, hot_key) = match input.sub_shards {
        SubShards::Base => {
            let mean = (r.global - r.hot).max(0.0) / f64::from(shards);
            (mean, mean + share)
        }
        SubShards::Dedicated => (r.global / f64::from(shards), share),
    };
    Placed {
        shards,
        fanout,
        mean,
        share,
        hot_key,
    }
}

/// The hottest entity's fan-out: with `Base` what the ingest's raise gives it (k = 1 when
/// it needs none), with `Dedicated` the fewest keys of its own within the budget.
fn hot_fanout(input: &PlanInput, r: &Rates) -> Result<u32, PlannerError> {
    match input.sub_shards {
        SubShards::Base => Ok(needed_fanout(r.hot, input.raise_ahead_wcu, u32::MAX)),
        SubShards::Dedicated => shards_for(r.hot, r.budget),
    }
}

/// The fewest table shards that keep every key within the budget, the hottest entity at
/// fan-out k: with `Base` the smallest N with `(global - peak)*w/N + peak*w/k <= budget`.
fn needed_shards(input: &PlanInput, r: &Rates, fanout: u32) -> Result<u32, PlannerError> {
    match input.sub_shards {
        SubShards::Base => {
            let rest = (r.global - r.hot).max(0.0);
            let share = r.hot / f64::from(fanout);
            // Below the budget whenever the raise reached its k (raise_ahead < budget).
            let room = r.budget - share;
            if room.is_nan() || room <= 0.0 {
                return Err(PlannerError::TooManyShards);
            }
            smallest_count(rest / room, |n| rest / n + share <= r.budget)
        }
        SubShards::Dedicated => shards_for(r.global, r.budget),
    }
}

/// Plans N and k so that no PK is expected above `partition_wcu / safety`, or evaluates a
/// given N. With N chosen by the planner, `max_pk_wcu <= budget_per_pk <= partition_wcu`.
/// With `Base` placement the hottest entity's keys are base shards: each carries the
/// rest of the table's mean load plus its share, and N is chosen for that sum.
pub fn plan_capacity(input: &PlanInput) -> Result<CapacityPlan, PlannerError> {
    validate(input)?;
    let wcu_per_item_u64 = input.item_bytes.div_ceil(WCU_BYTES);
    // item_bytes <= 400 KiB, so at most 400 WCU.
    let wcu_per_item = u32::try_from(wcu_per_item_u64).unwrap_or(u32::MAX);
    let w = input
        .write_units_per_reading
        .unwrap_or(f64::from(wcu_per_item));
    let r = Rates {
        budget: input.partition_wcu / input.safety,
        global: input.global_wps * w,
        hot: input.peak_entity_wps * w,
    };
    let fanout = hot_fanout(input, &r)?;
    let (shards, needed) = match input.table_shards {
        Some(n) => (n, needed_shards(input, &r, fanout).ok()),
        None => {
            let n = needed_shards(input, &r, fanout)?;
            (n, Some(n))
        }
    };
    let p = placed(input, &r, shards, fanout);

    let mut warnings = Vec::new();
    if input.table_shards.is_some() {
        warnings.extend(given_shards_finding(input, &r, &p, needed));
    }
    if wcu_per_item > 1 && input.write_units_per_reading.is_none() {
        warnings.push(format!(
            "items of {} bytes cost {wcu_per_item} WCU each (1 WCU per started KB): \
             {} w/s need {} WCU/s",
            num(input.item_bytes as f64),
            num(input.global_wps),
            num(r.global),
        ));
    }
    if fanout > 1 {
        warnings.push(hot_entity_finding(input, &r, &p));
    }
    if shards > LARGE_TABLE_SHARDS {
        warnings.push(format!(
            "N = {shards} makes a cross-entity read cost {shards} queries per \
             bucket; consider a finer bucket or fewer readers of all entities"
        ));
    }
    Ok(CapacityPlan {
        table_shards: shards,
        hot_entity_fanout: fanout,
        sub_shards: input.sub_shards,
        wcu_per_item,
        wcu_per_reading: w,
        mean_pk_wcu: p.mean,
        hot_share_wcu: p.share,
        hot_pk_wcu: p.hot_key,
        max_pk_wcu: p.mean.max(p.hot_key),
        budget_per_pk: r.budget,
        partition_wcu: input.partition_wcu,
        warnings,
    })
}

/// What a given N puts over the budget or the partition limit, with the N (or, with
/// `Base`, the hottest entity's k) that would fit.
fn given_shards_finding(
    input: &PlanInput,
    r: &Rates,
    p: &Placed,
    needed: Option<u32>,
) -> Option<String> {
    let over = |load: f64| {
        if load > input.partition_wcu {
            Some(format!(
                "the {} WCU/s partition limit",
                num(input.partition_wcu)
            ))
        } else if load > r.budget {
            Some(format!(
                "the safety budget of {} WCU/s (limit {} / safety {})",
                num(r.budget),
                num(input.partition_wcu),
                num(input.safety),
            ))
        } else {
            None
        }
    };
    let use_n = needed.map_or_else(
        || "no N keeps it within the budget".to_owned(),
        |n| format!("use N >= {n}"),
    );
    let n = p.shards;
    let base = input.sub_shards == SubShards::Base;
    if let Some(level) = over(p.mean) {
        let aside = if base && r.hot > 0.0 {
            " (the hottest entity aside)"
        } else {
            ""
        };
        return Some(format!(
            "N = {n} at {} w/s puts ~{} WCU/s on each PK{aside}, over {level}: {use_n}",
            num(input.global_wps),
            num(p.mean),
        ));
    }
    let level = over(p.hot_key).filter(|_| base)?;
    // The k at which the mean plus the share fits, and the raise-ahead share that gives it.
    let room = r.budget - p.mean;
    let fitting_k = (room > 0.0)
        .then(|| smallest_count(r.hot / room, |k| p.mean + r.hot / k <= r.budget).ok())
        .flatten();
    let or_k = fitting_k.map_or_else(String::new, |k| {
        let raise = if room >= 10.0 { room.floor() } else { room };
        format!(
            ", or k >= {k} (a raise-ahead share of at most {} WCU/s)",
            num(raise)
        )
    });
    Some(format!(
        "N = {n} puts ~{} WCU/s of the table on each PK, and the hottest entity's k = {} \
         sub-shards add ~{} WCU/s each to the base shards they land on: ~{} WCU/s, over \
         {level}: {use_n}{or_k}",
        num(p.mean),
        p.fanout,
        num(p.share),
        num(p.hot_key),
    ))
}

/// What the hottest entity needs, when it needs more than one key.
fn hot_entity_finding(input: &PlanInput, r: &Rates, p: &Placed) -> String {
    let one_pk = if r.hot > input.partition_wcu {
        format!(
            "a single PK would throttle it at {} WCU/s",
            num(input.partition_wcu)
        )
    } else if r.hot > r.budget {
        format!(
            "a single PK would run above the {} WCU/s budget",
            num(r.budget)
        )
    } else {
        format!(
            "it is above the raise-ahead share of {} WCU/s a key",
            num(input.raise_ahead_wcu)
        )
    };
    match input.sub_shards {
        SubShards::Base => format!(
            "the hottest entity at {} w/s needs {} WCU/s: {one_pk}; the ingest raises it to \
             k = {} at ~{} WCU/s a sub-shard (RAISE_AHEAD_WCU {}), on base shards that carry \
             ~{} WCU/s of the table each: ~{} WCU/s on each of its keys",
            num(input.peak_entity_wps),
            num(r.hot),
            p.fanout,
            num(p.share),
            num(input.raise_ahead_wcu),
            num(p.mean),
            num(p.hot_key),
        ),
        SubShards::Dedicated => format!(
            "the hottest entity at {} w/s needs {} WCU/s: {one_pk}; it needs fan-out \
             k = {} (~{} WCU/s per sub-shard); the cold layout alone caps an entity at one PK",
            num(input.peak_entity_wps),
            num(r.hot),
            p.fanout,
            num(p.share),
        ),
    }
}

/// Price of one million on-demand write request units, standard table class,
/// us-east-1 (since November 2024); other regions and provisioned capacity differ.
pub const ON_DEMAND_PRICE_PER_MILLION_WRITES: f64 = 0.625;

/// Seconds of the month a cost estimate covers (30 days).
pub const MONTH_SECS: f64 = 30.0 * 86_400.0;

/// What one choice of the readings table's indexes costs in writes, and what it buys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteCost {
    /// The template setting, e.g. `TimeIndex=disabled`.
    pub option: &'static str,
    /// Write units per reading: its item (or its share of a block) once, and again for
    /// each index holding it.
    pub wcu_per_reading: f64,
    /// Write cost of a 30-day month at the given mean rate and price, in US dollars.
    pub monthly_usd: f64,
    /// What the writes buy.
    pub buys: &'static str,
}

/// The write cost of each choice of the readings table's time index, for readings of
/// `wcu_per_reading` write units at a mean of `mean_wps` readings per second. The index
/// projects every attribute, so its entry is as large as the item and costs as much.
///
/// # Errors
/// A rate or price that is negative or not finite.
pub fn write_costs(
    wcu_per_reading: f64,
    mean_wps: f64,
    price_per_million: f64,
) -> Result<Vec<WriteCost>, PlannerError> {
    for (field, value) in [
        ("wcu_per_reading", wcu_per_reading),
        ("mean_wps", mean_wps),
        ("price_per_million", price_per_million),
    ] {
        if finite(field, value)? < 0.0 {
            return Err(PlannerError::InvalidInput {
                field,
                reason: format!("{value} is negative"),
            });
        }
    }
    let cost = |indexes: u32| {
        let wcu = wcu_per_reading * f64::from(1 + indexes);
        let monthly_usd = mean_wps * MONTH_SECS * wcu * price_per_million / 1e6;
        (wcu, monthly_usd)
    };
    let (without, without_usd) = cost(0);
    let (with, with_usd) = cost(1);
    Ok(vec![
        WriteCost {
            option: "TimeIndex=disabled",
            wcu_per_reading: without,
            monthly_usd: without_usd,
            buys: "reads of one device; a read over every device sorts the whole buckets \
                   its range touches, and is refused past MAX_BUFFERED_READINGS",
        },
        WriteCost {
            option: "TimeIndex=enabled",
            wcu_per_reading: with,
            monthly_usd: with_usd,
            buys: "reads over every device stop after the readings they need; each key \
                   takes half the readings per second, and a key's bucket at most 10 GB",
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(3125.0), "3,125");
        assert_eq!(num(50_000.0), "50,000");
        assert_eq!(num(1_000_000.4), "1,000,000");
        assert_eq!(num(500.0), "500");
        assert_eq!(num(2.5), "2.5");
        assert_eq!(num(2.0), "2");
    }

    #[test]
    fn the_time_index_doubles_the_write_cost() {
        let costs = write_costs(1.0, 50_000.0, ON_DEMAND_PRICE_PER_MILLION_WRITES).unwrap();
        assert_eq!(costs[0].option, "TimeIndex=disabled");
        assert_eq!(costs[0].wcu_per_reading, 1.0);
        // 50,000/s for 30 days is 129.6 billion writes at $0.625 per million.
        assert!(
            (costs[0].monthly_usd - 81_000.0).abs() < 1e-6,
            "{}",
            costs[0].monthly_usd
        );
        assert_eq!(costs[1].wcu_per_reading, 2.0);
        assert!((costs[1].monthly_usd - 162_000.0).abs() < 1e-6);
        let big = write_costs(3.0, 10.0, 1.0).unwrap();
        assert_eq!((big[0].wcu_per_reading, big[1].wcu_per_reading), (3.0, 6.0));
    }

    #[test]
    fn packed_readings_are_billed_by_their_share_of_a_block() {
        // 0.024 write units a reading (bench item 8, 50 readings a message) at
        // 50,000 readings/s: 3.1 billion write units a month, $1,944.
        let costs = write_costs(0.024, 50_000.0, ON_DEMAND_PRICE_PER_MILLION_WRITES).unwrap();
        assert!(
            (costs[0].monthly_usd - 1_944.0).abs() < 1e-6,
            "{}",
            costs[0].monthly_usd
        );
        assert!((costs[1].monthly_usd - 3_888.0).abs() < 1e-6);
    }

    #[test]
    fn a_cost_of_a_negative_or_infinite_rate_is_refused() {
        assert!(write_costs(1.0, -1.0, 0.625).is_err());
        assert!(write_costs(1.0, f64::NAN, 0.625).is_err());
        assert!(write_costs(1.0, 1.0, f64::INFINITY).is_err());
        assert!(write_costs(f64::NAN, 1.0, 0.625).is_err());
    }
}
