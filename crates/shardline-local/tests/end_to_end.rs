//! publish -> SQS -> run-local (ingest in process) -> DynamoDB -> query over HTTP, on a
//! private moto: the table holds exactly the valid readings, the DLQ exactly the
//! malformed messages, and the API reads a device's range back.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use indicatif::ProgressBar;
use shardline::env::EnvLookup;
use shardline_local::publish::{self, Manifest, Plan, ReadingId, SendOptions};
use shardline_local::query_api::{QueryApi, RangeRead};
use shardline_local::run_local::{self, Settings};
use stand_in::TestStack;

fn plan() -> Plan {
    Plan {
        devices: 20,
        rate: 400.0,
        duration: Duration::from_millis(500),
        hot_device: None,
        hot_rate: 0.0,
        jitter: Duration::from_millis(20),
        batch: 1,
        bad_rate: 0.05,
        seed: 42,
        max_messages: None,
        zipf_exponent: 1.0,
    }
}

/// Every reading of the readings table as (device, event, ts), blocks expanded, and
/// how many readings the items hold (a reading held by two items counts twice).
async fn table_readings(stack: &TestStack) -> Result<(BTreeSet<ReadingId>, usize)> {
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let items = store::scan::scan_items(client.scan().table_name(&stack.stack.table_name)).await?;
    let mut held = 0;
    let mut set = BTreeSet::new();
    for item in items {
        for reading in store::block::expand(item)? {
            held += 1;
            set.insert(ReadingId {
                device_id: reading.device_id,
                event_id: reading.event_id,
                ts_ms: reading.ts_ms,
            });
        }
    }
    Ok((set, held))
}

/// Every DLQ message's `source_message_id` attribute (drained; kept invisible).
async fn dlq_sources(stack: &TestStack) -> Result<Vec<String>> {
    let client = aws_sdk_sqs::Client::new(&stack.sdk_config().await);
    run_local::drain_dlq(&client, &stack.stack.dlq_url)
        .await?
        .into_iter()
        .map(|letter| {
            letter
                .source
                .context("a DLQ message without source_message_id")
        })
        .collect()
}

