//! The capacity model: per-(table, partition key) token buckets, optional table-level buckets
//! and DynamoDB's cost rules. Pure logic: time is passed in as `now` (a [`Duration`] since an
//! origin, see [`crate::clock`]).

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One write capacity unit covers this many item bytes.
pub const WRITE_UNIT_BYTES: usize = 1024;
/// One read capacity unit covers this many bytes (strongly consistent).
pub const READ_UNIT_BYTES: usize = 4096;

/// WCU for writing an item of `item_bytes`: ceil(bytes / 1 KB), at least 1.
pub fn write_cost(item_bytes: usize) -> f64 {
    item_bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as f64
}

/// RCU for reading `bytes` (one item, or the sum of a Query page): ceil(bytes / 4 KB), at
/// least 1, halved when eventually consistent.
pub fn read_cost(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// Why a request or item was throttled; the strings are DynamoDB's `ThrottlingReasons`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ThrottleReason {
    /// One partition key exceeded its write budget.
    TableWriteKeyRangeThroughputExceeded,
    /// The table's write cap was exceeded.
    TableWriteProvisionedThroughputExceeded,
    /// One partition key exceeded its read budget.
    TableReadKeyRangeThroughputExceeded,
    /// The table's read cap was exceeded.
    TableReadProvisionedThroughputExceeded,
}

impl ThrottleReason {
    /// DynamoDB's spelling of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TableWriteKeyRangeThroughputExceeded => "TableWriteKeyRangeThroughputExceeded",
            Self::TableWriteProvisionedThroughputExceeded => {
                "TableWriteProvisionedThroughputExceeded"
            }
            Self::TableReadKeyRangeThroughputExceeded => "TableReadKeyRangeThroughputExceeded",
            Self::TableReadProvisionedThroughputExceeded => {
                "TableReadProvisionedThroughputExceeded"
            }
        }
    }

    /// True for the per-key (hot partition) reasons.
    pub fn is_key_range(self) -> bool {
        matches!(
            self,
            Self::TableWriteKeyRangeThroughputExceeded | Self::TableReadKeyRangeThroughputExceeded
        )
    }
}

/// A token bucket refilled continuously at `rate` tokens per second.
///
/// Capacity is one second of rate plus `burst_seconds` of retained unused capacity
/// (DynamoDB keeps up to 300 s; the default here is 0, i.e. no burst beyond the rate).
/// It starts full. Tokens may go negative (debt) when a cost is charged after the fact
/// (reads are charged by the size actually returned); the debt is repaid by refill.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, burst_seconds: f64, now: Duration) -> Self {
        let capacity = rate * (1.0 + burst_seconds.max(0.0));
        Self {
            rate,
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: Duration) {
        if now > self.last {
            let dt = (now - self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
            self.last = now;
        }
    }

    /// Tokens available at `now`.
    pub fn available(&mut self, now: Duration) -> f64 {
        self.refill(now);
        self.tokens
    }

    /// True when `cost` can be taken at `now`. A cost above the whole capacity is allowed
    /// when the bucket is full, so a large item is slow rather than impossible.
    pub fn can_take(&mut self, cost: f64, now: Duration) -> bool {
        self.refill(now);
        self.tokens >= cost || (cost > self.capacity && self.tokens >= self.capacity)
    }

    /// Takes `cost` unconditionally (may leave the bucket in debt).
    pub fn take(&mut self, cost: f64, now: Duration) {
        self.refill(now);
        self.tokens -= cost;
    }

    /// Gives back `cost` taken earlier and not spent, up to the bucket's capacity.
    pub fn refund(&mut self, cost: f64, now: Duration) {
        self.refill(now);
        self.tokens = (self.tokens + cost).min(self.capacity);
    }

    /// Takes `cost` if [`Self::can_take`]; returns whether it did.
    pub fn try_take(&mut self, cost: f64, now: Duration) -> bool {
        if self.can_take(cost, now) {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }

    /// True when the bucket holds its full capacity (idle; safe to forget).
    pub fn is_full(&mut self, now: Duration) -> bool {
        self.refill(now);
        self.tokens >= self.capacity
    }
}

/// Capacity limits for one table (or the defaults for all tables).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Write capacity units per second per partition key value.
    pub key_wcu: f64,
    /// Read capacity units per second per partition key value.
    pub key_rcu: f64,
    /// Seconds of unused capacity a bucket may retain beyond one second of rate.
    pub burst_seconds: f64,
    /// Table-level write cap (all keys together), if any.
    pub table_wcu: Option<f64>,
    /// Table-level read cap (all keys together), if any.
    pub table_rcu: Option<f64>,
}

