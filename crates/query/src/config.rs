//! The `query` binary's configuration, parsed once from the environment; a missing
//! or bad variable fails the cold start with its name.

use std::time::Duration;

use crate::budget::RequestBudget;
use crate::cursor::{CursorKey, CursorKeyRing, CursorKeys};
use crate::params::{Limits, parse_interval};
use crate::service::{DEFAULT_STATS_WINDOW, ServiceConfig};
use crate::stats::StatsBudget;

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
    /// The sealer's derived items (`ROLLUP_TABLE`), read by `GET /devices` and
    /// `GET /stats`; `None`: those routes answer 501.
    pub rollup_table: Option<String>,
    /// Where the cursor key comes from.
    pub cursor_key: CursorKeySource,
    pub service: ServiceSettings,
}

/// The cursor keys as configured: the keys themselves (`CURSOR_KEY`, and the one before
/// it, `CURSOR_PREVIOUS_KEY`), or the ARN of a Secrets Manager secret
/// (`CURSOR_SECRET_ARN`) whose `AWSCURRENT` and `AWSPREVIOUS` versions hold them, read at
/// start and again when a cursor names a key the function does not hold yet.
#[derive(Clone, PartialEq, Eq)]
pub enum CursorKeySource {
    Inline {
        current: Vec<u8>,
        previous: Option<Vec<u8>>,
    },
    SecretArn(String),
}

impl std::fmt::Debug for CursorKeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline { current, previous } => write!(
                f,
                "Inline(<{} bytes>, previous: {:?})",
                current.len(),
                previous.as_ref().map(|p| format!("<{} bytes>", p.len()))
            ),
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
    pub max_buffered: usize,
    pub time_index: Option<String>,
    pub stats_budget: StatsBudget,
    pub budget: RequestBudget,
    /// How long a cursor is accepted (`CURSOR_MAX_AGE_SECS`).
    pub cursor_max_age: Duration,
    /// The JWT claim listing the devices a caller may read (`READ_SCOPE_CLAIM`).
    pub scope_claim: Option<String>,
}

impl ServiceSettings {
    /// The service's configuration with one cursor key.
    pub fn with_key(&self, cursor_key: CursorKey) -> ServiceConfig {
        self.with_keys(cursor_key, None)
    }

    /// The service's configuration sealing with `current` and opening cursors sealed
    /// with it or with `previous`.
    pub fn with_keys(&self, current: CursorKey, previous: Option<CursorKey>) -> ServiceConfig {
        ServiceConfig {
            limits: self.limits.clone(),
            concurrency: self.concurrency,
            cursor_keys: CursorKeyRing::new(self.cursor_keys(current, previous)),
            directory_ttl: self.directory_ttl,
            retry_after_secs: 1,
            max_buffered: self.max_buffered,
            time_index: self.time_index.clone(),
            stats_window: DEFAULT_STATS_WINDOW,
            stats_budget: self.stats_budget,
            budget: self.budget,
            scope_claim: self.scope_claim.clone(),
        }
    }

    /// `current` and `previous`, accepted for this configuration's cursor age.
    pub fn cursor_keys(&self, current: CursorKey, previous: Option<CursorKey>) -> CursorKeys {
        CursorKeys {
            current,
            previous,
            max_age: self.cursor_max_age,
        }
    }
}

