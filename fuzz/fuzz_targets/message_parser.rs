//! The ingest message parser on arbitrary bodies: it refuses or accepts, never panics.

#![no_main]

use std::time::Duration;

use ingest::{Limits, parse_body};
use libfuzzer_sys::fuzz_target;
use sharding::time::Timestamp;

fuzz_target!(|data: &[u8]| {
    // SQS bodies are text; the handler sees them as &str.
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(now) = Timestamp::from_millis(1_782_120_000_000) else {
        return;
    };
    let limits = Limits {
        now,
        max_future: Duration::from_secs(300),
        retention: Duration::from_secs(30 * 86_400),
        max_readings: 500,
    };
    if let Ok(readings) = parse_body(body, &limits) {
        // An accepted body holds at least one reading.
        assert!(!readings.is_empty());
    }
});
