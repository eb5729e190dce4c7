//! run-local as the soak's child process: its env file, its start (until its query
//! port answers), its SIGKILLs at seeded moments and restarts, and its graceful stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tokio::process::{Child, Command};

use super::{Report, SoakConfig};

/// How to start run-local as a child.
#[derive(Debug, Clone)]
pub(super) struct ChildSpec {
    bin: PathBuf,
    env_file: PathBuf,
    pub(super) query: SocketAddr,
    function_timeout: f64,
    max_concurrency: usize,
    log_dir: PathBuf,
    prefix: String,
    /// The received log every start of run-local appends to.
    pub(super) received_log: PathBuf,
}

impl ChildSpec {
    /// run-local's spec, its files under `dir` named after `prefix`: its env file
    /// written (the stack through `proxy_url`), its query API on a free loopback port.
    pub(super) fn prepare(
        cfg: &SoakConfig,
        stack: &stand_in::Stack,
        proxy_url: &str,
        dir: &Path,
        prefix: &str,
    ) -> anyhow::Result<Self> {
        let env_file = dir.join(format!("{prefix}.env"));
        let query_port = stand_in::free_loopback_port()?;
        write_child_env(stack, proxy_url, cfg.seed, cfg.batch > 1, &env_file)?;
        Ok(Self {
            bin: cfg.shardline_bin.clone(),
            env_file,
            query: SocketAddr::from(([127, 0, 0, 1], query_port)),
            function_timeout: cfg.function_timeout_secs,
            max_concurrency: cfg.max_concurrency,
            log_dir: dir.to_path_buf(),
            prefix: prefix.to_owned(),
            received_log: dir.join(format!("{prefix}.received.txt")),
        })
    }

    /// Removes the env file, the received log and the logs of the `starts` runs.
    pub(super) fn remove_files(&self, starts: u32) {
        let _ = std::fs::remove_file(&self.env_file);
        let _ = std::fs::remove_file(&self.received_log);
        for n in 0..starts {
            let _ = std::fs::remove_file(self.log(n));
            let _ = std::fs::remove_file(self.stdout(n));
        }
    }

    fn log(&self, n: u32) -> PathBuf {
        self.log_dir
            .join(format!("{}.run-local-{n}.log", self.prefix))
    }

    fn stdout(&self, n: u32) -> PathBuf {
        self.log_dir
            .join(format!("{}.run-local-{n}.out", self.prefix))
    }

    /// Starts run-local number `n` and waits until its query port answers.
    pub(super) async fn start(&self, n: u32) -> anyhow::Result<Child> {
        let log = std::fs::File::create(self.log(n))?;
        let out = std::fs::File::create(self.stdout(n))?;
        let mut child = Command::new(&self.bin)
            .arg("run-local")
            .arg("--env-file")
            .arg(&self.env_file)
            .args(["--batch-size", "10", "--batching-window", "0.5"])
            .args(["--max-concurrency", &self.max_concurrency.to_string()])
            .args(["--function-timeout", &self.function_timeout.to_string()])
            .args(["--query-listen", &self.query.to_string(), "--json"])
            .arg("--received-log")
            .arg(&self.received_log)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "run-local exited with {status} at start: {}",
                    std::fs::read_to_string(self.log(n)).unwrap_or_default()
                );
            }
            if tokio::net::TcpStream::connect(self.query).await.is_ok() {
                return Ok(child);
            }
            if Instant::now() > deadline {
                bail!("run-local did not listen on {} within 60 s", self.query);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, wait, and its JSON stats (None when it printed none).
    pub(super) async fn stop(&self, mut child: Child, n: u32) -> Option<serde_json::Value> {
        if let Some(pid) = child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        let _ = child.start_kill();
        let _ = child.wait().await;
        // stdout: the address line, then the stats as one JSON object.
        let text = std::fs::read_to_string(self.stdout(n)).ok()?;
        let (_, json) = text.split_once('\n')?;
        serde_json::from_str(json).ok()
    }
}

/// SIGKILLs `child` `cfg.kills` times at seeded moments, each after the restarted
/// runner had time to take batches in hand; returns the run-local started last.
pub(super) async fn kill_and_restart(
    cfg: &SoakConfig,
    spec: &ChildSpec,
    mut child: Child,
    report: &mut Report,
) -> anyhow::Result<Child> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_50a4);
    for k in 0..cfg.kills {
        let wait = Duration::from_millis(rng.random_range(2_000..6_000));
        tokio::time::sleep(wait).await;
        say!(
            cfg.verbose,
            "SIGKILL {} of run-local (pid {:?})",
            k + 1,
            child.id()
        );
        child.start_kill().context("killing run-local")?;
        let _ = child.wait().await;
        report.kills += 1;
        child = spec.start(report.starts).await?;
        report.starts += 1;
    }
    Ok(child)
}

/// Writes the run-local child's env file: DynamoDB through the proxy, SQS on moto, a
/// fixed cursor key, and the fan-out's and redelivery's time scales shrunk to the
/// soak's minutes.
fn write_child_env(
    stack: &stand_in::Stack,
    proxy_url: &str,
    seed: u64,
    blocks: bool,
    env_file: &Path,
) -> anyhow::Result<()> {
    let cursor_key = hex::encode(ChaCha8Rng::seed_from_u64(seed).random::<[u8; 32]>());
    stack.write_env_with(
        env_file,
        &[
            ("AWS_ENDPOINT_URL".to_owned(), proxy_url.to_owned()),
            // The stack's endpoint is moto's, which holds the queues.
            ("AWS_ENDPOINT_URL_SQS".to_owned(), stack.endpoint.clone()),
            // A soak of one reading a message writes no block: its table keeps one item
            // a reading, and the block-mode soak (`--batch` above 1) packs blocks, so the
            // two soaks cover both layouts.
            (
                "BLOCKS".to_owned(),
                if blocks { "on" } else { "off" }.to_owned(),
            ),
            // Fixed, so cursors stay valid across restarts of run-local.
            ("CURSOR_KEY".to_owned(), cursor_key),
            // The fan-out's time scale shrunk to the soak's minutes, as in the demo:
            // a hot device may double its shards every few seconds rather than every
            // ten minutes (the cooldown must cover the propagation margin, so the
            // caches and the future skew shrink with it).
            ("MAX_FUTURE_SECS".to_owned(), "2".to_owned()),
            ("SHARD_CACHE_TTL_SECS".to_owned(), "2".to_owned()),
            ("PROPAGATION_SLACK_SECS".to_owned(), "1".to_owned()),
            ("FANOUT_COOLDOWN_SECS".to_owned(), "5".to_owned()),
            ("FANOUT_JITTER_SECS".to_owned(), "1".to_owned()),
            // Redelivery waits on the same scale: 5, 10, 20, 40 s at most before
            // receives 2 to 5, so a throttled message lives about a minute before the
            // redrive could take it (30 s, 60 s, ... in production).
            ("REDELIVERY_BASE_SECS".to_owned(), "5".to_owned()),
            ("REDELIVERY_CAP_SECS".to_owned(), "40".to_owned()),
        ],
    )
}
