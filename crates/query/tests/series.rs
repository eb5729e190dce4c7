//! `GET /devices/{device_id}/series` and `GET /series`: one answer of at most 10,000
//! points or a 400 that says why (`bad_interval` naming the smallest interval that
//! fits, `budget_exceeded` naming the budget), the fleet's from its sealed parts, and
//! who may read them.

use std::collections::BTreeMap;
use std::sync::Arc;

use query::{QueryService, ReadScope, ServiceConfig};
use serde_json::Value;
use store::memory::{MemoryReadings, MemoryRollups};
use store::rollup::{
    DeviceHour, FleetPart, HOUR_MS, MINUTE_MS, RollupItem, RollupTable, keys, part_of,
};

use crate::common::{BASE_MS, R, Service, hourly, key, load, n, now, shard_table, table_history};

const DAY: i64 = 24 * HOUR_MS;
const CLAIM: &str = "shardline_devices";

fn config() -> ServiceConfig {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 8;
    config
}

/// `GET path?query` as `scope`'s caller: status and JSON body.
async fn get_as(svc: &Service<'_>, scope: &ReadScope, path: &str, query: &str) -> (u16, Value) {
    let request = query::service::Request {
        method: "GET",
        path,
        query: Some(query),
    };
    let resp = svc.handle_as(Ok(scope), request, now(), None).await;
    (
        resp.status().as_u16(),
        serde_json::from_str(resp.body()).unwrap(),
    )
}

async fn get(svc: &Service<'_>, path: &str, query: &str) -> (u16, Value) {
    get_as(svc, &ReadScope::Every, path, query).await
}

/// The fleet's parts of `hours` hours from `BASE_MS`, as the sealer writes them: two
/// devices (in two parts), each reading once a minute with a 38-digit temperature,
/// and the watermark at the end of the last hour.
async fn seal_fleet(rollups: &MemoryRollups, hours: i64) {
    let devices = ["dev-a", "dev-b"];
    assert_ne!(part_of(devices[0]), part_of(devices[1]));
    let templates: Vec<DeviceHour> = devices
        .iter()
        .enumerate()
        .map(|(d, device)| {
            let mut dh = DeviceHour::new(*device, 0);
            for m in 0..60_i64 {
                let v = format!("{}{:02}.{}", "1234567890123456789012345678901234", m, d);
                let metrics = BTreeMap::from([("temperature".to_owned(), n_text(&v))]);
                dh.add(
                    m * MINUTE_MS + 7,
                    &format!("e{m}"),
                    &metrics,
                    &BTreeMap::new(),
                );
            }
            dh
        })
        .collect();
    for h in 0..hours {
        let hour = BASE_MS + h * HOUR_MS;
        for dh in &templates {
            let part = FleetPart::of(hour, part_of(&dh.device), [dh]);
            let item = RollupItem::with_body(
                keys::fleet_part(hour, part.part),
                part.readings(),
                &part,
                None,
            )
            .unwrap();
            rollups.put(&item).await.unwrap();
        }
    }
    let end = BASE_MS + hours * HOUR_MS;
    let body = serde_json::json!({ "from_ms": BASE_MS });
    let watermark =
        RollupItem::with_body(keys::watermark(), u64::try_from(end).unwrap(), &body, None).unwrap();
    rollups.put(&watermark).await.unwrap();
}

/// `body` against `openapi.yaml`'s schema of `template`'s answer with `status`.
pub(crate) fn valid(body: &Value, template: &str, status: u16) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../openapi.yaml");
    let doc: Value = yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut response = &doc["paths"][template]["get"]["responses"][status.to_string()];
    if let Some(reference) = response.get("$ref").and_then(Value::as_str) {
        response = doc.pointer(reference.strip_prefix('#').unwrap()).unwrap();
    }
    let schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [response.pointer("/content/application~1json/schema").unwrap()],
        "components": doc["components"],
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{template} {status}: {errors:?}");
}

fn n_text(v: &str) -> store::Decimal {
    store::Decimal::parse(v).unwrap()
}

