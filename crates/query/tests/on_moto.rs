//! End to end against a private moto on loopback: items written with `serde_dynamo`
//! under a time-bucket layout with one hot device (fan-out raised inside the range),
//! read back through the handler with the DynamoDB adapters.

use std::collections::BTreeMap;
use std::time::Duration;

use query::{QueryService, ServiceConfig};
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::{Raise, ShardMeta};
use sharding::key::{ReadingRef, write_key};
use sharding::time::Timestamp;
use stand_in::TestStack;
use store::Written;
use store::directory::{ShardReader, ShardStore, UpdateCondition};
use store::dynamo::DynamoShards;
use store::item::{Reading, ReadingItem};
use store::read::DynamoReadingSource;

use crate::common::{BASE_MS, hourly, key, now, table_history, ts};

type Svc = QueryService<DynamoReadingSource, DynamoShards>;

#[tokio::test]
async fn readings_written_to_moto_read_back_through_the_handler() -> anyhow::Result<()> {
    // With the time index (off by default), so both every-device paths are read.
    let stand_in = TestStack::start_with(&[("TimeIndex", "enabled")]).await?;
    let client = aws_sdk_dynamodb::Client::new(&stand_in.sdk_config().await);
    let stack = &stand_in.stack;
    let shards = DynamoShards::new(&client, &stack.shard_table_name);

    // Layout: hour buckets over 2 shards; hot-1 goes to 3 sub-shards at 00:30.
    let layout = table_history(vec![(0, hourly(2))]);
    assert_eq!(shards.create_layout(&layout).await?, Written::Applied);
    let hot_history = raise_hot_device(&shards).await?;
    let expected_hot = write_readings(&client, &stack.table_name, &layout, &hot_history).await?;

    let source = DynamoReadingSource::new(client.clone(), &stack.table_name);
    let svc = QueryService::new(source, shards, ServiceConfig::new(key()));

    // One hot device, pages of 7 followed by cursor across the fan-out change.
    let hot = read_pages(
        &svc,
        &format!(
            "/devices/hot-1/readings?from={BASE_MS}&to={}&limit=7&consistent=true",
            BASE_MS + 2 * 3_600_000
        ),
    )
    .await?;
    let got: Vec<&str> = hot.iter().map(|(_, _, event)| event.as_str()).collect();
    assert_eq!(got, expected_hot);

    every_device_descending_is_merged_by_time(&svc).await?;
    one_reading_stats_and_shards(&svc).await?;

    // Every device through the time index the stand-in created from template.yaml
    // (moto: Query with IndexName on the LSI, LastEvaluatedKey naming ts_ms), paged by
    // cursor: the same 180 readings, in the same order, as the whole-bucket path.
    let mut indexed_config = ServiceConfig::new(key());
    indexed_config.time_index = Some("by-time".into());
    let indexed = QueryService::new(
        DynamoReadingSource::new(client.clone(), &stack.table_name),
        DynamoShards::new(&client, &stack.shard_table_name),
        indexed_config,
    );
    for order in ["asc", "desc"] {
        let url = format!(
            "/readings?from={BASE_MS}&to={}&limit=7&order={order}",
            BASE_MS + 2 * 3_600_000
        );
        let whole_buckets = read_pages(&svc, &url).await?;
        let through_index = read_pages(&indexed, &url).await?;
        assert_eq!(whole_buckets.len(), 180, "{order}");
        assert_eq!(through_index.len(), 180, "{order}");
        assert_eq!(
            whole_buckets, through_index,
            "{order}: index and whole buckets differ"
        );
    }
    Ok(())
}

/// Creates hot-1 and raises it to 3 sub-shards at 00:30; its stored history.
async fn raise_hot_device(shards: &DynamoShards) -> anyhow::Result<FanoutHistory> {
    let created = ShardMeta::initial(ts(BASE_MS - 1000));
    assert_eq!(
        shards.create_entity("hot-1", &created).await?,
        Written::Applied
    );
    let raise = Raise {
        from: 1,
        to: 3,
        precondition_last_updated: created.last_updated,
        effective_from: ts(BASE_MS + 1_800_000),
        updated_at: ts(BASE_MS),
    };
    let raised = created.raised(&raise)?;
    let condition = UpdateCondition {
        last_updated: created.last_updated,
        quiet_since: None,
    };
    assert_eq!(
        shards.update_entity("hot-1", &condition, &raised).await?,
        Written::Applied
    );
    let hot_history = shards
        .get_entity("hot-1")
        .await?
        .map(|m| m.shard_history)
        .unwrap_or_default();
    assert_eq!(hot_history.epochs().len(), 1);
    Ok(hot_history)
}

