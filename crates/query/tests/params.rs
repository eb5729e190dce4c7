//! Scenario 17: every bad request is a 400 naming the parameter, with no read at all.

use std::sync::Arc;

use crate::common::{BASE_MS, R, get, hourly, load, now, service, shard_table, table_history};
use store::memory::{MemoryReadings, MemoryShards};

fn fixture() -> (MemoryReadings, Arc<MemoryShards>) {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let readings: Vec<R> = (0..10)
        .map(|i| R {
            device: "dev-1".into(),
            event: format!("e{i}"),
            ts_ms: BASE_MS + i * 1000,
            value: crate::common::n(i as f64),
        })
        .collect();
    load(&table, &shards, &readings);
    (table, Arc::new(shards))
}

const DEV: &str = "/devices/dev-1/readings";

async fn refused(path_and_query: &str, status: u16, code: &str, mentions: &str) {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    let (got, body) = get(&svc, path_and_query).await;
    assert_eq!(got, status, "{path_and_query}: {body}");
    assert_eq!(body["error"]["code"], code, "{path_and_query}: {body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(
        message.contains(mentions),
        "{path_and_query}: message {message:?} should mention {mentions:?}"
    );
    assert_eq!(
        table.calls(),
        0,
        "{path_and_query}: readings table was read"
    );
    assert_eq!(
        shards.reads(),
        0,
        "{path_and_query}: metadata table was read"
    );
}

fn q(params: &str) -> String {
    format!("{DEV}?{params}")
}

#[tokio::test]
async fn bad_and_reversed_ranges() {
    refused(&q("to=1782086400000"), 400, "missing_parameter", "from").await;
    refused(&q("from=1782086400000"), 400, "missing_parameter", "to").await;
    refused(
        &q("from=yesterday&to=1782086400000"),
        400,
        "bad_range",
        "from",
    )
    .await;
    refused(
        &q("from=1782086400000&to=2026-13-01T00:00:00Z"),
        400,
        "bad_range",
        "to",
    )
    .await;
    refused(
        &q("from=1782086400000&to=1782086400000"),
        400,
        "bad_range",
        "before",
    )
    .await;
    refused(
        &q("from=2026-06-22T02:00:00Z&to=2026-06-22T01:00:00Z"),
        400,
        "bad_range",
        "before",
    )
    .await;
    refused(&q("from=-5&to=1782086400000"), 400, "bad_range", "from").await;
    refused(
        &q("from=2026-06-22T00:00:00.0001Z&to=2026-06-22T00:00:00.0009Z"),
        400,
        "bad_range",
        "before",
    )
    .await;
}

#[tokio::test]
async fn ranges_over_the_cap() {
    refused(
        &q("from=2026-05-01T00:00:00Z&to=2026-06-22T00:00:00Z"),
        400,
        "range_too_large",
        "31 days",
    )
    .await;
    refused(
        "/readings?from=2026-06-20T00:00:00Z&to=2026-06-22T00:00:00Z",
        400,
        "range_too_large",
        "24 hours",
    )
    .await;
    refused(
        "/devices/dev-1/stats?from=2026-05-01T00:00:00Z&to=2026-06-22T00:00:00Z&interval=1d&metric=t",
        400,
        "range_too_large",
        "31 days",
    )
    .await;
}

const R1: &str = "from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z";

#[tokio::test]
async fn bad_limits_orders_and_flags() {
    for limit in ["0", "1001", "-1", "ten", "", "1e3", "99999999999"] {
        refused(
            &q(&format!("{R1}&limit={limit}")),
            400,
            "bad_limit",
            "limit",
        )
        .await;
    }
    for order in ["ascending", "ASC", "", "random"] {
        refused(
            &q(&format!("{R1}&order={order}")),
            400,
            "bad_order",
            "order",
        )
        .await;
    }
    refused(
        &q(&format!("{R1}&consistent=yes")),
        400,
        "bad_parameter",
        "consistent",
    )
    .await;
    refused(
        &q(&format!("{R1}&limit=5&limit=6")),
        400,
        "duplicate_parameter",
        "limit",
    )
    .await;
}

