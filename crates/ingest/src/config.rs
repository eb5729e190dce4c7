//! The typed configuration, parsed once from the environment at init.
//!
//! Every failure names the variable, so a misconfigured function fails its init with a
//! message that says what to fix.

use std::num::NonZeroU32;
use std::time::Duration;

use sharding::backoff::{Backoff, MAX_VISIBILITY, Redelivery};
use sharding::epoch::propagation_margin;
use sharding::fanout::FanoutPolicy;
use sharding::layout::{Layout, Strategy, SubShards};
use sharding::time::Bucket;
use store::directory::DirectoryConfig;

/// A variable that is missing or does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("environment variable {name} is required but not set")]
    Missing {
        /// The variable.
        name: &'static str,
    },
    /// A variable is set to something unusable.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
}

/// The ingest function's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TABLE_NAME`: the readings table.
    pub table_name: String,
    /// `SHARD_TABLE_NAME`: the shard metadata table.
    pub shard_table_name: String,
    /// `DLQ_URL`: where permanently refused messages go.
    pub dlq_url: String,
    /// `SHARD_STRATEGY` (`time-bucket` | `random` | `calculated` | `unsharded`, default
    /// `time-bucket`), `BUCKET` (`minute` | `hour` | `day` | `month`, default `hour`),
    /// `SHARDS` (default 8), `CALCULATED_ATTRIBUTE` (default `event_id`), `SUB_SHARDS`
    /// (`base` | `dedicated`, default `base`: where a raised time-bucket entity's
    /// sub-shards live, [`sharding::layout::SubShards`]): the layout stored when the
    /// metadata table has none yet. A stored layout is never changed by these.
    pub layout: Layout,
    /// `RETENTION_DAYS` (default 30): readings older than this are refused; items expire
    /// this long after their ts.
    pub retention: Duration,
    /// `MAX_INFLIGHT` (default 16): concurrent `BatchWriteItem` calls.
    pub max_inflight: usize,
    /// `MAX_FUTURE_SECS` (default 300): how far ahead of the clock a ts may be.
    pub max_future: Duration,
    /// `CACHE_TTL_SECS` (default 60): how long shard metadata reads are trusted.
    pub cache_ttl: Duration,
    /// `FANOUT_COOLDOWN_SECS` (default 2), `FANOUT_JITTER_SECS` (default 1),
    /// `FANOUT_MAX` (default 32), `FANOUT_SHRINK_AFTER_SECS` (default 900),
    /// `PROPAGATION_SLACK_SECS` (default 5) and `RAISE_AHEAD_WCU` (the key rate, default
    /// 100): dynamic fan-out. Raises take effect at once (keys nest), so the cooldown
    /// only spaces the conditional updates of racing writers; shrinks wait for the
    /// propagation margin `CACHE_TTL_SECS + MAX_FUTURE_SECS + PROPAGATION_SLACK_SECS`.
    pub fanout: FanoutPolicy,
    /// `DEADLINE_MARGIN_MS` (default 1000): time kept back from the Lambda deadline for
    /// dead-lettering and answering.
    pub deadline_margin: Duration,
    /// `RETRY_BASE_MS` (default 25), `RETRY_CAP_MS` (default 1000), `RETRY_MAX_ATTEMPTS`
    /// (default 8): full-jitter backoff of the batch writer.
    pub backoff: Backoff,
    /// `MAX_READINGS_PER_MESSAGE` (default 500).
    pub max_readings_per_message: usize,
    /// `SOURCE_QUEUE_URL` (optional): the queue the function consumes. With it, a
    /// message reported for a transient reason gets the `redelivery` wait as its
    /// visibility timeout; without it, the queue's own timeout.
    pub source_queue_url: Option<String>,
    /// `REDELIVERY_BASE_SECS` (default 30), `REDELIVERY_CAP_SECS` (default 900, at most
    /// 43200): the wait before a reported message comes back, doubling per receive.
    pub redelivery: Redelivery,
    /// `MAX_RECEIVES` (default 5): the source queue's redrive `maxReceiveCount`. At this
    /// receive a message still failing transiently is requeued or dead-lettered with its
    /// reason, before the redrive would move it without one.
    pub max_receives: u32,
    /// `MAX_REQUEUES` (default 3): how often one message may be requeued as a fresh copy
    /// (each copy gets `MAX_RECEIVES` receives again); 0 dead-letters at the last receive.
    pub max_requeues: u32,
    /// `RAISE_AHEAD_WCU` (default 100, 0 turns rate-driven raises off): the readings per
    /// second one entity may put on one key (`FanoutPolicy::key_rate`). When a batch
    /// shows an entity writing faster than its keys carry at this rate, its fan-out is
    /// raised to `ceil(rate / RAISE_AHEAD_WCU)` before its readings are keyed. A tenth of
    /// a partition's 1,000 WCU/s: with sub-shards on base shards, an entity's share lands
    /// on keys that already carry the table's mean (half a partition, as the planner
    /// sizes N), so a share must stay small beside it (bench item 3).
    pub raise_ahead_wcu: f64,
}

