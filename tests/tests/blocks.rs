//! Blocks end to end on dynalite (docs/design-blocks.md): the real ingest handler with
//! `BLOCKS=on` writes one device's readings as blocks through the capacity-proxy, and
//! the real query service reads them back over the SDK. Every reading is answered once
//! by every route, through every cursor, a redelivery changes nothing, and the proxy
//! charges a fraction of a write unit a reading.

use std::collections::BTreeSet;

use anyhow::{Result, ensure};
use aws_lambda_events::event::sqs::SqsEvent;
use query::{QueryService, ServiceConfig};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use sharding::block::is_block_sk;
use stand_in::Backend;
use store::Written;
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;

use crate::ingest::{Rig, roomy, scan, t0};

/// 2026-06-22T03:00:00Z: an hour before the handler's clock.
const HOUR3: i64 = 1_782_097_200_000;
const DEVICES: [&str; 3] = ["sensor-1", "sensor-2", "sensor-3"];
/// Per device: 8 messages of 50 readings, a reading every 500 ms, the last two
/// messages crossing into the next hour's bucket for `sensor-3`.
const MESSAGES: usize = 8;
const PER_MESSAGE: usize = 50;
const STEP_MS: i64 = 500;

fn start_ms(device: usize) -> i64 {
    // sensor-3 starts 2.5 minutes before 04:00, so its readings cross the bucket.
    if device == 2 {
        HOUR3 + 3_600_000 - 150_000
    } else {
        HOUR3 + 60_000 * device as i64
    }
}

/// The messages: each device's readings in messages of 50, as a gateway sends them.
fn bodies() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        for m in 0..MESSAGES {
            let readings: Vec<Value> = (0..PER_MESSAGE)
                .map(|i| {
                    let n = m * PER_MESSAGE + i;
                    json!({
                        "device_id": device,
                        "event_id": format!("e-{n:04}"),
                        "ts": start_ms(d) + n as i64 * STEP_MS,
                        "metrics": {"temperature": 20.0 + (n % 40) as f64 / 8.0, "humidity": 41.5},
                    })
                })
                .collect();
            out.push((format!("m-{d}-{m}"), json!({ "readings": readings })));
        }
    }
    out
}

fn event(messages: &[(String, Value)]) -> SqsEvent {
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id,
                "body": body.to_string(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": t0().as_millis().to_string()},
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("an SQS event")
}

/// (device, event id) of every reading sent, in time order per device, devices in
/// `devices` order within a millisecond (the answers' order: time, device, event).
fn sent(from: i64, to: i64) -> Vec<(String, String)> {
    let mut all: Vec<(i64, String, String)> = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        for n in 0..MESSAGES * PER_MESSAGE {
            let ts = start_ms(d) + n as i64 * STEP_MS;
            if (from..to).contains(&ts) {
                all.push((ts, (*device).to_owned(), format!("e-{n:04}")));
            }
        }
    }
    all.sort();
    all.into_iter().map(|(_, d, e)| (d, e)).collect()
}

type Service = QueryService<DynamoReadingSource, DynamoShards>;

async fn get(svc: &Service, path: &str) -> Result<Value> {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let response = svc.handle_parts("GET", path, Some(query), t0()).await;
    ensure!(
        response.status() == 200,
        "{path}?{query}: {}",
        response.body()
    );
    Ok(serde_json::from_str(response.body())?)
}