/// The current and the previous cursor key from their configured source. A secret's
/// `AWSCURRENT` version is the current key and its `AWSPREVIOUS` version, when the
/// secret was rotated, the previous one; each version's `SecretString` (or
/// `SecretBinary`) is the key itself. Rotating is one `PutSecretValue` (docs/operations.md, "Rotating the cursor key").
pub async fn resolve_cursor_keys(
    source: &CursorKeySource,
    secrets: &aws_sdk_secretsmanager::Client,
) -> Result<(CursorKey, Option<CursorKey>), ConfigError> {
    let invalid = |name: &'static str| move |why: String| ConfigError::Invalid { name, why };
    let key = |name: &'static str, bytes: Vec<u8>| {
        CursorKey::new(bytes).map_err(|e| invalid(name)(e.to_string()))
    };
    match source {
        CursorKeySource::Inline { current, previous } => Ok((
            key("CURSOR_KEY", current.clone())?,
            previous
                .clone()
                .map(|bytes| key("CURSOR_PREVIOUS_KEY", bytes))
                .transpose()?,
        )),
        CursorKeySource::SecretArn(arn) => {
            store::secrets::current_and_previous(secrets, arn, CursorKey::new)
                .await
                .map_err(invalid("CURSOR_SECRET_ARN"))
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
    /// | `ROLLUP_TABLE` | empty | the sealer's derived items (`store::rollup`), read by `GET /devices` and `GET /stats`; empty: those routes answer 501 |
    /// | `CURSOR_KEY` or `CURSOR_SECRET_ARN` | one required | cursor HMAC key (>= 16 bytes) or its secret (versions `AWSCURRENT`, `AWSPREVIOUS`) |
    /// | `CURSOR_PREVIOUS_KEY` | none | with `CURSOR_KEY`: the key before it, whose cursors are still opened |
    /// | `CURSOR_MAX_AGE_SECS` | `86400` | how long a cursor is accepted after it was issued |
    /// | `MAX_DEVICE_RANGE` | `31d` | widest range for one device (`30s`, `5m`, `1h`, `1d` units) |
    /// | `MAX_ALL_RANGE` | `24h` | widest range for every device |
    /// | `MAX_STATS_BUCKETS` | `10000` | most buckets in one stats answer |
    /// | `QUERY_CONCURRENCY` | `32` | most Queries in flight per request |
    /// | `MAX_BUFFERED_READINGS` | `200000` | most readings an all-devices read may sort in memory |
    /// | `SHARD_CACHE_TTL_SECS` | `5` | reuse of shard metadata: a reading written under a raise newer than this cache may be missed for this long (the variable the writers read with their own default, 60) |
    /// | `STATS_MAX_READINGS` | `100000` | readings a stats page aggregates before it ends at the next bucket boundary (at most twice this inside one bucket) |
    /// | `STATS_MAX_SECS` | `3` | seconds a stats page reads before it ends at the next bucket boundary (at most twice this inside one bucket) |
    /// | `READ_SCOPE_CLAIM` | empty | the JWT claim that lists the devices a caller may read (`crate::scope`); empty: every caller reads every device (IAM auth) |
    /// | `READINGS_TIME_INDEX` | empty | the readings table's time index (LSI on `ts_ms`); empty: reads over every device sort whole buckets |
    /// | `QUERY_MAX_QUERIES` | `2000` | Query (and GetItem) calls one request may send |
    /// | `QUERY_MAX_EVALUATED` | `250000` | items DynamoDB may evaluate for one request (ScannedCount, filtered-out items included) |
    /// | `QUERY_MAX_ANSWER_BYTES` | `4000000` | bytes of one JSON answer (Lambda answers at most 6 MB) |
    /// | `QUERY_DEADLINE_MARGIN_MS` | `1000` | taken off the invocation's deadline: reads stop there |
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
                let previous = get("CURSOR_PREVIOUS_KEY").filter(|v| !v.is_empty());
                for (name, key) in [
                    ("CURSOR_KEY", Some(&k)),
                    ("CURSOR_PREVIOUS_KEY", previous.as_ref()),
                ] {
                    if let Some(key) = key {
                        CursorKey::new(key.as_bytes().to_vec()).map_err(|e| {
                            ConfigError::Invalid {
                                name,
                                why: e.to_string(),
                            }
                        })?;
                    }
                }
                CursorKeySource::Inline {
                    current: k.into_bytes(),
                    previous: previous.map(String::into_bytes),
                }
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
        let directory_ttl = Duration::from_secs(number("SHARD_CACHE_TTL_SECS", 5)?);
        let max_buffered =
            usize::try_from(number("MAX_BUFFERED_READINGS", 200_000)?).unwrap_or(usize::MAX);
        let default_budget = StatsBudget::default();
        let stats_budget = StatsBudget {
            readings: number("STATS_MAX_READINGS", default_budget.readings)?,
            time: Duration::from_secs(number("STATS_MAX_SECS", default_budget.time.as_secs())?),
        };
        let budget = request_budget(&number)?;
        Ok(Self {
            table_name,
            shard_table_name,
            rollup_table: get("ROLLUP_TABLE").filter(|v| !v.is_empty()),
            cursor_key,
            service: ServiceSettings {
                limits,
                concurrency,
                directory_ttl,
                max_buffered,
                time_index: get("READINGS_TIME_INDEX").filter(|v| !v.is_empty()),
                scope_claim: get("READ_SCOPE_CLAIM").filter(|v| !v.is_empty()),
                stats_budget,
                budget,
                cursor_max_age: Duration::from_secs(number(
                    "CURSOR_MAX_AGE_SECS",
                    crate::cursor::DEFAULT_MAX_AGE.as_secs(),
                )?),
            },
        })
    }
}

