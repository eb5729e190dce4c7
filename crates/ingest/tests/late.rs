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
use store::Written;
use store::item::ReadingItem;
use store::memory::{MemoryRollups, MemoryShards, MemoryTable};
use store::rollup::horizon::{Horizon, SWITCH};
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
    /// Marks to fail, the next ones put.
    fail_puts: Arc<Mutex<u32>>,
}

impl AfterReadings {
    fn puts(&self) -> Vec<(String, bool)> {
        self.puts.lock().expect("not poisoned").clone()
    }
}

impl RollupTable for AfterReadings {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.rollups.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.rollups.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.rollups.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        {
            let mut fail = self.fail_puts.lock().expect("not poisoned");
            if *fail > 0 {
                *fail -= 1;
                return Err(StoreError::Transient("HTTP 500".into()));
            }
        }
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
            fail_puts: Arc::default(),
        };
        Self { fx, rollups }
    }

    fn service(&self) -> Ingest<MemoryTable, MemoryShards, MemoryQueue, AfterReadings> {
        self.service_with(&[])
    }

    fn service_with(
        &self,
        extra: &[(&str, &str)],
    ) -> Ingest<MemoryTable, MemoryShards, MemoryQueue, AfterReadings> {
        let mut vars = vec![("ROLLUP_TABLE", "rollups")];
        vars.extend_from_slice(extra);
        Ingest::new(
            config(&vars),
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
            .filter(|m| m.pk.starts_with("late#"))
            .map(|m| m.sk)
            .collect()
    }

    /// The sealer's watermark, as it writes it, publishing `horizon`.
    async fn publish(&self, horizon: Horizon) {
        let end = hour_of(now_ms()) - HOUR_MS;
        let body = serde_json::json!({ "from_ms": end - HOUR_MS, "horizon": horizon });
        let version = u64::try_from(end).expect("after 1970");
        let item =
            RollupItem::with_body(keys::watermark(), version, &body, None).expect("a watermark");
        self.rollups.rollups.put(&item).await.expect("stored");
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
    keys::late_mark(device, hour_of(ts)).sk
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
        assert_eq!(item.pk, keys::late_mark(device, 0).pk);
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
    *marked.rollups.fail_puts.lock().expect("not poisoned") = 1;
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

/// The rollups table whose late marks fail while `failing` is set (reads and the
/// sealer's conditional writes pass).
#[derive(Clone, Default)]
struct MarksFail {
    rollups: MemoryRollups,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl MarksFail {
    fn set_failing(&self, failing: bool) {
        self.failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }
}

impl RollupTable for MarksFail {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.rollups.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.rollups.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.rollups.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Transient("HTTP 500 on the late mark".into()));
        }
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

/// The `INGEST_SENDER_ID` of `support::config`: a copy the ingest sends carries it.
const INGEST_SENDER: &str = "000000000000";
/// The redrive's `maxReceiveCount` (the config's `MAX_RECEIVES`).
const MAX_RECEIVES: u32 = 5;

/// One message in the simulated source queue.
struct Pending {
    id: String,
    body: String,
    sender: &'static str,
    attributes: store::queue::Attributes,
    receives: u32,
    visible_at: i64,
}

impl Pending {
    fn record(&self) -> serde_json::Value {
        let attributes: serde_json::Map<String, serde_json::Value> = self
            .attributes
            .iter()
            .map(|(name, (data_type, value))| {
                (
                    name.clone(),
                    serde_json::json!({"dataType": data_type, "stringValue": value}),
                )
            })
            .collect();
        serde_json::json!({
            "messageId": self.id,
            "receiptHandle": format!("{}-{}", self.id, self.receives),
            "body": self.body,
            "attributes": {
                "ApproximateReceiveCount": self.receives.to_string(),
                "SentTimestamp": now().as_millis().to_string(),
                "SenderId": self.sender,
            },
            "messageAttributes": attributes,
        })
    }
}

/// What became of a message in [`source_queue`].
#[derive(Debug, Default)]
struct Run {
    /// Seconds after the start at which each late mark was first stored.
    marked_at: Option<i64>,
    /// Letters the ingest sent to the DLQ.
    letters: usize,
    /// Messages SQS's redrive moved to the DLQ (received more than `MAX_RECEIVES` times).
    redriven: usize,
    /// Receives, in all.
    receives: usize,
    /// Each receive: its seconds, receive count and fate.
    log: Vec<(i64, u32, Fate)>,
}

/// Plays SQS for `body` for up to `horizon_secs`: delivers the visible message, applies
/// the fates (a report comes back after its delay, or is redriven after
/// `MAX_RECEIVES`; copies join the queue with their delay). `marks_fail(t, receive)`
/// says whether late marks fail on a receive at `t`; `queue_fails(id, receive)` whether
/// the queue's calls (copies, letters, delays) do on receive `receive` of message `id`.
async fn source_queue(
    body: serde_json::Value,
    horizon_secs: i64,
    marks_fail: impl Fn(i64, u32) -> bool,
    queue_fails: impl Fn(&str, u32) -> bool,
) -> (Run, MarksFail, Fixture) {
    let fx = Fixture::new();
    let rollups = MarksFail::default();
    let service = Ingest::new(
        config(&[
            ("ROLLUP_TABLE", "rollups"),
            ("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest"),
        ]),
        fx.table.clone(),
        fx.shards.clone(),
        fx.dlq.clone(),
    )
    .with_rollups(rollups.clone());
    let mut queue = vec![Pending {
        id: "m-000".to_owned(),
        body: body.to_string(),
        sender: "AIDAEXAMPLEDEVICE",
        attributes: Default::default(),
        receives: 1,
        visible_at: 0,
    }];
    let mut run = Run::default();
    let mut rng = StdRng::seed_from_u64(59);
    let mut copies = 0;
    while let Some(next) = queue.iter().map(|p| p.visible_at).min() {
        if next > horizon_secs {
            break;
        }
        let at = queue
            .iter()
            .position(|p| p.visible_at == next)
            .expect("the earliest");
        let mut pending = queue.swap_remove(at);
        rollups.set_failing(marks_fail(next, pending.receives));
        fx.dlq
            .set_failing(queue_fails(&pending.id, pending.receives));
        let ev: SqsEvent =
            serde_json::from_value(serde_json::json!({ "Records": [pending.record()] }))
                .expect("an SQS event");
        let letters_before = fx.dlq.letters().len();
        let report = service
            .process(
                &ev,
                sharding::time::Timestamp::from_millis(now_ms() + next * 1000).expect("in range"),
                Instant::now() + Duration::from_secs(30),
                &mut rng,
            )
            .await;
        run.receives += 1;
        run.letters += fx.dlq.letters().len() - letters_before;
        let fate = report.messages[0].fate.clone();
        run.log.push((next, pending.receives, fate.clone()));
        if run.marked_at.is_none() && !marked_hours(&rollups).is_empty() {
            run.marked_at = Some(next);
        }
        let (delays, sent) = fx.dlq.take_redeliveries();
        for copy in sent {
            copies += 1;
            queue.push(Pending {
                id: format!("copy-{copies}"),
                body: copy.body,
                sender: INGEST_SENDER,
                attributes: copy.attributes,
                receives: 1,
                visible_at: next + i64::from(copy.delay_secs),
            });
        }
        if matches!(fate, Fate::Reported { .. }) {
            if pending.receives >= MAX_RECEIVES {
                run.redriven += 1;
                continue;
            }
            let wait = delays.first().map_or(30, |d| i64::from(d.visibility_secs));
            pending.receives += 1;
            pending.visible_at = next + wait;
            queue.push(pending);
        }
    }
    (run, rollups, fx)
}

/// The late marks stored, by sort key.
fn marked_hours(rollups: &MarksFail) -> BTreeSet<String> {
    rollups
        .rollups
        .items()
        .into_values()
        .filter(|i| i.pk.starts_with("late#"))
        .map(|i| i.sk)
        .collect()
}

/// Scenario 59: a late mark fails on every receive of its message, the last included,
/// and on every receive of its copies for a day, beyond any count of receives and
/// requeues the redrive would allow (`MAX_RECEIVES` 5 and `MAX_REQUEUES` 3 allow 20).
/// The queue fails too on the first four receives, so the message itself reaches its
/// last receive. Its reading is stored from the first receive and never dead-lettered,
/// neither by the ingest nor by the redrive, and its mark is written at the first
/// receive after the rollups table takes marks again: within 15 minutes (a copy's
/// longest wait, SQS's `DelaySeconds` limit and `REDELIVERY_CAP_SECS`' default).
#[tokio::test(start_paused = true)]
async fn s59_a_late_mark_failing_on_every_receive_is_never_dead_lettered_and_written_once_it_can_be()
 {
    const RECOVERY: i64 = 86_400;
    let late = now_ms() - 2 * HOUR_MS;
    let (run, rollups, fx) = source_queue(
        body("dev-a", &[late]),
        RECOVERY + 3_600,
        |t, _| t < RECOVERY,
        |id, receive| id == "m-000" && receive < MAX_RECEIVES,
    )
    .await;
    // The message itself failed its mark on all its receives, the last included.
    let own: Vec<u32> = run
        .log
        .iter()
        .take_while(|(_, _, fate)| matches!(fate, Fate::Reported { .. }))
        .map(|(_, receive, _)| *receive)
        .collect();
    assert_eq!(own, [1, 2, 3, 4], "{:?}", run.log);
    assert_eq!(run.log[4].1, MAX_RECEIVES);
    assert!(
        run.receives > 20,
        "more receives than the redrive and requeues allow: {}",
        run.receives
    );
    assert_eq!((run.letters, run.redriven), (0, 0), "{:?}", run.log);
    assert!(fx.dlq.letters().is_empty());
    // Stored from the first receive, under one key.
    assert_eq!(fx.table.items().len(), 1);
    assert_eq!(
        marked_hours(&rollups),
        BTreeSet::from([mark("dev-a", late)])
    );
    let marked_at = run.marked_at.expect("marked");
    assert!(
        (RECOVERY..=RECOVERY + 900).contains(&marked_at),
        "marked {} s after the recovery",
        marked_at - RECOVERY
    );
    // Written and marked, its last copy is deleted: nothing keeps coming back.
    let (_, _, last) = run.log.last().expect("receives");
    assert!(matches!(last, Fate::Written { .. }), "{last:?}");
}

/// Hole 8: the ingest marks with the horizon the sealer publishes in its watermark, not
/// with its own `LATENESS_HORIZON_SECS`, and while a lowered horizon switches over, with
/// the lower one. A reading of the 02:00 hour written at 04:00 may be sealed under a
/// 10-minute horizon (sealed at 03:10), not under a 2-hour one (05:00).
#[tokio::test(start_paused = true)]
async fn the_ingest_marks_with_the_horizon_the_sealer_published_not_its_own() {
    let late = hour_of(now_ms()) - 2 * HOUR_MS + 1_000;
    let ev = batch(&[body("dev-a", &[late])]);
    // Its own says 2 h, the sealer's 10 min: marked.
    let marked = Marked::new();
    marked.publish(Horizon::steady(600)).await;
    let report = marked
        .service_with(&[("LATENESS_HORIZON_SECS", "7200")])
        .process(
            &ev,
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut StdRng::seed_from_u64(7),
        )
        .await;
    assert_eq!(report.late_marks, 1, "{report:?}");
    assert_eq!(marked.marks(), BTreeSet::from([mark("dev-a", late)]));
    // Its own says 10 min, the sealer's 2 h: not marked (the sealer seals at 05:00).
    let unmarked = Marked::new();
    unmarked.publish(Horizon::steady(7_200)).await;
    let report = unmarked.process(&ev).await;
    assert_eq!(report.late_marks, 0, "{report:?}");
    // Lowered from 2 h to 10 min a minute ago: the lower one already.
    let lowered = Marked::new();
    let switching = Horizon::next(
        Some(Horizon::steady(7_200)),
        Duration::from_secs(600),
        now_ms() - 60_000,
    );
    let switch = i64::try_from(SWITCH.as_millis()).expect("30 min");
    assert!(switching.switch_ms > now_ms() && switching.switch_ms - now_ms() < switch);
    lowered.publish(switching).await;
    let report = lowered.process(&ev).await;
    assert_eq!(report.late_marks, 1, "{report:?}");
    // No watermark yet: its own.
    let fresh = Marked::new();
    let report = fresh
        .service_with(&[("LATENESS_HORIZON_SECS", "7200")])
        .process(
            &ev,
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut StdRng::seed_from_u64(7),
        )
        .await;
    assert_eq!(report.late_marks, 0, "{report:?}");
}
