//! The cursor decoder on arbitrary cursors, and on arbitrary bodies sealed with the right
//! key (so the checks after the signature run too): it refuses or returns a position
//! inside the request's range, never panics.

#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use query::cursor::CursorKeys;
use query::{CursorKey, Fingerprint, decode_cursor};
use sharding::time::Timestamp;
use sha2::Sha256;

const KEY: &[u8] = b"fuzzing-cursor-key-0123456789abcdef";

fn seal(json: &[u8]) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).ok()?;
    mac.update(json);
    let tag = mac.finalize().into_bytes();
    Some(format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(json),
        URL_SAFE_NO_PAD.encode(tag)
    ))
}

fuzz_target!(|data: &[u8]| {
    let Ok(key) = CursorKey::new(KEY.to_vec()) else {
        return;
    };
    let keys = CursorKeys::from(key.clone());
    let Ok(now) = Timestamp::from_millis(1_782_050_000_000) else {
        return;
    };
    let fp = Fingerprint {
        route: "device_readings",
        device: Some("dev-1".to_owned()),
        from_ms: 1_782_000_000_000,
        to_ms: 1_782_100_000_000,
        descending: false,
        limit: 100,
        detail: String::new(),
    };
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let cursor = match mode % 3 {
        // A cursor as a client could send it.
        0 => String::from_utf8_lossy(rest).into_owned(),
        // Any body, correctly sealed.
        1 => match seal(rest) {
            Some(c) => c,
            None => return,
        },
        // A well-formed body for this request with a fuzzed position, sealed.
        _ => {
            let text = String::from_utf8_lossy(rest);
            let mut parts = text.splitn(3, '\n');
            let ts: i64 = parts.next().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
            let device = parts.next().unwrap_or("");
            let event = parts.next().unwrap_or("");
            let body = serde_json::json!({
                "v": 2,
                "k": key.id(),
                "t": now.as_millis(),
                "fp": fp.digest(),
                "pos": {"ts_ms": ts, "device_id": device, "event_id": event},
            });
            match serde_json::to_vec(&body).ok().and_then(|b| seal(&b)) {
                Some(c) => c,
                None => return,
            }
        }
    };
    if let Ok(pos) = decode_cursor(&cursor, &fp, &keys, now) {
        assert!(pos.ts_ms >= fp.from_ms && pos.ts_ms < fp.to_ms);
        assert_eq!(pos.device_id, "dev-1");
    }
});