/// A series whose range holds more than 10,000 buckets of its interval is 400
/// `bad_interval`, naming the smallest `interval_ms` that fits (a whole minute from a
/// minute on, since the interval used is rounded up to one), before any read.
#[tokio::test]
async fn a_series_of_more_than_10000_points_is_400_naming_the_smallest_interval_that_fits() {
    let table = MemoryReadings::new(None);
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let rollups = MemoryRollups::new();
    let svc = QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    let month = format!("from={BASE_MS}&to={}", BASE_MS + 31 * DAY);
    for (path, query, fits) in [
        // 44,640 minutes; 8,928 five-minute buckets fit.
        (
            "/devices/d-1/series",
            format!("metric=t&{month}&interval_ms=60000"),
            300_000,
        ),
        (
            "/series",
            format!("metric=t&{month}&interval_ms=60000"),
            300_000,
        ),
        // The fleet rounds 1 s up to a minute: still too many.
        (
            "/series",
            format!("metric=t&{month}&interval_ms=1000"),
            300_000,
        ),
        // An hour at 100 ms is 36,000 points; 360 ms makes 10,000.
        (
            "/devices/d-1/series",
            format!(
                "metric=t&from={BASE_MS}&to={}&interval_ms=100",
                BASE_MS + HOUR_MS
            ),
            360,
        ),
        // Unaligned, 360 ms touches 10,001 buckets.
        (
            "/devices/d-1/series",
            format!(
                "metric=t&from={}&to={}&interval_ms=100",
                BASE_MS + 1,
                BASE_MS + HOUR_MS + 1
            ),
            361,
        ),
    ] {
        let (status, body) = get(&svc, path, &query).await;
        assert_eq!(status, 400, "{path}?{query}: {body}");
        assert_eq!(body["error"]["code"], "bad_interval", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.ends_with(&format!("the smallest interval_ms that fits is {fits}")),
            "{message}"
        );
        let fitting = query.replace(
            &query[query.find("interval_ms=").unwrap()..],
            &format!("interval_ms={fits}"),
        );
        let parsed = query::parse_request("GET", path, Some(&fitting), &svc.config().limits);
        assert!(parsed.is_ok(), "{fitting}: {parsed:?}");
    }
    assert_eq!((table.calls(), rollups.reads()), (0, 0), "nothing read");
    for (query, code) in [
        ("metric=t&from=0&to=1000&interval_ms=0", "bad_interval"),
        ("metric=t&from=0&to=1000&interval_ms=1.5", "bad_interval"),
        ("metric=t&from=0&to=1000&interval_ms=-5", "bad_interval"),
        ("metric=t&from=0&to=1000", "missing_parameter"),
        ("from=0&to=1000&interval_ms=10", "missing_parameter"),
        (
            "metric=t&from=0&to=1000&interval_ms=10&agg=median",
            "bad_parameter",
        ),
        (
            "metric=t&from=0&to=1000&interval_ms=10&interval=1m",
            "unknown_parameter",
        ),
    ] {
        let (status, body) = get(&svc, "/devices/d-1/series", query).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some(code)),
            "{query}"
        );
    }
    let (status, body) = get(
        &svc,
        "/series",
        "metric=t&from=0&to=1000&interval_ms=10&consistent=true",
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("unknown_parameter"))
    );
}