impl Default for Limits {
    /// DynamoDB's per-partition limits, no burst, no table cap.
    fn default() -> Self {
        Self {
            key_wcu: 1000.0,
            key_rcu: 3000.0,
            burst_seconds: 0.0,
            table_wcu: None,
            table_rcu: None,
        }
    }
}

#[derive(Debug)]
struct KeyBuckets {
    wcu: TokenBucket,
    rcu: TokenBucket,
}

#[derive(Debug)]
struct TableBuckets {
    wcu: Option<TokenBucket>,
    rcu: Option<TokenBucket>,
}

/// All buckets of all tables and keys.
#[derive(Debug)]
pub struct CapacityModel {
    defaults: Limits,
    per_table: HashMap<String, Limits>,
    keys: HashMap<(String, String), KeyBuckets>,
    tables: HashMap<String, TableBuckets>,
}

impl CapacityModel {
    /// A model with `defaults` for every table and `per_table` overrides.
    pub fn new(defaults: Limits, per_table: HashMap<String, Limits>) -> Self {
        Self {
            defaults,
            per_table,
            keys: HashMap::new(),
            tables: HashMap::new(),
        }
    }

    /// The limits in force for `table`.
    pub fn limits(&self, table: &str) -> Limits {
        self.per_table.get(table).copied().unwrap_or(self.defaults)
    }

    fn buckets(
        &mut self,
        table: &str,
        pk: Option<&str>,
        now: Duration,
    ) -> (Option<&mut KeyBuckets>, &mut TableBuckets) {
        let limits = self.limits(table);
        let key = match pk {
            Some(pk) => Some(
                self.keys
                    .entry((table.to_owned(), pk.to_owned()))
                    .or_insert_with(|| KeyBuckets {
                        wcu: TokenBucket::new(limits.key_wcu, limits.burst_seconds, now),
                        rcu: TokenBucket::new(limits.key_rcu, limits.burst_seconds, now),
                    }),
            ),
            None => None,
        };
        let table = self
            .tables
            .entry(table.to_owned())
            .or_insert_with(|| TableBuckets {
                wcu: limits
                    .table_wcu
                    .map(|r| TokenBucket::new(r, limits.burst_seconds, now)),
                rcu: limits
                    .table_rcu
                    .map(|r| TokenBucket::new(r, limits.burst_seconds, now)),
            });
        (key, table)
    }

    /// Admits a write of `cost` WCU to (`table`, `pk`) or says why not. Nothing is consumed
    /// when refused. A write whose partition key is unknown is charged to the table only.
    pub fn try_write(
        &mut self,
        table: &str,
        pk: Option<&str>,
        cost: f64,
        now: Duration,
    ) -> Result<(), ThrottleReason> {
        let (mut key, table) = self.buckets(table, pk, now);
        if let Some(key) = &mut key
            && !key.wcu.can_take(cost, now)
        {
            return Err(ThrottleReason::TableWriteKeyRangeThroughputExceeded);
        }
        if let Some(t) = &mut table.wcu
            && !t.can_take(cost, now)
        {
            return Err(ThrottleReason::TableWriteProvisionedThroughputExceeded);
        }
        if let Some(key) = key {
            key.wcu.take(cost, now);
        }
        if let Some(t) = &mut table.wcu {
            t.take(cost, now);
        }
        Ok(())
    }

