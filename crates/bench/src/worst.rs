//! Item 7: the worst input each message kind accepts, and what it costs against its
//! budget: the real ingest handler writing to dynalite through the capacity-proxy in
//! forward mode (which charges each item's write units as DynamoDB does), with its dead
//! letters and requeued copies held by the in-memory queue, which refuses what SQS
//! refuses.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use capacity_proxy::{Proxy, ProxyConfig};
use ingest::{Fate, Report};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use store::queue::{Attributes, MAX_ATTRIBUTES, MAX_MESSAGE_BYTES, message_bytes};
use tokio::time::Instant;

use crate::common;
use crate::report::{Results, at_most};

/// The template's `IngestTimeout`: an invocation's deadline, seconds.
const INGEST_TIMEOUT_SECS: u64 = 30;
/// The most readings one message may carry (`MAX_READINGS_PER_MESSAGE`'s default).
const MAX_READINGS: usize = 500;
/// The template's `MaxReceiveCount`: the receive at which a failing message is requeued.
const LAST_RECEIVE: u32 = 5;

/// What one invocation of the handler cost.
struct Cost {
    report: Report,
    wall: Duration,
    calls: u64,
    wcu: f64,
    /// SQS sends (dead letters and requeued copies) and their bytes, body and attributes.
    sends: usize,
    send_bytes: usize,
    most_attributes: usize,
}

/// Runs one SQS event of `records` through a fresh handler (a fresh Lambda instance)
/// and measures it.
async fn invoke(rig: &Rig, records: Vec<SqsMessage>, deadline: Duration) -> Result<Cost> {
    let (tables, event) = (&rig.tables, event(records));
    let mut pc = ProxyConfig::forward(&rig.endpoint)?;
    pc.seed = Some(7);
    let proxy = Proxy::start(pc).await?;
    let config = common::ingest_config(&[
        ("TABLE_NAME", &tables.readings),
        ("SHARD_TABLE_NAME", &tables.shards),
        ("RETENTION_DAYS", "36500"),
        ("SOURCE_QUEUE_URL", "http://127.0.0.1:9/source"),
    ])?;
    let service = common::service(&proxy.url(), config).await;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let started = Instant::now();
    let report = service
        .process(&event, common::ts(3_600_000)?, started + deadline, &mut rng)
        .await;
    let wall = started.elapsed();
    let stats = proxy.stats();
    let calls = stats
        .requests_by_op
        .get("BatchWriteItem")
        .copied()
        .unwrap_or(0);
    // A fold from +0.0: an empty float sum is -0.0.
    let wcu = stats.keys.iter().fold(0.0, |sum, k| sum + k.wcu_total);
    proxy.shutdown().await?;
    let queue = service.queue();
    let refused = queue.refused();
    ensure!(
        refused.is_empty(),
        "SQS would refuse what the ingest sent: {refused:?}"
    );
    let letters = queue.letters();
    let copies = queue.copies();
    let sent: Vec<(usize, usize)> = letters
        .iter()
        .map(|l| (message_bytes(&l.body, &l.attributes), l.attributes.len()))
        .chain(
            copies
                .iter()
                .map(|c| (message_bytes(&c.body, &c.attributes), c.attributes.len())),
        )
        .collect();
    Ok(Cost {
        report,
        wall,
        calls,
        wcu,
        sends: sent.len(),
        send_bytes: sent.iter().map(|(b, _)| b).sum(),
        most_attributes: sent.iter().map(|(_, a)| *a).max().unwrap_or(0),
    })
}

/// The tables of the default template on the stand-in.
struct Tables {
    readings: String,
    shards: String,
}

/// Where every row runs: dynalite and the default template's tables on it.
struct Rig {
    endpoint: String,
    tables: Tables,
}

/// One message of `body`, received for the `receives`th time with `attributes`.
fn record(id: &str, body: String, receives: u32, attributes: &Attributes) -> SqsMessage {
    let mut m = common::record(id.to_owned(), body);
    m.attributes
        .insert("ApproximateReceiveCount".to_owned(), receives.to_string());
    m.attributes.insert(
        "SentTimestamp".to_owned(),
        (common::T0_MS + 3_599_000).to_string(),
    );
    m.message_attributes = attributes
        .iter()
        .map(|(name, (data_type, value))| {
            let mut a = SqsMessageAttribute::default();
            a.data_type = Some(data_type.clone());
            a.string_value = Some(value.clone());
            (name.clone(), a)
        })
        .collect::<HashMap<_, _>>();
    m
}

