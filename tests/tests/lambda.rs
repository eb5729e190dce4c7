//! The built `ingest` binary under `cargo lambda watch` against a private moto: the
//! shared events go in with `cargo lambda invoke --data-file`, then the table and the
//! DLQ are checked. cargo-lambda comes from the project's deploy venv
//! (`infra/deploy/requirements.txt`).

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use stand_in::{TestStack, Venv};
use store::ReadingItem;
use tokio::time::Instant;

use crate::harness;

/// How long the first invocation may take: `cargo lambda watch` compiles the binary.
const FIRST_INVOKE: Duration = Duration::from_secs(600);
/// How long any later invocation may take.
const INVOKE: Duration = Duration::from_secs(60);
/// How long the emulator may take to listen.
const LISTEN: Duration = Duration::from_secs(60);

/// The target directory of this test binary, so `cargo lambda watch` reuses what
/// `cargo test` built instead of compiling everything again elsewhere.
fn target_dir() -> Result<PathBuf> {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .context("CARGO_TARGET_TMPDIR has no parent")
}

/// Variables cargo sets for the test process itself, not for the cargo it may run.
fn leaks_from_cargo_test(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || matches!(
            name,
            "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR" | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// `cargo lambda watch` in its own process group, killed with its children (cargo, the
/// function) on drop.
struct Watch {
    child: Child,
    log: PathBuf,
}

impl Watch {
    fn start(venv: &Venv, root: &Path, port: u16, env_file: &Path, log: PathBuf) -> Result<Self> {
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(venv.bin("cargo-lambda"));
        // Cargo gives this test process the package variables of `e2e`; inherited by the
        // nested cargo they change the fingerprints of build scripts that watch them
        // (ring's watches CARGO_PKG_NAME, CARGO_MANIFEST_DIR, ...), and the SDK's TLS
        // stack would be rebuilt here and again by the next `cargo test`.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if leaks_from_cargo_test(&name) {
                command.env_remove(name.as_ref());
            }
        }
        let child = command
            .args(["lambda", "watch", "--package", "ingest", "--bin", "ingest"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string())
            // The binary is fixed for the test: no reload on file changes.
            .arg("--ignore-changes")
            // Through the environment: cargo-lambda 1.9 also hands `--target-dir` to
            // `cargo metadata`, which refuses it.
            .env("CARGO_TARGET_DIR", target_dir()?)
            .arg("--env-file")
            .arg(env_file)
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .context("starting cargo lambda watch")?;
        Ok(Self { child, log })
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the emulator accepts connections on `port`.
    async fn wait_listening(&mut self, port: u16) -> Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + LISTEN;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "cargo lambda watch exited with {status}:\n{}",
                    self.log_text()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "cargo lambda watch did not listen on {addr} within {LISTEN:?}:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The whole group: cargo-lambda, the cargo it runs and the function binary.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo lambda invoke --data-file`, bounded by `limit`; the function's JSON answer.
async fn invoke(
    venv: &Venv,
    port: u16,
    data_file: &Path,
    limit: Duration,
) -> Result<serde_json::Value> {
    let mut command = tokio::process::Command::new(venv.bin("cargo-lambda"));
    command
        .args(["lambda", "invoke", "--invoke-address", "127.0.0.1"])
        .arg("--invoke-port")
        .arg(port.to_string())
        .arg("--data-file")
        .arg(data_file)
        .args(["--output-format", "json", "ingest"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .with_context(|| format!("invoking with {} took over {limit:?}", data_file.display()))?
        .context("running cargo lambda invoke")?;
    ensure!(
        output.status.success(),
        "cargo lambda invoke {} failed with {}: {}{}",
        data_file.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "answer to {}: {}",
            data_file.display(),
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_lambda_watch_ingests_the_events() -> Result<()> {
    let root = stand_in::repo_root()?;
    let venv = stand_in::ensure_deploy_venv(&root)?;
    let stack = TestStack::start().await?;
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "lambda-watch-{}-{}",
        std::process::id(),
        stack.stack.table_name
    ));
    std::fs::create_dir_all(&scratch)?;
    let env_file = scratch.join("ingest.env");
    stack.stack.write_env_with(
        &env_file,
        &[
            // The events carry fixed 2026-06-22 timestamps; the clock here is the wall clock.
            ("RETENTION_DAYS".to_owned(), "36500".to_owned()),
            ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
        ],
    )?;
    let port = stand_in::free_loopback_port()?;
    let mut watch = Watch::start(&venv, &root, port, &env_file, scratch.join("watch.log"))?;
    watch.wait_listening(port).await?;

    let events = root.join("events");
    let mut limit = FIRST_INVOKE;
    for name in [
        "sqs-single.json",
        "sqs-batch.json",
        "sqs-hot-burst.json",
        "sqs-mixed-bad.json",
    ] {
        let answer = invoke(&venv, port, &events.join(name), limit).await?;
        limit = INVOKE;
        assert_eq!(
            answer,
            serde_json::json!({ "batchItemFailures": [] }),
            "{name}; log:\n{}",
            watch.log_text()
        );
    }
    let log = watch.log_text();
    drop(watch);

    // Every valid reading stored exactly once (1 + 11 + 100 + 9 in the four events).
    let dynamo = harness::dynamodb(&stack.endpoint()).await;
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = dynamo
            .scan()
            .table_name(&stack.stack.table_name)
            .set_exclusive_start_key(start)
            .send()
            .await?;
        for item in page.items() {
            items.push(ReadingItem::from_item(item.clone())?);
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    let distinct: BTreeSet<(&str, &str)> = items
        .iter()
        .map(|i| (i.device_id.as_str(), i.event_id.as_str()))
        .collect();
    assert_eq!(items.len(), 121, "log:\n{log}");
    assert_eq!(distinct.len(), items.len());

    // The one malformed body of sqs-mixed-bad is in the DLQ with its reason.
    let sqs = harness::sqs(&stack.endpoint()).await;
    let received = sqs
        .receive_message()
        .queue_url(&stack.stack.dlq_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await?;
    let messages = received.messages();
    assert_eq!(messages.len(), 1, "log:\n{log}");
    let attributes = messages[0].message_attributes().context("attributes")?;
    let value = |k: &str| attributes.get(k).and_then(|v| v.string_value());
    assert_eq!(value("field"), Some("body"));
    assert!(value("reason").is_some_and(|r| r.contains("valid JSON")));

    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
