//! The typed configuration, parsed once from the environment at init.
//!
//! Every failure names the variable, so a misconfigured function fails its init with a
//! message that says what to fix.

use std::time::Duration;

use sharding::backoff::{Backoff, MAX_VISIBILITY, Redelivery};
use store::config::Vars;
pub use store::config::{ConfigError, WriterSettings};
use store::directory::DirectoryConfig;

use crate::front_door::Principals;
use crate::seal::{SealKey, SealKeys};

/// `MAX_INFLIGHT` when unset: concurrent `BatchWriteItem` calls of one invocation (the
/// template's `MaxInflight` default, held equal by the template test).
pub const DEFAULT_MAX_INFLIGHT: usize = 16;

/// The ingest function's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TABLE_NAME`: the readings table.
    pub table_name: String,
    /// The shard directory's settings every writer shares: `SHARD_TABLE_NAME`,
    /// `MAX_FUTURE_SECS`, the layout, `SHARD_CACHE_TTL_SECS` and the fan-out policy
    /// ([`WriterSettings::parse`] lists the variables).
    pub shards: WriterSettings,
    /// `DLQ_URL`: where permanently refused messages go.
    pub dlq_url: String,
    /// `RETENTION_DAYS` (default 30): readings older than this are refused; items expire
    /// this long after their ts.
    pub retention: Duration,
    /// `MAX_INFLIGHT` (default 16): concurrent `BatchWriteItem` calls.
    pub max_inflight: usize,
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
    /// `INGEST_SENDER_ID` (optional): the ingest's own sender identity as SQS reports it
    /// in a message's `SenderId` (the template passes the ingest role's `RoleId`; a role
    /// session's SenderId is `"<RoleId>:<session>"`). A record's `shardline.*`
    /// attributes (requeue count, first message id) are honoured only when its SenderId
    /// is this or a session of it: a device cannot set them. Without it no record's are,
    /// and a message failing at its last receive is dead-lettered rather than requeued.
    pub sender_id: Option<String>,
    /// `IOT_SENDER_ID` (optional): the SenderId of the IoT front door's rule, its role's
    /// `RoleId` (the template passes it when `IotFrontDoor` is enabled, and an empty
    /// value otherwise). Only a record this role (or one of its sessions) sent may carry
    /// the rule's envelope, the thing its connection proved beside the readings
    /// (`crate::front_door`); without it, no record may.
    pub iot_sender_id: Option<String>,
    /// `IOT_PRINCIPALS` (default `certificate`, the template's `IotPrincipals`): which
    /// connections' envelopes the ingest takes, by the principal the rule wrote beside
    /// the thing ([`Principals`]): `certificate`, only a connection authenticated with
    /// an X.509 certificate (the one the thing policy binds to its thing), or `any`.
    pub iot_principals: Principals,
    /// `FRONT_DOOR_KEY` or `FRONT_DOOR_SECRET_ARN` (both optional, at most one): the key
    /// that seals a dead letter of the IoT rule's message so that, redriven, it is read
    /// as the rule's again ([`crate::seal`]).
    pub front_door_key: FrontDoorKey,
    /// `BATCH_SIZE` (default 100, the template's `IngestBatchSize`) and
    /// `BATCHING_WINDOW_SECS` (default 1, `BatchingWindow`): how the event source mapping
    /// gathers a batch, from which each entity's arrival rate is measured
    /// ([`sharding::fanout::BatchArrival`]).
    pub intake: Intake,
    /// `ROLLUP_TABLE` (optional): the sealer's derived items' table (`store::rollup`).
    /// With it, each written reading whose hour may already be sealed leaves a late mark
    /// there; without it, none does.
    pub rollup_table: Option<String>,
    /// `LATENESS_HORIZON_SECS` (default
    /// [`DEFAULT_LATENESS_HORIZON_SECS`](store::rollup::DEFAULT_LATENESS_HORIZON_SECS),
    /// the sealer's): how long after an hour ends the sealer seals it. Used only until
    /// the sealer has published the horizon it seals with in its watermark
    /// (`store::rollup::horizon`), which the ingest reads and marks with instead.
    pub lateness_horizon: Duration,
}

/// Where the front door's sealing keys come from.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum FrontDoorKey {
    /// Neither variable set: letters are not sealed, and a sealed message is refused.
    #[default]
    None,
    /// `FRONT_DOOR_KEY`, or a secret's versions once read ([`Config::resolve_key`]).
    Keys(SealKeys),
    /// `FRONT_DOOR_SECRET_ARN`: a Secrets Manager secret, read at init (`AWSCURRENT`
    /// seals; `AWSPREVIOUS`, after a rotation, still opens).
    SecretArn(String),
}