/// An id has one spelling in a path: a percent-encoded character that decodes into the
/// id alphabet is another spelling a path rule (an IAM `execute-api:Invoke` resource on
/// `.../GET/devices/sensor-alpha-001/*`) would not match, so it is refused on every
/// device route, naming the canonical form; the plain id is served.
#[tokio::test]
async fn a_percent_encoded_id_is_refused_on_every_device_route() {
    for path in [
        format!("/devices/sensor%2Dalpha-001/readings?{R1}"),
        format!("/devices/sensor%2dalpha-001/readings?{R1}"),
        format!("/devices/%73ensor-alpha-001/stats?{R1}&interval=1m&metric=t"),
        "/devices/sensor%2Dalpha-001/shards".to_owned(),
        "/devices/sensor%2Dalpha-001/latest".to_owned(),
        "/devices/sensor%2Dalpha-001/readings/e1?ts=2026-06-22T01:00:00Z".to_owned(),
    ] {
        refused(&path, 400, "bad_id", "sensor-alpha-001").await;
    }
    refused(
        "/devices/sensor-alpha-001/readings/e%2D1?ts=2026-06-22T01:00:00Z",
        400,
        "bad_id",
        "event_id",
    )
    .await;
    let plain = query::parse_request(
        "GET",
        "/devices/sensor-alpha-001/shards",
        None,
        &query::Limits::default(),
    );
    assert!(plain.is_ok(), "{plain:?}");
}

#[tokio::test]
async fn bad_ids() {
    refused(
        &format!("/devices/dev%231/readings?{R1}"),
        400,
        "bad_id",
        "device_id",
    )
    .await;
    refused(
        &format!("/devices/dev%20x/readings?{R1}"),
        400,
        "bad_id",
        "device_id",
    )
    .await;
    let long = "a".repeat(300);
    refused(
        &format!("/devices/{long}/readings?{R1}"),
        400,
        "bad_id",
        "device_id",
    )
    .await;
    refused(
        "/devices/dev-1/readings/ev%23t?ts=1782086400000",
        400,
        "bad_id",
        "event_id",
    )
    .await;
    refused("/devices/dev-1/readings/e1", 400, "missing_parameter", "ts").await;
}

#[tokio::test]
async fn unknown_parameters_are_named() {
    refused(
        &q(&format!("{R1}&limt=10")),
        400,
        "unknown_parameter",
        "limt",
    )
    .await;
    refused(
        "/devices/dev-1/shards?verbose=1",
        400,
        "unknown_parameter",
        "verbose",
    )
    .await;
    refused(
        "/devices/dev-1/readings/e1?ts=1782086400000&from=1",
        400,
        "unknown_parameter",
        "from",
    )
    .await;
    // The newest reading takes `consistent` alone: no range, limit or order.
    for name in ["limit", "order", "from", "cursor"] {
        refused(
            &format!("/devices/dev-1/latest?{name}=1"),
            400,
            "unknown_parameter",
            name,
        )
        .await;
    }
    refused(
        "/devices/dev-1/latest?consistent=yes",
        400,
        "bad_parameter",
        "consistent",
    )
    .await;
    refused(
        "/devices/dev-1/latest?consistent=true&consistent=false",
        400,
        "duplicate_parameter",
        "consistent",
    )
    .await;
    // The stats route pages by cursor, not by limit.
    refused(
        &format!("/devices/dev-1/stats?{R1}&interval=1h&metric=t&limit=10"),
        400,
        "unknown_parameter",
        "limit",
    )
    .await;
}

#[tokio::test]
async fn bad_stats_parameters() {
    let base = format!("/devices/dev-1/stats?{R1}");
    refused(
        &format!("{base}&metric=t"),
        400,
        "missing_parameter",
        "interval",
    )
    .await;
    refused(
        &format!("{base}&interval=1h"),
        400,
        "missing_parameter",
        "metric",
    )
    .await;
    for interval in ["0s", "1w", "h", "1.5h", "-1h", "1H"] {
        refused(
            &format!("{base}&interval={interval}&metric=t"),
            400,
            "bad_interval",
            "interval",
        )
        .await;
    }
    refused(
        &format!("{base}&interval=1s&metric=t&to=x"),
        400,
        "duplicate_parameter",
        "to",
    )
    .await;
    refused(
        &format!("{base}&interval=1h&metric=a%23b"),
        400,
        "bad_parameter",
        "metric",
    )
    .await;
}

