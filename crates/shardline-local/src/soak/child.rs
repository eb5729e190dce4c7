//! run-local as the soak's child process: its env file, its start (until its query
//! port answers), its SIGKILLs at seeded moments spread over the publishing and its
//! restarts, and its graceful stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tokio::process::{Child, Command};

use super::traffic::Publisher;
use super::{KillMoment, Report, SoakConfig, publishing_period};

/// The least time from a start of run-local to its SIGKILL, and between two kill
/// moments: the runner receives batches (its window is 0.5 s) and takes them in hand,
/// so a kill interrupts writes and deletes rather than a start.
const MIN_KILL_GAP: Duration = Duration::from_secs(2);

/// How often a kill waiting for its moment looks at the publisher's progress.
const PROGRESS_POLL: Duration = Duration::from_millis(100);

/// Seconds between two runs of the sealer in slab mode.
const SLAB_SEAL_EVERY_SECS: f64 = 5.0;

/// How to start run-local as a child.
#[derive(Debug, Clone)]
pub(super) struct ChildSpec {
    bin: PathBuf,
    env_file: PathBuf,
    pub(super) query: SocketAddr,
    function_timeout: f64,
    max_concurrency: usize,
    /// Seconds between two runs of the sealer (its schedule), as run-local's
    /// `--seal-every`.
    seal_every: f64,
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
        write_child_env(stack, proxy_url, cfg, &env_file)?;
        Ok(Self {
            bin: cfg.shardline_bin.clone(),
            env_file,
            query: SocketAddr::from(([127, 0, 0, 1], query_port)),
            function_timeout: cfg.function_timeout_secs,
            max_concurrency: cfg.max_concurrency,
            // In slab mode the sealer runs every few seconds, so the windows closed
            // during the soak are compacted within it; otherwise the template's minute.
            seal_every: if cfg.slabs {
                SLAB_SEAL_EVERY_SECS
            } else {
                crate::run_local::DEFAULT_SEAL_EVERY_SECS
            },
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
            .args(["--seal-every", &self.seal_every.to_string()])
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

/// SIGKILLs `child` `cfg.kills` times, each when the publisher has come to its
/// [`kill_moments`] moment of the publishing schedule (or finished) and at least
/// [`MIN_KILL_GAP`] after the runner it kills started, and restarts it; returns the
/// run-local started last. The moments follow the publisher's progress, not the clock:
/// held back by moto's SQS, it can take several times its schedule.
pub(super) async fn kill_and_restart(
    cfg: &SoakConfig,
    spec: &ChildSpec,
    mut child: Child,
    publisher: &Publisher,
    report: &mut Report,
) -> anyhow::Result<Child> {
    let period = publishing_period(cfg);
    // The first run-local started just before the publisher.
    let mut started = Instant::now();
    for (k, moment) in kill_moments(cfg.seed, cfg.kills, period, MIN_KILL_GAP)
        .into_iter()
        .enumerate()
    {
        while !publisher.has_reached(moment) {
            tokio::time::sleep(PROGRESS_POLL).await;
        }
        tokio::time::sleep(MIN_KILL_GAP.saturating_sub(started.elapsed())).await;
        let kill = KillMoment {
            secs: publisher.elapsed().as_secs_f64(),
            sent: publisher.sent(),
        };
        say!(
            cfg.verbose,
            "SIGKILL {} of run-local (pid {:?}): {:.1} s into the publisher's {:.1} s schedule, {} messages sent",
            k + 1,
            child.id(),
            moment.as_secs_f64(),
            period.as_secs_f64(),
            kill.sent
        );
        child.start_kill().context("killing run-local")?;
        let _ = child.wait().await;
        report.kills += 1;
        report.kill_moments.push(kill);
        child = spec.start(report.starts).await?;
        started = Instant::now();
        report.starts += 1;
    }
    Ok(child)
}

/// The moments of `kills` SIGKILLs on a publishing schedule of `period`, drawn from
/// `seed`, in order. The period after `min_gap` is cut into `kills` equal parts and
/// each part holds one moment, so the kills cover the whole publishing, not only its
/// start. Within its part a moment is drawn so that it comes at least `min_gap` after
/// the one before (the first at least `min_gap` after the start), and the last at
/// least `min_gap` before the period ends: each restarted runner has time to take
/// batches in hand, the last one while the publisher still sends. A period too short
/// for that (under `(kills + 1) * min_gap`) spaces the moments `min_gap` apart from
/// `min_gap` on, the later ones past its end.
pub(super) fn kill_moments(
    seed: u64,
    kills: u32,
    period: Duration,
    min_gap: Duration,
) -> Vec<Duration> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_50a4);
    let part = (period.saturating_sub(min_gap) / kills.max(1)).max(min_gap);
    (0..kills)
        .map(|k| min_gap + part * k + (part - min_gap).mul_f64(rng.random::<f64>()))
        .collect()
}

/// Writes the run-local child's env file: DynamoDB through the proxy, SQS on moto, a
/// fixed cursor key, the fan-out's and redelivery's time scales shrunk to the soak's
/// minutes, and in slab mode `SLABS=on` with the ingest's timeout for the sealer.
fn write_child_env(
    stack: &stand_in::Stack,
    proxy_url: &str,
    cfg: &SoakConfig,
    env_file: &Path,
) -> anyhow::Result<()> {
    let cursor_key = hex::encode(ChaCha8Rng::seed_from_u64(cfg.seed).random::<[u8; 32]>());
    let blocks = cfg.batch > 1;
    let mut vars = vec![
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
    ];
    if cfg.slabs {
        vars.extend([
            // The first writer stores the layout of its environment: the table's
            // layout writes slabs from the beginning.
            ("SLABS".to_owned(), "on".to_owned()),
            // The sealer closes a slab window only after the ingest's last invocation
            // that could write into it ended: the child's function timeout.
            (
                "INGEST_TIMEOUT_SECS".to_owned(),
                cfg.function_timeout_secs.ceil().to_string(),
            ),
        ]);
    }
    stack.write_env_with(env_file, &vars)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;
    use crate::soak::SoakArgs;

    /// `shardline-local soak`'s flags, to read their defaults.
    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        soak: SoakArgs,
    }