impl FrontDoorKey {
    /// `FRONT_DOOR_KEY` (at least 16 bytes; an error shows its length, never the key)
    /// or `FRONT_DOOR_SECRET_ARN`, at most one of them.
    fn parse<F: Fn(&str) -> Option<String>>(env: &Vars<F>) -> Result<Self, ConfigError> {
        Ok(
            match (
                env.optional("FRONT_DOOR_KEY"),
                env.optional("FRONT_DOOR_SECRET_ARN"),
            ) {
                (None, None) => Self::None,
                (Some(key), None) => {
                    let bytes = key.len();
                    let key =
                        SealKey::new(key.into_bytes()).map_err(|reason| ConfigError::Invalid {
                            name: "FRONT_DOOR_KEY",
                            value: format!("<{bytes} bytes, not shown>"),
                            reason,
                        })?;
                    Self::Keys(key.into())
                }
                (None, Some(arn)) => Self::SecretArn(arn),
                (Some(_), Some(_)) => {
                    return Err(env.invalid(
                        "FRONT_DOOR_SECRET_ARN",
                        "set it or FRONT_DOOR_KEY, not both",
                    ));
                }
            },
        )
    }

    /// The keys, once known.
    pub fn keys(&self) -> Option<&SealKeys> {
        match self {
            Self::Keys(keys) => Some(keys),
            Self::None | Self::SecretArn(_) => None,
        }
    }
}

/// How the event source mapping gathers a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intake {
    /// Most messages in one batch.
    pub batch_size: usize,
    /// The batching window.
    pub window: Duration,
}

impl Config {
    /// The shard directory's settings: cache TTL, fan-out policy, initial layout.
    pub fn directory_config(&self) -> DirectoryConfig {
        self.shards.directory.clone()
    }

    /// Reads the front door's keys from their secret, when `FRONT_DOOR_SECRET_ARN` names
    /// one: its `AWSCURRENT` version seals, its `AWSPREVIOUS` (absent until the first
    /// rotation) still opens. An error names the variable, as any configuration error.
    pub async fn resolve_key(
        &mut self,
        secrets: &aws_sdk_secretsmanager::Client,
    ) -> Result<(), ConfigError> {
        let FrontDoorKey::SecretArn(arn) = &self.front_door_key else {
            return Ok(());
        };
        let invalid = |reason: String| ConfigError::Invalid {
            name: "FRONT_DOOR_SECRET_ARN",
            value: arn.clone(),
            reason,
        };
        let (current, previous) = store::secrets::current_and_previous(secrets, arn, SealKey::new)
            .await
            .map_err(invalid)?;
        self.front_door_key = FrontDoorKey::Keys(SealKeys { current, previous });
        Ok(())
    }