    /// Admits all of `writes`, each `(table, pk, cost)`, or none: every key and table
    /// bucket must cover the sum of the costs charged to it. `Err` holds, for each write
    /// in order, why it was refused (`None` for a write that alone would have passed).
    /// Nothing is consumed when refused.
    pub fn try_write_all(
        &mut self,
        writes: &[(&str, Option<&str>, f64)],
        now: Duration,
    ) -> Result<(), Vec<Option<ThrottleReason>>> {
        let mut on_key: HashMap<(&str, &str), f64> = HashMap::new();
        let mut on_table: HashMap<&str, f64> = HashMap::new();
        let mut refused = vec![None; writes.len()];
        for (i, &(table, pk, cost)) in writes.iter().enumerate() {
            let table_sum = on_table.entry(table).or_default();
            *table_sum += cost;
            let table_sum = *table_sum;
            let key_sum = pk.map(|pk| {
                let sum = on_key.entry((table, pk)).or_default();
                *sum += cost;
                *sum
            });
            let (key, buckets) = self.buckets(table, pk, now);
            if let (Some(key), Some(sum)) = (key, key_sum)
                && !key.wcu.can_take(sum, now)
            {
                refused[i] = Some(ThrottleReason::TableWriteKeyRangeThroughputExceeded);
            } else if let Some(t) = &mut buckets.wcu
                && !t.can_take(table_sum, now)
            {
                refused[i] = Some(ThrottleReason::TableWriteProvisionedThroughputExceeded);
            }
        }
        if refused.iter().any(Option::is_some) {
            return Err(refused);
        }
        for &(table, pk, cost) in writes {
            let (key, buckets) = self.buckets(table, pk, now);
            if let Some(key) = key {
                key.wcu.take(cost, now);
            }
            if let Some(t) = &mut buckets.wcu {
                t.take(cost, now);
            }
        }
        Ok(())
    }

    /// Settles a write admitted at `reserved` WCU whose cost turned out `actual`: the
    /// difference is taken (possibly into debt) or given back.
    pub fn settle_write(
        &mut self,
        table: &str,
        pk: Option<&str>,
        reserved: f64,
        actual: f64,
        now: Duration,
    ) {
        let delta = actual - reserved;
        if delta == 0.0 {
            return;
        }
        let (key, table) = self.buckets(table, pk, now);
        let buckets = key
            .map(|k| &mut k.wcu)
            .into_iter()
            .chain(table.wcu.as_mut());
        for bucket in buckets {
            if delta > 0.0 {
                bucket.take(delta, now);
            } else {
                bucket.refund(-delta, now);
            }
        }
    }

    /// Decides before forwarding whether a read may proceed: refused when the key's (or the
    /// table's) read bucket cannot cover even the smallest read (`min_cost`). The read is
    /// charged afterwards with [`Self::charge_read`], by the size actually returned.
    pub fn check_read(
        &mut self,
        table: &str,
        pk: Option<&str>,
        min_cost: f64,
        now: Duration,
    ) -> Result<(), ThrottleReason> {
        let (key, table) = self.buckets(table, pk, now);
        if let Some(key) = key
            && !key.rcu.can_take(min_cost, now)
        {
            return Err(ThrottleReason::TableReadKeyRangeThroughputExceeded);
        }
        if let Some(t) = &mut table.rcu
            && !t.can_take(min_cost, now)
        {
            return Err(ThrottleReason::TableReadProvisionedThroughputExceeded);
        }
        Ok(())
    }

    /// Charges a completed read of `cost` RCU (may leave the buckets in debt).
    pub fn charge_read(&mut self, table: &str, pk: Option<&str>, cost: f64, now: Duration) {
        let (key, table) = self.buckets(table, pk, now);
        if let Some(key) = key {
            key.rcu.take(cost, now);
        }
        if let Some(t) = &mut table.rcu {
            t.take(cost, now);
        }
    }

    /// Forgets keys whose buckets are full (idle), bounding memory under many distinct keys.
    pub fn prune(&mut self, now: Duration) {
        self.keys
            .retain(|_, b| !(b.wcu.is_full(now) && b.rcu.is_full(now)));
    }