    /// The soak a command without flags runs, with `seed`.
    fn default_config(seed: u64) -> SoakConfig {
        let args = Flags::parse_from(["soak"]).soak;
        let mut cfg = SoakConfig::new(
            PathBuf::new(),
            PathBuf::new(),
            args.messages,
            args.kills,
            seed,
        );
        cfg.batch = usize::from(args.batch);
        cfg
    }

    /// The moments are in order, the first `min_gap` after the start at the earliest,
    /// each `min_gap` after the one before, the last `min_gap` before the period ends.
    fn assert_within_and_apart(moments: &[Duration], period: Duration, min_gap: Duration) {
        let first = moments.first().expect("kills");
        let last = moments.last().expect("kills");
        assert!(*first >= min_gap, "{moments:?}");
        assert!(*last <= period - min_gap, "{moments:?} over {period:?}");
        for pair in moments.windows(2) {
            assert!(pair[1] >= pair[0] + min_gap, "{moments:?}");
        }
    }

    #[test]
    fn the_default_soaks_kills_cover_its_whole_publishing() {
        for seed in 0..500 {
            let cfg = default_config(seed);
            let period = publishing_period(&cfg);
            let moments = kill_moments(seed, cfg.kills, period, MIN_KILL_GAP);
            assert_eq!(moments.len(), 3);
            assert_within_and_apart(&moments, period, MIN_KILL_GAP);
            assert!(moments[0] < period / 3, "{moments:?} over {period:?}");
            assert!(moments[2] >= period * 2 / 3, "{moments:?} over {period:?}");
        }
    }

    #[test]
    fn the_block_mode_soak_of_the_test_suite_kills_once_in_each_half() {
        for seed in 0..500 {
            let mut cfg = SoakConfig::new(PathBuf::new(), PathBuf::new(), 200, 2, seed);
            cfg.batch = 10;
            let period = publishing_period(&cfg);
            let moments = kill_moments(seed, cfg.kills, period, MIN_KILL_GAP);
            assert_eq!(moments.len(), 2);
            assert_within_and_apart(&moments, period, MIN_KILL_GAP);
            assert!(moments[0] < period / 2, "{moments:?} over {period:?}");
            assert!(moments[1] >= period / 2, "{moments:?} over {period:?}");
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_moments() {
        let period = Duration::from_secs(60);
        let moments = kill_moments(7, 4, period, MIN_KILL_GAP);
        assert_eq!(moments, kill_moments(7, 4, period, MIN_KILL_GAP));
        assert_ne!(moments, kill_moments(8, 4, period, MIN_KILL_GAP));
    }

    #[test]
    fn a_period_too_short_for_the_kills_spaces_them_by_the_gap() {
        let secs = Duration::from_secs;
        assert_eq!(
            kill_moments(1, 3, secs(3), secs(2)),
            [secs(2), secs(4), secs(6)]
        );
        assert!(kill_moments(1, 0, secs(30), secs(2)).is_empty());
    }
}
