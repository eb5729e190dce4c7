//! Scenario 30: a caller whose token grants some devices (the JWT claim of
//! `query::scope`) reads those and no other, on every route, page and cursor; a token
//! that grants nothing reads nothing. Requests go through the Lambda adapter as API
//! Gateway hands them over, with the JWT authorizer's claims in the request context.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use base64::Engine as _;
use query::lambda::handle_apigw;
use query::{QueryService, ServiceConfig};
use serde_json::{Value, json};
use store::memory::{MemoryReadings, MemoryShards};

use crate::common::{BASE_MS, R, fanout_history, hourly, key, load, shard_table, table_history};

const CLAIM: &str = "shardline_devices";
const HOUR: &str = "from=2026-06-22T01:00:00Z&to=2026-06-22T02:00:00Z";
const DEVICES: [&str; 5] = ["site-a-1", "site-a-2", "site-b-1", "sensor-7", "site-b-hot"];

/// Every device reads every 30 s over [01:00, 02:00); `site-b-hot` was raised to
/// fan-out 8 over 4 base shards, so half its sub-shards have keys of their own.
fn fixture() -> (MemoryReadings, Arc<MemoryShards>) {
    let table = MemoryReadings::new(None);
    let hot = fanout_history(vec![(BASE_MS, 8)]);
    let shards = shard_table(
        table_history(vec![(0, hourly(4))]),
        [("site-b-hot".to_owned(), hot)],
    );
    let readings: Vec<R> = DEVICES
        .iter()
        .enumerate()
        .flat_map(|(d, device)| {
            (0..120).map(move |i| R {
                device: (*device).to_owned(),
                event: format!("e{i:04}"),
                ts_ms: BASE_MS + 3_600_000 + i * 30_000 + d as i64 * 7,
                value: crate::common::n(i as f64),
            })
        })
        .collect();
    load(&table, &shards, &readings);
    (table, Arc::new(shards))
}

type Service<'a> = QueryService<&'a MemoryReadings, Arc<MemoryShards>>;

fn service<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    configure: impl FnOnce(&mut ServiceConfig),
) -> Service<'a> {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    config.scope_claim = Some(CLAIM.to_owned());
    configure(&mut config);
    QueryService::new(table, shards, config)
}

/// How the caller is authenticated.
#[derive(Clone, Copy)]
enum Token<'a> {
    /// A JWT whose device claim is this.
    Devices(&'a str),
    /// A JWT without the device claim.
    NoClaim,
    /// No JWT at all (an IAM-authorized request).
    None,
}

/// `GET path?query` as API Gateway (HTTP API, payload 2.0) hands it to the function.
fn request(path: &str, query: &str, token: Token<'_>) -> lambda_http::Request {
    let mut event: Value =
        serde_json::from_str(include_str!("../../../events/apigw-all-readings.json"))
            .expect("the shared event");
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["rawQueryString"] = json!(query);
    event["queryStringParameters"] = json!({});
    let claims = match token {
        Token::Devices(value) => Some(json!({ "sub": "user-1", CLAIM: value })),
        Token::NoClaim => Some(json!({ "sub": "user-1" })),
        Token::None => None,
    };
    if let Some(claims) = claims {
        event["requestContext"]["authorizer"] =
            json!({ "jwt": { "claims": claims, "scopes": ["shardline/read"] } });
    }
    lambda_http::request::from_str(&event.to_string()).expect("an API Gateway v2 event")
}

async fn call(svc: &Service<'_>, path: &str, query: &str, token: Token<'_>) -> (u16, Value) {
    let resp = handle_apigw(svc, request(path, query, token))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = match resp.body() {
        lambda_http::Body::Text(t) => serde_json::from_str(t).unwrap(),
        other => panic!("unexpected body {other:?}"),
    };
    (status, body)
}

/// The position a cursor carries (its body is readable, only sealed).
fn cursor_device(cursor: &str) -> String {
    let body = cursor.split_once('.').unwrap().0;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .unwrap();
    let opened: Value = serde_json::from_slice(&json).unwrap();
    opened["pos"]["device_id"].as_str().unwrap().to_owned()
}

