//! Proxy configuration: mode, capacity limits, per-table settings, faults.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::capacity::Limits;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ProxyError;

/// Where accepted requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Forward to a DynamoDB-compatible endpoint (moto, dynalite), e.g. `http://127.0.0.1:5000`.
    Forward {
        /// Base URL of the upstream endpoint (plain HTTP on loopback).
        upstream: http::Uri,
    },
    /// Answer `BatchWriteItem` and `PutItem` in process, keeping only the written keys.
    Sink,
}

/// Fault injection settings. Rates are probabilities in [0, 1].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Fixed latency per data-plane call, milliseconds, counted from the request's
    /// arrival: the proxy's own reading and parsing of the request fall within it (an
    /// emulator's work is not the service's), an upstream's answer comes on top.
    pub latency_ms: u64,
    /// Uniform random extra latency in [0, jitter_ms], milliseconds.
    pub jitter_ms: u64,
    /// Fraction of `BatchWriteItem` items returned unprocessed whatever the budget.
    pub unprocessed_rate: f64,
    /// Fraction of calls answered with HTTP 500 `InternalServerError`.
    pub error_rate: f64,
    /// Fraction of calls throttled as a whole (key-range reason).
    pub throttle_rate: f64,
    /// Fraction of calls whose connection is closed without a reply.
    pub drop_rate: f64,
}

/// Settings for one table, from the `--config` TOML file. Absent fields take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// Partition key attribute name (skips the DescribeTable lookup).
    pub pk_attr: Option<String>,
    /// Sort key attribute name (sink mode records it in the key set).
    pub sk_attr: Option<String>,
    /// WCU/s per partition key value.
    pub key_wcu: Option<f64>,
    /// RCU/s per partition key value.
    pub key_rcu: Option<f64>,
    /// Seconds of retained burst capacity.
    pub burst_seconds: Option<f64>,
    /// Table-level WCU/s cap.
    pub table_wcu: Option<f64>,
    /// Table-level RCU/s cap.
    pub table_rcu: Option<f64>,
}

impl TableConfig {
    /// These settings over `defaults`.
    pub fn limits(&self, defaults: Limits) -> Limits {
        Limits {
            key_wcu: self.key_wcu.unwrap_or(defaults.key_wcu),
            key_rcu: self.key_rcu.unwrap_or(defaults.key_rcu),
            burst_seconds: self.burst_seconds.unwrap_or(defaults.burst_seconds),
            table_wcu: self.table_wcu.or(defaults.table_wcu),
            table_rcu: self.table_rcu.or(defaults.table_rcu),
        }
    }
}

/// The `--config` file: `[tables.NAME]` sections of [`TableConfig`].
///
/// ```toml
/// [tables.readings]
/// pk_attr = "PK"
/// key_wcu = 1000
/// table_wcu = 40000
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Per-table settings by table name.
    #[serde(default)]
    pub tables: HashMap<String, TableConfig>,
}

impl ConfigFile {
    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, ProxyError> {
        toml::from_str(text).map_err(|e| ProxyError::Config(e.to_string()))
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<Self, ProxyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ProxyError::Config(format!("{}: {e}", path.display())))?;
        Self::parse(&text)
    }
}

/// Everything [`crate::Proxy::start`] needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Address to bind; port 0 picks a free port (see [`crate::ProxyHandle::addr`]).
    pub listen: SocketAddr,
    /// Forward or sink.
    pub mode: Mode,
    /// Default limits for every table.
    pub limits: Limits,
    /// Default partition key attribute when a table's key schema is unknown.
    pub pk_attr: String,
    /// Default sort key attribute recorded in the sink key set (absent attribute = no SK).
    pub sk_attr: String,
    /// Per-table settings.
    pub tables: HashMap<String, TableConfig>,
    /// Faults to inject.
    pub faults: Faults,
    /// Seed for fault decisions; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// Where to write the per-second heat CSV, if anywhere.
    pub heat_csv: Option<PathBuf>,
    /// Region and account used in throttling ARNs.
    pub region: String,
    /// Account id used in throttling ARNs.
    pub account: String,
    /// Time source (tests pass a [`crate::clock::ManualClock`]).
    pub clock: Arc<dyn Clock>,
}