fn event(records: Vec<SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = records;
    event
}

/// A reading of `device` as large as the ingest accepts: 64 metrics and 32 tags of
/// 256 characters.
fn largest_reading(device: &str, i: usize) -> serde_json::Value {
    let metrics: serde_json::Map<String, serde_json::Value> = (0..64)
        .map(|m| {
            (
                format!("metric_{m:02}"),
                serde_json::json!(123_456.789_012 + m as f64),
            )
        })
        .collect();
    let tags: serde_json::Map<String, serde_json::Value> = (0..32)
        .map(|t| (format!("tag_{t:02}"), serde_json::json!("x".repeat(256))))
        .collect();
    serde_json::json!({
        "device_id": device,
        "event_id": format!("largest-{i:05}"),
        "ts": common::T0_MS + 3_000_000 + i as i64,
        "metrics": metrics,
        "tags": tags,
    })
}

/// The largest body of `MAX_READINGS` readings of `device` within SQS's 256 KiB:
/// every reading padded with one tag to the same size.
fn fullest_message(device: &str) -> String {
    let body = |pad: usize| {
        let readings: Vec<serde_json::Value> = (0..MAX_READINGS)
            .map(|i| {
                serde_json::json!({
                    "device_id": device,
                    "event_id": format!("full-{i:05}"),
                    "ts": common::T0_MS + 3_000_000 + i as i64,
                    "metrics": {"temperature": 21.5, "humidity": 40.25},
                    "tags": {
                        "pad_a": "a".repeat(pad.min(256)),
                        "pad_b": "b".repeat(pad.saturating_sub(256).clamp(1, 256)),
                    },
                })
            })
            .collect();
        serde_json::json!({ "readings": readings }).to_string()
    };
    let bare = body(1).len();
    // Two tags of up to 256 characters each carry the padding.
    let pad = (MAX_MESSAGE_BYTES - bare) / MAX_READINGS;
    body(pad.clamp(1, 512))
}

fn reported(report: &Report) -> usize {
    report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Reported { .. }))
        .count()
}

/// Item 7's rows for the message kinds.
pub async fn run(root: &Path, results: &mut Results) -> Result<()> {
    let server = stand_in::Dynalite::start(&stand_in::ensure_dynalite(root)?)?;
    let provisioned = stand_in::provision_tables(
        &server.endpoint(),
        &root.join("template.yaml"),
        "bench-worst",
        stand_in::Backend::Dynalite,
    )
    .await
    .context("provisioning the default template's tables")?;
    let rig = Rig {
        endpoint: server.endpoint(),
        tables: Tables {
            readings: provisioned.name("ReadingsTable")?.to_owned(),
            shards: provisioned.name("ShardsTable")?.to_owned(),
        },
    };
    written_messages(&rig, results).await?;
    leaving_messages(&rig, results).await?;
    results.note(
        "7",
        "the real ingest handler, a fresh instance per row, writing to dynalite through the \
         capacity-proxy in forward mode (write units as the proxy charges them); dead letters \
         and requeued copies go to the in-memory queue, which refuses what SQS refuses \
         (characters, 10 attributes, 256 KiB): a send it would refuse fails the row. \
         Wall time is dynalite's on this machine, not DynamoDB's.",
    );
    Ok(())
}

