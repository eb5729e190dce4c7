//! Scenario 18: cursors are sealed and bound to their request.

use std::sync::Arc;

use query::cursor::{Binding, CursorError, decode_cursor, encode_cursor};
use query::model::ReadingKey;

use crate::common::{
    BASE_MS, R, get, hourly, keys, load, now, service, shard_table, table_history,
};
use store::memory::{MemoryReadings, MemoryShards};

fn fixture() -> (MemoryReadings, Arc<MemoryShards>) {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(2))]), []);
    let readings: Vec<R> = ["dev-1", "dev-2"]
        .iter()
        .flat_map(|d| {
            (0..20).map(move |i| R {
                device: (*d).into(),
                event: format!("e{i:02}"),
                ts_ms: BASE_MS + i * 60_000,
                value: crate::common::n(1.0),
            })
        })
        .collect();
    load(&table, &shards, &readings);
    (table, Arc::new(shards))
}

const PAGE: &str =
    "/devices/dev-1/readings?from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z&limit=5";

async fn first_cursor(svc: &crate::common::Service<'_>) -> String {
    let (status, body) = get(svc, PAGE).await;
    assert_eq!(status, 200, "{body}");
    body["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string()
}

fn binding() -> Binding {
    Binding {
        route: "device_readings",
        device: Some("dev-1".into()),
        from_ms: 0,
        to_ms: 10_000,
        descending: false,
        limit: 5,
        detail: String::new(),
        scope: None,
    }
}

fn pos(ts_ms: i64) -> ReadingKey {
    ReadingKey {
        ts_ms,
        device_id: "dev-1".into(),
        event_id: "e1".into(),
    }
}

#[test]
fn round_trip_and_refusals() {
    let c = encode_cursor(&pos(42), &binding(), &keys(), now());
    assert_eq!(decode_cursor(&c, &binding(), &keys(), now()), Ok(pos(42)));
    let other_key = query::CursorKey::new(b"another-key-of-enough-length".to_vec()).unwrap();
    assert_eq!(
        decode_cursor(&c, &binding(), &other_key.into(), now()),
        Err(CursorError::UnknownKey),
        "a deployment holding another key"
    );
    let (body, tag) = c.split_once('.').expect("sealed");
    let forged = format!("{body}.{}", "A".repeat(tag.len()));
    assert_eq!(
        decode_cursor(&forged, &binding(), &keys(), now()),
        Err(CursorError::BadSignature)
    );
    // Another request or caller: the seal covers the binding, which the cursor does
    // not store.
    let others = [
        Binding {
            limit: 6,
            ..binding()
        },
        Binding {
            descending: true,
            ..binding()
        },
        Binding {
            detail: "interval=60000 metric=t".into(),
            ..binding()
        },
        Binding {
            scope: Some("dev-1".into()),
            ..binding()
        },
        Binding {
            route: "all_readings",
            device: None,
            ..binding()
        },
    ];
    for other in others {
        assert_eq!(
            decode_cursor(&c, &other, &keys(), now()),
            Err(CursorError::BadSignature),
            "{other:?}"
        );
    }
    assert_eq!(
        decode_cursor("", &binding(), &keys(), now()),
        Err(CursorError::Malformed)
    );
    assert_eq!(
        decode_cursor(&"a".repeat(5000), &binding(), &keys(), now()),
        Err(CursorError::TooLong)
    );
}

#[test]
fn a_sealed_position_outside_the_range_is_refused() {
    // Only a holder of the key could mint this; the check still bounds the read.
    let c = encode_cursor(&pos(20_000), &binding(), &keys(), now());
    assert_eq!(
        decode_cursor(&c, &binding(), &keys(), now()),
        Err(CursorError::OutOfRange)
    );
}

#[test]
fn every_single_byte_change_is_refused() {
    let c = encode_cursor(&pos(42), &binding(), &keys(), now());
    let bytes = c.as_bytes();
    for i in 0..bytes.len() {
        for replacement in [b'A', b'b', b'-', b'_', b'.'] {
            if bytes[i] == replacement {
                continue;
            }
            let mut t = bytes.to_vec();
            t[i] = replacement;
            let t = String::from_utf8(t).unwrap();
            assert!(
                decode_cursor(&t, &binding(), &keys(), now()).is_err(),
                "changed byte {i} to {replacement} and it still opened"
            );
        }
    }
}

#[tokio::test]
async fn tampered_cursor_gets_400_without_a_read() {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    let cursor = first_cursor(&svc).await;
    let (t0, s0) = (table.calls(), shards.reads());
    let mut tampered = cursor.clone().into_bytes();
    let i = tampered.len() / 3;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let (status, body) = get(&svc, &format!("{PAGE}&cursor={tampered}")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_cursor");
    assert_eq!((table.calls(), shards.reads()), (t0, s0));
}

#[tokio::test]
async fn cursor_reused_with_other_parameters_gets_400() {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    let cursor = first_cursor(&svc).await;
    let (t0, s0) = (table.calls(), shards.reads());
    let variants = [
        // Another device: the cursor must not open another device's data.
        "/devices/dev-2/readings?from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z&limit=5"
            .to_string(),
        // A wider range.
        "/devices/dev-1/readings?from=2026-06-21T00:00:00Z&to=2026-06-22T01:00:00Z&limit=5"
            .to_string(),
        "/devices/dev-1/readings?from=2026-06-22T00:00:00Z&to=2026-06-22T02:00:00Z&limit=5"
            .to_string(),
        format!("{PAGE}0"),
        format!("{PAGE}&order=desc"),
        "/readings?from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z&limit=5".to_string(),
    ];
    for v in variants {
        let (status, body) = get(&svc, &format!("{v}&cursor={cursor}")).await;
        assert_eq!(status, 400, "{v}: {body}");
        assert_eq!(body["error"]["code"], "bad_cursor", "{v}");
    }
    assert_eq!((table.calls(), shards.reads()), (t0, s0));
    // The same parameters continue; consistency may change between pages.
    let (status, body) = get(&svc, &format!("{PAGE}&cursor={cursor}&consistent=true")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"][0]["event_id"], "e05");
}

fn key_of(text: &str) -> query::CursorKey {
    query::CursorKey::new(text.as_bytes().to_vec()).expect("long enough")
}

/// Keys rotate: a deployment holding the key a cursor was sealed with as its previous
/// key still reads it; one rotated twice since refuses it with 400, as it does a cursor
/// past its age.
#[tokio::test]
async fn a_cursor_sealed_with_the_previous_key_is_read_and_one_with_an_older_key_is_400() {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    let first = key_of("test-cursor-key-0123456789abcdef");
    let cursor = first_cursor(&svc).await;
    let ring = &svc.config().cursor_keys;
    let second = key_of("the-key-after-one-rotation-000000");
    ring.replace(query::cursor::CursorKeys {
        current: second.clone(),
        previous: Some(first),
        max_age: query::cursor::DEFAULT_MAX_AGE,
    });
    let (status, body) = get(&svc, &format!("{PAGE}&cursor={cursor}")).await;
    assert_eq!(status, 200, "sealed with the previous key: {body}");
    let next = body["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    assert_eq!(
        query::cursor::sealer_id(&next).as_deref(),
        Some(second.id()),
        "new pages are sealed with the current key"
    );
    ring.replace(query::cursor::CursorKeys {
        current: key_of("the-key-after-two-rotations-00000"),
        previous: Some(second),
        max_age: query::cursor::DEFAULT_MAX_AGE,
    });
    let (t0, s0) = (table.calls(), shards.reads());
    let (status, body) = get(&svc, &format!("{PAGE}&cursor={cursor}")).await;
    assert_eq!(status, 400, "sealed with a key rotated out: {body}");
    assert_eq!(body["error"]["code"], "bad_cursor");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no longer holds")),
        "{body}"
    );
    assert_eq!((table.calls(), shards.reads()), (t0, s0), "nothing read");
}

#[test]
fn a_cursor_is_read_until_its_age_and_refused_after() {
    let keys = query::cursor::CursorKeys {
        current: key_of("test-cursor-key-0123456789abcdef"),
        previous: None,
        max_age: std::time::Duration::from_secs(3600),
    };
    let issued = sharding::time::Timestamp::from_millis(1_782_000_000_000).expect("in range");
    let c = encode_cursor(&pos(42), &binding(), &keys, issued);
    let at = |ms: i64| issued.saturating_add(std::time::Duration::from_millis(ms as u64));
    assert_eq!(
        decode_cursor(&c, &binding(), &keys, at(3_600_000)),
        Ok(pos(42))
    );
    assert_eq!(
        decode_cursor(&c, &binding(), &keys, at(3_600_001)),
        Err(CursorError::Expired(3600))
    );
    let earlier = issued
        .checked_sub(std::time::Duration::from_secs(301))
        .expect("in range");
    assert_eq!(
        decode_cursor(&c, &binding(), &keys, earlier),
        Err(CursorError::IssuedAhead),
        "a cursor issued more than the clock skew after now"
    );
}

/// A function started before a rotation learns the new key from the first cursor that
/// names it, reading the secret again at most once a minute.
#[tokio::test]
async fn an_unknown_key_reads_the_keys_again_at_most_once_a_minute() {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    let rotated = key_of("the-key-after-one-rotation-000000");
    let sealed = encode_cursor(&pos(42), &binding(), &rotated.clone().into(), now());
    let request = |cursor: &str| {
        http::Request::builder()
            .uri(format!(
                "https://api.example/devices/dev-1/readings?cursor={cursor}"
            ))
            .body(lambda_http::Body::Empty)
            .expect("request")
    };
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let last = parking_lot::Mutex::new(None);
    let read = || async {
        reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok::<_, String>(query::cursor::CursorKeys {
            current: rotated.clone(),
            previous: Some(key_of("test-cursor-key-0123456789abcdef")),
            max_age: query::cursor::DEFAULT_MAX_AGE,
        })
    };
    assert!(!svc.config().cursor_keys.get().holds(rotated.id()));
    query::lambda::refresh_cursor_keys(&svc, &request(&sealed), &last, read).await;
    assert!(svc.config().cursor_keys.get().holds(rotated.id()));
    // A cursor of a key nobody holds: within the minute, no second read.
    let stranger = encode_cursor(
        &pos(42),
        &binding(),
        &key_of("a-key-of-no-deployment-000000").into(),
        now(),
    );
    query::lambda::refresh_cursor_keys(&svc, &request(&stranger), &last, read).await;
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// When the tests below issue and present cursors: the day after the fixture's readings.
const AT_MS: i64 = 1_782_172_800_000;

fn at() -> sharding::time::Timestamp {
    sharding::time::Timestamp::from_millis(AT_MS).expect("in range")
}

/// `GET /readings?query` at [`at`] by a caller granted `grants` (`None`: every device).
async fn read_as(
    svc: &crate::common::Service<'_>,
    grants: Option<&str>,
    query: &str,
) -> (u16, serde_json::Value) {
    let scope = match grants {
        Some(claim) => query::ReadScope::from_claim("shardline_devices", claim).unwrap(),
        None => query::ReadScope::Every,
    };
    let request = query::service::Request {
        method: "GET",
        path: "/readings",
        query: Some(query),
    };
    let resp = svc.handle_as(Ok(&scope), request, at(), None).await;
    let body = serde_json::from_str(resp.body()).expect("JSON body");
    (resp.status().as_u16(), body)
}

/// A cursor's JSON body, which is readable (only sealed), and its seal.
fn opened(cursor: &str) -> (serde_json::Value, String) {
    use base64::Engine as _;
    let (body, tag) = cursor.split_once('.').expect("sealed");
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .expect("base64url");
    (serde_json::from_slice(&json).expect("JSON"), tag.to_owned())
}

/// Scenario 53: a cursor stores its version, key id, issue time and position, nothing
/// derived from its request's parameters or the caller's grants, so a leaked cursor
/// confirms no guess of them offline: the same position reached under other grants or
/// another range gives the same body, and only the seal differs. Each of these cursors
/// opens for its own request alone: 400 `bad_cursor` under any of the others.
#[tokio::test]
async fn a_cursor_stores_its_position_and_nothing_of_its_request_or_grants() {
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    // Each reads both devices, so each first page ends at the same reading.
    let one_hour = "from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z&limit=5";
    let two_hours = "from=2026-06-22T00:00:00Z&to=2026-06-22T02:00:00Z&limit=5";
    let requests = [
        (None, one_hour),
        (Some("dev-1 dev-2"), one_hour),
        (Some("dev-*"), one_hour),
        (Some("dev-1 dev-2 dev-3"), one_hour),
        (None, two_hours),
        (Some("dev-1 dev-2"), two_hours),
    ];
    let mut cursors = Vec::new();
    for (grants, query) in requests {
        let (status, body) = read_as(&svc, grants, query).await;
        assert_eq!(status, 200, "{grants:?} {query}: {body}");
        let cursor = body["next_cursor"].as_str().expect("a next page");
        cursors.push(cursor.to_owned());
    }
    let (first, _) = opened(&cursors[0]);
    let fields: std::collections::BTreeSet<&str> = first
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, ["k", "pos", "t", "v"].into(), "{first}");
    assert_eq!(first["pos"]["device_id"], "dev-1");
    let tags: std::collections::BTreeSet<String> = cursors
        .iter()
        .map(|cursor| {
            let (body, tag) = opened(cursor);
            assert_eq!(body, first, "a body that depends on the request or grants");
            tag
        })
        .collect();
    assert_eq!(
        tags.len(),
        requests.len(),
        "each request seals its own binding"
    );
    let (t0, s0) = (table.calls(), shards.reads());
    for (i, cursor) in cursors.iter().enumerate() {
        for (j, (grants, query)) in requests.iter().enumerate() {
            if i == j {
                continue;
            }
            let (status, body) = read_as(&svc, *grants, &format!("{query}&cursor={cursor}")).await;
            assert_eq!(status, 400, "cursor {i} under request {j}: {body}");
            assert_eq!(body["error"]["code"], "bad_cursor", "{i} under {j}");
        }
    }
    assert_eq!((table.calls(), shards.reads()), (t0, s0), "nothing read");
    for (cursor, (grants, query)) in cursors.iter().zip(requests) {
        let (status, body) = read_as(&svc, grants, &format!("{query}&cursor={cursor}")).await;
        assert_eq!(status, 200, "{grants:?} {query}: {body}");
        assert_eq!(body["items"][0]["device_id"], "dev-2", "{grants:?} {query}");
        assert_eq!(body["items"][0]["event_id"], "e02", "{grants:?} {query}");
    }
}

/// Scenario 53: cursors of the earlier versions, as those versions issued them for
/// [`PAGE`] at [`at`] (version 2 carried the fingerprint `fp`, version 1 no key id or
/// issue time either), are refused with 400 `bad_cursor` naming the version, before any
/// read; a function holding the key they name is not sent to read the keys again.
#[tokio::test]
async fn a_cursor_of_an_earlier_version_is_400_bad_cursor_with_nothing_read() {
    const VERSION_2: &str = "eyJ2IjoyLCJrIjoiNzUyYmQ0NWU5Njg3Y2NmOSIsInQiOjE3ODIxNzI4MDAwMDAsImZwIjoiNGMyNzc2MjExOTU0MDYzNjNkMmU2YWQyZjIzZTFlYmYiLCJwb3MiOnsidHNfbXMiOjE3ODIwODY2NDAwMDAsImRldmljZV9pZCI6ImRldi0xIiwiZXZlbnRfaWQiOiJlMDQifX0.2YBJC6nhQLJHDrDlWJyHdo65d059fbYjLhoDRo07gZs";
    const VERSION_1: &str = "eyJ2IjoxLCJmcCI6IjRjMjc3NjIxMTk1NDA2MzYzZDJlNmFkMmYyM2UxZWJmIiwicG9zIjp7InRzX21zIjoxNzgyMDg2NjQwMDAwLCJkZXZpY2VfaWQiOiJkZXYtMSIsImV2ZW50X2lkIjoiZTA0In19.5fQhGtOGDgEagyGlpg2thXgyViC0CiUdgUufDl36Rpo";
    let (table, shards) = fixture();
    let svc = service(&table, shards.clone());
    let (path, query) = PAGE.split_once('?').expect("a query");
    // Today's cursor for the same page continues.
    let resp = svc.handle_parts("GET", path, Some(query), at()).await;
    let body: serde_json::Value = serde_json::from_str(resp.body()).expect("JSON");
    let current = body["next_cursor"].as_str().expect("a next page");
    let resp = svc
        .handle_parts(
            "GET",
            path,
            Some(&format!("{query}&cursor={current}")),
            at(),
        )
        .await;
    assert_eq!(resp.status().as_u16(), 200, "{}", resp.body());
    let (t0, s0) = (table.calls(), shards.reads());
    for (version, cursor) in [(2, VERSION_2), (1, VERSION_1)] {
        let resp = svc
            .handle_parts("GET", path, Some(&format!("{query}&cursor={cursor}")), at())
            .await;
        assert_eq!(
            resp.status().as_u16(),
            400,
            "version {version}: {}",
            resp.body()
        );
        let body: serde_json::Value = serde_json::from_str(resp.body()).expect("JSON");
        assert_eq!(body["error"]["code"], "bad_cursor");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("version {version} is not supported")),
            "{message}"
        );
        assert_eq!(query::cursor::sealer_id(cursor), None, "version {version}");
    }
    assert_eq!((table.calls(), shards.reads()), (t0, s0), "nothing read");
}