impl Config {
    /// The shard directory's settings: cache TTL, fan-out policy, initial layout.
    pub fn directory_config(&self) -> DirectoryConfig {
        DirectoryConfig {
            cache_ttl: self.cache_ttl,
            policy: self.fanout,
            initial_layout: self.layout.clone(),
        }
    }

    /// Parses the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Parses variables from `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(&lookup);
        let strategy_name = env
            .optional("SHARD_STRATEGY")
            .unwrap_or_else(|| "time-bucket".to_owned());
        let bucket: Bucket = env.parse_or("BUCKET", Bucket::Hour, "minute, hour, day or month")?;
        let shards: NonZeroU32 = env.parse_or(
            "SHARDS",
            NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN),
            "a positive integer",
        )?;
        let sub_shards = match env.optional("SUB_SHARDS").as_deref() {
            None | Some("base") => SubShards::Base,
            Some("dedicated") => SubShards::Dedicated,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: "SUB_SHARDS",
                    value: other.to_owned(),
                    reason: "expected base or dedicated".to_owned(),
                });
            }
        };
        let strategy = match strategy_name.as_str() {
            "time-bucket" => Strategy::TimeBucket { bucket, sub_shards },
            "random" => Strategy::Random,
            "calculated" => Strategy::Calculated {
                attribute: env
                    .optional("CALCULATED_ATTRIBUTE")
                    .unwrap_or_else(|| sharding::key::EVENT_ID_ATTRIBUTE.to_owned()),
            },
            "unsharded" => Strategy::Unsharded,
            other => {
                return Err(ConfigError::Invalid {
                    name: "SHARD_STRATEGY",
                    value: other.to_owned(),
                    reason: "expected time-bucket, random, calculated or unsharded".to_owned(),
                });
            }
        };
        let retention_days: u64 =
            env.parse_or("RETENTION_DAYS", 30, "a positive number of days")?;
        if retention_days == 0 {
            return Err(env.invalid("RETENTION_DAYS", "must be at least 1"));
        }
        let max_inflight: usize = env.parse_or("MAX_INFLIGHT", 16, "a positive integer")?;
        if max_inflight == 0 {
            return Err(env.invalid("MAX_INFLIGHT", "must be at least 1"));
        }
        let max_future = Duration::from_secs(env.parse_or("MAX_FUTURE_SECS", 300, "seconds")?);
        let cache_ttl = Duration::from_secs(env.parse_or("CACHE_TTL_SECS", 60, "seconds")?);
        let slack = Duration::from_secs(env.parse_or("PROPAGATION_SLACK_SECS", 5, "seconds")?);
        let margin = propagation_margin(cache_ttl, max_future, slack);
        let cooldown = Duration::from_secs(env.parse_or("FANOUT_COOLDOWN_SECS", 2, "seconds")?);
        let shrink_after =
            Duration::from_secs(env.parse_or("FANOUT_SHRINK_AFTER_SECS", 900, "seconds")?);
        if shrink_after < cache_ttl {
            return Err(env.invalid(
                "FANOUT_SHRINK_AFTER_SECS",
                "must be at least CACHE_TTL_SECS (a quiet period shorter than a cache read \
                 cannot tell a quiet entity from a writer's stale view)",
            ));
        }
        let max_fanout: u32 = env.parse_or("FANOUT_MAX", 32, "a positive integer")?;
        if max_fanout == 0 {
            return Err(env.invalid("FANOUT_MAX", "must be at least 1"));
        }
        let max_attempts: u32 = env.parse_or("RETRY_MAX_ATTEMPTS", 8, "a positive integer")?;
        if max_attempts == 0 {
            return Err(env.invalid("RETRY_MAX_ATTEMPTS", "must be at least 1"));
        }
        let max_readings_per_message: usize =
            env.parse_or("MAX_READINGS_PER_MESSAGE", 500, "a positive integer")?;
        if max_readings_per_message == 0 {
            return Err(env.invalid("MAX_READINGS_PER_MESSAGE", "must be at least 1"));
        }
        let redelivery = Redelivery {
            base: Duration::from_secs(env.parse_or("REDELIVERY_BASE_SECS", 30, "seconds")?),
            cap: Duration::from_secs(env.parse_or("REDELIVERY_CAP_SECS", 900, "seconds")?),
        };
        if redelivery.cap > MAX_VISIBILITY {
            return Err(env.invalid(
                "REDELIVERY_CAP_SECS",
                "must be at most 43200 (SQS's 12-hour visibility limit)",
            ));
        }
        if redelivery.cap < redelivery.base {
            return Err(env.invalid(
                "REDELIVERY_CAP_SECS",
                "must be at least REDELIVERY_BASE_SECS",
            ));
        }
        let max_receives: u32 = env.parse_or("MAX_RECEIVES", 5, "a positive integer")?;
        if max_receives == 0 {
            return Err(env.invalid("MAX_RECEIVES", "must be at least 1"));
        }
        let raise_ahead_wcu: f64 =
            env.parse_or("RAISE_AHEAD_WCU", 100.0, "readings per second per key")?;
        if !(raise_ahead_wcu.is_finite() && raise_ahead_wcu >= 0.0) {
            return Err(env.invalid("RAISE_AHEAD_WCU", "must be 0 (off) or more"));
        }
        Ok(Config {
            raise_ahead_wcu,
            max_receives,
            max_requeues: env.parse_or("MAX_REQUEUES", 3, "a non-negative integer")?,
            source_queue_url: env.optional("SOURCE_QUEUE_URL"),
            redelivery,
            table_name: env.required("TABLE_NAME")?,
            shard_table_name: env.required("SHARD_TABLE_NAME")?,
            dlq_url: env.required("DLQ_URL")?,
            layout: Layout { strategy, shards },
            retention: Duration::from_secs(retention_days.saturating_mul(86_400)),
            max_inflight,
            max_future,
            cache_ttl,
            fanout: FanoutPolicy {
                cooldown,
                jitter: Duration::from_secs(env.parse_or("FANOUT_JITTER_SECS", 1, "seconds")?),
                max_fanout,
                propagation_margin: margin,
                key_rate: raise_ahead_wcu,
                shrink_after,
            },
            deadline_margin: Duration::from_millis(env.parse_or(
                "DEADLINE_MARGIN_MS",
                1000,
                "milliseconds",
            )?),
            backoff: Backoff {
                base: Duration::from_millis(env.parse_or("RETRY_BASE_MS", 25, "milliseconds")?),
                cap: Duration::from_millis(env.parse_or("RETRY_CAP_MS", 1000, "milliseconds")?),
                max_attempts,
            },
            max_readings_per_message,
        })
    }
}