#[tokio::test]
async fn bad_cursors() {
    refused(&q(&format!("{R1}&cursor=")), 400, "bad_cursor", "cursor").await;
    refused(
        &q(&format!("{R1}&cursor=garbage")),
        400,
        "bad_cursor",
        "cursor",
    )
    .await;
    refused(
        &q(&format!("{R1}&cursor=e30.AAAA")),
        400,
        "bad_cursor",
        "signature",
    )
    .await;
    refused(
        &q(&format!("{R1}&cursor=%FF%FE")),
        400,
        "bad_parameter",
        "cursor",
    )
    .await;
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    for path in [
        "/",
        "/device",
        "/stats/x",
        "/devices/dev-1",
        "/devices/dev-1/other",
        "/readings/x/y",
    ] {
        let resp = svc.handle_parts("GET", path, None, now()).await;
        assert_eq!(resp.status(), 404, "{path}");
        let body: serde_json::Value = serde_json::from_str(resp.body()).unwrap();
        assert_eq!(body["error"]["code"], "not_found");
    }
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let resp = svc.handle_parts(method, DEV, Some(R1), now()).await;
        assert_eq!(resp.status(), 405, "{method}");
        assert_eq!(resp.headers()["allow"], "GET");
    }
    assert_eq!(table.calls() + shards.reads(), 0);
}

#[tokio::test]
async fn a_throttled_read_is_a_503_with_retry_after() {
    let (table, shards) = fixture();
    table.set_throttled(true);
    let svc = service(&table, shards);
    let resp = svc.handle_parts("GET", DEV, Some(R1), now()).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = serde_json::from_str(resp.body()).unwrap();
    assert_eq!(body["error"]["code"], "throttled");
}

#[tokio::test]
async fn good_requests_answer() {
    let (table, shards) = fixture();
    let svc = service(&table, shards);
    let (status, body) = get(
        &svc,
        &q(&format!("{R1}&limit=3&order=desc&consistent=true")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["event_id"], "e9");
    assert_eq!(items[0]["ts"], "2026-06-22T00:00:09.000Z");
    assert_eq!(items[0]["metrics"]["temperature"], 9.0);
    assert_eq!(items[0]["tags"]["site"], "lab");
    assert!(body["next_cursor"].is_string());

    let (status, body) = get(&svc, "/devices/dev-1/readings/e4?ts=2026-06-22T00:00:04Z").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["event_id"], "e4");
    let (status, body) = get(&svc, "/devices/dev-1/readings/e4?ts=2026-06-22T00:00:05Z").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");

    let (status, body) = get(
        &svc,
        &format!("/devices/dev-1/stats?{R1}&interval=5s&metric=temperature"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let buckets = body["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 2);
    assert_eq!(buckets[0]["start"], "2026-06-22T00:00:00.000Z");
    assert_eq!(buckets[0]["count"], 5);
    assert_eq!(buckets[0]["min"], 0.0);
    assert_eq!(buckets[0]["max"], 4.0);
    assert_eq!(buckets[0]["avg"], 2.0);
    assert_eq!(buckets[1]["avg"], 7.0);

    let (status, body) = get(&svc, "/devices/dev-1/shards").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["layout"][0]["strategy"], "time_bucket(hour)");
    assert_eq!(body["layout"][0]["shards"], 4);
    assert_eq!(body["fanout"], serde_json::json!([]));
}

/// A time a request names is read by the one rule a reading's `ts` is read with
/// (`sharding::time::Timestamp::parse`): any offset, sub-millisecond digits truncated,
/// so a bound falls on the millisecond its readings are stored at; the request's own
/// limits (digits, length, 1970 to 9999) on top.
#[test]
fn a_request_reads_a_time_by_the_rule_a_reading_is_read_with() {
    use sharding::time::Timestamp;
    for raw in [
        "2026-06-22T01:00:00Z",
        "2026-06-22T01:00:00.123Z",
        "2026-06-22T01:00:00.123456Z",
        "2026-06-22T01:00:00.123999999Z",
        "2026-06-22T03:00:00.5+02:00",
        "1782090000123",
        "0",
    ] {
        assert_eq!(
            query::params::parse_ts("from", raw).ok(),
            Timestamp::parse(raw).ok().map(Timestamp::as_millis),
            "{raw}"
        );
    }
    assert_eq!(
        query::params::parse_ts("from", "2026-06-22T01:00:00.123456Z").ok(),
        Some(BASE_MS + 3_600_000 + 123)
    );
    for raw in [
        "-1",
        " 2026-06-22T01:00:00Z",
        "yesterday",
        "10000-01-01T00:00:00Z",
    ] {
        assert!(query::params::parse_ts("from", raw).is_err(), "{raw}");
    }
}
