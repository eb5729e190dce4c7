//! Capacity planner: table-level N and hot-entity fan-out k from the expected write rates.

use serde::{Deserialize, Serialize};

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
    /// The plan needs more table shards than fit a u32.
    #[error("the global rate needs more than {} table shards", u32::MAX)]
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
}

impl PlanInput {
    /// Input with the default safety factor and partition limit.
    #[must_use]
    pub const fn new(global_wps: f64, peak_entity_wps: f64, item_bytes: u64) -> Self {
        PlanInput {
            global_wps,
            peak_entity_wps,
            item_bytes,
            safety: DEFAULT_SAFETY,
            partition_wcu: PARTITION_WCU,
            table_shards: None,
        }
    }
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityPlan {
    /// Table-level shard count N.
    pub table_shards: u32,
    /// Fan-out k the hottest entity needs (1 = no fan-out).
    pub hot_entity_fanout: u32,
    /// WCU per item write: `ceil(item_bytes / 1024)`.
    pub wcu_per_item: u32,
    /// Expected peak WCU/s on the busiest PK: `max(global*w/N, peak*w/k)`.
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
    Ok(())
}

/// Smallest count c >= 1 with `load / c <= budget`.
fn shards_for(load: f64, budget: f64) -> Result<u32, PlannerError> {
    let estimate = (load / budget).ceil().max(1.0);
    if estimate > f64::from(u32::MAX) {
        return Err(PlannerError::TooManyShards);
    }
    // In range by the check above; the cast truncates an already integral value.
    let mut count = estimate as u32;
    // Guard against rounding in the division: the guarantee is load / count <= budget.
    while load / f64::from(count) > budget {
        count = count.checked_add(1).ok_or(PlannerError::TooManyShards)?;
    }
    Ok(count)
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

/// Plans N and k so that no PK is expected above `partition_wcu / safety`, or evaluates a
/// given N. With N chosen by the planner, `max_pk_wcu <= budget_per_pk <= partition_wcu`.
pub fn plan_capacity(input: &PlanInput) -> Result<CapacityPlan, PlannerError> {
    validate(input)?;
    let wcu_per_item_u64 = input.item_bytes.div_ceil(WCU_BYTES);
    // item_bytes <= 400 KiB, so at most 400 WCU.
    let wcu_per_item = u32::try_from(wcu_per_item_u64).unwrap_or(u32::MAX);
    let w = f64::from(wcu_per_item);
    let budget = input.partition_wcu / input.safety;
    let global_wcu = input.global_wps * w;
    let hot_wcu = input.peak_entity_wps * w;

    let table_shards = match input.table_shards {
        Some(n) => n,
        None => shards_for(global_wcu, budget)?,
    };
    let hot_entity_fanout = shards_for(hot_wcu, budget)?;
    let cold_pk_wcu = global_wcu / f64::from(table_shards);
    let hot_pk_wcu = hot_wcu / f64::from(hot_entity_fanout);
    let max_pk_wcu = cold_pk_wcu.max(hot_pk_wcu);

    let mut warnings = Vec::new();
    if input.table_shards.is_some() {
        let needed = shards_for(global_wcu, budget)?;
        if cold_pk_wcu > input.partition_wcu {
            warnings.push(format!(
                "N = {table_shards} at {} w/s puts ~{} WCU/s on each PK, over the {} WCU/s \
                 partition limit: use N >= {needed}",
                num(input.global_wps),
                num(cold_pk_wcu),
                num(input.partition_wcu),
            ));
        } else if cold_pk_wcu > budget {
            warnings.push(format!(
                "N = {table_shards} at {} w/s puts ~{} WCU/s on each PK, over the safety \
                 budget of {} WCU/s (limit {} / safety {}): use N >= {needed}",
                num(input.global_wps),
                num(cold_pk_wcu),
                num(budget),
                num(input.partition_wcu),
                num(input.safety),
            ));
        }
    }
    if wcu_per_item > 1 {
        warnings.push(format!(
            "items of {} bytes cost {wcu_per_item} WCU each (1 WCU per started KB): \
             {} w/s need {} WCU/s",
            num(input.item_bytes as f64),
            num(input.global_wps),
            num(global_wcu),
        ));
    }
    if hot_entity_fanout > 1 {
        let one_pk = if hot_wcu > input.partition_wcu {
            format!(
                "a single PK would throttle it at {} WCU/s",
                num(input.partition_wcu)
            )
        } else {
            format!(
                "a single PK would run above the {} WCU/s budget",
                num(budget)
            )
        };
        warnings.push(format!(
            "the hottest entity at {} w/s needs {} WCU/s: {one_pk}; it needs fan-out \
             k = {hot_entity_fanout} (~{} WCU/s per sub-shard); the cold layout alone \
             caps an entity at one PK",
            num(input.peak_entity_wps),
            num(hot_wcu),
            num(hot_pk_wcu),
        ));
    }
    if table_shards > LARGE_TABLE_SHARDS {
        warnings.push(format!(
            "N = {table_shards} makes a cross-entity read cost {table_shards} queries per \
             bucket; consider a finer bucket or fewer readers of all entities"
        ));
    }
    Ok(CapacityPlan {
        table_shards,
        hot_entity_fanout,
        wcu_per_item,
        max_pk_wcu,
        budget_per_pk: budget,
        partition_wcu: input.partition_wcu,
        warnings,
    })
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
    /// Write units per reading: the item once, and again for each index holding it.
    pub wcu_per_reading: u32,
    /// Write cost of a 30-day month at the given mean rate and price, in US dollars.
    pub monthly_usd: f64,
    /// What the writes buy.
    pub buys: &'static str,
}

/// The write cost of each choice of the readings table's time index, for readings of
/// `wcu_per_item` write units at a mean of `mean_wps` readings per second. The index
/// projects every attribute, so its entry is as large as the item and costs as much.
///
/// # Errors
/// A rate or price that is negative or not finite.
pub fn write_costs(
    wcu_per_item: u32,
    mean_wps: f64,
    price_per_million: f64,
) -> Result<Vec<WriteCost>, PlannerError> {
    for (field, value) in [
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
        let wcu = wcu_per_item.saturating_mul(1 + indexes);
        let monthly_usd = mean_wps * MONTH_SECS * f64::from(wcu) * price_per_million / 1e6;
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
        let costs = write_costs(1, 50_000.0, ON_DEMAND_PRICE_PER_MILLION_WRITES).unwrap();
        assert_eq!(costs[0].option, "TimeIndex=disabled");
        assert_eq!(costs[0].wcu_per_reading, 1);
        // 50,000/s for 30 days is 129.6 billion writes at $0.625 per million.
        assert!(
            (costs[0].monthly_usd - 81_000.0).abs() < 1e-6,
            "{}",
            costs[0].monthly_usd
        );
        assert_eq!(costs[1].wcu_per_reading, 2);
        assert!((costs[1].monthly_usd - 162_000.0).abs() < 1e-6);
        let big = write_costs(3, 10.0, 1.0).unwrap();
        assert_eq!((big[0].wcu_per_reading, big[1].wcu_per_reading), (3, 6));
    }

    #[test]
    fn a_cost_of_a_negative_or_infinite_rate_is_refused() {
        assert!(write_costs(1, -1.0, 0.625).is_err());
        assert!(write_costs(1, f64::NAN, 0.625).is_err());
        assert!(write_costs(1, 1.0, f64::INFINITY).is_err());
    }
}