struct Env<'a, F>(&'a F);

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    fn optional(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.optional(name).ok_or(ConfigError::Missing { name })
    }

    fn invalid(&self, name: &'static str, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            name,
            value: self.optional(name).unwrap_or_default(),
            reason: reason.to_owned(),
        }
    }

    fn parse_or<T: std::str::FromStr>(
        &self,
        name: &'static str,
        default: T,
        expected: &str,
    ) -> Result<T, ConfigError> {
        match self.optional(name) {
            None => Ok(default),
            Some(value) => value.trim().parse().map_err(|_| ConfigError::Invalid {
                name,
                value,
                reason: format!("expected {expected}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    const REQUIRED: [(&str, &str); 3] = [
        ("TABLE_NAME", "readings"),
        ("SHARD_TABLE_NAME", "shards"),
        ("DLQ_URL", "http://127.0.0.1:1/q"),
    ];

    #[test]
    fn defaults_fill_everything_but_the_names() {
        let config = parse(&REQUIRED).expect("valid");
        assert_eq!(
            config.layout,
            Layout::time_bucket(Bucket::Hour, NonZeroU32::new(8).expect("8 > 0"))
        );
        assert_eq!(config.max_inflight, 16);
        assert_eq!(config.max_future, Duration::from_secs(300));
        assert_eq!(config.retention, Duration::from_secs(30 * 86_400));
        assert_eq!(config.fanout.propagation_margin, Duration::from_secs(365));
        assert_eq!(config.fanout.cooldown, Duration::from_secs(2));
        assert_eq!(config.fanout.shrink_after, Duration::from_secs(900));
        assert_eq!(config.fanout.key_rate, 100.0);
        assert_eq!(config.source_queue_url, None);
        assert_eq!((config.max_receives, config.max_requeues), (5, 3));
        assert_eq!(config.redelivery.ceiling(5), Duration::from_secs(480));
        let mut vars = REQUIRED.to_vec();
        vars.push(("SUB_SHARDS", "dedicated"));
        assert_eq!(
            parse(&vars).expect("valid").layout,
            Layout::time_bucket_dedicated(Bucket::Hour, NonZeroU32::new(8).expect("8 > 0"))
        );
    }

    #[test]
    fn a_missing_variable_is_named() {
        let err = parse(&REQUIRED[..2]).expect_err("DLQ_URL missing");
        assert_eq!(err, ConfigError::Missing { name: "DLQ_URL" });
        assert!(err.to_string().contains("DLQ_URL"));
    }

    #[test]
    fn an_invalid_variable_is_named() {
        let check = |var: (&str, &str), name: &str| {
            let mut vars = REQUIRED.to_vec();
            vars.push(var);
            let err = parse(&vars).expect_err("invalid");
            assert!(err.to_string().contains(name), "{err}");
        };
        check(("SHARD_STRATEGY", "round-robin"), "SHARD_STRATEGY");
        check(("BUCKET", "week"), "BUCKET");
        check(("SUB_SHARDS", "own"), "SUB_SHARDS");
        check(("SHARDS", "0"), "SHARDS");
        check(("MAX_INFLIGHT", "0"), "MAX_INFLIGHT");
        check(("RETENTION_DAYS", "-1"), "RETENTION_DAYS");
        check(("FANOUT_COOLDOWN_SECS", "soon"), "FANOUT_COOLDOWN_SECS");
        check(
            ("FANOUT_SHRINK_AFTER_SECS", "10"),
            "FANOUT_SHRINK_AFTER_SECS",
        );
        check(("REDELIVERY_CAP_SECS", "50000"), "REDELIVERY_CAP_SECS");
        check(("REDELIVERY_BASE_SECS", "ten"), "REDELIVERY_BASE_SECS");
        check(("MAX_RECEIVES", "0"), "MAX_RECEIVES");
        check(("MAX_REQUEUES", "-1"), "MAX_REQUEUES");
        check(("RAISE_AHEAD_WCU", "-5"), "RAISE_AHEAD_WCU");
        check(("RAISE_AHEAD_WCU", "inf"), "RAISE_AHEAD_WCU");
    }

    #[test]
    fn strategies_parse() {
        let mut vars = REQUIRED.to_vec();
        vars.push(("SHARD_STRATEGY", "calculated"));
        vars.push(("CALCULATED_ATTRIBUTE", "site"));
        vars.push(("SHARDS", "4"));
        let config = parse(&vars).expect("valid");
        assert_eq!(
            config.layout,
            Layout::calculated("site", NonZeroU32::new(4).expect("4 > 0"))
        );
    }
}