    /// Parses the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Parses variables from `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Vars(&lookup);
        let shards = WriterSettings::parse(&env)?;
        let retention_days: u64 =
            env.parse_or("RETENTION_DAYS", 30, "a positive number of days")?;
        if retention_days == 0 {
            return Err(env.invalid("RETENTION_DAYS", "must be at least 1"));
        }
        let max_inflight: usize =
            env.parse_or("MAX_INFLIGHT", DEFAULT_MAX_INFLIGHT, "a positive integer")?;
        if max_inflight == 0 {
            return Err(env.invalid("MAX_INFLIGHT", "must be at least 1"));
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
        let batch_size: usize = env.parse_or("BATCH_SIZE", 100, "a positive integer")?;
        if batch_size == 0 {
            return Err(env.invalid("BATCH_SIZE", "must be at least 1"));
        }
        let window_secs: f64 = env.parse_or("BATCHING_WINDOW_SECS", 1.0, "seconds")?;
        let window = Duration::try_from_secs_f64(window_secs)
            .map_err(|_| env.invalid("BATCHING_WINDOW_SECS", "must be 0 or more seconds"))?;
        Ok(Config {
            intake: Intake { batch_size, window },
            shards,
            max_receives,
            max_requeues: env.parse_or("MAX_REQUEUES", 3, "a non-negative integer")?,
            source_queue_url: env.optional("SOURCE_QUEUE_URL"),
            sender_id: env.optional("INGEST_SENDER_ID"),
            iot_sender_id: env.optional("IOT_SENDER_ID"),
            iot_principals: env.parse_or(
                "IOT_PRINCIPALS",
                Principals::Certificate,
                "certificate or any",
            )?,
            front_door_key: FrontDoorKey::parse(&env)?,
            rollup_table: env.optional("ROLLUP_TABLE"),
            lateness_horizon: Duration::from_secs(env.parse_or(
                "LATENESS_HORIZON_SECS",
                store::rollup::DEFAULT_LATENESS_HORIZON_SECS,
                "a number of seconds",
            )?),
            redelivery,
            table_name: env.required("TABLE_NAME")?,
            dlq_url: env.required("DLQ_URL")?,
            retention: Duration::from_secs(retention_days.saturating_mul(86_400)),
            max_inflight,
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::num::NonZeroU32;

    use sharding::block::BlockLayout;
    use sharding::layout::Layout;
    use sharding::time::Bucket;

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
        // A new table packs blocks: a minute, 16 KiB, 1,000 readings.
        assert_eq!(
            config.shards.directory.initial_layout,
            Layout::time_bucket(Bucket::Hour, NonZeroU32::new(8).expect("8 > 0"))
                .with_blocks(BlockLayout::default())
        );
        assert_eq!(config.max_inflight, 16);
        assert_eq!(config.shards.max_future, Duration::from_secs(300));
        assert_eq!(config.retention, Duration::from_secs(30 * 86_400));
        assert_eq!(
            config.shards.directory.policy.propagation_margin,
            Duration::from_secs(365)
        );
        assert_eq!(
            config.shards.directory.policy.cooldown,
            Duration::from_secs(2)
        );
        assert_eq!(
            config.shards.directory.policy.shrink_after,
            Duration::from_secs(900)
        );
        assert_eq!(config.shards.directory.policy.key_rate, 100.0);
        assert_eq!(config.source_queue_url, None);
        assert_eq!((config.max_receives, config.max_requeues), (5, 3));
        assert_eq!(config.sender_id, None);
        assert_eq!(config.iot_sender_id, None);
        assert_eq!(config.iot_principals, Principals::Certificate);
        assert_eq!(config.rollup_table, None);
        assert_eq!(config.lateness_horizon, Duration::from_secs(600));
        assert_eq!(config.redelivery.ceiling(5), Duration::from_secs(480));
        let mut vars = REQUIRED.to_vec();
        vars.push(("SUB_SHARDS", "dedicated"));
        vars.push(("BLOCKS", "off"));
        assert_eq!(
            parse(&vars).expect("valid").shards.directory.initial_layout,
            Layout::time_bucket_dedicated(Bucket::Hour, NonZeroU32::new(8).expect("8 > 0"))
        );
        let mut vars = REQUIRED.to_vec();
        vars.push(("BLOCK_WINDOW_SECS", "300"));
        assert_eq!(
            parse(&vars)
                .expect("valid")
                .shards
                .directory
                .initial_layout
                .blocks
                .map(|b| b.window_ms),
            Some(300_000)
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
        check(("BLOCKS", "yes"), "BLOCKS");
        check(("BLOCK_WINDOW_SECS", "0"), "BLOCK_WINDOW_SECS");
        check(("BLOCK_WINDOW_SECS", "3601"), "BLOCK_WINDOW_SECS");
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
        check(("LATENESS_HORIZON_SECS", "-1"), "LATENESS_HORIZON_SECS");
        // Neither of the two: never a silently wider door.
        check(("IOT_PRINCIPALS", "all"), "IOT_PRINCIPALS");
        check(("IOT_PRINCIPALS", "Certificate"), "IOT_PRINCIPALS");
    }

    #[test]
    fn the_front_door_may_be_told_to_take_any_principal() {
        let mut vars = REQUIRED.to_vec();
        vars.push(("IOT_PRINCIPALS", "any"));
        assert_eq!(parse(&vars).expect("valid").iot_principals, Principals::Any);
    }

    #[test]
    fn strategies_parse() {
        let mut vars = REQUIRED.to_vec();
        vars.push(("SHARD_STRATEGY", "calculated"));
        vars.push(("CALCULATED_ATTRIBUTE", "site"));
        vars.push(("SHARDS", "4"));
        vars.push(("BLOCKS", "off"));
        let config = parse(&vars).expect("valid");
        assert_eq!(
            config.shards.directory.initial_layout,
            Layout::calculated("site", NonZeroU32::new(4).expect("4 > 0"))
        );
    }

    #[test]
    fn the_front_door_key_is_one_source_and_never_shown() {
        assert_eq!(
            parse(&REQUIRED).expect("valid").front_door_key,
            FrontDoorKey::None
        );
        let mut vars = REQUIRED.to_vec();
        vars.push(("FRONT_DOOR_KEY", "a-front-door-key-of-32-bytes-000"));
        let config = parse(&vars).expect("valid");
        assert!(config.front_door_key.keys().is_some());
        assert!(!format!("{config:?}").contains("a-front-door-key"));
        let mut short = REQUIRED.to_vec();
        short.push(("FRONT_DOOR_KEY", "hunter2"));
        let error = parse(&short).expect_err("too short").to_string();
        assert!(
            error.contains("FRONT_DOOR_KEY") && error.contains("16 bytes"),
            "{error}"
        );
        assert!(!error.contains("hunter2"), "{error}");
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:front-door";
        let mut secret = REQUIRED.to_vec();
        secret.push(("FRONT_DOOR_SECRET_ARN", arn));
        let config = parse(&secret).expect("valid");
        assert_eq!(
            config.front_door_key,
            FrontDoorKey::SecretArn(arn.to_owned())
        );
        assert_eq!(config.front_door_key.keys(), None);
        vars.push(("FRONT_DOOR_SECRET_ARN", arn));
        let error = parse(&vars).expect_err("both").to_string();
        assert!(error.contains("not both"), "{error}");
    }
}