/// A series that would pass a request budget is 400 `budget_exceeded` naming it, never
/// a page cut short: a device's raw readings past `QUERY_MAX_EVALUATED`, the fleet's
/// hours past `QUERY_MAX_QUERIES` (known before any read, so nothing is read).
#[tokio::test]
async fn a_series_past_a_budget_is_400_budget_exceeded_naming_it() {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let readings: Vec<R> = (0..3_000)
        .map(|i| R {
            device: "d-1".to_owned(),
            event: format!("e{i:05}"),
            ts_ms: BASE_MS + i * 1000,
            value: n(i as f64),
        })
        .collect();
    load(&table, &shards, &readings);
    let shards = Arc::new(shards);
    let rollups = MemoryRollups::new();
    seal_fleet(&rollups, 48).await;
    let mut tight = config();
    tight.budget.evaluated = 1_000;
    tight.budget.queries = 20;
    let svc = QueryService::new(&table, shards.clone(), tight).with_rollups(rollups.clone());
    let q = format!(
        "metric=temperature&from={BASE_MS}&to={}&interval_ms=10000",
        BASE_MS + HOUR_MS
    );
    let (status, body) = get(&svc, "/devices/d-1/series", &q).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded");
    valid(&body, "/devices/{device_id}/series", 400);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("QUERY_MAX_EVALUATED"), "{message}");
    assert!(
        message.contains("interval_ms of whole minutes"),
        "{message}"
    );
    // Under the default budgets the same series is answered.
    let svc_default = QueryService::new(&table, shards.clone(), config());
    let (status, body) = get(&svc_default, "/devices/d-1/series", &q).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["points"].as_array().unwrap().len(), 300);
    assert_eq!(body["points"][0], serde_json::json!([BASE_MS, 4.5]));
    // 48 hours of the fleet: a Query each, past 20.
    let before = rollups.reads();
    let q = format!(
        "metric=temperature&from={BASE_MS}&to={}&interval_ms=3600000",
        BASE_MS + 2 * DAY
    );
    let (status, body) = get(&svc, "/series", &q).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("QUERY_MAX_QUERIES"),
        "{body}"
    );
    assert_eq!(rollups.reads() - before, 1, "the watermark alone");
}

/// The fleet's series over 31 days at `interval_ms=300000` is one answer of 8,928
/// points (every five minutes of the month), well under `QUERY_MAX_ANSWER_BYTES`
/// (4 MB), sums written with all their digits; its figures equal `GET /stats`'s.
#[tokio::test]
async fn the_fleet_series_of_31_days_at_5_minutes_is_one_answer_under_4_mb() {
    let table = MemoryReadings::new(None);
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let rollups = MemoryRollups::new();
    seal_fleet(&rollups, 31 * 24).await;
    let svc = QueryService::new(&table, shards, config()).with_rollups(rollups.clone());
    let month = format!("from={BASE_MS}&to={}", BASE_MS + 31 * DAY);
    let mut sizes = Vec::new();
    for agg in ["avg", "min", "max", "count", "sum"] {
        let before = rollups.reads();
        let request = query::service::Request {
            method: "GET",
            path: "/series",
            query: Some(&format!(
                "metric=temperature&{month}&interval_ms=300000&agg={agg}"
            )),
        };
        let resp = svc
            .handle_as(Ok(&ReadScope::Every), request, now(), None)
            .await;
        assert_eq!(resp.status(), 200, "{}", resp.body());
        let bytes = resp.body().len();
        let body: Value = serde_json::from_str(resp.body()).unwrap();
        assert_eq!(body["points"].as_array().unwrap().len(), 8_928, "{agg}");
        assert_eq!(body["interval_ms"], 300_000);
        assert_eq!(body["watermark"], "2026-07-23T00:00:00.000Z");
        assert!(bytes < 4_000_000, "{agg}: {bytes} bytes");
        assert_eq!(
            rollups.reads() - before,
            31 * 24 + 1,
            "{agg}: the watermark and a Query an hour"
        );
        valid(&body, "/series", 200);
        if agg == "count" {
            assert!(
                body["points"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|p| p[1] == 10)
            );
        }
        sizes.push(format!("{agg}: {bytes} bytes"));
    }
    println!(
        "31 days at interval_ms=300000, 8,928 points: {}",
        sizes.join(", ")
    );
    // The same figures as the fleet's stats of a day (one page).
    let day = format!("from={BASE_MS}&to={}", BASE_MS + DAY);
    let (_, stats) = get(
        &svc,
        "/stats",
        &format!("{day}&interval=5m&metric=temperature"),
    )
    .await;
    let (_, sums) = get(
        &svc,
        "/series",
        &format!("metric=temperature&{day}&interval_ms=300000&agg=sum"),
    )
    .await;
    let (_, avgs) = get(
        &svc,
        "/series",
        &format!("metric=temperature&{day}&interval_ms=300000"),
    )
    .await;
    let buckets = stats["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 288);
    for ((b, s), a) in buckets
        .iter()
        .zip(sums["points"].as_array().unwrap())
        .zip(avgs["points"].as_array().unwrap())
    {
        let cell = &b["metrics"]["temperature"];
        assert_eq!(
            serde_json::to_string(&s[1]).unwrap(),
            serde_json::to_string(&cell["sum"]).unwrap()
        );
        assert_eq!(a[1], cell["avg"]);
        assert_eq!(
            query::model::format_ts(s[0].as_i64().unwrap()).unwrap(),
            b["start"].as_str().unwrap()
        );
    }
}

/// The fleet rounds its interval up to a whole minute and answers no point at or after
/// the watermark; without the rollups table it is 501, and a device's series reads
/// the readings alone.
#[tokio::test]
async fn the_fleet_series_answers_sealed_whole_minutes_and_is_501_without_the_table() {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let readings: Vec<R> = (0..120)
        .map(|i| R {
            device: "d-1".to_owned(),
            event: format!("e{i:05}"),
            ts_ms: BASE_MS + i * 30_000,
            value: n(1.0),
        })
        .collect();
    load(&table, &shards, &readings);
    let shards = Arc::new(shards);
    let rollups = MemoryRollups::new();
    seal_fleet(&rollups, 2).await;
    let svc = QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    let q = format!(
        "metric=temperature&from={BASE_MS}&to={}&interval_ms=90000",
        BASE_MS + 3 * HOUR_MS
    );
    let (status, body) = get(&svc, "/series", &q).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interval_ms"], 120_000, "rounded up to whole minutes");
    let points = body["points"].as_array().unwrap();
    assert_eq!(points.len(), 60, "the two sealed hours' buckets");
    let last = points.last().unwrap()[0].as_i64().unwrap();
    assert!(
        last + 120_000 <= BASE_MS + 2 * HOUR_MS,
        "none past the watermark"
    );
    let raw_only = QueryService::new(&table, shards, config());
    let (status, body) = get(&raw_only, "/series", &q).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (501, Some("not_supported"))
    );
    valid(&body, "/series", 501);
    let q = format!(
        "metric=temperature&from={BASE_MS}&to={}&interval_ms=90000&agg=count",
        BASE_MS + HOUR_MS
    );
    let (status, body) = get(&raw_only, "/devices/d-1/series", &q).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interval_ms"], 120_000);
    valid(&body, "/devices/{device_id}/series", 200);
    assert_eq!(body["points"].as_array().unwrap().len(), 30);
    assert!(body["points"].as_array().unwrap().iter().all(|p| p[1] == 4));
}

