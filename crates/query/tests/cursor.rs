//! Scenario 18: cursors are sealed and bound to their request.

use std::sync::Arc;

use query::cursor::{CursorError, Fingerprint, decode_cursor, encode_cursor};
use query::model::ReadingKey;

use crate::common::{BASE_MS, R, get, hourly, key, load, service, shard_table, table_history};
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
                value: 1.0,
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
    let c = encode_cursor(&pos(42), &fp(), &key());
    assert_eq!(decode_cursor(&c, &fp(), &key()), Ok(pos(42)));
    let other_key = query::CursorKey::new(b"another-key-of-enough-length".to_vec()).unwrap();
    assert_eq!(
        decode_cursor(&c, &fp(), &other_key),
        Err(CursorError::BadSignature)
    );
    let mut other = fp();
    other.limit = 6;
    assert_eq!(
        decode_cursor(&c, &other, &key()),
        Err(CursorError::OtherRequest)
    );
    let mut other = fp();
    other.descending = true;
    assert_eq!(
        decode_cursor(&c, &other, &key()),
        Err(CursorError::OtherRequest)
    );
    assert_eq!(
        decode_cursor("", &fp(), &key()),
        Err(CursorError::Malformed)
    );
    assert_eq!(
        decode_cursor(&"a".repeat(5000), &fp(), &key()),
        Err(CursorError::TooLong)
    );
}

#[test]
fn a_sealed_position_outside_the_range_is_refused() {
    // Only a holder of the key could mint this; the check still bounds the read.
    let c = encode_cursor(&pos(20_000), &fp(), &key());
    assert_eq!(
        decode_cursor(&c, &fp(), &key()),
        Err(CursorError::OutOfRange)
    );
}

#[test]
fn every_single_byte_change_is_refused() {
    let c = encode_cursor(&pos(42), &fp(), &key());
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
                decode_cursor(&t, &fp(), &key()).is_err(),
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
