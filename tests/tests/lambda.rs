//! The built Lambda binaries under `cargo lambda watch` against a private moto, fed the
//! shared events with `cargo lambda invoke --data-file`: `ingest` with events/sqs-*.json
//! (then the table and the DLQ are checked), `query` with events/apigw-*.json over
//! readings written beforehand and sealed by `sealer` with events/sealer-*.json (then
//! each answer is checked). cargo-lambda comes from the project's deploy venv
//! (`infra/deploy/requirements.txt`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use stand_in::{LambdaWatch, TestStack, Venv, WatchSpec};
use store::ReadingItem;
use tokio::time::Instant;

use crate::harness;

/// How long the first invocation may take: `cargo lambda watch` compiles the binary.
const FIRST_INVOKE: Duration = Duration::from_secs(1200);
/// How long any later invocation may take.
const INVOKE: Duration = Duration::from_secs(60);
/// How long the emulator may take to listen, and how often to check.
const LISTEN: Duration = Duration::from_secs(60);
const LISTEN_POLL: Duration = Duration::from_millis(200);

/// The target directory of this test binary, so `cargo lambda watch` reuses what
/// `cargo test` built instead of compiling everything again elsewhere.
fn target_dir() -> Result<PathBuf> {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .context("CARGO_TARGET_TMPDIR has no parent")
}