/// A device's series is a device route: 403 outside the token's scope before any read;
/// the fleet's needs a token that grants every device.
#[tokio::test]
async fn a_scoped_token_reads_its_devices_series_and_not_the_fleets() {
    let table = MemoryReadings::new(None);
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let rollups = MemoryRollups::new();
    seal_fleet(&rollups, 2).await;
    let svc = QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    let scope = |claim| ReadScope::from_claim(CLAIM, claim).unwrap();
    let q = format!(
        "metric=temperature&from={BASE_MS}&to={}&interval_ms=60000",
        BASE_MS + HOUR_MS
    );
    let before = (table.calls(), rollups.reads(), shards.reads());
    for (claim, path) in [
        ("site-a-*", "/devices/site-b-1/series"),
        ("site-a-1", "/devices/site-a-10/series"),
        ("site-a-*", "/series"),
        ("dev-a dev-b", "/series"),
    ] {
        let (status, body) = get_as(&svc, &scope(claim), path, &q).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{claim} {path}"
        );
    }
    assert_eq!(
        (table.calls(), rollups.reads(), shards.reads()),
        before,
        "nothing read"
    );
    let (status, _) = get_as(&svc, &scope("site-a-*"), "/devices/site-a-1/series", &q).await;
    assert_eq!(status, 200);
    let (status, _) = get_as(&svc, &scope("*"), "/series", &q).await;
    assert_eq!(status, 200);
}