/// The largest valid messages, alone and as the template's batch.
async fn written_messages(rig: &Rig, results: &mut Results) -> Result<()> {
    let timeout = Duration::from_secs(INGEST_TIMEOUT_SECS);
    let none = Attributes::new();
    let budget = format!("within the {INGEST_TIMEOUT_SECS}-s invocation");

    // The fullest valid message: 500 readings in 256 KiB.
    let body = fullest_message("worst-full-1");
    let bytes = body.len();
    let cost = invoke(rig, vec![record("full", body, 1, &none)], timeout).await?;
    message_row(
        results,
        &format!(
            "a valid message of {MAX_READINGS} readings filling {bytes} bytes (of {MAX_MESSAGE_BYTES})"
        ),
        &cost,
        &budget,
    );

    // Readings as large as the ingest accepts, as many as fit a message.
    let one = largest_reading("worst-large-1", 0).to_string().len();
    let fit = (MAX_MESSAGE_BYTES / (one + 1)).max(1);
    let readings: Vec<serde_json::Value> = (0..fit)
        .map(|i| largest_reading("worst-large-1", i))
        .collect();
    let body = serde_json::json!({ "readings": readings }).to_string();
    let bytes = body.len();
    let cost = invoke(rig, vec![record("large", body, 1, &none)], timeout).await?;
    message_row(
        results,
        &format!(
            "a valid message of {fit} readings of 64 metrics and 32 tags of 256 characters \
             ({one} bytes each, {bytes} in all)"
        ),
        &cost,
        &budget,
    );

    // The template's batch: 100 of the fullest messages, one device each.
    let records: Vec<SqsMessage> = (0..100)
        .map(|d| {
            record(
                &format!("batch-{d:03}"),
                fullest_message(&format!("worst-batch-{d:03}")),
                1,
                &none,
            )
        })
        .collect();
    let cost = invoke(rig, records, timeout).await?;
    message_row(
        results,
        "the template's batch (IngestBatchSize 100) of the fullest messages, a device each",
        &cost,
        &format!(
            "within the {INGEST_TIMEOUT_SECS}-s invocation; what the deadline leaves is \
             reported ({} messages reported)",
            reported(&cost.report)
        ),
    );
    Ok(())
}

/// The messages that leave through SQS: a refusal with the longest reason, and a copy
/// of a message with 10 attributes.
async fn leaving_messages(rig: &Rig, results: &mut Results) -> Result<()> {
    let one_send =
        format!("1 send of at most {MAX_MESSAGE_BYTES} bytes and {MAX_ATTRIBUTES} attributes");
    // A refusal whose reason echoes 200,000 characters of unknown field name.
    let field = "\u{ffff}".to_owned() + &"f".repeat(200_000);
    let body = format!(r#"{{"{field}":1,"device_id":"d","event_id":"e","ts":0,"metrics":{{}}}}"#);
    let timeout = Duration::from_secs(INGEST_TIMEOUT_SECS);
    let cost = invoke(
        rig,
        vec![record("refused", body, 1, &Attributes::new())],
        timeout,
    )
    .await?;
    message_row(
        results,
        "a refused message naming 200,000 characters of unknown field (U+FFFF first)",
        &cost,
        &one_send,
    );

    // Ten attributes at the last receive, with no time left to write: requeued.
    let ten: Attributes = (0..MAX_ATTRIBUTES)
        .map(|i| {
            (
                format!("publisher.{i}"),
                ("String".to_owned(), "v".repeat(64)),
            )
        })
        .collect();
    let body = fullest_message("worst-ten-1");
    // Inside the ingest's 1-s margin: no write starts, the queue's work still runs.
    let cost = invoke(
        rig,
        vec![record("ten", body, LAST_RECEIVE, &ten)],
        Duration::from_millis(900),
    )
    .await?;
    message_row(
        results,
        "a message with 10 attributes failing at its last receive (requeued)",
        &cost,
        &one_send,
    );
    Ok(())
}

fn message_row(results: &mut Results, kind: &str, cost: &Cost, budget: &str) {
    let r = &cost.report;
    results.goal(
        "7",
        &format!("message: {kind}"),
        format!(
            "{} readings written, {} BatchWriteItem calls, {:.0} WCU; {} SQS sends ({} bytes, \
             at most {} attributes); {} dead-lettered, {} requeued, {} split (the unwritten \
             rest sent back), {} reported; {:.2} s",
            r.writes.written,
            cost.calls,
            cost.wcu,
            cost.sends,
            cost.send_bytes,
            cost.most_attributes,
            r.dead_lettered,
            r.requeued,
            r.split,
            reported(r),
            cost.wall.as_secs_f64(),
        ),
        budget,
        at_most(cost.wall.as_secs_f64(), INGEST_TIMEOUT_SECS as f64),
    );
}
