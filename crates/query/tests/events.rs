//! The API Gateway events in `events/` (the same files `cargo lambda invoke
//! --data-file` uses) through the Lambda adapter, over a service that reads the
//! sealer's derived items too (`ROLLUP_TABLE`), as the deployed function does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use http::StatusCode;
use query::lambda::handle_apigw;

use crate::common::{BASE_MS, R, hourly, load, service, shard_table, table_history};
use store::Written;
use store::memory::{MemoryReadings, MemoryRollups};
use store::rollup::{
    DeviceHour, DirEntry, FleetPart, HOUR_MS, RollupItem, RollupTable, hour_of, keys, part_of,
};

fn event(name: &str) -> lambda_http::Request {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../events")
        .join(name);
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    lambda_http::request::from_str(&json).expect("an API Gateway v2 event")
}

/// The hours `[from_ms, to_ms)` of `readings` sealed as the sealer seals them: each
/// device-hour from its readings, with its hour summary; a directory entry per device;
/// each part of an hour `FleetPart::of` its device-hours; then the watermark, the end
/// its version and the first sealed hour in its body.
async fn seal(rollups: &MemoryRollups, readings: &[R], from_ms: i64, to_ms: i64) {
    let mut device_hours: BTreeMap<(i64, String), DeviceHour> = BTreeMap::new();
    for r in readings
        .iter()
        .filter(|r| (from_ms..to_ms).contains(&r.ts_ms))
    {
        let hour = hour_of(r.ts_ms);
        device_hours
            .entry((hour, r.device.clone()))
            .or_insert_with(|| DeviceHour::new(&r.device, hour))
            .add(
                r.ts_ms,
                &r.event,
                &BTreeMap::from([("temperature".to_owned(), r.value.clone())]),
                &BTreeMap::from([("site".to_owned(), "lab".to_owned())]),
            );
    }
    let mut directory: BTreeMap<String, DirEntry> = BTreeMap::new();
    let mut parts: BTreeMap<(i64, u32), Vec<&DeviceHour>> = BTreeMap::new();
    for ((hour, device), dh) in &device_hours {
        let item = RollupItem::with_body(keys::device_hour(device, *hour), dh.readings(), dh, None);
        assert_eq!(
            rollups.put_if_newer(&item.unwrap()).await.unwrap(),
            Written::Applied
        );
        let summary = dh.summary();
        let key = keys::device_summary(device, *hour);
        let item = RollupItem::with_body(key, dh.readings(), &summary, None);
        assert_eq!(
            rollups.put_if_newer(&item.unwrap()).await.unwrap(),
            Written::Applied
        );
        let entry = DirEntry::of(dh);
        directory
            .entry(device.clone())
            .and_modify(|e| *e = e.merged(&entry))
            .or_insert(entry);
        parts.entry((*hour, part_of(device))).or_default().push(dh);
    }
    for (device, entry) in &directory {
        let key = keys::directory_entry(device);
        let item = RollupItem::with_body(key, 1, entry, None).unwrap();
        rollups.put(&item).await.unwrap();
    }
    for ((hour, part), dhs) in parts {
        let fleet = FleetPart::of(hour, part, dhs);
        let item =
            RollupItem::with_body(keys::fleet_part(hour, part), fleet.readings(), &fleet, None)
                .unwrap();
        assert_eq!(rollups.put_if_newer(&item).await.unwrap(), Written::Applied);
    }
    let version = u64::try_from(to_ms).unwrap();
    let body = serde_json::json!({ "from_ms": from_ms });
    let watermark = RollupItem::with_body(keys::watermark(), version, &body, None).unwrap();
    rollups.put(&watermark).await.unwrap();
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
    // A device whose one reading `GET /devices?prefix=sensor-` leaves out.
    let gateway = R {
        device: "gateway-9".into(),
        event: "evt-gw-0".into(),
        ts_ms: BASE_MS + 1_800_000,
        value: crate::common::n(5.0),
    };
    load(&table, &shards, std::slice::from_ref(&gateway));
    // The hours 00:00 and 01:00 sealed: the watermark at 02:00.
    let rollups = MemoryRollups::new();
    let sealed = [rs.as_slice(), &[gateway]].concat();
    seal(&rollups, &sealed, BASE_MS, BASE_MS + 2 * HOUR_MS).await;
    let svc = service(&table, Arc::new(shards)).with_rollups(rollups);
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
async fn devices_event() {
    let (status, body, calls) = call("apigw-devices.json").await;
    assert_eq!(status, 200, "{body}");
    let devices: Vec<&str> = body["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device_id"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["sensor-alpha-001", "sensor-beta-002"]);
    let alpha = &body["devices"][0];
    assert_eq!(alpha["first_seen"], "2026-06-22T01:00:00.000Z");
    assert_eq!(alpha["last_event_id"], "evt-000098");
    assert_eq!(body["as_of"], "2026-06-22T02:00:00.000Z");
    assert!(body["next_cursor"].is_null(), "{body}");
    assert_eq!(calls, 0, "no read of the readings table");
}

#[tokio::test]
async fn fleet_stats_event() {
    let (status, body, calls) = call("apigw-fleet-stats.json").await;
    assert_eq!(status, 200, "{body}");
    // Only the sealed hours, before the watermark: 00:00 (the gateway) and 01:00.
    assert_eq!(body["watermark"], "2026-06-22T02:00:00.000Z");
    let buckets = body["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 2, "{body}");
    assert_eq!(buckets[0]["start"], "2026-06-22T00:00:00.000Z");
    assert_eq!(buckets[0]["readings"], 1);
    assert_eq!(buckets[1]["start"], "2026-06-22T01:00:00.000Z");
    assert_eq!(buckets[1]["readings"], 100);
    assert_eq!(buckets[1]["devices"], 2);
    // 20 + 21 + ... + 119, exact.
    assert_eq!(buckets[1]["metrics"]["temperature"]["count"], 100);
    assert_eq!(buckets[1]["metrics"]["temperature"]["sum"], 6950);
    assert!(body["next_cursor"].is_null(), "{body}");
    assert_eq!(calls, 0, "no read of the readings table");
}

#[tokio::test]
async fn device_series_event() {
    let (status, body, _) = call("apigw-device-series.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metric"], "temperature");
    assert_eq!(body["agg"], "avg");
    assert_eq!(body["interval_ms"], 60_000);
    // sensor-alpha-001's 50 readings, 20, 22, ..., 118, in the minute 01:00 (sealed).
    assert_eq!(
        body["points"],
        serde_json::json!([[BASE_MS + HOUR_MS, 69.0]])
    );
}

#[tokio::test]
async fn fleet_series_event() {
    let (status, body, calls) = call("apigw-fleet-series.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["agg"], "sum");
    assert_eq!(body["interval_ms"], 3_600_000);
    assert_eq!(body["watermark"], "2026-06-22T02:00:00.000Z");
    // The sealed hours: the gateway's 5 at 00:00, 20 + 21 + ... + 119 at 01:00.
    assert_eq!(
        body["points"],
        serde_json::json!([[BASE_MS, 5], [BASE_MS + HOUR_MS, 6950]])
    );
    assert_eq!(calls, 0, "no read of the readings table");
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