/// Every reading of every page from `first` on, following its cursors.
async fn follow(svc: &Service, first: &str) -> Result<Vec<(String, String)>> {
    let mut got = Vec::new();
    let mut cursor = String::new();
    for _ in 0..2_000 {
        let body = get(svc, &format!("{first}{cursor}")).await?;
        for item in body["items"].as_array().into_iter().flatten() {
            got.push((
                item["device_id"].as_str().unwrap_or_default().to_owned(),
                item["event_id"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        match body["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return Ok(got),
        }
    }
    anyhow::bail!("{first}: the pages never end")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynalite_blocks_written_by_the_ingest_are_read_back_once_by_every_route() -> Result<()> {
    let rig = Rig::start(Backend::Dynalite, |_, _| {}).await?;
    let service = rig.service(&[("BLOCKS", "on")]);
    let messages = bodies();
    let mut rng = StdRng::seed_from_u64(34);
    let mut written = 0;
    for batch in messages.chunks(10) {
        let report = service
            .process(&event(batch), t0(), roomy(), &mut rng)
            .await;
        ensure!(
            report.response()?.batch_item_failures.is_empty(),
            "{report:?}"
        );
        written += report.readings_written;
    }
    let readings = DEVICES.len() * MESSAGES * PER_MESSAGE;
    assert_eq!(written, readings as u64);

    // The bill, as the proxy charged it: 50 readings of this shape are one block of
    // about 1.3 KB (2 write units), so 0.04 a reading, and a few blocks split at a
    // minute's window or the bucket boundary.
    let wcu: f64 = rig.proxy.stats().wcu_by_table.values().sum();
    let per_reading = wcu / readings as f64;
    assert!(per_reading <= 0.06, "{per_reading} write units a reading");

    // Stored: blocks, holding every reading once; a redelivery of every message
    // rebuilds the same blocks.
    let items = scan(&rig.direct, &rig.table_name).await?;
    assert!(items.len() < readings / 20, "{} items", items.len());
    let stored = rig.readings().await?;
    let distinct: BTreeSet<(String, String)> = stored
        .iter()
        .map(|r| (r.device_id.clone(), r.event_id.clone()))
        .collect();
    assert_eq!(stored.len(), readings);
    assert_eq!(distinct.len(), readings);
    for batch in messages.chunks(10) {
        rig.direct_service(&[("BLOCKS", "on")])
            .process(&event(batch), t0(), roomy(), &mut rng)
            .await;
    }
    let again = scan(&rig.direct, &rig.table_name).await?;
    assert_eq!(again.len(), items.len());
    assert!(again.iter().all(|item| match item.get("SK") {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)) => is_block_sk(sk),
        _ => false,
    }));

    // Read back through the query service over the SDK.
    let mut config = ServiceConfig::new(query::cursor::CursorKey::new(
        b"e2e-blocks-cursor-key-0123456789".to_vec(),
    )?);
    config.concurrency = 8;
    let svc = QueryService::new(
        DynamoReadingSource::new(rig.direct.clone(), &rig.table_name),
        rig.shards(),
        config,
    );
    let (from, to) = (HOUR3, HOUR3 + 2 * 3_600_000);
    for device in DEVICES {
        let want: Vec<_> = sent(from, to)
            .into_iter()
            .filter(|(d, _)| d == device)
            .collect();
        for limit in [7, 100] {
            let path = format!("/devices/{device}/readings?from={from}&to={to}&limit={limit}");
            assert_eq!(follow(&svc, &path).await?, want, "{path}");
        }
        // A range starting inside a block answers only its own readings.
        let (a, b) = (start_ms(1) + 20_250, start_ms(1) + 41_000);
        let want: Vec<_> = sent(a, b)
            .into_iter()
            .filter(|(d, _)| d == device)
            .collect();
        let path = format!("/devices/{device}/readings?from={a}&to={b}&limit=4");
        assert_eq!(follow(&svc, &path).await?, want, "{path}");
    }
    let path = format!("/readings?from={from}&to={to}&limit=50");
    assert_eq!(follow(&svc, &path).await?, sent(from, to), "{path}");

    // A point read finds a reading inside a block by its event id and time.
    let ts = start_ms(2) + 123 * STEP_MS;
    let body = get(&svc, &format!("/devices/sensor-3/readings/e-0123?ts={ts}")).await?;
    assert_eq!(body["event_id"], "e-0123", "{body}");
    assert_eq!(body["metrics"]["humidity"], 41.5, "{body}");
    rig.finish().await
}

/// Readings grouped across the messages of a batch, where a lost response re-forms
/// them (docs/design-blocks.md): the first batch's block is written and its response
/// lost, so SQS redelivers one of its messages with one sent since, and the ingest
/// packs them into another block. Ten readings are then held by two blocks on dynalite:
/// every route answers each once, through every cursor, the stats count it once, and
/// `shardline audit` counts the ten and their extra copies.
/// A message sent again in a later batch (a publisher's retry after its first send was
/// stored, or SQS's redelivery after a lost response) is packed there with another
/// message of its device, into another block: its readings are stored twice, the audit
/// counts the copies, and every route answers each reading once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynalite_a_reading_re_formed_into_two_blocks_is_answered_once_and_audited() -> Result<()> {
    let rig = Rig::start(Backend::Dynalite, |_, _| {}).await?;
    let service = rig.service(&[("BLOCKS", "on")]);
    // sensor-1's readings a second apart, ten to a message.
    let body = |from: usize| {
        let readings: Vec<Value> = (from..from + 10)
            .map(|n| {
                json!({
                    "device_id": "sensor-1",
                    "event_id": format!("e-{n:04}"),
                    "ts": HOUR3 + n as i64 * 1_000,
                    "metrics": {"temperature": 20.0 + n as f64 / 8.0},
                })
            })
            .collect();
        json!({ "readings": readings })
    };
    let (a, b, c) = (
        ("m-a".to_owned(), body(0)),
        ("m-b".to_owned(), body(10)),
        ("m-c".to_owned(), body(20)),
    );
    let mut rng = StdRng::seed_from_u64(34);
    for batch in [[a, b.clone()], [b, c]] {
        let report = service
            .process(&event(&batch), t0(), roomy(), &mut rng)
            .await;
        ensure!(
            report.response()?.batch_item_failures.is_empty(),
            "{report:?}"
        );
    }
    let items = scan(&rig.direct, &rig.table_name).await?;
    assert_eq!(items.len(), 2, "two blocks");

    // The audit of the table: 40 readings held, 30 distinct, 10 of them twice.
    let attributes = store::scan::ScanAttributes::readings();
    let table = store::scan::DynamoScan::new(rig.direct.clone(), &rig.table_name);
    let sample = shardline::audit::scan_table(&table, &attributes, None).await?;
    let report = shardline::audit::audit_sampled(&sample, &Default::default());
    assert_eq!(
        report.duplicates,
        Some(shardline::audit::DuplicateReport {
            items: 40,
            readings: 30,
            duplicated: 10,
            extra_copies: 10,
        }),
        "{report:?}"
    );

    // Every route answers each reading once.
    let config = ServiceConfig::new(query::cursor::CursorKey::new(
        b"e2e-blocks-cursor-key-0123456789".to_vec(),
    )?);
    let svc = QueryService::new(
        DynamoReadingSource::new(rig.direct.clone(), &rig.table_name),
        rig.shards(),
        config,
    );
    let want: Vec<(String, String)> = (0..30)
        .map(|n| ("sensor-1".to_owned(), format!("e-{n:04}")))
        .collect();
    let (from, to) = (HOUR3, HOUR3 + 3_600_000);
    for limit in [3, 7, 100] {
        for path in [
            format!("/devices/sensor-1/readings?from={from}&to={to}&limit={limit}"),
            format!("/readings?from={from}&to={to}&limit={limit}"),
        ] {
            assert_eq!(follow(&svc, &path).await?, want, "{path}");
        }
    }
    let stats = get(
        &svc,
        &format!(
            "/devices/sensor-1/stats?from={from}&to={}&interval=5s&metric=temperature",
            from + 30_000
        ),
    )
    .await?;
    let counts: Vec<u64> = stats["buckets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| b["count"].as_u64().unwrap_or_default())
        .collect();
    assert_eq!(counts, [5; 6], "{stats}");
    // A point read of a reading held twice answers it once.
    let ts = HOUR3 + 15_000;
    let point = get(&svc, &format!("/devices/sensor-1/readings/e-0015?ts={ts}")).await?;
    assert_eq!(point["event_id"], "e-0015", "{point}");
    rig.finish().await
}

/// `shardline blocks on`'s write where DynamoDB's conditions are enforced (dynalite,
/// whose conditional puts are atomic; moto's are not): eight switches at once schedule
/// one table-layout epoch and the other seven find it done, and a layout written from a
/// history another writer has moved on from is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynalite_switching_blocks_on_at_once_schedules_one_epoch() -> Result<()> {
    use sharding::block::BlockLayout;
    use sharding::epoch::TableHistory;
    use sharding::layout::Layout;
    use sharding::time::Bucket;
    use store::config::{Vars, WriterSettings};
    use store::directory::layout::ScheduledLayout;
    use store::directory::{ShardDirectory, ShardReader, ShardStore};

    let rig = Rig::start(Backend::Dynalite, |_, _| {}).await?;
    let shards = DynamoShards::new(&rig.direct, &rig.shard_table_name);
    let hourly = Layout::time_bucket(Bucket::Hour, std::num::NonZeroU32::MIN.saturating_add(3));
    let before = TableHistory::new(hourly);
    ensure!(
        shards.create_layout(&before).await? == Written::Applied,
        "the layout was created"
    );
    let table = rig.shard_table_name.clone();
    let settings = WriterSettings::parse(&Vars(|name: &str| {
        (name == "SHARD_TABLE_NAME").then(|| table.clone())
    }))?;
    let on = |latest: &Layout| latest.clone().with_blocks(BlockLayout::default());
    let switches = (0..8).map(|_| {
        let directory = ShardDirectory::new(
            DynamoShards::new(&rig.direct, &rig.shard_table_name),
            settings.directory.clone(),
        );
        async move { directory.schedule_layout(on, t0()).await }
    });
    let outcomes = futures::future::join_all(switches).await;
    let scheduled = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(ScheduledLayout::Scheduled(_))))
        .count();
    let already = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(ScheduledLayout::Already(_))))
        .count();
    assert_eq!((scheduled, already), (1, 7), "{outcomes:?}");
    let stored = shards.get_layout().await?.expect("a layout");
    assert_eq!(stored.epochs().len(), 2, "{stored:?}");
    assert!(stored.latest().blocks.is_some(), "{stored:?}");

    // A writer still holding the one-epoch history cannot write over the switch.
    let mut stale = before.clone();
    stale.schedule(
        Layout::time_bucket(Bucket::Minute, std::num::NonZeroU32::MIN),
        t0(),
        settings.directory.policy.propagation_margin,
    )?;
    assert_eq!(
        shards.replace_layout(1, &stale).await?,
        Written::Refused,
        "a stale write was taken"
    );
    assert_eq!(shards.get_layout().await?, Some(stored));
    Ok(())
}
