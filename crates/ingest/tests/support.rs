//! Shared helpers: configuration, the fakes, the events in `events/`.

use std::collections::HashMap;
use std::path::PathBuf;

use aws_lambda_events::event::sqs::SqsEvent;
use ingest::{Config, Ingest, MemoryQueue};
use sharding::time::Timestamp;
use store::memory::{MemoryRollups, MemoryShards, MemoryTable};

pub type Service = Ingest<MemoryTable, MemoryShards, MemoryQueue, MemoryRollups>;

pub fn config(extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = [
        ("TABLE_NAME", "readings"),
        ("SHARD_TABLE_NAME", "shards"),
        ("DLQ_URL", "http://127.0.0.1:1/000000000000/dlq"),
        ("SHARD_STRATEGY", "time-bucket"),
        ("BUCKET", "hour"),
        ("SHARDS", "4"),
        ("RETRY_BASE_MS", "10"),
        ("RETRY_CAP_MS", "200"),
        ("RETRY_MAX_ATTEMPTS", "6"),
        ("DEADLINE_MARGIN_MS", "500"),
        // The SenderId of the shared events: their shardline.* attributes are the
        // ingest's own (a test of a device's message gives it another SenderId).
        ("INGEST_SENDER_ID", "000000000000"),
        // The handler's tests count items of one reading each, so they run on the
        // item-a-reading layout; blocks.rs runs the same handler with blocks, the
        // layout of a new table by default.
        ("BLOCKS", "off"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        vars.insert((*k).to_owned(), (*v).to_owned());
    }
    Config::from_lookup(|name| vars.get(name).cloned()).expect("valid test config")
}

pub struct Fixture {
    pub table: MemoryTable,
    pub shards: MemoryShards,
    pub dlq: MemoryQueue,
}

impl Fixture {
    pub fn new() -> Self {
        Self {
            table: MemoryTable::new(),
            shards: MemoryShards::new(),
            dlq: MemoryQueue::new(),
        }
    }

    /// A service over this fixture's fakes (a fresh cache, like a new Lambda instance).
    pub fn service(&self, extra: &[(&str, &str)]) -> Service {
        Ingest::new(
            config(extra),
            self.table.clone(),
            self.shards.clone(),
            self.dlq.clone(),
        )
    }
}

pub fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../events")
}

/// One of the shared events, as `cargo lambda invoke --data-file` sends it.
pub fn event(name: &str) -> SqsEvent {
    let path = events_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The clock of the tests: shortly after the events' readings.
pub fn now() -> Timestamp {
    Timestamp::parse("2026-06-22T04:00:00Z").expect("valid")
}

pub fn ids(event: &SqsEvent) -> Vec<String> {
    event
        .records
        .iter()
        .map(|r| r.message_id.clone().expect("events carry message ids"))
        .collect()
}
