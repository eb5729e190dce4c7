//! The ingest message parser on arbitrary bodies: it refuses or accepts, never panics,
//! and every reading it accepts obeys the documented limits.

#![no_main]

use std::time::Duration;

use ingest::message::{MAX_METRICS, MAX_TAG_NAME, MAX_TAG_VALUE, MAX_TAGS};
use ingest::{Limits, parse_body};
use libfuzzer_sys::fuzz_target;
use sharding::key::{MAX_ID_LEN, MAX_METRIC_NAME, validate_id};
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
    let Ok(readings) = parse_body(body, &limits) else {
        return;
    };
    // An accepted body holds 1 to max_readings readings, each within the documented
    // limits (README, "Pointing devices at the queue").
    assert!((1..=limits.max_readings).contains(&readings.len()));
    let latest = now.saturating_add(limits.max_future);
    let earliest = now.checked_sub(limits.retention).unwrap_or(Timestamp::MIN);
    for r in &readings {
        for (name, id) in [("device_id", &r.device_id), ("event_id", &r.event_id)] {
            assert!((1..=MAX_ID_LEN).contains(&id.chars().count()), "{name} {id:?}");
            assert!(validate_id(name, id).is_ok(), "{name} {id:?}");
        }
        assert!(earliest <= r.ts && r.ts <= latest, "ts {}", r.ts);
        assert!((1..=MAX_METRICS).contains(&r.metrics.len()));
        for (name, value) in &r.metrics {
            assert!((1..=MAX_METRIC_NAME).contains(&name.len()), "metric {name:?}");
            assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            // Canonical decimal text, of at most 38 significant digits (20 bytes stored).
            assert_eq!(
                store::Decimal::parse(value.as_str()).as_ref(),
                Ok(value),
                "metric {name}"
            );
            assert!(value.stored_size() <= 20, "metric {name} = {value}");
            // DynamoDB's number range: 0, or a magnitude from 1e-130 to below 1e126
            // (as a double, within its rounding).
            let magnitude = value.to_f64().abs();
            assert!(
                magnitude == 0.0 || (9.99e-131..=1e126).contains(&magnitude),
                "metric {name} = {value} is outside what DynamoDB stores"
            );
        }
        assert!(r.tags.len() <= MAX_TAGS);
        for (name, value) in &r.tags {
            assert!((1..=MAX_TAG_NAME).contains(&name.chars().count()), "tag {name:?}");
            assert!(value.chars().count() <= MAX_TAG_VALUE, "tag {name}");
        }
    }
});
