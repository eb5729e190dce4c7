//! Late marks (`ingest::handler::late`) against the in-memory fakes: a written reading
//! whose hour may already be sealed leaves one mark per (device, hour) of the batch in
//! the rollups table, after its write; an on-time reading leaves none; a reading not
//! written leaves none; a mark that fails reports its message.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use ingest::{Fate, Ingest, MemoryQueue, Report};
use rand::SeedableRng;
use rand::rngs::StdRng;
use store::item::ReadingItem;
use store::memory::{MemoryRollups, MemoryShards, MemoryTable};
use store::rollup::{HOUR_MS, RollupItem, RollupPage, RollupQuery, RollupTable, hour_of, keys};
use store::{StoreError, ThrottleKind};
use tokio::time::Instant;

use crate::support::{Fixture, config, now};

/// The rollups table, checking at each put that the readings of the marked
/// device-hour are already in the readings table.
#[derive(Clone)]
struct AfterReadings {
    rollups: MemoryRollups,
    table: MemoryTable,
    /// Each mark put: its key, and whether a reading of its device-hour was stored.
    puts: Arc<Mutex<Vec<(String, bool)>>>,
}

impl AfterReadings {
    fn puts(&self) -> Vec<(String, bool)> {
        self.puts.lock().expect("not poisoned").clone()
    }
}

impl RollupTable for AfterReadings {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<bool, StoreError> {
        self.rollups.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<bool, StoreError> {
        self.rollups.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<bool, StoreError> {
        self.rollups.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        // `{hour}#{device}`
        let (hour, device) = item.sk.split_once('#').expect("a late mark's sort key");
        let hour: i64 = hour.parse().expect("an hour");
        let stored = self.table.items().into_values().any(|i| {
            ReadingItem::from_item(i)
                .is_ok_and(|r| r.device_id == device && hour_of(r.ts_ms) == hour)
        });
        self.puts
            .lock()
            .expect("not poisoned")
            .push((item.sk.clone(), stored));
        self.rollups.put(item).await
    }
    async fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<RollupItem>, StoreError> {
        self.rollups.get(pk, sk, consistent).await
    }
    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
        self.rollups.query(q).await
    }
}

struct Marked {
    fx: Fixture,
    rollups: AfterReadings,
}

impl Marked {
    fn new() -> Self {
        let fx = Fixture::new();
        let rollups = AfterReadings {
            rollups: MemoryRollups::new(),
            table: fx.table.clone(),
            puts: Arc::default(),
        };
        Self { fx, rollups }
    }

    fn service(&self) -> Ingest<MemoryTable, MemoryShards, MemoryQueue, AfterReadings> {
        Ingest::new(
            config(&[("ROLLUP_TABLE", "rollups")]),
            self.fx.table.clone(),
            self.fx.shards.clone(),
            self.fx.dlq.clone(),
        )
        .with_rollups(self.rollups.clone())
    }

    async fn process(&self, ev: &SqsEvent) -> Report {
        self.service()
            .process(
                ev,
                now(),
                Instant::now() + Duration::from_secs(30),
                &mut StdRng::seed_from_u64(7),
            )
            .await
    }

    /// The late marks stored, by sort key (`{hour}#{device}`).
    fn marks(&self) -> BTreeSet<String> {
        self.rollups
            .rollups
            .items()
            .into_values()
            .map(|m| m.sk)
            .collect()
    }
}

/// A message of `device`'s readings, one at each of `ts` (epoch ms).
fn body(device: &str, ts: &[i64]) -> serde_json::Value {
    let readings: Vec<serde_json::Value> = ts
        .iter()
        .enumerate()
        .map(|(i, ts)| {
            serde_json::json!({
                "device_id": device,
                "event_id": format!("{device}-{ts}-{i}"),
                "ts": ts,
                "metrics": {"temperature": 20.5},
            })
        })
        .collect();
    serde_json::json!({ "readings": readings })
}

/// The messages `m-000`, `m-001`, ... holding `bodies`.
fn batch(bodies: &[serde_json::Value]) -> SqsEvent {
    let records: Vec<serde_json::Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            serde_json::json!({
                "messageId": format!("m-{i:03}"),
                "body": body.to_string(),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now().as_millis().to_string(),
                    "SenderId": "AIDAEXAMPLEDEVICE",
                },
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event")
}

fn now_ms() -> i64 {
    now().as_millis()
}

/// The late mark's sort key of `device`'s reading at `ts`.
fn mark(device: &str, ts: i64) -> String {
    keys::late_mark(device, hour_of(ts)).1
}

fn reported(report: &Report) -> BTreeSet<String> {
    report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Reported { .. }))
        .map(|m| m.message_id.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn on_time_readings_write_no_late_mark() {
    let marked = Marked::new();
    // The current hour, and the hour before it while the sealer waits out the horizon
    // (less the margin): 04:00 now, the 03:00 hour sealed at 04:10.
    let ev = batch(&[
        body("dev-a", &[now_ms() - 120_000, now_ms() - 30_000]),
        body("dev-b", &[now_ms() - HOUR_MS + 1]),
    ]);
    let report = marked.process(&ev).await;
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Written { .. })),
        "{report:?}"
    );
    assert_eq!(marked.fx.table.items().len(), 3);
    assert_eq!(marked.rollups.rollups.writes(), 0);
    assert_eq!(report.late_marks, 0);
}

