//! The writers' shard-directory settings, parsed from environment variables in one
//! place: the ingest function reads them at init, and `shardline fanout` reads the same
//! variables from the stack's env file, so an operator's schedule follows the margin,
//! maximum and layout the writers follow.
//!
//! Every failure names the variable, so a misconfigured function fails its init with a
//! message that says what to fix.

use std::num::NonZeroU32;
use std::time::Duration;

use sharding::block::BlockLayout;
use sharding::epoch::propagation_margin;
use sharding::fanout::FanoutPolicy;
use sharding::layout::{Layout, Strategy, SubShards};
use sharding::slab::{self, SlabLayout};
use sharding::time::Bucket;

use crate::directory::DirectoryConfig;

/// How far ahead of a writer's clock a reading's timestamp may be, by default
/// (`MAX_FUTURE_SECS`): the ingest refuses a reading stamped later, so a reader looking
/// for a device's newest reading looks no further ahead of its own clock than this.
pub const DEFAULT_MAX_FUTURE_SECS: u64 = 300;

/// How long the writers keep an entity's shard metadata before reading it again
/// (`SHARD_CACHE_TTL_SECS`): a device heard from less often than this is read once a
/// message (`shardline cost` prices those reads).
pub const DEFAULT_SHARD_CACHE_TTL_SECS: u64 = 60;

/// The writers' variables renamed, each `(name, old name)`: the old name is still read
/// for one release. `SHARD_CACHE_TTL_SECS` is the one name of the shard-metadata cache's
/// TTL in every function that caches shard metadata, each with its own default (the
/// writers' 60 s here, the query's 5 s in `query::config`, which always read this
/// name); the writers read it as `CACHE_TTL_SECS` before.
pub const RENAMED: &[(&str, &str)] = &[("SHARD_CACHE_TTL_SECS", "CACHE_TTL_SECS")];

/// `name`'s value from `get`, and for a renamed variable set only under its old name,
/// the old one's with that old name (the new name wins when both are set). Blank counts
/// as unset.
pub fn renamed_value(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
) -> (Option<String>, Option<&'static str>) {
    let set = |n: &str| get(n).filter(|v| !v.trim().is_empty());
    if let Some(value) = set(name) {
        return (Some(value), None);
    }
    let old = RENAMED
        .iter()
        .find(|(new, _)| *new == name)
        .and_then(|(_, old)| Some((set(old)?, *old)));
    match old {
        Some((value, old)) => (Some(value), Some(old)),
        None => (get(name), None),
    }
}

/// `name`'s value as [`renamed_value`] finds it, with a warning naming the new name
/// when only the old one is set: [`Vars`] reads every variable through this.
fn lookup(get: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    let (value, old) = renamed_value(get, name);
    if let Some(old) = old {
        tracing::warn!(
            variable = old,
            renamed_to = name,
            "{old} is read for one more release; set {name} instead"
        );
    }
    value
}

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

/// Variables looked up by name (the process environment, an env file, a map in tests);
/// empty counts as unset.
pub struct Vars<F>(pub F);

impl<F> std::fmt::Debug for Vars<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vars(..)")
    }
}

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// The variable's value, if set and not blank.
    pub fn optional(&self, name: &str) -> Option<String> {
        lookup(&self.0, name).filter(|v| !v.trim().is_empty())
    }

    /// The variable's value, or [`ConfigError::Missing`].
    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.optional(name).ok_or(ConfigError::Missing { name })
    }

    /// [`ConfigError::Invalid`] for the variable's value.
    pub fn invalid(&self, name: &'static str, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            name,
            value: self.optional(name).unwrap_or_default(),
            reason: reason.to_owned(),
        }
    }

    /// The variable parsed, `default` when unset, or an error saying what was `expected`.
    pub fn parse_or<T: std::str::FromStr>(
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

/// What every writer of a table must agree on about its shard directory.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterSettings {
    /// `SHARD_TABLE_NAME`: the shard metadata table.
    pub shard_table_name: String,
    /// `MAX_FUTURE_SECS` (default 300): how far ahead of the clock a ts may be.
    pub max_future: Duration,
    /// The directory's cache TTL, fan-out policy and initial layout.
    pub directory: DirectoryConfig,
}