/// `cargo lambda invoke --data-file` of `function`, bounded by `limit`; the function's
/// JSON answer.
async fn invoke(
    venv: &Venv,
    port: u16,
    function: &str,
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
        .args(["--output-format", "json", function])
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
    let mut watch = LambdaWatch::start(
        &venv,
        &root,
        &target_dir()?,
        WatchSpec {
            package: "ingest",
            bin: "ingest",
            port,
            env_file: &env_file,
            log: scratch.join("watch.log"),
            release: false,
        },
    )?;
    watch.wait_listening(LISTEN, LISTEN_POLL).await?;

    let events = root.join("events");
    let mut limit = FIRST_INVOKE;
    for name in [
        "sqs-single.json",
        "sqs-batch.json",
        "sqs-hot-burst.json",
        "sqs-mixed-bad.json",
    ] {
        let answer = invoke(&venv, port, "ingest", &events.join(name), limit).await?;
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
    let mut items: Vec<ReadingItem> = Vec::new();
    for item in store::scan::scan_items(dynamo.scan().table_name(&stack.stack.table_name)).await? {
        items.extend(store::block::expand(item)?);
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

/// The readings the query events ask about: `sensor-alpha-001` every 10 s from
/// 00:53:10.500 (so `evt-000042` is at 01:00:10.500, as events/apigw-reading.json
/// expects) and `dev-002` every 30 s from 01:00:05, on 2026-06-22.
const SENSOR_READINGS: i64 = 600;
const OTHER_READINGS: i64 = 120;
const DAY_MS: i64 = 1_782_086_400_000; // 2026-06-22T00:00:00Z

fn reading(device: &str, event: String, ts_ms: i64, n: i64) -> serde_json::Value {
    serde_json::json!({
        "device_id": device,
        "event_id": event,
        "ts": ts_ms,
        "metrics": {"temperature": 20.0 + (n % 10) as f64, "humidity": 40.0},
    })
}

/// An SQS event of `readings` in messages of ten.
fn sqs_event(readings: Vec<serde_json::Value>) -> Result<aws_lambda_events::event::sqs::SqsEvent> {
    let records: Vec<serde_json::Value> = readings
        .chunks(10)
        .enumerate()
        .map(|(m, chunk)| {
            serde_json::json!({
                "messageId": format!("m{m}"),
                "body": serde_json::json!({ "readings": chunk }).to_string(),
                "eventSource": "aws:sqs",
            })
        })
        .collect();
    Ok(serde_json::from_value(
        serde_json::json!({ "Records": records }),
    )?)
}

/// Writes the readings with the ingest library (the code the ingest Lambda runs),
/// configured from the same env file as the query function.
async fn write_readings(env_file: &Path, stack: &TestStack) -> Result<()> {
    let vars = stand_in::read_env_file(env_file)?;
    let config = ingest::Config::from_lookup(|name| vars.get(name).cloned())?;
    let dynamo = harness::dynamodb(&stack.endpoint()).await;
    let sqs = harness::sqs(&stack.endpoint()).await;
    let service = ingest::Ingest::from_clients(config, &dynamo, &sqs);
    let mut readings: Vec<serde_json::Value> = (0..SENSOR_READINGS)
        .map(|i| {
            let ts = DAY_MS + 53 * 60_000 + 10_500 + i * 10_000;
            reading("sensor-alpha-001", format!("evt-{i:06}"), ts, i)
        })
        .collect();
    readings.extend((0..OTHER_READINGS).map(|j| {
        let ts = DAY_MS + 3_600_000 + 5_000 + j * 30_000;
        reading("dev-002", format!("other-{j:04}"), ts, j)
    }));
    let now = sharding::time::Timestamp::from_millis(i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?)?;
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(5);
    let report = service
        .process(
            &sqs_event(readings)?,
            now,
            Instant::now() + INVOKE,
            &mut rng,
        )
        .await;
    ensure!(
        report.response()?.batch_item_failures.is_empty(),
        "writing the query test's readings: {report:?}"
    );
    Ok(())
}

/// The status and the parsed JSON body of an API Gateway v2 answer.
fn http_answer(answer: &serde_json::Value) -> Result<(u64, serde_json::Value)> {
    let status = answer["statusCode"]
        .as_u64()
        .with_context(|| format!("no statusCode in {answer}"))?;
    let body = answer["body"]
        .as_str()
        .with_context(|| format!("no body in {answer}"))?;
    Ok((status, serde_json::from_str(body)?))
}

fn items(body: &serde_json::Value) -> Result<&Vec<serde_json::Value>> {
    body["items"]
        .as_array()
        .with_context(|| format!("no items in {body}"))
}

fn field<'a>(item: &'a serde_json::Value, name: &str) -> &'a str {
    item[name].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_lambda_watch_answers_the_api_events() -> Result<()> {
    let root = stand_in::repo_root()?;
    let venv = stand_in::ensure_deploy_venv(&root)?;
    let stack = TestStack::start().await?;
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "lambda-watch-query-{}-{}",
        std::process::id(),
        stack.stack.table_name
    ));
    std::fs::create_dir_all(&scratch)?;
    let env_file = scratch.join("query.env");
    stack.stack.write_env_with(
        &env_file,
        &[
            ("RETENTION_DAYS".to_owned(), "36500".to_owned()),
            ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
            (
                "CURSOR_KEY".to_owned(),
                "lambda-watch-test-cursor-key-0123456789".to_owned(),
            ),
        ],
    )?;
    write_readings(&env_file, &stack).await?;
    seal_the_readings(&venv, &root, &env_file, &scratch).await?;

    let port = stand_in::free_loopback_port()?;
    let mut watch = LambdaWatch::start(
        &venv,
        &root,
        &target_dir()?,
        WatchSpec {
            package: "query",
            bin: "query",
            port,
            env_file: &env_file,
            log: scratch.join("watch.log"),
            release: false,
        },
    )?;
    watch.wait_listening(LISTEN, LISTEN_POLL).await?;
    let events = root.join("events");
    let mut limit = FIRST_INVOKE;
    let mut ask = async |name: &str| -> Result<(u64, serde_json::Value)> {
        let answer = invoke(&venv, port, "query", &events.join(name), limit).await?;
        limit = INVOKE;
        http_answer(&answer).with_context(|| format!("{name}; log:\n{}", watch.log_text()))
    };

    // The first 100 of the sensor's 600 readings in [00:00, 06:00), oldest first.
    let (status, body) = ask("apigw-device-readings.json").await?;
    assert_eq!(status, 200, "{body}");
    let page = items(&body)?;
    let ids: Vec<&str> = page.iter().map(|i| field(i, "event_id")).collect();
    let expected: Vec<String> = (0..100).map(|i| format!("evt-{i:06}")).collect();
    assert_eq!(ids, expected);
    assert!(body["next_cursor"].is_string(), "{body}");

    let (status, body) = ask("apigw-reading.json").await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(field(&body, "event_id"), "evt-000042");
    assert_eq!(field(&body, "ts"), "2026-06-22T01:00:10.500Z");

    // Every device in [01:00, 02:00), newest first: the sensor's evt-000400 (01:59:50.5)
    // leads, then both devices interleaved by time.
    let (status, body) = ask("apigw-all-readings.json").await?;
    assert_eq!(status, 200, "{body}");
    let page = items(&body)?;
    assert_eq!(page.len(), 100);
    assert_eq!(field(&page[0], "event_id"), "evt-000400");
    let times: Vec<&str> = page.iter().map(|i| field(i, "ts")).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    let devices: BTreeSet<&str> = page.iter().map(|i| field(i, "device_id")).collect();
    assert_eq!(devices, BTreeSet::from(["dev-002", "sensor-alpha-001"]));

    // Hourly counts of the sensor: 41 readings before 01:00, 360 in the hour, 199 after.
    let (status, body) = ask("apigw-stats.json").await?;
    assert_eq!(status, 200, "{body}");
    let counts: Vec<(String, u64)> = body["buckets"]
        .as_array()
        .with_context(|| format!("no buckets in {body}"))?
        .iter()
        .filter(|b| b["count"].as_u64().unwrap_or(0) > 0)
        .map(|b| {
            (
                field(b, "start").to_owned(),
                b["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![
            ("2026-06-22T00:00:00.000Z".to_owned(), 41),
            ("2026-06-22T01:00:00.000Z".to_owned(), 360),
            ("2026-06-22T02:00:00.000Z".to_owned(), 199),
        ]
    );

    let (status, body) = ask("apigw-shards.json").await?;
    assert_eq!(status, 200, "{body}");

    dashboard_answers(&mut ask).await?;

    // A reversed range and a misspelt parameter: 400 naming the problem, no 500.
    let (status, body) = ask("apigw-bad-request.json").await?;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["code"].is_string(), "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    drop(watch);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// The readings' hours sealed by the sealer binary: events/sealer-reseal.json rebuilds
/// [00:00, 06:00) of 2026-06-22 and gives the empty rollups table its watermark, then
/// events/sealer-schedule.json (an EventBridge scheduled event as AWS sends it) runs
/// the schedule's run, which goes on from the watermark, six hours at most.
async fn seal_the_readings(
    venv: &Venv,
    root: &Path,
    env_file: &Path,
    scratch: &Path,
) -> Result<()> {
    let port = stand_in::free_loopback_port()?;
    let mut watch = LambdaWatch::start(
        venv,
        root,
        &target_dir()?,
        WatchSpec {
            package: "sealer",
            bin: "sealer",
            port,
            env_file,
            log: scratch.join("sealer-watch.log"),
            release: false,
        },
    )?;
    watch.wait_listening(LISTEN, LISTEN_POLL).await?;
    let events = root.join("events");
    let rebuilt = invoke(
        venv,
        port,
        "sealer",
        &events.join("sealer-reseal.json"),
        FIRST_INVOKE,
    )
    .await
    .with_context(|| format!("log:\n{}", watch.log_text()))?;
    let readings = SENSOR_READINGS + OTHER_READINGS;
    assert_eq!(rebuilt["hours_sealed"], 6, "{rebuilt}");
    assert_eq!(
        rebuilt["readings"], readings,
        "each reading once: {rebuilt}"
    );
    assert_eq!(rebuilt["watermark_ms"], DAY_MS + 6 * HOUR_MS, "{rebuilt}");
    let run = invoke(
        venv,
        port,
        "sealer",
        &events.join("sealer-schedule.json"),
        INVOKE,
    )
    .await?;
    assert_eq!(run["hours_sealed"], 6, "{run}");
    assert_eq!(run["watermark_ms"], DAY_MS + 12 * HOUR_MS, "{run}");
    assert_eq!(run["behind"], true, "{run}");
    drop(watch);
    Ok(())
}

const HOUR_MS: i64 = 3_600_000;

/// The temperature the test's reading `n` carries.
fn temperature(n: i64) -> f64 {
    20.0 + (n % 10) as f64
}

/// The answers a dashboard asks first, from events/apigw-{latest,devices,fleet-stats,
/// fleet-series,device-series}.json, over the sealed hours.
async fn dashboard_answers(
    ask: &mut impl AsyncFnMut(&str) -> Result<(u64, serde_json::Value)>,
) -> Result<()> {
    let sensor_at = |i: i64| DAY_MS + 53 * 60_000 + 10_500 + i * 10_000;
    let other_at = |j: i64| DAY_MS + HOUR_MS + 5_000 + j * 30_000;

    // The latest reading is looked for back from the request's clock, the wall clock
    // here, over MAX_DEVICE_RANGE (31 days): the readings of 2026-06-22 are older, so
    // the answer is the JSON 404 naming the device (crates/query/tests/latest.rs reads
    // it at a clock of that day).
    let (status, body) = ask("apigw-latest.json").await?;
    assert_eq!(status, 404, "{body}");
    assert_eq!(field(&body["error"], "code"), "not_found");
    assert!(
        field(&body["error"], "message").contains("sensor-alpha-001"),
        "{body}"
    );

    let (status, body) = ask("apigw-devices.json").await?;
    assert_eq!(status, 200, "{body}");
    let devices: Vec<&str> = body["devices"]
        .as_array()
        .with_context(|| format!("no devices in {body}"))?
        .iter()
        .map(|d| field(d, "device_id"))
        .collect();
    assert_eq!(devices, ["sensor-alpha-001"], "prefix=sensor-: {body}");
    assert_eq!(field(&body["devices"][0], "last_event_id"), "evt-000599");

    // Each hour's readings, devices and temperature sum, from the readings themselves.
    let mut hours: std::collections::BTreeMap<i64, (u64, BTreeSet<&str>, f64)> =
        std::collections::BTreeMap::new();
    let sensor = (0..SENSOR_READINGS).map(|i| (sensor_at(i), "sensor-alpha-001", temperature(i)));
    let other = (0..OTHER_READINGS).map(|j| (other_at(j), "dev-002", temperature(j)));
    for (ts, device, t) in sensor.chain(other) {
        let hour = hours.entry(ts - ts.rem_euclid(HOUR_MS)).or_default();
        hour.0 += 1;
        hour.1.insert(device);
        hour.2 += t;
    }
    let (status, body) = ask("apigw-fleet-stats.json").await?;
    assert_eq!(status, 200, "{body}");
    // Sealed to 12:00: the reseal's six hours and the scheduled run's six after them.
    assert_eq!(field(&body, "watermark"), "2026-06-22T12:00:00.000Z");
    let buckets = body["buckets"]
        .as_array()
        .with_context(|| format!("no buckets in {body}"))?;
    let answered: Vec<(u64, u64, f64)> = buckets
        .iter()
        .filter(|b| b["readings"].as_u64().unwrap_or(0) > 0)
        .map(|b| {
            (
                b["readings"].as_u64().unwrap_or(0),
                b["devices"].as_u64().unwrap_or(0),
                b["metrics"]["temperature"]["sum"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
            )
        })
        .collect();
    let want: Vec<(u64, u64, f64)> = hours
        .values()
        .map(|(n, devices, sum)| (*n, devices.len() as u64, *sum))
        .collect();
    assert_eq!(answered, want, "{body}");

    let (status, body) = ask("apigw-fleet-series.json").await?;
    assert_eq!(status, 200, "{body}");
    let points: Vec<(i64, f64)> = body["points"]
        .as_array()
        .with_context(|| format!("no points in {body}"))?
        .iter()
        .map(|p| {
            (
                p[0].as_i64().unwrap_or(0),
                p[1].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    let want: Vec<(i64, f64)> = hours.iter().map(|(h, (_, _, sum))| (*h, *sum)).collect();
    assert_eq!(points, want, "{body}");

    // One point a minute the sensor reported in, each its readings' mean.
    let (status, body) = ask("apigw-device-series.json").await?;
    assert_eq!(status, 200, "{body}");
    let points = body["points"]
        .as_array()
        .with_context(|| format!("no points in {body}"))?;
    let minutes: BTreeSet<i64> = (0..SENSOR_READINGS)
        .map(|i| sensor_at(i) - sensor_at(i).rem_euclid(60_000))
        .collect();
    assert_eq!(points.len(), minutes.len(), "{body}");
    // 00:53 holds readings 0 to 4 (00:53:10.5 to 00:53:50.5): 20 to 24, mean 22.
    assert_eq!(
        points[0],
        serde_json::json!([DAY_MS + 53 * 60_000, 22.0]),
        "{body}"
    );
    Ok(())
}
