//! The API Gateway events in `events/` (the same files `cargo lambda invoke
//! --data-file` uses) through the Lambda adapter.

use std::path::PathBuf;
use std::sync::Arc;

use http::StatusCode;
use query::lambda::handle_apigw;

use crate::common::{BASE_MS, R, hourly, load, service, shard_table, table_history};
use store::memory::MemoryReadings;

fn event(name: &str) -> lambda_http::Request {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../events")
        .join(name);
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    lambda_http::request::from_str(&json).expect("an API Gateway v2 event")
}

pub(crate) async fn call(name: &str) -> (StatusCode, serde_json::Value, u64) {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let rs: Vec<R> = (0..100)
        .map(|i| R {
            device: if i % 2 == 0 {
                "sensor-alpha-001"
            } else {
                "sensor-beta-002"
            }
            .into(),
            event: format!("evt-{i:06}"),
            ts_ms: BASE_MS + 3_600_000 + i * 250,
            value: crate::common::n(20.0 + i as f64),
        })
        .collect();
    load(&table, &shards, &rs);
    // sensor-alpha-001's newest readings, an hour before the wall clock the adapter
    // reads: `GET /devices/{device_id}/latest` looks back from it.
    let now_ms = crate::common::now().as_millis();
    let recent: Vec<R> = (0..3)
        .map(|i| R {
            device: "sensor-alpha-001".into(),
            event: format!("evt-recent-{i}"),
            ts_ms: now_ms - 3_600_000 + i * 1000,
            value: crate::common::n(30.0 + i as f64),
        })
        .collect();
    load(&table, &shards, &recent);
    let svc = service(&table, Arc::new(shards));
    let resp = handle_apigw(&svc, event(name)).await.unwrap();
    let status = resp.status();
    let body = match resp.body() {
        lambda_http::Body::Text(t) => serde_json::from_str(t).unwrap(),
        other => panic!("unexpected body {other:?}"),
    };
    (status, body, table.calls())
}

#[tokio::test]
async fn device_readings_event() {
    let (status, body, _) = call("apigw-device-readings.json").await;
    assert_eq!(status, 200, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 50);
    assert!(items.iter().all(|i| i["device_id"] == "sensor-alpha-001"));
    assert!(body["next_cursor"].is_null());
}

#[tokio::test]
async fn reading_event() {
    let (status, body, calls) = call("apigw-reading.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["event_id"], "evt-000042");
    assert_eq!(body["ts"], "2026-06-22T01:00:10.500Z");
    assert_eq!(calls, 1, "one GetItem");
}

#[tokio::test]
async fn all_readings_event() {
    let (status, body, _) = call("apigw-all-readings.json").await;
    assert_eq!(status, 200, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 100);
    assert_eq!(items[0]["event_id"], "evt-000099", "descending");
}

#[tokio::test]
async fn stats_event() {
    let (status, body, _) = call("apigw-stats.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["buckets"][0]["start"], "2026-06-22T01:00:00.000Z");
    assert_eq!(body["buckets"][0]["count"], 50);
}

#[tokio::test]
async fn shards_event() {
    let (status, body, _) = call("apigw-shards.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["device_id"], "sensor-alpha-001");
}

#[tokio::test]
async fn latest_event() {
    let (status, body, calls) = call("apigw-latest.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["device_id"], "sensor-alpha-001");
    assert_eq!(body["event_id"], "evt-recent-2");
    assert!(body["as_of"].is_string(), "{body}");
    assert!(calls <= 6, "{calls} Queries");
}

#[tokio::test]
async fn bad_request_event() {
    let (status, body, calls) = call("apigw-bad-request.json").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_parameter");
    assert!(body["error"]["message"].as_str().unwrap().contains("limt"));
    assert_eq!(calls, 0);
}

#[test]
fn named_stages_are_stripped() {
    use query::lambda::strip_stage;
    assert_eq!(strip_stage("/prod/readings", Some("prod")), "/readings");
    assert_eq!(strip_stage("/readings", Some("$default")), "/readings");
    assert_eq!(
        strip_stage("/production/readings", Some("prod")),
        "/production/readings"
    );
    assert_eq!(strip_stage("/readings", None), "/readings");
}
