//! Scenario 18: cursors are sealed and bound to their request.

use std::sync::Arc;

use query::cursor::{CursorError, Fingerprint, decode_cursor, encode_cursor};
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

fn fp() -> Fingerprint {
    Fingerprint {
        route: "device_readings",
        device: Some("dev-1".into()),
        from_ms: 0,
        to_ms: 10_000,
        descending: false,
        limit: 5,
        detail: String::new(),
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
    let c = encode_cursor(&pos(42), &fp(), &keys(), now());
    assert_eq!(decode_cursor(&c, &fp(), &keys(), now()), Ok(pos(42)));
    let other_key = query::CursorKey::new(b"another-key-of-enough-length".to_vec()).unwrap();
    assert_eq!(
        decode_cursor(&c, &fp(), &other_key.into(), now()),
        Err(CursorError::UnknownKey),
        "a deployment holding another key"
    );
    let (body, tag) = c.split_once('.').expect("sealed");
    let forged = format!("{body}.{}", "A".repeat(tag.len()));
    assert_eq!(
        decode_cursor(&forged, &fp(), &keys(), now()),
        Err(CursorError::BadSignature)
    );
    let mut other = fp();
    other.limit = 6;
    assert_eq!(
        decode_cursor(&c, &other, &keys(), now()),
        Err(CursorError::OtherRequest)
    );
    let mut other = fp();
    other.descending = true;
    assert_eq!(
        decode_cursor(&c, &other, &keys(), now()),
        Err(CursorError::OtherRequest)
    );
    assert_eq!(
        decode_cursor("", &fp(), &keys(), now()),
        Err(CursorError::Malformed)
    );
    assert_eq!(
        decode_cursor(&"a".repeat(5000), &fp(), &keys(), now()),
        Err(CursorError::TooLong)
    );
}

#[test]
fn a_sealed_position_outside_the_range_is_refused() {
    // Only a holder of the key could mint this; the check still bounds the read.
    let c = encode_cursor(&pos(20_000), &fp(), &keys(), now());
    assert_eq!(
        decode_cursor(&c, &fp(), &keys(), now()),
        Err(CursorError::OutOfRange)
    );
}

#[test]
fn every_single_byte_change_is_refused() {
    let c = encode_cursor(&pos(42), &fp(), &keys(), now());
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
                decode_cursor(&t, &fp(), &keys(), now()).is_err(),
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
    let c = encode_cursor(&pos(42), &fp(), &keys, issued);
    let at = |ms: i64| issued.saturating_add(std::time::Duration::from_millis(ms as u64));
    assert_eq!(decode_cursor(&c, &fp(), &keys, at(3_600_000)), Ok(pos(42)));
    assert_eq!(
        decode_cursor(&c, &fp(), &keys, at(3_600_001)),
        Err(CursorError::Expired(3600))
    );
    let earlier = issued
        .checked_sub(std::time::Duration::from_secs(301))
        .expect("in range");
    assert_eq!(
        decode_cursor(&c, &fp(), &keys, earlier),
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
    let sealed = encode_cursor(&pos(42), &fp(), &rotated.clone().into(), now());
    let request = |cursor: &str| {
        http::Request::builder()
            .uri(format!(
                "https://api.example/devices/dev-1/readings?cursor={cursor}"
            ))
            .body(lambda_http::Body::Empty)
            .expect("request")
    };
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let last = std::sync::Mutex::new(None);
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
        &fp(),
        &key_of("a-key-of-no-deployment-000000").into(),
        now(),
    );
    query::lambda::refresh_cursor_keys(&svc, &request(&stranger), &last, read).await;
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
}