impl WriterSettings {
    /// Parses the variables:
    ///
    /// - `SHARD_STRATEGY` (`time-bucket` | `random` | `calculated` | `unsharded`, default
    ///   `time-bucket`), `BUCKET` (`minute` | `hour` | `day` | `month`, default `hour`),
    ///   `SHARDS` (default 8), `CALCULATED_ATTRIBUTE` (default `event_id`), `SUB_SHARDS`
    ///   (`base` | `dedicated`, default `base`: where a raised time-bucket entity's
    ///   sub-shards live, [`sharding::layout::SubShards`]), `BLOCKS` (`on` | `off`,
    ///   default `on`: whether the writer packs one device's readings into blocks,
    ///   [`sharding::block::BlockLayout`]) and `BLOCK_WINDOW_SECS` (default 60, at most
    ///   3600: a block's span): the layout stored when the metadata table has none yet.
    ///   A stored layout is never changed by these.
    /// - `SHARD_CACHE_TTL_SECS` (default 60, the writers'; `CACHE_TTL_SECS` still read,
    ///   [`RENAMED`]): how long shard metadata reads are trusted.
    /// - `RETENTION_DAYS` (default 30, the ingest's): how long the hot index's items are
    ///   kept after their hour.
    /// - `FANOUT_COOLDOWN_SECS` (default 2), `FANOUT_JITTER_SECS` (default 1),
    ///   `FANOUT_MAX` (default 32), `FANOUT_SHRINK_AFTER_SECS` (default 900),
    ///   `PROPAGATION_SLACK_SECS` (default 5) and `RAISE_AHEAD_WCU` (the key rate in write
    ///   units per second, default 100, 0 turns rate-driven raises off): dynamic fan-out. Raises take
    ///   effect at once (keys nest), so the cooldown only spaces the conditional updates
    ///   of racing writers; shrinks wait for the propagation margin
    ///   `SHARD_CACHE_TTL_SECS + MAX_FUTURE_SECS + PROPAGATION_SLACK_SECS`.
    pub fn parse<F: Fn(&str) -> Option<String>>(env: &Vars<F>) -> Result<Self, ConfigError> {
        let layout = parse_layout(env)?;
        let max_future = Duration::from_secs(env.parse_or(
            "MAX_FUTURE_SECS",
            DEFAULT_MAX_FUTURE_SECS,
            "seconds",
        )?);
        let cache_ttl = Duration::from_secs(env.parse_or(
            "SHARD_CACHE_TTL_SECS",
            DEFAULT_SHARD_CACHE_TTL_SECS,
            "seconds",
        )?);
        let slack = Duration::from_secs(env.parse_or("PROPAGATION_SLACK_SECS", 5, "seconds")?);
        let cooldown = Duration::from_secs(env.parse_or("FANOUT_COOLDOWN_SECS", 2, "seconds")?);
        let shrink_after =
            Duration::from_secs(env.parse_or("FANOUT_SHRINK_AFTER_SECS", 900, "seconds")?);
        if shrink_after < cache_ttl {
            return Err(env.invalid(
                "FANOUT_SHRINK_AFTER_SECS",
                "must be at least SHARD_CACHE_TTL_SECS (a quiet period shorter than a cache read \
                 cannot tell a quiet entity from a writer's stale view)",
            ));
        }
        let max_fanout: u32 = env.parse_or("FANOUT_MAX", 32, "a positive integer")?;
        if max_fanout == 0 {
            return Err(env.invalid("FANOUT_MAX", "must be at least 1"));
        }
        let key_rate: f64 =
            env.parse_or("RAISE_AHEAD_WCU", 100.0, "write units per second per key")?;
        if !(key_rate.is_finite() && key_rate >= 0.0) {
            return Err(env.invalid("RAISE_AHEAD_WCU", "must be 0 (off) or more"));
        }
        Ok(Self {
            shard_table_name: env.required("SHARD_TABLE_NAME")?,
            max_future,
            directory: DirectoryConfig {
                cache_ttl,
                policy: FanoutPolicy {
                    cooldown,
                    jitter: Duration::from_secs(env.parse_or(
                        "FANOUT_JITTER_SECS",
                        1,
                        "seconds",
                    )?),
                    max_fanout,
                    propagation_margin: propagation_margin(cache_ttl, max_future, slack),
                    key_rate,
                    shrink_after,
                },
                initial_layout: layout,
                retention: Duration::from_secs(
                    env.parse_or::<u64>("RETENTION_DAYS", 30, "a positive number of days")?
                        .saturating_mul(86_400),
                ),
            },
        })
    }
}

