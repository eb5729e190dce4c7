//! Item 6: binary sizes, start-to-ready time under `cargo lambda watch`, and the
//! binary's own start against a fake Lambda runtime API.
//!
//! Under `watch`, "ready" is the moment its emulator accepts an invocation; the first
//! invocation then includes watch's `cargo build` (a no-op over the release build) and
//! the function's start. For the binary alone, "ready" is the moment it asks the
//! runtime API for its first invocation (`GET /2018-06-01/runtime/invocation/next`):
//! by then `main` has parsed its configuration, built its clients and entered the
//! runtime loop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use stand_in::{LambdaWatch, WatchSpec};

use crate::common;
use crate::report::Results;

const RUNS: usize = 7;
/// The ceiling for each stripped Lambda binary, 8 MB (bench item 6's goal).
const MAX_BINARY_BYTES: u64 = 8_000_000;

/// The functions' configuration: both start and answer the events below without an
/// AWS call (nothing listens at the endpoint).
const FUNCTION_ENV: [(&str, &str); 8] = [
    ("AWS_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", "bench"),
    ("AWS_SECRET_ACCESS_KEY", "bench"),
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ("TABLE_NAME", "readings"),
    ("SHARD_TABLE_NAME", "shards"),
    ("DLQ_URL", "http://127.0.0.1:9/000000000000/dlq"),
    // Inline instead of a Secrets Manager ARN.
    ("CURSOR_KEY", "bench-cursor-key-0123456789abcdef"),
];