    /// Number of keys currently tracked.
    pub fn tracked_keys(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn costs_follow_dynamodb_rounding() {
        for (bytes, wcu) in [
            (0, 1.0),
            (1, 1.0),
            (1024, 1.0),
            (1025, 2.0),
            (400 * 1024, 400.0),
        ] {
            assert_eq!(write_cost(bytes), wcu, "write {bytes}");
        }
        for (bytes, consistent, rcu) in [
            (0, true, 1.0),
            (0, false, 0.5),
            (4096, true, 1.0),
            (4097, true, 2.0),
            (4097, false, 1.0),
            (10_000, false, 1.5),
        ] {
            assert_eq!(
                read_cost(bytes, consistent),
                rcu,
                "read {bytes} {consistent}"
            );
        }
    }

    #[test]
    fn bucket_admits_one_second_of_rate_then_refills_continuously() {
        let mut b = TokenBucket::new(10.0, 0.0, s(0.0));
        let admitted = (0..20).filter(|_| b.try_take(1.0, s(0.0))).count();
        assert_eq!(admitted, 10);
        assert!(!b.try_take(1.0, s(0.05)));
        // Half a second refills half the rate.
        let admitted = (0..20).filter(|_| b.try_take(1.0, s(0.5))).count();
        assert_eq!(admitted, 5);
        // A long idle period does not accumulate more than the capacity.
        let admitted = (0..50).filter(|_| b.try_take(1.0, s(100.0))).count();
        assert_eq!(admitted, 10);
    }

    #[test]
    fn burst_seconds_extend_capacity() {
        let mut b = TokenBucket::new(10.0, 2.0, s(0.0));
        assert_eq!((0..100).filter(|_| b.try_take(1.0, s(0.0))).count(), 30);
    }

    #[test]
    fn oversized_cost_passes_only_from_a_full_bucket_and_leaves_debt() {
        let mut b = TokenBucket::new(10.0, 0.0, s(0.0));
        assert!(b.try_take(25.0, s(0.0)));
        assert!(b.available(s(0.0)) < 0.0);
        assert!(!b.try_take(1.0, s(1.0)));
        assert!(b.try_take(1.0, s(1.6)));
    }

    #[test]
    fn one_hot_key_gets_its_rate_over_simulated_seconds() {
        let mut m = CapacityModel::new(Limits::default(), HashMap::new());
        let mut accepted = 0;
        for sec in 0..10 {
            for _ in 0..2000 {
                if m.try_write("t", Some("hot"), 1.0, s(sec as f64)).is_ok() {
                    accepted += 1;
                }
            }
        }
        assert_eq!(accepted, 10_000);
    }

    #[test]
    fn spread_keys_are_not_throttled_and_the_reason_names_the_key_range() {
        let mut m = CapacityModel::new(Limits::default(), HashMap::new());
        for i in 0..2000 {
            let pk = format!("k{}", i % 4);
            assert_eq!(m.try_write("t", Some(&pk), 1.0, s(0.0)), Ok(()));
        }
        let mut last = Ok(());
        for _ in 0..1000 {
            last = m.try_write("t", Some("k0"), 1.0, s(0.0));
        }
        assert_eq!(
            last,
            Err(ThrottleReason::TableWriteKeyRangeThroughputExceeded)
        );
        assert!(ThrottleReason::TableWriteKeyRangeThroughputExceeded.is_key_range());
    }

    #[test]
    fn table_cap_throttles_with_the_table_reason_and_refused_writes_cost_nothing() {
        let limits = Limits {
            table_wcu: Some(100.0),
            ..Limits::default()
        };
        let mut m = CapacityModel::new(Limits::default(), HashMap::from([("t".into(), limits)]));
        let results: Vec<_> = (0..150)
            .map(|i| m.try_write("t", Some(&format!("k{i}")), 1.0, s(0.0)))
            .collect();
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 100);
        assert_eq!(
            results[149],
            Err(ThrottleReason::TableWriteProvisionedThroughputExceeded)
        );
        // Other tables keep the defaults.
        assert_eq!(m.limits("other"), Limits::default());
        // A key refused by its own bucket must not drain the table bucket.
        let mut m = CapacityModel::new(
            Limits {
                key_wcu: 1.0,
                table_wcu: Some(10.0),
                ..Limits::default()
            },
            HashMap::new(),
        );
        assert!(m.try_write("t", Some("a"), 1.0, s(0.0)).is_ok());
        for _ in 0..100 {
            assert!(m.try_write("t", Some("a"), 1.0, s(0.0)).is_err());
        }
        let others = (0..20)
            .filter(|i| {
                m.try_write("t", Some(&format!("b{i}")), 1.0, s(0.0))
                    .is_ok()
            })
            .count();
        assert_eq!(others, 9);
    }