/// The request budget from its variables, each a positive integer.
fn request_budget(
    number: &impl Fn(&'static str, u64) -> Result<u64, ConfigError>,
) -> Result<RequestBudget, ConfigError> {
    let default = RequestBudget::default();
    let answer_bytes = number("QUERY_MAX_ANSWER_BYTES", default.answer_bytes as u64)?;
    // Lambda's response limit: a larger budget would turn big pages into 5xx.
    const LAMBDA_RESPONSE_BYTES: u64 = 6 * 1024 * 1024;
    if answer_bytes > LAMBDA_RESPONSE_BYTES - 64 * 1024 {
        return Err(ConfigError::Invalid {
            name: "QUERY_MAX_ANSWER_BYTES",
            why: format!(
                "{answer_bytes} leaves no room under Lambda's {LAMBDA_RESPONSE_BYTES}-byte \
                 response limit"
            ),
        });
    }
    let margin_ms = number(
        "QUERY_DEADLINE_MARGIN_MS",
        u64::try_from(default.deadline_margin.as_millis()).unwrap_or(u64::MAX),
    )?;
    Ok(RequestBudget {
        queries: number("QUERY_MAX_QUERIES", default.queries)?,
        evaluated: number("QUERY_MAX_EVALUATED", default.evaluated)?,
        answer_bytes: usize::try_from(answer_bytes).unwrap_or(usize::MAX),
        deadline_margin: Duration::from_millis(margin_ms),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    const BASE: [(&str, &str); 3] = [
        ("TABLE_NAME", "readings"),
        ("SHARD_TABLE_NAME", "shards"),
        ("CURSOR_KEY", "0123456789abcdef0123"),
    ];

    #[test]
    fn defaults() {
        let c = Config::from_lookup(lookup(&BASE)).expect("valid");
        assert_eq!(c.table_name, "readings");
        assert_eq!(c.rollup_table, None);
        assert_eq!(c.service.limits, Limits::default());
        assert_eq!(c.service.concurrency, 32);
        assert_eq!(c.service.directory_ttl, Duration::from_secs(5));
        assert_eq!(c.service.time_index, None);
        assert_eq!(c.service.stats_budget, StatsBudget::default());
        assert_eq!(c.service.budget, RequestBudget::default());
        assert!(matches!(
            c.cursor_key,
            CursorKeySource::Inline { previous: None, .. }
        ));
    }

    #[test]
    fn overrides() {
        let mut pairs = BASE.to_vec();
        pairs.extend([
            ("MAX_DEVICE_RANGE", "7d"),
            ("MAX_ALL_RANGE", "30m"),
            ("QUERY_CONCURRENCY", "8"),
            ("READINGS_TIME_INDEX", "by-time"),
            ("STATS_MAX_READINGS", "5000"),
            ("STATS_MAX_SECS", "2"),
            ("QUERY_MAX_QUERIES", "300"),
            ("QUERY_MAX_EVALUATED", "40000"),
            ("QUERY_MAX_ANSWER_BYTES", "1000000"),
            ("QUERY_DEADLINE_MARGIN_MS", "1500"),
            ("ROLLUP_TABLE", "rollups"),
        ]);
        let c = Config::from_lookup(lookup(&pairs)).expect("valid");
        assert_eq!(c.rollup_table.as_deref(), Some("rollups"));
        assert_eq!(
            c.service.budget,
            RequestBudget {
                queries: 300,
                evaluated: 40_000,
                answer_bytes: 1_000_000,
                deadline_margin: Duration::from_millis(1500),
            }
        );
        let budget = c
            .service
            .with_key(CursorKey::new(vec![1; 32]).expect("key"))
            .stats_budget;
        assert_eq!(budget.readings, 5000);
        assert_eq!(budget.time, Duration::from_secs(2));
        assert_eq!(c.service.time_index.as_deref(), Some("by-time"));
        assert_eq!(
            c.service
                .with_key(CursorKey::new(vec![1; 32]).expect("key"))
                .time_index,
            Some("by-time".to_owned())
        );
        assert_eq!(c.service.limits.max_device_range_ms, 7 * 86_400_000);
        assert_eq!(c.service.limits.max_all_range_ms, 30 * 60_000);
        assert_eq!(c.service.concurrency, 8);
        let empty = [BASE[0], BASE[1], BASE[2], ("READINGS_TIME_INDEX", "")];
        let c = Config::from_lookup(lookup(&empty)).expect("valid");
        assert_eq!(c.service.time_index, None, "empty: no index");
    }

    #[test]
    fn errors_name_the_variable() {
        let check = |pairs: &[(&str, &str)], name: &str| {
            let err = Config::from_lookup(lookup(pairs)).expect_err("invalid");
            assert!(err.to_string().contains(name), "{err} should name {name}");
        };
        check(&BASE[1..], "TABLE_NAME");
        check(&BASE[..2], "CURSOR_KEY");
        check(&[BASE[0], BASE[1], ("CURSOR_KEY", "short")], "CURSOR_KEY");
        check(
            &[BASE[0], BASE[1], BASE[2], ("QUERY_CONCURRENCY", "0")],
            "QUERY_CONCURRENCY",
        );
        check(
            &[BASE[0], BASE[1], BASE[2], ("MAX_ALL_RANGE", "1 day")],
            "MAX_ALL_RANGE",
        );
        check(
            &[BASE[0], BASE[1], BASE[2], ("STATS_MAX_READINGS", "0")],
            "STATS_MAX_READINGS",
        );
        check(
            &[BASE[0], BASE[1], BASE[2], ("STATS_MAX_SECS", "soon")],
            "STATS_MAX_SECS",
        );
        for name in [
            "QUERY_MAX_QUERIES",
            "QUERY_MAX_EVALUATED",
            "QUERY_MAX_ANSWER_BYTES",
            "QUERY_DEADLINE_MARGIN_MS",
        ] {
            check(&[BASE[0], BASE[1], BASE[2], (name, "-1")], name);
        }
        check(
            &[
                BASE[0],
                BASE[1],
                BASE[2],
                ("QUERY_MAX_ANSWER_BYTES", "6291456"),
            ],
            "QUERY_MAX_ANSWER_BYTES",
        );
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cursor";
        let c = Config::from_lookup(lookup(&[BASE[0], BASE[1], ("CURSOR_SECRET_ARN", arn)]))
            .expect("valid");
        assert_eq!(c.cursor_key, CursorKeySource::SecretArn(arn.into()));
    }

    #[tokio::test]
    async fn the_current_and_previous_keys_are_the_secrets_current_and_previous_versions() {
        use aws_sdk_secretsmanager::operation::get_secret_value::{
            GetSecretValueError, GetSecretValueOutput,
        };
        use aws_sdk_secretsmanager::types::error::ResourceNotFoundException;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};
        let version = |stage: &'static str, value: &'static str| {
            mock!(aws_sdk_secretsmanager::Client::get_secret_value)
                .match_requests(move |r| {
                    r.secret_id() == Some("arn:cursor") && r.version_stage() == Some(stage)
                })
                .then_output(move || GetSecretValueOutput::builder().secret_string(value).build())
        };
        let current = version("AWSCURRENT", "a-secret-cursor-key-of-32-bytes!");
        let previous = version("AWSPREVIOUS", "the-key-before-the-rotation-1234");
        let client = mock_client!(
            aws_sdk_secretsmanager,
            RuleMode::MatchAny,
            [&current, &previous]
        );
        let source = CursorKeySource::SecretArn("arn:cursor".into());
        let (key, before) = resolve_cursor_keys(&source, &client).await.expect("keys");
        assert_eq!(
            key.id(),
            CursorKey::new(b"a-secret-cursor-key-of-32-bytes!".to_vec())
                .expect("key")
                .id()
        );
        let before = before.expect("the previous version");
        assert_eq!(
            before.id(),
            CursorKey::new(b"the-key-before-the-rotation-1234".to_vec())
                .expect("key")
                .id()
        );
        assert_eq!((current.num_calls(), previous.num_calls()), (1, 1));

        // A secret never rotated has no AWSPREVIOUS version: no previous key.
        let only = version("AWSCURRENT", "a-secret-cursor-key-of-32-bytes!");
        let none = mock!(aws_sdk_secretsmanager::Client::get_secret_value)
            .match_requests(|r| r.version_stage() == Some("AWSPREVIOUS"))
            .then_error(|| {
                GetSecretValueError::ResourceNotFoundException(
                    ResourceNotFoundException::builder()
                        .message("no such version")
                        .build(),
                )
            });
        let client = mock_client!(aws_sdk_secretsmanager, RuleMode::MatchAny, [&only, &none]);
        let (_, before) = resolve_cursor_keys(&source, &client).await.expect("keys");
        assert!(before.is_none());
    }

    #[test]
    fn an_inline_previous_key_is_checked_and_kept() {
        let c = Config::from_lookup(lookup(&[
            BASE[0],
            BASE[1],
            BASE[2],
            ("CURSOR_PREVIOUS_KEY", "the-key-before-it-0123"),
        ]))
        .expect("valid");
        assert!(matches!(
            c.cursor_key,
            CursorKeySource::Inline {
                previous: Some(_),
                ..
            }
        ));
        let short = Config::from_lookup(lookup(&[
            BASE[0],
            BASE[1],
            BASE[2],
            ("CURSOR_PREVIOUS_KEY", "short"),
        ]));
        assert!(
            format!("{short:?}").contains("CURSOR_PREVIOUS_KEY"),
            "{short:?}"
        );
    }
}
