//! The `query` binary's configuration, parsed once from the environment; a missing
//! or bad variable fails the cold start with its name.

use std::time::Duration;

use crate::cursor::CursorKey;
use crate::params::{Limits, parse_interval};
use crate::service::ServiceConfig;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {why}")]
    Invalid { name: &'static str, why: String },
}

/// Everything the Lambda needs, from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Readings table (`TABLE_NAME`).
    pub table_name: String,
    /// Shard metadata table (`SHARD_TABLE_NAME`).
    pub shard_table_name: String,
    /// Where the cursor key comes from.
    pub cursor_key: CursorKeySource,
    pub service: ServiceSettings,
}

/// The cursor key as configured: the key itself (`CURSOR_KEY`), or the ARN of a
/// Secrets Manager secret holding it (`CURSOR_SECRET_ARN`), read once at start.
#[derive(Clone, PartialEq, Eq)]
pub enum CursorKeySource {
    Inline(Vec<u8>),
    SecretArn(String),
}

impl std::fmt::Debug for CursorKeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline(k) => write!(f, "Inline(<{} bytes>)", k.len()),
            Self::SecretArn(arn) => write!(f, "SecretArn({arn})"),
        }
    }
}

/// Service settings other than the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSettings {
    pub limits: Limits,
    pub concurrency: usize,
    pub directory_ttl: Duration,
}

impl ServiceSettings {
    pub fn with_key(&self, cursor_key: CursorKey) -> ServiceConfig {
        ServiceConfig {
            limits: self.limits.clone(),
            concurrency: self.concurrency,
            cursor_key,
            directory_ttl: self.directory_ttl,
            retry_after_secs: 1,
        }
    }
}

impl Config {
    /// From the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any lookup (tests pass a map).
    ///
    /// | variable | default | meaning |
    /// |---|---|---|
    /// | `TABLE_NAME` | required | readings table |
    /// | `SHARD_TABLE_NAME` | required | shard metadata table |
    /// | `CURSOR_KEY` or `CURSOR_SECRET_ARN` | one required | cursor HMAC key (>= 16 bytes) or its secret |
    /// | `MAX_DEVICE_RANGE` | `31d` | widest range for one device (`30s`, `5m`, `1h`, `1d` units) |
    /// | `MAX_ALL_RANGE` | `24h` | widest range for every device |
    /// | `MAX_STATS_BUCKETS` | `10000` | most buckets in one stats answer |
    /// | `QUERY_CONCURRENCY` | `32` | most Queries in flight per request |
    /// | `SHARD_CACHE_TTL_SECS` | `60` | reuse of shard metadata; keep it <= the epoch propagation margin |
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let required = |name: &'static str| {
            get(name)
                .filter(|v| !v.is_empty())
                .ok_or(ConfigError::Missing(name))
        };
        let table_name = required("TABLE_NAME")?;
        let shard_table_name = required("SHARD_TABLE_NAME")?;
        let cursor_key = match (
            get("CURSOR_KEY").filter(|v| !v.is_empty()),
            get("CURSOR_SECRET_ARN").filter(|v| !v.is_empty()),
        ) {
            (Some(k), _) => {
                CursorKey::new(k.as_bytes().to_vec()).map_err(|e| ConfigError::Invalid {
                    name: "CURSOR_KEY",
                    why: e.to_string(),
                })?;
                CursorKeySource::Inline(k.into_bytes())
            }
            (None, Some(arn)) => CursorKeySource::SecretArn(arn),
            (None, None) => return Err(ConfigError::Missing("CURSOR_KEY")),
        };
        let duration = |name: &'static str, default: &str| -> Result<i64, ConfigError> {
            let raw = get(name).unwrap_or_else(|| default.to_string());
            parse_interval(&raw).map_err(|e| ConfigError::Invalid {
                name,
                why: e.message,
            })
        };
        let number = |name: &'static str, default: u64| -> Result<u64, ConfigError> {
            match get(name) {
                None => Ok(default),
                Some(raw) => match raw.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(ConfigError::Invalid {
                        name,
                        why: format!("expected a positive integer, got {raw:?}"),
                    }),
                },
            }
        };
        let limits = Limits {
            max_device_range_ms: duration("MAX_DEVICE_RANGE", "31d")?,
            max_all_range_ms: duration("MAX_ALL_RANGE", "24h")?,
            max_stats_buckets: i64::try_from(number("MAX_STATS_BUCKETS", 10_000)?).map_err(
                |_| ConfigError::Invalid {
                    name: "MAX_STATS_BUCKETS",
                    why: "too large".into(),
                },
            )?,
        };
        let concurrency = usize::try_from(number("QUERY_CONCURRENCY", 32)?).unwrap_or(usize::MAX);
        let directory_ttl = Duration::from_secs(number("SHARD_CACHE_TTL_SECS", 60)?);
        Ok(Self {
            table_name,
            shard_table_name,
            cursor_key,
            service: ServiceSettings {
                limits,
                concurrency,
                directory_ttl,
            },
        })
    }
}