/// `SHARD_STRATEGY`, `BUCKET`, `SHARDS`, `SUB_SHARDS` and `CALCULATED_ATTRIBUTE`.
fn parse_layout<F: Fn(&str) -> Option<String>>(env: &Vars<F>) -> Result<Layout, ConfigError> {
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
        Some(_) => return Err(env.invalid("SUB_SHARDS", "expected base or dedicated")),
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
        _ => {
            return Err(env.invalid(
                "SHARD_STRATEGY",
                "expected time-bucket, random, calculated or unsharded",
            ));
        }
    };
    let blocks = match env.optional("BLOCKS").as_deref() {
        Some("off") => None,
        None | Some("on") => {
            let window_secs: u32 = env.parse_or(
                "BLOCK_WINDOW_SECS",
                sharding::block::DEFAULT_WINDOW_SECS,
                "seconds",
            )?;
            let layout = BlockLayout {
                window_ms: window_secs.saturating_mul(1000),
                ..BlockLayout::default()
            };
            Some(layout.checked().map_err(|e| {
                env.invalid("BLOCK_WINDOW_SECS", &format!("1 to 3600 seconds ({e})"))
            })?)
        }
        Some(_) => return Err(env.invalid("BLOCKS", "expected on or off")),
    };
    let slabs = match env.optional("SLABS").as_deref() {
        None | Some("off") => None,
        Some("on") => Some(slab_layout(env)?),
        Some(_) => return Err(env.invalid("SLABS", "expected on or off")),
    };
    Ok(Layout {
        strategy,
        shards,
        blocks,
        slabs,
    })
}

/// The slab layout of `SLAB_GROUPS`, `SLAB_WINDOW_MINUTES`, `SLAB_ACCEPT_SECS`,
/// `SLAB_EXPIRY_HOURS`, `SLAB_RUN_MINUTES` and `SLAB_SHARED` (`on`, the default, or
/// `off`) (`sharding::slab`).
fn slab_layout<F: Fn(&str) -> Option<String>>(env: &Vars<F>) -> Result<SlabLayout, ConfigError> {
    let groups = env.parse_or(
        "SLAB_GROUPS",
        NonZeroU32::new(slab::DEFAULT_GROUPS).unwrap_or(NonZeroU32::MIN),
        "a positive integer",
    )?;
    let layout = SlabLayout {
        groups,
        window_minutes: env.parse_or(
            "SLAB_WINDOW_MINUTES",
            slab::DEFAULT_WINDOW_MINUTES,
            "minutes",
        )?,
        accept_secs: env.parse_or("SLAB_ACCEPT_SECS", slab::DEFAULT_ACCEPT_SECS, "seconds")?,
        expiry_hours: env.parse_or("SLAB_EXPIRY_HOURS", slab::DEFAULT_EXPIRY_HOURS, "hours")?,
        run_minutes: env.parse_or("SLAB_RUN_MINUTES", slab::DEFAULT_RUN_MINUTES, "minutes")?,
        shared_slabs: match env.optional("SLAB_SHARED").as_deref() {
            None | Some("on") => true,
            Some("off") => false,
            Some(_) => return Err(env.invalid("SLAB_SHARED", "expected on or off")),
        },
        ..SlabLayout::default()
    };
    layout
        .checked()
        .map_err(|e| env.invalid("SLABS", &e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn check(set: &[(&str, &str)], value: Option<&str>, old: Option<&str>) {
        let map: HashMap<&str, &str> = set.iter().copied().collect();
        let get = |name: &str| map.get(name).map(|v| (*v).to_owned());
        let got = renamed_value(&get, "SHARD_CACHE_TTL_SECS");
        assert_eq!((got.0.as_deref(), got.1), (value, old), "{set:?}");
    }

    #[test]
    fn the_old_cache_ttl_name_is_read_until_the_new_one_is_set() {
        check(&[], None, None);
        check(&[("SHARD_CACHE_TTL_SECS", "7")], Some("7"), None);
        check(
            &[("CACHE_TTL_SECS", "30")],
            Some("30"),
            Some("CACHE_TTL_SECS"),
        );
        check(
            &[("CACHE_TTL_SECS", "30"), ("SHARD_CACHE_TTL_SECS", "7")],
            Some("7"),
            None,
        );
        check(
            &[("CACHE_TTL_SECS", "30"), ("SHARD_CACHE_TTL_SECS", " ")],
            Some("30"),
            Some("CACHE_TTL_SECS"),
        );
    }

    #[test]
    fn writers_read_either_name_with_their_own_default() {
        let ttl = |set: &[(&str, &str)]| {
            let map: HashMap<&str, &str> = set.iter().copied().collect();
            let env = Vars(|name: &str| map.get(name).map(|v| (*v).to_owned()));
            WriterSettings::parse(&env).map(|s| s.directory.cache_ttl.as_secs())
        };
        let table = ("SHARD_TABLE_NAME", "shards");
        assert_eq!(ttl(&[table]), Ok(60));
        assert_eq!(ttl(&[table, ("CACHE_TTL_SECS", "30")]), Ok(30));
        assert_eq!(
            ttl(&[
                table,
                ("CACHE_TTL_SECS", "30"),
                ("SHARD_CACHE_TTL_SECS", "20")
            ]),
            Ok(20)
        );
    }
}
