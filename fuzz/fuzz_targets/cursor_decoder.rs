//! The cursor decoder on arbitrary cursors, and on arbitrary bodies sealed with the right
//! key (so the checks after the signature run too): it refuses or returns a position
//! inside the request's range, never panics.

#![no_main]

use libfuzzer_sys::fuzz_target;
use query::cursor::{CURSOR_VERSION, CursorKeys, seal_body};
use query::{Binding, CursorKey, decode_cursor};
use sharding::time::Timestamp;

const KEY: &[u8] = b"fuzzing-cursor-key-0123456789abcdef";

fuzz_target!(|data: &[u8]| {
    let Ok(key) = CursorKey::new(KEY.to_vec()) else {
        return;
    };
    let keys = CursorKeys::from(key.clone());
    let Ok(now) = Timestamp::from_millis(1_782_050_000_000) else {
        return;
    };
    let binding = Binding {
        route: "device_readings",
        device: Some("dev-1".to_owned()),
        from_ms: 1_782_000_000_000,
        to_ms: 1_782_100_000_000,
        descending: false,
        limit: 100,
        detail: String::new(),
        scope: None,
    };
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let cursor = match mode % 3 {
        // A cursor as a client could send it.
        0 => String::from_utf8_lossy(rest).into_owned(),
        // Any body, correctly sealed for this request.
        1 => seal_body(rest, &binding, &key),
        // A well-formed body for this request with a fuzzed position, sealed.
        _ => {
            let text = String::from_utf8_lossy(rest);
            let mut parts = text.splitn(3, '\n');
            let ts: i64 = parts
                .next()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            let device = parts.next().unwrap_or("");
            let event = parts.next().unwrap_or("");
            let body = serde_json::json!({
                "v": CURSOR_VERSION,
                "k": key.id(),
                "t": now.as_millis(),
                "pos": {"ts_ms": ts, "device_id": device, "event_id": event},
            });
            match serde_json::to_vec(&body) {
                Ok(json) => seal_body(&json, &binding, &key),
                Err(_) => return,
            }
        }
    };
    if let Ok(pos) = decode_cursor(&cursor, &binding, &keys, now) {
        assert!(pos.ts_ms >= binding.from_ms && pos.ts_ms < binding.to_ms);
        assert_eq!(pos.device_id, "dev-1");
    }
});