async fn start_to_ready(binary: &Path) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let api = listener.local_addr()?.to_string();
    let started = Instant::now();
    let mut child = Command::new(binary)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .envs(FUNCTION_ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let accepted = tokio::time::timeout(Duration::from_secs(20), async {
        let (mut socket, _) = listener.accept().await?;
        let mut buf = vec![0u8; 1024];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        anyhow::Ok((
            started.elapsed(),
            String::from_utf8_lossy(&got).into_owned(),
        ))
    })
    .await;
    let _ = child.kill();
    let output = child.wait_with_output()?;
    match accepted {
        Ok(Ok((elapsed, request))) if request.contains("/runtime/invocation/next") => {
            Ok(elapsed.as_secs_f64() * 1000.0)
        }
        Ok(Ok((_, request))) => bail!("{}: unexpected first request {request:?}", binary.display()),
        Ok(Err(e)) => Err(e),
        Err(_) => bail!(
            "{} never polled the runtime API: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
}

/// What `cargo lambda watch` took to serve a function, in ms.
struct WatchTimes {
    /// From its start until its emulator accepted a connection.
    listening: f64,
    /// The first invocation: watch's `cargo build`, the function's start and its answer.
    first: f64,
    /// The median of the later invocations, the function already running.
    warm: f64,
}

/// One invocation through the emulator's invoke API; fails unless it answers 200.
async fn invoke(port: u16, function: &str, event: &str) -> Result<()> {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!(
        "POST /2015-03-31/functions/{function}/invocations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{event}",
        event.len()
    );
    socket.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    if !answer.starts_with("HTTP/1.1 200") {
        bail!(
            "invoking {function}: {}",
            answer.lines().next().unwrap_or("no answer")
        );
    }
    Ok(())
}

/// Serves `function` (package and binary of that name) under `cargo lambda watch
/// --release` over the release build in `target_dir`, and invokes it with `event`.
async fn under_watch(
    root: &Path,
    target_dir: &Path,
    function: &str,
    event: &str,
) -> Result<WatchTimes> {
    let venv = stand_in::ensure_deploy_venv(root)?;
    let scratch = target_dir.join("bench-watch");
    std::fs::create_dir_all(&scratch)?;
    let env_file = scratch.join(format!("{function}.env"));
    let vars: String = FUNCTION_ENV
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    std::fs::write(&env_file, vars)?;
    // What watch runs (`cargo run --release --package F --bin F`) builds the package
    // alone, with its own feature set: built here first, watch's build is a no-op.
    build_alone(root, target_dir, function)?;
    let port = stand_in::free_loopback_port()?;
    let mut watch = LambdaWatch::start(
        &venv,
        root,
        target_dir,
        WatchSpec {
            package: function,
            bin: function,
            port,
            env_file: &env_file,
            log: scratch.join(format!("{function}.log")),
            release: true,
        },
    )?;
    let listening = watch
        .wait_listening(Duration::from_secs(120), Duration::from_millis(5))
        .await?;
    let mut timed = Vec::new();
    for _ in 0..=RUNS {
        let t = Instant::now();
        tokio::time::timeout(Duration::from_secs(600), invoke(port, function, event))
            .await
            .context("invocation timed out")?
            .with_context(|| format!("log:\n{}", watch.log_text()))?;
        timed.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(watch);
    let first = timed.remove(0);
    Ok(WatchTimes {
        listening: listening.as_secs_f64() * 1000.0,
        first,
        warm: common::median(&mut timed),
    })
}

/// `cargo build --release --package F --bin F`: the function alone, with its own
/// feature set, as `sam build` (cargo lambda) builds it for deployment.
fn build_alone(root: &Path, target_dir: &Path, function: &str) -> Result<()> {
    let built = stand_in::cargo_command("cargo")
        .args([
            "build",
            "--release",
            "--package",
            function,
            "--bin",
            function,
        ])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("cargo build")?;
    if !built.success() {
        bail!("cargo build --release --package {function} failed with {built}");
    }
    Ok(())
}

/// `cargo bloat --crates` of a function built alone, unstripped (its own build: the
/// release profile strips): the largest crates' share of `.text`. `None` when
/// cargo-bloat is not installed.
fn bloat(root: &Path, target_dir: &Path, function: &str) -> Result<Option<String>> {
    let output = stand_in::cargo_command("cargo")
        .args([
            "bloat",
            "--release",
            "--package",
            function,
            "--bin",
            function,
        ])
        .args(["--crates", "-n", "12"])
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_PROFILE_RELEASE_STRIP", "false")
        .current_dir(root)
        .stderr(Stdio::null())
        .output()
        .context("cargo bloat")?;
    if !output.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<String> = text
        .lines()
        .filter_map(|line| {
            // " 6.2%  12.3%   1.3MiB aws_lc_sys": shares of the file and of .text, the
            // size and the crate; the total and "And N more crates" lines are left out.
            let fields: Vec<&str> = line.split_whitespace().collect();
            let row = fields.len() == 4
                && fields[0].ends_with('%')
                && fields[1].ends_with('%')
                && fields[2].ends_with('B');
            row.then(|| format!("{} {} ({})", fields[3], fields[2], fields[1]))
        })
        .collect();
    Ok(Some(rows.join("; ")))
}

/// Item 6 over the release binaries in `release_dir`.
pub async fn run(root: &Path, release_dir: &Path, results: &mut Results) -> Result<()> {
    let target_dir = release_dir
        .parent()
        .context("the release directory has no parent (the target directory)")?;
    watch_rows(root, target_dir, results).await?;
    for name in ["ingest", "query"] {
        binary_rows(root, release_dir, target_dir, name, results).await?;
    }
    // Last: it rebuilds the binaries unstripped in the same target directory.
    for name in ["ingest", "query"] {
        match bloat(root, target_dir, name)? {
            Some(rows) => results.note(
                "6",
                format!("{name}, `cargo bloat --crates` (share of .text): {rows}"),
            ),
            None => results.note(
                "6",
                format!("{name}: cargo bloat NOT RUN (cargo install cargo-bloat --locked)"),
            ),
        }
    }
    results.note(
        "6",
        "sizes of target/release/{ingest,query}, each built alone (`cargo build --release \
         --package F --bin F`, with its own feature set, as `sam build` builds it), under the \
         workspace release profile (fat LTO, one codegen unit, dependencies at opt-level z \
         but serde_json, the allocator and SHA-256, symbols stripped). Under `cargo lambda \
         watch --release --ignore-changes` (the deploy venv's cargo-lambda, the same target \
         directory): watch \
         runs `cargo run --release --package F --bin F`, which builds the package alone with \
         its own feature set, so the bench first runs that `cargo build` itself and watch's \
         build is a no-op. Start to ready is from spawning watch \
         until its emulator accepts a connection on the invoke port; watch starts the function \
         only when the first invocation arrives, so that invocation's time includes watch's \
         `cargo build` (no-op), the function's start and its answer. The events need no AWS call: \
         ingest gets an empty SQS event, query events/apigw-bad-request.json (a 400). The binary \
         alone: the release binary started directly with the Lambda environment variables and \
         AWS_LAMBDA_RUNTIME_API pointing at a fake runtime API on loopback, from spawn until its \
         first GET /2018-06-01/runtime/invocation/next (configuration parsed, SDK clients \
         built, runtime loop entered; the query function gets CURSOR_KEY inline instead of a \
         Secrets Manager ARN).",
    );
    Ok(())
}

/// Each function under `cargo lambda watch`: start to ready, the first invocation and
/// the later ones (a function that could not be served is noted, not measured).
async fn watch_rows(root: &Path, target_dir: &Path, results: &mut Results) -> Result<()> {
    let events = [
        ("ingest", r#"{"Records":[]}"#.to_owned()),
        (
            "query",
            std::fs::read_to_string(root.join("events/apigw-bad-request.json"))?,
        ),
    ];
    for (name, event) in &events {
        match under_watch(root, target_dir, name, event).await {
            Ok(w) => {
                results.figure(
                    "6",
                    &format!("{name}: cargo lambda watch, start to ready for an invocation"),
                    format!("{:.0} ms", w.listening),
                );
                results.figure(
                    "6",
                    &format!(
                        "{name}: cargo lambda watch, first invocation (cargo build no-op + \
                         function start + answer); later ones, median of {RUNS}"
                    ),
                    format!("{:.0} ms; {:.1} ms", w.first, w.warm),
                );
            }
            Err(e) => results.note(
                "6",
                format!("{name} under cargo lambda watch NOT MEASURED: {e:#}"),
            ),
        }
    }
    Ok(())
}

/// The binary `name` built alone: its size and its own start, against their goals.
async fn binary_rows(
    root: &Path,
    release_dir: &Path,
    target_dir: &Path,
    name: &str,
    results: &mut Results,
) -> Result<()> {
    build_alone(root, target_dir, name)?;
    let binary = release_dir.join(name);
    let size = std::fs::metadata(&binary)
        .with_context(|| format!("{} (build it with cargo build --release)", binary.display()))?
        .len();
    results.goal(
        "6",
        &format!("{name}: stripped release binary, built alone"),
        format!(
            "{:.2} MB ({size} bytes, {:.2} MiB)",
            size as f64 / 1e6,
            size as f64 / 1_048_576.0
        ),
        "at most 8 MB",
        if size <= MAX_BINARY_BYTES {
            "met".to_owned()
        } else {
            format!("missed by {} bytes", size - MAX_BINARY_BYTES)
        },
    );
    let mut times = Vec::new();
    for _ in 0..RUNS {
        times.push(start_to_ready(&binary).await?);
    }
    times.sort_by(f64::total_cmp);
    let median = common::quantile(&times, 0.5);
    results.goal(
        "6",
        &format!("{name}: process start to first runtime-API poll, median (min-max) of {RUNS}"),
        format!(
            "{median:.1} ms ({:.1}-{:.1})",
            times[0],
            times[times.len() - 1]
        ),
        "at most 10 ms",
        if median <= 10.0 {
            "met".to_owned()
        } else {
            format!("missed by {:.1} ms", median - 10.0)
        },
    );
    Ok(())
}