fn env_of(stack: &TestStack) -> EnvLookup {
    EnvLookup::from_pairs(stack.stack.env_pairs())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_run_local_query() -> Result<()> {
    let _alone = crate::ONE_RUN.lock().await;
    let stack = TestStack::start().await?;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk_config().await);
    let dir = tempfile::tempdir()?;
    let manifest_path = dir.path().join("manifest.jsonl");
    let mut file = std::fs::File::create(&manifest_path)?;
    let summary = publish::publish(
        &sqs,
        &stack.stack.queue_url,
        plan(),
        store::clock::wall_clock()?,
        SendOptions::default(),
        &ProgressBar::hidden(),
        Some(&mut file),
    )
    .await?;
    drop(file);
    assert_eq!(summary.send_failures, 0, "{}", summary.text());
    assert_eq!(summary.sent.messages, 200);
    let manifest = Manifest::read(&manifest_path)?;
    let malformed = summary.sent.malformed_total();
    assert!(malformed > 0, "the seed yields malformed messages");
    assert_eq!(manifest.readings.len() as u64, summary.sent.readings);
    assert_eq!(manifest.malformed.len() as u64, malformed);
    assert_eq!(summary.sent.readings + malformed, 200);

    let mut settings = Settings::new(&stack.stack.queue_url);
    settings.batch_size = 10;
    settings.batching_window = Duration::from_millis(200);
    settings.max_concurrency = 2;
    let running = run_local::start(settings, &env_of(&stack), None).await?;
    let addr = running.query_addr().context("query address")?;

    // Wait (bounded, as a failure guard) until every message was handled and deleted.
    let mut waited = 0;
    while running.stats().deleted < 200 {
        if waited > 1200 {
            bail!("not all messages were deleted: {}", running.stats().text());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }

    // The API reads the busiest device's range back: exactly its readings, in time order.
    let mut by_device: BTreeMap<&str, Vec<&ReadingId>> = BTreeMap::new();
    for r in &manifest.readings {
        by_device.entry(r.device_id.as_str()).or_default().push(r);
    }
    let (device, expected) = by_device
        .iter()
        .max_by_key(|(_, v)| v.len())
        .context("some device")?;
    let from = expected.iter().map(|r| r.ts_ms).min().context("min")?;
    let to = expected.iter().map(|r| r.ts_ms).max().context("max")? + 1;
    let api = QueryApi::untimed(addr);
    let read = RangeRead {
        device,
        from,
        to,
        limit: 1000,
    };
    let reply = api.readings_page(&read, None).await?;
    assert_eq!(reply.status, 200, "{}", api.readings_url(device));
    let page = reply.page()?;
    let got: Vec<&str> = page
        .items
        .iter()
        .filter_map(|i| i["event_id"].as_str())
        .collect();
    let mut want: Vec<&ReadingId> = expected.clone();
    want.sort_by_key(|r| (r.ts_ms, r.event_id.clone()));
    let want: Vec<&str> = want.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(got, want);
    assert!(page.items.iter().all(|i| i["device_id"] == *device));
    // A bad request is a 400 from the same server.
    let query = [("from", "x".to_owned()), ("to", "1".to_owned())];
    let bad = api.get(&api.readings_url(device), &query).await?;
    assert_eq!(bad.status, 400);

    running.stop();
    let stats = running.wait().await?;
    // SQS delivers at least once: under load a message may be received twice, so the
    // counters are at least the sent figures; the table and the DLQ below are exact.
    assert!(stats.messages >= 200, "{}", stats.text());
    assert!(stats.deleted >= 200, "{}", stats.text());
    assert!(stats.written_messages >= summary.sent.valid_messages);
    assert!(stats.dead_lettered >= malformed);
    assert_eq!(stats.failures_reported, 0);
    assert_eq!(stats.failed_invocations, 0);
    assert!(stats.readings_written >= summary.sent.readings);
    assert!(stats.write_lag_p50_ms.is_some());

    let (stored, items) = table_readings(&stack).await?;
    assert_eq!(items, manifest.readings.len(), "no duplicates");
    assert_eq!(stored, manifest.readings, "exactly the valid readings");
    // A malformed message received twice is dead-lettered twice, with one source id.
    let sources = dlq_sources(&stack).await?;
    assert!(sources.len() >= manifest.malformed.len());
    let sources: BTreeSet<String> = sources.into_iter().collect();
    let expected: BTreeSet<String> = manifest.malformed.keys().cloned().collect();
    assert_eq!(sources, expected, "exactly the malformed messages");
    Ok(())
}

/// The binaries as the demo drives them: `publish` with a manifest, then `run-local`
/// until idle, recording each message it received; both read the stack from an env
/// file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_publish_and_run_local_until_idle() -> Result<()> {
    let _alone = crate::ONE_RUN.lock().await;
    let stack = TestStack::start().await?;
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("stack.env");
    stack.stack.write_env(&env_file)?;
    let manifest_path = dir.path().join("manifest.jsonl");
    let bin = env!("CARGO_BIN_EXE_shardline-local");
    let out = Command::new(bin)
        .args([
            "publish",
            "--devices",
            "5",
            "--rate",
            "100",
            "--duration",
            "0.5",
            "--batch",
            "3",
            "--bad-rate",
            "0.2",
            "--seed",
            "3",
            "--json",
            "--env-file",
        ])
        .arg(&env_file)
        .arg("--manifest")
        .arg(&manifest_path)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let messages = summary["sent"]["messages"].as_u64().context("messages")?;
    let readings = summary["sent"]["readings"].as_u64().context("readings")?;
    assert_eq!(messages, 17, "50 readings in messages of 3");
    let manifest = Manifest::read(&manifest_path)?;
    assert_eq!(manifest.readings.len() as u64, readings);

    let received_log = dir.path().join("received.txt");
    let child = Command::new(bin)
        .args([
            "run-local",
            "--batching-window",
            "0.2",
            "--max-concurrency",
            "2",
            "--exit-when-idle",
            "3",
            "--json",
            "--env-file",
        ])
        .arg(&env_file)
        .arg("--received-log")
        .arg(&received_log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (first, rest) = stdout.split_once('\n').context("two parts")?;
    assert!(
        first.starts_with("query listening on http://127.0.0.1:"),
        "{stdout}"
    );
    let stats: serde_json::Value = serde_json::from_str(rest)?;
    // At-least-once delivery: the counters may include a redelivered message; the
    // table is exact.
    let count = |name: &str| {
        stats[name]
            .as_u64()
            .with_context(|| format!("{name} in {stats}"))
    };
    assert!(count("deleted")? >= messages, "{stats}");
    assert!(count("readings_written")? >= readings, "{stats}");
    assert!(
        count("dead_lettered")? >= manifest.malformed.len() as u64,
        "{stats}"
    );
    let (stored, items) = table_readings(&stack).await?;
    assert_eq!(items, manifest.readings.len(), "no duplicates");
    assert_eq!(stored, manifest.readings);
    // Every message SQS accepted was received, and is named in the received log.
    let received = run_local::read_received(&received_log)?;
    let accepted: BTreeSet<String> = manifest
        .valid
        .keys()
        .chain(manifest.malformed.keys())
        .cloned()
        .collect();
    assert_eq!(accepted.len() as u64, messages);
    assert_eq!(received, accepted, "{}", received_log.display());
    Ok(())
}
