//! The sealer's configuration, read once from the environment.

use std::time::Duration;

use store::config::{ConfigError, Vars};

/// Default lateness horizon: an hour is sealed this long after it ends.
pub const DEFAULT_HORIZON_SECS: u64 = store::rollup::DEFAULT_LATENESS_HORIZON_SECS;

/// What one sealer needs: its tables and its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub table_name: String,
    pub shard_table_name: String,
    pub rollup_table: String,
    pub settings: Settings,
}

/// How the sealer seals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long after an hour ends it is sealed: readings written later are late, and
    /// sealed again by their marks.
    pub horizon: Duration,
    /// How long derived items are kept after their hour: the readings' own retention.
    pub retention: Duration,
    /// Most Queries (and conditional writes) in flight at once.
    pub concurrency: usize,
    /// Most readings of one device's hour a run holds in memory; a device with more is
    /// sealed alone, by its own keys in time order.
    pub max_buffered: usize,
    /// Most hours one run seals, so a sealer that fell behind catches up over runs.
    pub max_hours_per_run: u32,
    /// The ingest function's timeout (`INGEST_TIMEOUT_SECS`): a slab window is closed
    /// only once no ingest invocation can still write into it
    /// (`sharding::slab::SlabLayout::closes_at`). Unset, a table whose layout has slabs
    /// is not compacted, and its runs fail naming the variable.
    pub ingest_timeout: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            horizon: Duration::from_secs(DEFAULT_HORIZON_SECS),
            retention: Duration::from_secs(30 * 86_400),
            concurrency: 16,
            max_buffered: 2_000_000,
            max_hours_per_run: 6,
            ingest_timeout: None,
        }
    }
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any lookup (tests pass a map).
    ///
    /// | variable | default | meaning |
    /// |---|---|---|
    /// | `TABLE_NAME` | required | readings table |
    /// | `SHARD_TABLE_NAME` | required | shard metadata table |
    /// | `ROLLUP_TABLE` | required | the derived items' table (`store::rollup`) |
    /// | `LATENESS_HORIZON_SECS` | `600` | an hour is sealed this long after it ends |
    /// | `RETENTION_DAYS` | `30` | derived items expire this long after their hour, as readings do |
    /// | `SEAL_CONCURRENCY` | `16` | Queries and writes in flight at once |
    /// | `SEAL_MAX_BUFFERED` | `2000000` | readings of one device's hour held in memory at most (more: the device is sealed alone) |
    /// | `SEAL_MAX_HOURS_PER_RUN` | `6` | hours one run seals at most |
    /// | `INGEST_TIMEOUT_SECS` | none | the ingest function's timeout; required once the table's layout has slabs |
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Vars(get);
        let defaults = Settings::default();
        let secs = |name, default: Duration| {
            env.parse_or::<u64>(name, default.as_secs(), "a number of seconds")
                .map(Duration::from_secs)
        };
        let days = env.parse_or::<u64>("RETENTION_DAYS", 30, "a positive number of days")?;
        let settings = Settings {
            horizon: secs("LATENESS_HORIZON_SECS", defaults.horizon)?,
            retention: Duration::from_secs(days.saturating_mul(86_400)),
            concurrency: env
                .parse_or(
                    "SEAL_CONCURRENCY",
                    defaults.concurrency,
                    "a positive number",
                )?
                .max(1),
            max_buffered: env.parse_or(
                "SEAL_MAX_BUFFERED",
                defaults.max_buffered,
                "a number of readings",
            )?,
            max_hours_per_run: env
                .parse_or(
                    "SEAL_MAX_HOURS_PER_RUN",
                    defaults.max_hours_per_run,
                    "a number of hours",
                )?
                .max(1),
            ingest_timeout: env
                .optional("INGEST_TIMEOUT_SECS")
                .map(|_| secs("INGEST_TIMEOUT_SECS", Duration::ZERO))
                .transpose()?,
        };
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            shard_table_name: env.required("SHARD_TABLE_NAME")?,
            rollup_table: env.required("ROLLUP_TABLE")?,
            settings,
        })
    }
}
