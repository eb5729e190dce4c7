//! Configuration from the environment, the way the Lambdas get it, plus the
//! `.local/stack.env` file that `cargo xtask local up` writes.
//!
//! A variable set in the process environment wins over the file (the usual dotenv
//! rule), so one shell export overrides the recorded stack without editing it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

/// Where `cargo xtask local up` records the local stack.
pub const DEFAULT_ENV_FILE: &str = ".local/stack.env";

/// Region used when neither `AWS_REGION` nor `AWS_DEFAULT_REGION` is set.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where a command finds the stack it talks to: the flags every such command shares
/// (`publish`, `run-local`, `audit`, `fanout`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StackArgs {
    /// The AWS endpoint (default: AWS_ENDPOINT_URL from the environment or the env
    /// file; without either, AWS itself).
    #[arg(long)]
    pub endpoint_url: Option<String>,
    /// Env file to read (default: .local/stack.env when present): the variables the
    /// Lambdas read (TABLE_NAME, SHARD_TABLE_NAME, QUEUE_URL, SHARD_STRATEGY, ...).
    #[arg(long)]
    pub env_file: Option<PathBuf>,
}

impl StackArgs {
    /// The process environment over the env file.
    pub fn env(&self) -> anyhow::Result<EnvLookup> {
        EnvLookup::load(self.env_file.as_deref())
    }

    /// An SDK configuration for the stack's endpoint (`--endpoint-url` first).
    pub async fn sdk_config(&self, env: &EnvLookup) -> SdkConfig {
        env.sdk_config(self.endpoint_url.as_deref()).await
    }
}

/// Variables from the process environment (optionally) over those of an env file.
#[derive(Debug, Clone, Default)]
pub struct EnvLookup {
    file: BTreeMap<String, String>,
    process: bool,
    source: Option<PathBuf>,
}

impl EnvLookup {
    /// The process environment over `env_file`, or over `.local/stack.env` when that
    /// exists and no file is given. A given file must exist.
    pub fn load(env_file: Option<&Path>) -> anyhow::Result<Self> {
        let path = match env_file {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_ENV_FILE)).filter(|p| p.is_file()),
        };
        let file = match &path {
            Some(p) => read_env_file(p)?,
            None => BTreeMap::new(),
        };
        Ok(Self {
            file,
            process: true,
            source: path,
        })
    }

    /// Only these pairs, not the process environment (tests, embedding).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            file: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            process: false,
            source: None,
        }
    }

    /// Adds or replaces a variable below the process environment.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.file.insert(name.into(), value.into());
    }

    /// The env file read, if any.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// A variable's value; empty counts as unset.
    pub fn get(&self, name: &str) -> Option<String> {
        let from_process = if self.process {
            std::env::var(name).ok()
        } else {
            None
        };
        from_process
            .or_else(|| self.file.get(name).cloned())
            .filter(|v| !v.trim().is_empty())
    }

    /// A required variable, or an error naming it and where it was looked for.
    pub fn require(&self, name: &str) -> anyhow::Result<String> {
        self.get(name).with_context(|| match &self.source {
            Some(p) => format!(
                "{name} is not set (neither in the environment nor in {})",
                p.display()
            ),
            None => format!(
                "{name} is not set (no env file found; run `cargo xtask local up` or pass --env-file)"
            ),
        })
    }

    /// The SDK configuration: `endpoint` (a flag) or `AWS_ENDPOINT_URL`, the region, and
    /// static credentials when `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` are known (the
    /// local stand-in), else the default provider chain.
    pub async fn sdk_config(&self, endpoint: Option<&str>) -> SdkConfig {
        let region = self
            .get("AWS_REGION")
            .or_else(|| self.get("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| DEFAULT_REGION.to_owned());
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).region(Region::new(region));
        if let Some(url) = endpoint
            .map(str::to_owned)
            .or_else(|| self.get("AWS_ENDPOINT_URL"))
        {
            loader = loader.endpoint_url(url);
        }
        if let (Some(id), Some(secret)) = (
            self.get("AWS_ACCESS_KEY_ID"),
            self.get("AWS_SECRET_ACCESS_KEY"),
        ) {
            loader = loader.credentials_provider(Credentials::new(
                id,
                secret,
                self.get("AWS_SESSION_TOKEN"),
                None,
                "shardline-env",
            ));
        }
        loader.load().await
    }
}

/// Reads an env file in dotenv syntax (`KEY=VALUE`, optionally quoted; blank lines and
/// `#` comments skipped), as `cargo xtask local up` writes it. A line that does not
/// parse is an error naming the file.
pub fn read_env_file(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    dotenvy::from_path_iter(path)
        .and_then(Iterator::collect)
        .with_context(|| format!("cannot read env file {}", path.display()))
}
