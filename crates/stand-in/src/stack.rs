//! The local stack as the tools see it: where it listens, its resources' names and the
//! `.local/stack.env` file. No AWS SDK here, so `xtask` can read a stack without
//! building one; creating it is the `provision` feature's work.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Region of every local resource.
pub const LOCAL_REGION: &str = "us-east-1";
/// Static credentials the local servers accept (they check the format, not the value).
pub const DUMMY_ACCESS_KEY_ID: &str = "testing";
pub const DUMMY_SECRET_ACCESS_KEY: &str = "testing";

/// Which server the resources are created on; dynalite implements DynamoDB only and
/// lacks UpdateTimeToLive, UpdateContinuousBackups and SSE settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Moto,
    Dynalite,
}

/// The DynamoDB tables created from the template, by logical id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    pub endpoint: String,
    pub region: String,
    /// Logical id -> local table name.
    pub names: BTreeMap<String, String>,
}

impl Tables {
    /// The local name of a table by logical id.
    pub fn name(&self, logical_id: &str) -> Result<&str> {
        self.names
            .get(logical_id)
            .map(String::as_str)
            .with_context(|| format!("template.yaml declares no table {logical_id}"))
    }
}

/// The local stack: where it listens and the names of its resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub endpoint: String,
    pub region: String,
    /// `ReadingsTable`.
    pub table_name: String,
    /// `ShardsTable`.
    pub shard_table_name: String,
    /// `RollupTable`: the sealer's derived items.
    pub rollup_table_name: String,
    /// `IngestQueue`.
    pub queue_url: String,
    /// `IngestDLQ`.
    pub dlq_url: String,
    /// The readings table's time index (its local secondary index sorted by `ts_ms`),
    /// when the template declares one (`TimeIndex`).
    pub readings_time_index: Option<String>,
    /// Every table, logical id -> name.
    pub tables: BTreeMap<String, String>,
    /// Every queue, logical id -> URL.
    pub queues: BTreeMap<String, String>,
}

impl Stack {
    /// The `.local/stack.env` variables, in a stable order.
    pub fn env_pairs(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_REGION", self.region.as_str()),
            ("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY),
            ("TABLE_NAME", self.table_name.as_str()),
            ("SHARD_TABLE_NAME", self.shard_table_name.as_str()),
            ("ROLLUP_TABLE", self.rollup_table_name.as_str()),
            ("QUEUE_URL", self.queue_url.as_str()),
            ("DLQ_URL", self.dlq_url.as_str()),
            (
                "READINGS_TIME_INDEX",
                self.readings_time_index.as_deref().unwrap_or(""),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// Writes the env file with the stack's variables.
    pub fn write_env(&self, path: &Path) -> Result<()> {
        self.write_env_with(path, &[])
    }

    /// Writes the env file with the stack's variables followed by `extra` pairs
    /// (e.g. `MOTO_URL`, `QUERY_URL`); an extra key replaces a stack key of that name.
    pub fn write_env_with(&self, path: &Path, extra: &[(String, String)]) -> Result<()> {
        let mut pairs = self.env_pairs();
        for (key, value) in extra {
            match pairs.iter_mut().find(|(k, _)| k == key) {
                Some(pair) => pair.1.clone_from(value),
                None => pairs.push((key.clone(), value.clone())),
            }
        }
        write_env_file(path, &pairs)
    }
}

/// Writes `KEY='VALUE'` lines in dotenv syntax (keys `[A-Z0-9_]`; values single-quoted,
/// so that no `$`, `#` or space in them is read as anything but itself, and without
/// newlines or single quotes).
pub fn write_env_file(path: &Path, pairs: &[(String, String)]) -> Result<()> {
    let mut text = String::new();
    for (key, value) in pairs {
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            bail!("invalid env key {key:?}");
        }
        if value.contains(['\n', '\r', '\'']) {
            bail!("env value for {key} contains a newline or a single quote");
        }
        let _ = writeln!(text, "{key}='{value}'");
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Reads an env file in dotenv syntax, as [`Stack::write_env`] writes it (blank lines and
/// `#` comments skipped, values quoted or not). A line that does not parse is an error
/// naming the file.
pub fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>> {
    dotenvy::from_path_iter(path)
        .and_then(Iterator::collect)
        .with_context(|| format!("cannot read env file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack() -> Stack {
        Stack {
            endpoint: "http://127.0.0.1:1".into(),
            region: LOCAL_REGION.into(),
            table_name: "p-ReadingsTable".into(),
            shard_table_name: "p-ShardsTable".into(),
            rollup_table_name: "p-RollupTable".into(),
            queue_url: "http://127.0.0.1:1/123/p-IngestQueue".into(),
            dlq_url: "http://127.0.0.1:1/123/p-IngestDLQ".into(),
            readings_time_index: Some("by-time".into()),
            tables: BTreeMap::new(),
            queues: BTreeMap::new(),
        }
    }

    #[test]
    fn env_file_has_every_key_and_extra_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stack.env");
        let extra = [("MOTO_URL".to_owned(), "http://127.0.0.1:1".to_owned())];
        stack().write_env_with(&path, &extra).unwrap();
        let env = read_env_file(&path).unwrap();
        let keys: Vec<_> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "AWS_ACCESS_KEY_ID",
                "AWS_ENDPOINT_URL",
                "AWS_REGION",
                "AWS_SECRET_ACCESS_KEY",
                "DLQ_URL",
                "MOTO_URL",
                "QUEUE_URL",
                "READINGS_TIME_INDEX",
                "ROLLUP_TABLE",
                "SHARD_TABLE_NAME",
                "TABLE_NAME"
            ]
        );
        assert_eq!(env["TABLE_NAME"], "p-ReadingsTable");
        assert_eq!(env["ROLLUP_TABLE"], "p-RollupTable");
        assert_eq!(env["READINGS_TIME_INDEX"], "by-time");
        assert_eq!(env["QUEUE_URL"], "http://127.0.0.1:1/123/p-IngestQueue");
        stack()
            .write_env_with(&path, &[("NOTE".into(), "a $HOME # not a comment".into())])
            .unwrap();
        assert_eq!(
            read_env_file(&path).unwrap()["NOTE"],
            "a $HOME # not a comment"
        );
        assert!(
            stack()
                .write_env_with(&path, &[("bad key".into(), "x".into())])
                .is_err()
        );
    }
}