impl ProxyConfig {
    /// Defaults: loopback on a free port, DynamoDB's limits, key `PK`/`SK`, no faults.
    pub fn new(mode: Mode) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            mode,
            limits: Limits::default(),
            pk_attr: "PK".to_owned(),
            sk_attr: "SK".to_owned(),
            tables: HashMap::new(),
            faults: Faults::default(),
            seed: None,
            heat_csv: None,
            region: "us-east-1".to_owned(),
            account: "000000000000".to_owned(),
            clock: Arc::new(MonotonicClock::new()),
        }
    }

    /// Forward mode to `upstream` (e.g. `http://127.0.0.1:5000`).
    pub fn forward(upstream: &str) -> Result<Self, ProxyError> {
        let uri: http::Uri = upstream
            .parse()
            .map_err(|e| ProxyError::Config(format!("upstream URL {upstream:?}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(ProxyError::Config(format!(
                "upstream URL {upstream:?} must be http://HOST:PORT"
            )));
        }
        Ok(Self::new(Mode::Forward { upstream: uri }))
    }

    /// Sink mode.
    pub fn sink() -> Self {
        Self::new(Mode::Sink)
    }

    /// Checks rates and limits.
    pub fn validate(&self) -> Result<(), ProxyError> {
        let f = &self.faults;
        for (name, p) in [
            ("unprocessed-rate", f.unprocessed_rate),
            ("error-rate", f.error_rate),
            ("throttle-rate", f.throttle_rate),
            ("drop-rate", f.drop_rate),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(ProxyError::Config(format!("{name} {p} is not in [0, 1]")));
            }
        }
        let mut all = vec![("defaults".to_owned(), self.limits)];
        all.extend(
            self.tables
                .iter()
                .map(|(t, c)| (t.clone(), c.limits(self.limits))),
        );
        for (table, l) in all {
            let caps = [Some(l.key_wcu), Some(l.key_rcu), l.table_wcu, l.table_rcu];
            if caps
                .into_iter()
                .flatten()
                .any(|r| !(r > 0.0 && r.is_finite()))
                || !(l.burst_seconds >= 0.0 && l.burst_seconds.is_finite())
            {
                return Err(ProxyError::Config(format!(
                    "limits for {table} must be positive and finite: {l:?}"
                )));
            }
        }
        Ok(())
    }

    /// Partition key attribute configured for `table`, if any.
    pub fn configured_pk_attr(&self, table: &str) -> Option<&str> {
        self.tables.get(table).and_then(|t| t.pk_attr.as_deref())
    }

    /// Sort key attribute for `table`.
    pub fn sk_attr(&self, table: &str) -> &str {
        self.tables
            .get(table)
            .and_then(|t| t.sk_attr.as_deref())
            .unwrap_or(&self.sk_attr)
    }

    /// Table ARN used as the throttling resource.
    pub fn table_arn(&self, table: &str) -> String {
        format!(
            "arn:aws:dynamodb:{}:{}:table/{table}",
            self.region, self.account
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_overrides_only_what_it_names() {
        let file = ConfigFile::parse(
            "[tables.readings]\npk_attr = \"pk\"\nkey_wcu = 200\ntable_wcu = 500\n",
        )
        .expect("valid toml");
        let t = &file.tables["readings"];
        assert_eq!(t.pk_attr.as_deref(), Some("pk"));
        let l = t.limits(Limits::default());
        assert_eq!(l.key_wcu, 200.0);
        assert_eq!(l.key_rcu, 3000.0);
        assert_eq!(l.table_wcu, Some(500.0));
        assert!(ConfigFile::parse("[tables.x]\nbogus = 1\n").is_err());
    }

    #[test]
    fn validation_rejects_bad_rates_and_limits() {
        let mut c = ProxyConfig::sink();
        assert!(c.validate().is_ok());
        c.faults.error_rate = 1.5;
        assert!(c.validate().is_err());
        c.faults.error_rate = 0.1;
        c.tables.insert(
            "t".into(),
            TableConfig {
                key_wcu: Some(0.0),
                ..TableConfig::default()
            },
        );
        assert!(c.validate().is_err());
        assert!(ProxyConfig::forward("https://x:1").is_err());
        assert!(ProxyConfig::forward("http://127.0.0.1:5000").is_ok());
    }
}