/// Every page of `GET /readings` over the hour, with the cursors it hands out.
async fn every_page(svc: &Service<'_>, extra: &str, token: Token<'_>) -> (Vec<Value>, Vec<String>) {
    let (mut items, mut cursors) = (Vec::new(), Vec::new());
    let mut query = format!("{HOUR}&{extra}");
    for _ in 0..1_000 {
        let (status, body) = call(svc, "/readings", &query, token).await;
        assert_eq!(status, 200, "{body}");
        items.extend(body["items"].as_array().unwrap().iter().cloned());
        let Some(cursor) = body["next_cursor"].as_str() else {
            return (items, cursors);
        };
        cursors.push(cursor.to_owned());
        query = format!("{HOUR}&{extra}&cursor={cursor}");
    }
    panic!("the read never ended");
}

fn identities(items: &[Value]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|i| {
            let field = |n: &str| i[n].as_str().unwrap().to_owned();
            (field("device_id"), field("event_id"))
        })
        .collect()
}

#[tokio::test]
async fn a_device_outside_the_scope_is_403_on_every_route_before_any_read() {
    let (table, shards) = fixture();
    let svc = service(&table, shards, |_| {});
    let token = Token::Devices("site-a-* sensor-7");
    let routes = [
        ("readings", HOUR.to_owned()),
        ("readings/e0001", "ts=2026-06-22T01:00:30.014Z".to_owned()),
        ("stats", format!("{HOUR}&interval=10m&metric=temperature")),
        ("shards", String::new()),
    ];
    for (route, query) in &routes {
        let (status, body) = call(&svc, &format!("/devices/site-b-1/{route}"), query, token).await;
        assert_eq!(status, 403, "{route}: {body}");
        assert_eq!(body["error"]["code"], "forbidden", "{route}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(CLAIM) && message.contains("site-b-1"),
            "{message}"
        );
    }
    assert_eq!(table.calls(), 0, "a refused device costs no read");
    for (route, query) in &routes {
        for device in ["site-a-2", "sensor-7"] {
            let (status, body) =
                call(&svc, &format!("/devices/{device}/{route}"), query, token).await;
            // The point read's instant is site-b-1's reading: another device's is absent.
            let found = if route.starts_with("readings/") {
                404
            } else {
                200
            };
            assert_eq!(status, found, "{device} {route}: {body}");
        }
    }
    // An id is not a prefix of a longer one.
    let (status, _) = call(&svc, "/devices/sensor-70/readings", HOUR, token).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_token_that_grants_nothing_reads_nothing() {
    let (table, shards) = fixture();
    let svc = service(&table, shards, |_| {});
    for token in [
        Token::NoClaim,
        Token::None,
        Token::Devices(""),
        Token::Devices("site#a"),
    ] {
        for path in ["/readings", "/devices/site-a-1/readings"] {
            let (status, body) = call(&svc, path, HOUR, token).await;
            assert_eq!(status, 403, "{path}: {body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(CLAIM),
                "{body}"
            );
        }
    }
    assert_eq!(table.calls(), 0);
    // A bad request is still named as such.
    let (status, _) = call(&svc, "/readings", "from=yesterday", Token::NoClaim).await;
    assert_eq!(status, 400);
}

/// Scenario 43: a claim holding a space other than ASCII's, or a control character,
/// is unreadable: 403 on every route, with nothing read, never a wider grant.
#[tokio::test]
async fn a_claim_with_any_other_space_or_a_control_character_reads_nothing() {
    let (table, shards) = fixture();
    let svc = service(&table, shards, |_| {});
    let routes = [
        ("/readings", HOUR.to_owned()),
        ("/devices/site-b-1/readings", HOUR.to_owned()),
        ("/devices/site-a-1/readings", HOUR.to_owned()),
        (
            "/devices/site-a-1/readings/e0001",
            "ts=2026-06-22T01:00:30.000Z".to_owned(),
        ),
        (
            "/devices/site-a-1/stats",
            format!("{HOUR}&interval=10m&metric=temperature"),
        ),
        ("/devices/site-a-1/shards", String::new()),
    ];
    for c in [
        '\u{a0}', '\u{2028}', '\u{2029}', '\u{3000}', '\u{85}', '\t', '\n', '\r', '\0',
    ] {
        let claims = [
            format!("site-a-1{c}*"),
            format!("[site-a-1{c}*]"),
            format!("site-a-1 sensor-7{c}site-b-*"),
            format!("site-a{c}-1"),
        ];
        for claim in &claims {
            for (path, query) in &routes {
                let (status, body) = call(&svc, path, query, Token::Devices(claim)).await;
                assert_eq!(status, 403, "{claim:?} {path}: {body}");
                assert_eq!(body["error"]["code"], "forbidden");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains(CLAIM), "{message}");
            }
        }
    }
    assert_eq!(table.calls(), 0, "an unreadable claim costs no read");
    // The same claims with ASCII spaces read what they name, and no more.
    let (status, _) = call(
        &svc,
        "/devices/site-b-1/readings",
        HOUR,
        Token::Devices("site-a-1 *"),
    )
    .await;
    assert_eq!(status, 200);
    let token = Token::Devices("site-a-1 sensor-7,site-b-*");
    let (status, _) = call(&svc, "/devices/site-b-1/readings", HOUR, token).await;
    assert_eq!(status, 200);
    let (status, _) = call(&svc, "/devices/site-a-2/readings", HOUR, token).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn every_device_answers_only_the_scope_on_every_page_and_cursor() {
    let (table, shards) = fixture();
    let scoped = ["site-a-1", "site-a-2", "sensor-7"];
    for time_index in [None, Some("by-time")] {
        let svc = service(&table, shards.clone(), |c| {
            c.time_index = time_index.map(str::to_owned);
        });
        for order in ["asc", "desc"] {
            let token = Token::Devices("[site-a-* sensor-7]");
            let (items, cursors) = every_page(&svc, &format!("limit=7&order={order}"), token).await;
            let got = identities(&items);
            let distinct: BTreeSet<_> = got.iter().cloned().collect();
            assert_eq!(distinct.len(), got.len(), "a reading answered twice");
            let expected: BTreeSet<(String, String)> = scoped
                .iter()
                .flat_map(|d| (0..120).map(move |i| ((*d).to_owned(), format!("e{i:04}"))))
                .collect();
            assert_eq!(distinct, expected, "{time_index:?} {order}");
            assert!(cursors.len() >= 50, "pages of 7: {}", cursors.len());
            for cursor in &cursors {
                let device = cursor_device(cursor);
                assert!(
                    device.is_empty() || scoped.contains(&device.as_str()),
                    "a cursor names {device}"
                );
            }
            let times: Vec<&str> = items.iter().map(|i| i["ts"].as_str().unwrap()).collect();
            let sorted = times.windows(2).all(|w| match order {
                "asc" => w[0] <= w[1],
                _ => w[0] >= w[1],
            });
            assert!(sorted, "{order}");
        }
    }
}

#[tokio::test]
async fn a_cursor_resumes_only_under_the_scope_it_was_issued_for() {
    let (table, shards) = fixture();
    let svc = service(&table, shards, |_| {});
    let narrow = Token::Devices("site-a-*");
    let (status, body) = call(&svc, "/readings", &format!("{HOUR}&limit=5"), narrow).await;
    assert_eq!(status, 200, "{body}");
    let cursor = body["next_cursor"].as_str().unwrap();
    let resumed = format!("{HOUR}&limit=5&cursor={cursor}");
    for wider in [Token::Devices("site-a-* site-b-*"), Token::Devices("*")] {
        let (status, body) = call(&svc, "/readings", &resumed, wider).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "bad_cursor");
    }
    // The same grants, spelled otherwise, resume it.
    let (status, body) = call(&svc, "/readings", &resumed, Token::Devices("[site-a-*]")).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_scope_that_is_sparse_in_the_fleet_pages_within_the_budget_and_moves_on() {
    let (table, shards) = fixture();
    // Each request may evaluate 60 items of the fleet's 600: most pages of one device
    // end early, some with nothing in them, and every cursor moves the read on.
    let svc = service(&table, shards, |c| {
        c.time_index = Some("by-time".to_owned());
        c.budget.evaluated = 60;
    });
    // A prefix, so the fleet's keys are read (a token naming ids reads theirs alone).
    let (items, cursors) = every_page(&svc, "limit=50", Token::Devices("sensor-7*")).await;
    let got = identities(&items);
    let expected: Vec<(String, String)> = (0..120)
        .map(|i| ("sensor-7".to_owned(), format!("e{i:04}")))
        .collect();
    assert_eq!(got, expected);
    assert!(cursors.len() > 120 / 50, "the budget ended pages early");
    let distinct: BTreeSet<&String> = cursors.iter().collect();
    assert_eq!(distinct.len(), cursors.len(), "every cursor moves on");
}

#[tokio::test]
async fn a_scoped_read_leaves_out_the_raised_keys_of_devices_outside_it() {
    let (table, shards) = fixture();
    let svc = service(&table, shards, |_| {});
    let mut calls = BTreeMap::new();
    for (name, token) in [
        ("every", Token::Devices("*")),
        ("site-a", Token::Devices("site-a-*")),
    ] {
        let before = table.calls();
        every_page(&svc, "limit=1000", token).await;
        calls.insert(name, table.calls() - before);
    }
    // site-b-hot's four sub-shards beyond the 4 base shards have keys of their own.
    assert!(calls["site-a"] < calls["every"], "{calls:?}");
}

/// IAM's match of a resource pattern: `*` stands for any run of characters (`/`
/// included), `?` for any one.
fn iam_matches(pattern: &str, arn: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
            Some((b'?', rest)) => !s.is_empty() && go(rest, &s[1..]),
            Some((c, rest)) => s.first() == Some(c) && go(rest, &s[1..]),
        }
    }
    go(pattern.as_bytes(), arn.as_bytes())
}