    #[test]
    fn reads_are_refused_only_once_the_bucket_is_spent_and_charged_after() {
        let limits = Limits {
            key_rcu: 4.0,
            ..Limits::default()
        };
        let mut m = CapacityModel::new(limits, HashMap::new());
        assert!(m.check_read("t", Some("k"), 0.5, s(0.0)).is_ok());
        m.charge_read("t", Some("k"), 10.0, s(0.0)); // a large Query page: debt of 6
        assert_eq!(
            m.check_read("t", Some("k"), 0.5, s(1.0)),
            Err(ThrottleReason::TableReadKeyRangeThroughputExceeded)
        );
        assert!(m.check_read("t", Some("k"), 0.5, s(1.7)).is_ok());
        assert!(m.check_read("t", Some("other"), 0.5, s(1.7)).is_ok());
    }

    #[test]
    fn a_settled_write_takes_the_rest_or_gives_back_what_it_did_not_spend() {
        let limits = Limits {
            key_wcu: 10.0,
            table_wcu: Some(10.0),
            ..Limits::default()
        };
        let mut m = CapacityModel::new(limits, HashMap::new());
        assert!(m.try_write("t", Some("k"), 4.0, s(0.0)).is_ok());
        m.settle_write("t", Some("k"), 4.0, 1.0, s(0.0)); // 3 back: 9 left
        assert!(m.try_write("t", Some("k"), 9.0, s(0.0)).is_ok());
        assert!(m.try_write("t", Some("k"), 1.0, s(0.0)).is_err());
        m.settle_write("t", Some("k"), 1.0, 6.0, s(0.0)); // 5 more: 5 in debt
        assert!(m.try_write("t", Some("k"), 1.0, s(0.55)).is_err());
        assert!(
            m.try_write("t", Some("other"), 1.0, s(0.55)).is_err(),
            "the table too"
        );
        assert!(m.try_write("t", Some("k"), 1.0, s(0.6)).is_ok());
        // What is given back never fills a bucket beyond its capacity.
        m.settle_write("t", Some("k"), 100.0, 0.0, s(10.0));
        assert_eq!(
            (0..20)
                .filter(|_| m.try_write("t", Some("k"), 1.0, s(10.0)).is_ok())
                .count(),
            10
        );
    }

    #[test]
    fn writes_admitted_together_are_admitted_whole_or_not_at_all() {
        let limits = Limits {
            key_wcu: 10.0,
            ..Limits::default()
        };
        let mut m = CapacityModel::new(limits, HashMap::new());
        assert!(m.try_write("t", Some("a"), 1.0, s(0.0)).is_ok());
        // Two writes of 5 to a key with 9 left exceed it together, though each alone fits.
        assert_eq!(
            m.try_write_all(
                &[
                    ("t", Some("a"), 5.0),
                    ("t", Some("b"), 1.0),
                    ("t", Some("a"), 5.0)
                ],
                s(0.0)
            ),
            Err(vec![
                None,
                None,
                Some(ThrottleReason::TableWriteKeyRangeThroughputExceeded)
            ])
        );
        // Nothing was taken: the key still covers 9.
        assert_eq!(
            m.try_write_all(&[("t", Some("a"), 5.0), ("t", Some("a"), 4.0)], s(0.0)),
            Ok(())
        );
        assert!(m.try_write("t", Some("a"), 1.0, s(0.0)).is_err());
        let capped = Limits {
            table_wcu: Some(3.0),
            ..Limits::default()
        };
        let mut m = CapacityModel::new(capped, HashMap::new());
        assert!(m.try_write("t", Some("c"), 1.0, s(0.0)).is_ok());
        assert_eq!(
            m.try_write_all(&[("t", Some("a"), 2.0), ("t", Some("b"), 2.0)], s(0.0)),
            Err(vec![
                None,
                Some(ThrottleReason::TableWriteProvisionedThroughputExceeded)
            ])
        );
    }

    #[test]
    fn prune_forgets_only_idle_keys() {
        let limits = Limits {
            key_wcu: 1.0,
            ..Limits::default()
        };
        let mut m = CapacityModel::new(limits, HashMap::new());
        m.try_write("t", Some("a"), 1.0, s(0.0)).ok();
        m.try_write("t", Some("b"), 1.0, s(0.9)).ok();
        m.prune(s(1.5));
        assert_eq!(m.tracked_keys(), 1);
        m.prune(s(2.0));
        assert_eq!(m.tracked_keys(), 0);
    }
}