/// 90 readings per device over 90 minutes, one a minute, hot-1 offset by 1 ms; the
/// event ids of hot-1's, in time order.
async fn write_readings(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    layout: &TableHistory,
    hot_history: &FanoutHistory,
) -> anyhow::Result<Vec<String>> {
    let mut expected_hot = Vec::new();
    for (device, offset, history) in [
        ("cold-1", 0, FanoutHistory::new()),
        ("hot-1", 1, hot_history.clone()),
    ] {
        for i in 0..90i64 {
            let reading = Reading {
                device_id: device.into(),
                event_id: format!("e{i:03}"),
                ts: Timestamp::from_millis(BASE_MS + i * 60_000 + offset)?,
                metrics: BTreeMap::from([(
                    "temperature".into(),
                    store::Decimal::from_f64(i as f64).expect("a number"),
                )]),
                tags: BTreeMap::new(),
                written: store::WriteOrder::OLDEST,
            };
            let k = write_key(
                &ReadingRef::new(device, &reading.event_id, reading.ts),
                layout,
                &history,
                reading.ts,
            )?
            .key;
            let item = ReadingItem::new(&reading, k, Duration::from_secs(86_400 * 3650));
            client
                .put_item()
                .table_name(table)
                .set_item(Some(item.to_item()?))
                .send()
                .await?;
            if device == "hot-1" {
                expected_hot.push(reading.event_id.clone());
            }
        }
    }
    Ok(expected_hot)
}

/// (status, JSON body) of one GET.
async fn get(svc: &Svc, url: &str) -> (u16, serde_json::Value) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let resp = svc.handle_parts("GET", path, Some(query), now()).await;
    let body: serde_json::Value = serde_json::from_str(resp.body()).expect("JSON");
    (resp.status().as_u16(), body)
}

/// Every page of a readings read, following its cursors: (ts, device, event) of each
/// reading in the order the pages gave them.
async fn read_pages(svc: &Svc, url: &str) -> anyhow::Result<Vec<(String, String, String)>> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let mut got = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, body) = get(svc, &format!("{url}{cursor}")).await;
        assert_eq!(status, 200, "{body}");
        for item in body["items"].as_array().expect("items") {
            got.push((
                text(&item["ts"]),
                text(&item["device_id"]),
                text(&item["event_id"]),
            ));
        }
        match body["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return Ok(got),
        }
    }
}

/// Every device, descending, merged by time.
async fn every_device_descending_is_merged_by_time(svc: &Svc) -> anyhow::Result<()> {
    let (status, body) = get(
        svc,
        &format!(
            "/readings?from={BASE_MS}&to={}&limit=4&order=desc",
            BASE_MS + 2 * 3_600_000
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let firsts: Vec<(String, String)> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["device_id"].as_str().unwrap_or_default().to_string(),
                i["event_id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let pair = |d: &str, e: &str| (d.to_string(), e.to_string());
    assert_eq!(
        firsts,
        vec![
            pair("hot-1", "e089"),
            pair("cold-1", "e089"),
            pair("hot-1", "e088"),
            pair("cold-1", "e088")
        ]
    );
    Ok(())
}

/// One reading, stats, shards.
async fn one_reading_stats_and_shards(svc: &Svc) -> anyhow::Result<()> {
    let (status, body) = get(
        svc,
        "/devices/hot-1/readings/e045?ts=2026-06-22T00:45:00.001Z",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metrics"]["temperature"], 45.0);
    let (status, body) = get(
        svc,
        &format!(
            "/devices/hot-1/stats?from={BASE_MS}&to={}&interval=1h&metric=temperature",
            BASE_MS + 2 * 3_600_000
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["buckets"][0]["count"], 60);
    assert_eq!(body["buckets"][1]["count"], 30);
    assert_eq!(body["buckets"][1]["min"], 60.0);
    let (status, body) = get(svc, "/devices/hot-1/shards?").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["fanout"][0]["k"], 3);
    assert_eq!(
        body["fanout"][0]["effective_from"],
        "2026-06-22T00:30:00.000Z"
    );
    Ok(())
}