/// The one-device IAM grant of docs/access.md (`ApiAuth=IAM`) reaches exactly that device's
/// routes: every device route of `openapi.yaml` for it, none for another device (one
/// whose id extends it included), not the read over every device. Its other spelling
/// (percent-encoded) is refused by the router (scenario 34).
#[test]
fn the_documented_one_device_grant_reaches_that_device_routes_alone() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let access = std::fs::read_to_string(root.join("docs/access.md")).unwrap();
    let grant = access
        .split('"')
        .find(|s| s.starts_with("arn:aws:execute-api:") && s.contains("/GET/devices/"))
        .expect("docs/access.md shows a one-device grant");
    let device = grant
        .split("/GET/devices/")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/*"))
        .expect("a grant of one device's paths");
    let openapi: Value =
        yaml_serde::from_str(&std::fs::read_to_string(root.join("openapi.yaml")).unwrap()).unwrap();
    let arn = |path: &str| {
        format!("arn:aws:execute-api:eu-west-1:123456789012:abc123/$default/GET{path}")
    };
    let mut device_routes = 0;
    for template in openapi["paths"].as_object().unwrap().keys() {
        let path = |id: &str| {
            template
                .replace("{device_id}", id)
                .replace("{event_id}", "evt-1")
        };
        if template.contains("{device_id}") {
            device_routes += 1;
            assert!(iam_matches(grant, &arn(&path(device))), "{template}");
            for other in [
                "sensor-beta-002",
                &format!("{device}0"),
                &format!("x{device}"),
            ] {
                assert!(
                    !iam_matches(grant, &arn(&path(other))),
                    "{template} for {other}"
                );
            }
        } else {
            assert!(!iam_matches(grant, &arn(template)), "{template}");
        }
    }
    assert_eq!(
        device_routes, 6,
        "readings, a reading, stats, shards, latest, series"
    );
    let encoded = format!("/devices/{}/readings", device.replacen('-', "%2D", 1));
    let refused = query::parse_request("GET", &encoded, Some(HOUR), &query::Limits::default());
    assert_eq!(refused.unwrap_err().code, "bad_id");
}

/// A token naming a few devices by id reads their keys alone: the same answer as the
/// fleet's keys filtered to them, at the cost of their own readings.
#[tokio::test]
async fn a_scope_naming_its_devices_reads_their_keys_alone() {
    let (table, shards) = fixture();
    let svc = service(&table, shards, |_| {});
    let mut answers = Vec::new();
    let mut evaluated = Vec::new();
    // The same two devices, by id and by prefix (no other id starts with either).
    for claim in ["site-a-1 site-b-hot", "site-a-1* site-b-hot*"] {
        let before = table.evaluated();
        let (items, _) = every_page(&svc, "limit=30&order=desc", Token::Devices(claim)).await;
        evaluated.push(table.evaluated() - before);
        answers.push(identities(&items));
    }
    assert_eq!(answers[0].len(), 240);
    assert_eq!(answers[0], answers[1]);
    // Each page of 30 reads a little past its end on each key it reads.
    assert!(
        evaluated[0] * 4 < evaluated[1],
        "by id, their own readings; by prefix, the fleet's: {evaluated:?}"
    );
}