#[tokio::test(start_paused = true)]
async fn late_readings_mark_each_device_hour_once_after_their_write() {
    let marked = Marked::new();
    let two_hours_ago = now_ms() - 2 * HOUR_MS;
    let ev = batch(&[
        // Two readings of dev-a's 02:00 hour in one message, a third in another.
        body("dev-a", &[two_hours_ago, two_hours_ago + 600_000]),
        body("dev-a", &[two_hours_ago + 1_200_000]),
        // dev-a's 01:00 hour, dev-b's 02:00 hour.
        body("dev-a", &[two_hours_ago - HOUR_MS / 2]),
        body("dev-b", &[two_hours_ago + 5_000]),
        // On time: no mark.
        body("dev-c", &[now_ms() - 1_000]),
    ]);
    let report = marked.process(&ev).await;
    assert!(reported(&report).is_empty(), "{report:?}");
    let want: BTreeSet<String> = [
        mark("dev-a", two_hours_ago),
        mark("dev-a", two_hours_ago - HOUR_MS / 2),
        mark("dev-b", two_hours_ago),
    ]
    .into();
    assert_eq!(marked.marks(), want);
    assert_eq!(
        marked.rollups.rollups.writes(),
        3,
        "one write a device-hour"
    );
    let puts = marked.rollups.puts();
    assert_eq!(puts.len(), 3);
    assert!(
        puts.iter().all(|(_, stored)| *stored),
        "each mark after its readings: {puts:?}"
    );
    // The late mark's partition is its device's part.
    for item in marked.rollups.rollups.items().into_values() {
        let device = item.sk.split_once('#').expect("sk").1;
        assert_eq!(item.pk, keys::late_mark(device, 0).0);
    }
    assert_eq!((report.late_marks, report.late_mark_failures), (3, 0));
    let line: serde_json::Value = serde_json::from_str(&report.emf_lines(now())[0]).expect("json");
    assert_eq!(line["LateMarks"], 3.0);
}

#[tokio::test(start_paused = true)]
async fn a_late_reading_not_written_leaves_no_mark_and_is_reported() {
    let marked = Marked::new();
    marked.fx.table.fail_next(vec![
        StoreError::Throttled {
            kind: ThrottleKind::Table,
            reason: "TableWriteAccountLimitExceeded".into(),
        };
        1000
    ]);
    let ev = batch(&[body("dev-a", &[now_ms() - 2 * HOUR_MS])]);
    let report = marked.process(&ev).await;
    assert_eq!(reported(&report), BTreeSet::from(["m-000".to_owned()]));
    assert!(marked.fx.table.items().is_empty());
    assert_eq!(marked.rollups.rollups.writes(), 0);
    assert_eq!(report.late_marks, 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_late_mark_reports_its_message_and_its_redelivery_marks_it() {
    let marked = Marked::new();
    let late = now_ms() - 2 * HOUR_MS;
    let ev = batch(&[
        body("dev-a", &[late]),
        body("dev-b", &[late + 1_000]),
        body("dev-c", &[now_ms() - 1_000]),
    ]);
    marked
        .rollups
        .rollups
        .fail_next([StoreError::Transient("HTTP 500".into())]);
    let report = marked.process(&ev).await;
    assert_eq!((report.late_marks, report.late_mark_failures), (1, 1));
    // All three written; the message whose mark failed is reported, the others not.
    assert_eq!(marked.fx.table.items().len(), 3);
    let failed = reported(&report);
    assert_eq!(failed.len(), 1, "{report:?}");
    let stored = marked.marks();
    assert_eq!(stored.len(), 1);
    let (failed_id, missing) = if stored.contains(&mark("dev-a", late)) {
        ("m-001", mark("dev-b", late))
    } else {
        ("m-000", mark("dev-a", late))
    };
    assert!(failed.contains(failed_id), "{report:?}");
    let line: serde_json::Value = serde_json::from_str(&report.emf_lines(now())[0]).expect("json");
    assert_eq!(line["LateMarkFailures"], 1.0);

    // Redelivered, its reading is written again under the same key and its mark is.
    let again = batch(&[if failed_id == "m-000" {
        body("dev-a", &[late])
    } else {
        body("dev-b", &[late + 1_000])
    }]);
    let report = marked.process(&again).await;
    assert!(reported(&report).is_empty(), "{report:?}");
    assert_eq!(marked.fx.table.items().len(), 3);
    assert!(marked.marks().contains(&missing));
    assert_eq!(marked.marks().len(), 2);
}

/// Without `ROLLUP_TABLE` nothing is marked: today's behaviour.
#[tokio::test(start_paused = true)]
async fn without_a_rollups_table_no_mark_is_tried() {
    let fx = Fixture::new();
    let ev = batch(&[body("dev-a", &[now_ms() - 2 * HOUR_MS])]);
    let report = fx
        .service(&[])
        .process(
            &ev,
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut StdRng::seed_from_u64(7),
        )
        .await;
    assert!(reported(&report).is_empty());
    assert_eq!(report.late_marks, 0);
    assert!(fx.service(&[]).rollups().is_none());
}
