//! Shared helpers.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sharding::backoff::Backoff;
use store::batch::{Item, WriterConfig};

/// An item with key `(pk, sk)` and a small payload.
pub fn item(pk: &str, sk: &str) -> Item {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
        ("v".to_owned(), AttributeValue::N("1".to_owned())),
    ])
}

/// `n` items spread over `pks` partition keys.
pub fn items(n: usize, pks: usize) -> Vec<Item> {
    (0..n)
        .map(|i| item(&format!("p{}", i % pks), &format!("s{i:05}")))
        .collect()
}

pub const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(10),
    cap: Duration::from_millis(200),
    max_attempts: 6,
};

pub fn config() -> WriterConfig {
    WriterConfig {
        max_inflight: 4,
        backoff: BACKOFF,
    }
}

/// The most time `attempts` sleeps of [`BACKOFF`] can take.
pub fn max_sleep(attempts: u32) -> Duration {
    (0..attempts).map(|a| BACKOFF.ceiling(a)).sum()
}
