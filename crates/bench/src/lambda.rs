//! Item 6: binary sizes, and start-to-ready time against a fake Lambda runtime API.
//!
//! "Ready" is the moment the binary asks the runtime API for its first invocation
//! (`GET /2018-06-01/runtime/invocation/next`): by then `main` has parsed its
//! configuration, built its clients and entered the runtime loop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::common;
use crate::report::Results;

const RUNS: usize = 7;

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
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        // Nothing listens here: readiness needs no AWS call.
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("TABLE_NAME", "readings")
        .env("SHARD_TABLE_NAME", "shards")
        .env("DLQ_URL", "http://127.0.0.1:9/000000000000/dlq")
        .env("CURSOR_KEY", "bench-cursor-key-0123456789abcdef")
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

/// Item 6 over the release binaries in `release_dir`.
pub async fn run(release_dir: &Path, results: &mut Results) -> Result<()> {
    for name in ["ingest", "query"] {
        let binary = release_dir.join(name);
        let size = std::fs::metadata(&binary)
            .with_context(|| format!("{} (build it with cargo build --release)", binary.display()))?
            .len();
        results.figure(
            "6",
            &format!("{name}: stripped release binary"),
            format!("{:.1} MiB ({size} bytes)", size as f64 / 1_048_576.0),
        );
        let mut times = Vec::new();
        for _ in 0..RUNS {
            times.push(start_to_ready(&binary).await?);
        }
        times.sort_by(f64::total_cmp);
        results.figure(
            "6",
            &format!("{name}: process start to first runtime-API poll, median (min-max) of {RUNS}"),
            format!(
                "{:.1} ms ({:.1}-{:.1})",
                common::quantile(&times, 0.5),
                times[0],
                times[times.len() - 1]
            ),
        );
    }
    results.note(
        "6",
        "sizes of target/release/{ingest,query} from `cargo build --release -p ingest -p query` \
         (the workspace release profile strips symbols). Start-to-ready is NOT measured under \
         `cargo lambda watch`: `watch` runs `cargo build` and starts the function when the \
         first invocation arrives, so its figure would be mostly cargo's (the e2e tests run \
         both functions under it). Measured instead: the release binary started directly with the \
         Lambda environment variables and AWS_LAMBDA_RUNTIME_API pointing at a fake runtime API \
         on loopback, from spawn until its first GET /2018-06-01/runtime/invocation/next \
         (configuration parsed, SDK clients built, runtime loop entered; no AWS call needed; the \
         query function gets CURSOR_KEY inline instead of a Secrets Manager ARN).",
    );
    Ok(())
}
