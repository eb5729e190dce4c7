//! The batch writer's dedup, retry and deadline logic against the in-memory table.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::key::ItemKey;
use store::batch::{BatchWriter, ItemTooLarge, MAX_BATCH_ITEMS, Outcome, Put, SizedItem};
use store::memory::MemoryTable;
use store::size::{MAX_ITEM_BYTES, item_size};
use store::{StoreError, ThrottleKind};
use tokio::time::Instant;

use crate::support::{BACKOFF, Batch, config, item, items, max_sleep, put};

fn writer(table: &MemoryTable) -> BatchWriter<MemoryTable> {
    BatchWriter::new(table.clone(), config())
}

#[tokio::test(start_paused = true)]
async fn s01_valid_items_are_all_written_in_full_chunks() {
    let table = MemoryTable::new();
    let input = items(60, 7);
    let report = writer(&table)
        .write(
            input.puts(),
            Instant::now() + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(1),
            &input.items,
        )
        .await;
    assert!(report.outcomes.iter().all(Outcome::is_written));
    assert_eq!(table.items().len(), 60);
    let sizes: Vec<usize> = table.calls().iter().map(Vec::len).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 60);
    assert_eq!(sizes.len(), 3);
    assert_eq!(report.stats.calls, 3);
    assert_eq!(report.stats.retries, 0);
}

#[tokio::test(start_paused = true)]
async fn s03_thirty_percent_unprocessed_on_every_call_all_written_calls_bounded_sleeps_capped() {
    let table = MemoryTable::new();
    table.set_unprocessed_fraction(0.3);
    let started = Instant::now();
    let input = items(100, 10);
    let report = writer(&table)
        .write(
            input.puts(),
            started + Duration::from_secs(60),
            &mut StdRng::seed_from_u64(3),
            &input.items,
        )
        .await;
    assert!(
        report.outcomes.iter().all(Outcome::is_written),
        "{:?}",
        report.outcomes
    );
    assert_eq!(table.items().len(), 100);
    // Each send of a key either stored it or left it unprocessed: nothing stored was
    // sent again.
    let sent: usize = table.calls().iter().map(Vec::len).sum();
    assert_eq!(sent as u64, 100 + report.stats.unprocessed);
    assert!(table.calls().iter().all(|c| c.len() <= MAX_BATCH_ITEMS));
    let chunks = 4;
    assert!(report.stats.calls <= chunks * u64::from(BACKOFF.max_attempts));
    assert_eq!(report.stats.calls, report.stats.retries + chunks);
    assert!(report.stats.unprocessed > 0);
    // Chunks sleep concurrently; one chunk's sleeps are capped by the ceilings.
    assert!(Instant::now() - started <= max_sleep(BACKOFF.max_attempts));
}

#[tokio::test(start_paused = true)]
async fn s04_one_key_permanently_throttled_only_its_items_fail_within_the_budget() {
    let table = MemoryTable::new();
    table.throttle_pk("p0");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    let input = items(50, 5);
    let report = writer(&table)
        .write(
            input.puts(),
            deadline,
            &mut StdRng::seed_from_u64(4),
            &input.items,
        )
        .await;
    for (key, outcome) in input.keys.iter().zip(&report.outcomes) {
        if key.pk == "p0" {
            assert!(
                matches!(
                    outcome,
                    Outcome::FailedRetryable {
                        throttle: Some(ThrottleKind::KeyRange),
                        ..
                    }
                ),
                "{outcome:?}"
            );
        } else {
            assert_eq!(outcome, &Outcome::Written);
        }
    }
    assert_eq!(table.items().len(), 40);
    assert!(report.stats.calls <= 2 * u64::from(BACKOFF.max_attempts));
    assert!(
        report
            .stats
            .throttles
            .contains_key("TableWriteKeyRangeThroughputExceeded")
    );
    assert!(Instant::now() < deadline);
}

#[tokio::test(start_paused = true)]
async fn s04_deadline_stops_retries_before_the_attempt_budget() {
    let table = MemoryTable::new();
    table.throttle_pk("p0");
    let writer = BatchWriter::new(
        table.clone(),
        store::batch::WriterConfig {
            max_inflight: 1,
            backoff: sharding::backoff::Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(1),
                max_attempts: 1000,
            },
        },
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(5);
    let input = Batch::of(&[("p0", "a")]);
    let report = writer
        .write(
            input.puts(),
            deadline,
            &mut StdRng::seed_from_u64(5),
            &input.items,
        )
        .await;
    assert!(matches!(
        report.outcomes[0],
        Outcome::FailedRetryable { .. }
    ));
    assert!(Instant::now() <= deadline);
    assert!(report.stats.calls < 1000);
}

#[tokio::test(start_paused = true)]
async fn s06_table_throttle_backs_off_and_reports_the_table_kind() {
    let table = MemoryTable::new();
    let throttle = StoreError::Throttled {
        kind: ThrottleKind::Table,
        reason: "TableWriteProvisionedThroughputExceeded".into(),
    };
    table.fail_next(vec![throttle.clone(); 2]);
    let input = items(10, 2);
    let report = writer(&table)
        .write(
            input.puts(),
            Instant::now() + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(6),
            &input.items,
        )
        .await;
    assert!(report.outcomes.iter().all(Outcome::is_written));
    assert_eq!(
        report
            .stats
            .throttles
            .get("TableWriteProvisionedThroughputExceeded"),
        Some(&2)
    );
    assert_eq!(report.stats.retries, 2);

    let table = MemoryTable::new();
    table.fail_next(vec![throttle; 100]);
    let input = items(3, 1);
    let report = writer(&table)
        .write(
            input.puts(),
            Instant::now() + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(6),
            &input.items,
        )
        .await;
    assert!(report.outcomes.iter().all(|o| matches!(
        o,
        Outcome::FailedRetryable {
            throttle: Some(ThrottleKind::Table),
            ..
        }
    )));
    assert_eq!(report.stats.calls, u64::from(BACKOFF.max_attempts));
}

#[test]
fn s07_an_item_over_400_kb_cannot_be_put_and_one_of_400_kb_can() {
    let mut big = item("p1", "big");
    big.insert("blob".into(), AttributeValue::S(String::new()));
    // The blob's length that makes the item exactly 400 KB by DynamoDB's rule.
    let room = MAX_ITEM_BYTES - item_size(&big);
    big.insert("blob".into(), AttributeValue::S("x".repeat(room)));
    assert_eq!(item_size(&big), MAX_ITEM_BYTES);
    assert!(SizedItem::new(big.clone(), MAX_ITEM_BYTES).is_ok());

    big.insert("blob".into(), AttributeValue::S("x".repeat(room + 1)));
    let size = item_size(&big);
    assert_eq!(size, MAX_ITEM_BYTES + 1);
    let refused = SizedItem::new(big, size).expect_err("over 400 KB");
    assert_eq!(refused, ItemTooLarge { size });
    let reason = refused.to_string();
    assert!(
        reason.contains("400 KB") && reason.contains(&MAX_ITEM_BYTES.to_string()),
        "{reason}"
    );
}

#[tokio::test(start_paused = true)]
async fn s07_the_items_within_400_kb_of_a_batch_are_written_in_one_call() {
    let table = MemoryTable::new();
    let mut input = items(5, 1);
    input
        .push("p1", "big")
        .insert("blob".into(), AttributeValue::S("x".repeat(401 * 1024)));
    // The caller makes the puts; the one over 400 KB never becomes one.
    let puts: Vec<Put<'_>> = input
        .keys
        .iter()
        .zip(&input.items)
        .filter_map(|(key, item)| put(key, item).ok())
        .collect();
    assert_eq!(puts.len(), 5);
    let report = writer(&table)
        .write(
            puts,
            Instant::now() + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(7),
            &input.items,
        )
        .await;
    assert!(report.outcomes.iter().all(Outcome::is_written));
    assert_eq!(table.calls(), [input.keys[..5].to_vec()]);
    assert_eq!(table.items().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn s07_validation_error_splits_the_chunk_so_good_items_are_written() {
    let table = MemoryTable::new();
    // The first call is refused as a whole; halves are retried without delay.
    table.fail_next([StoreError::Validation(
        "One or more parameter values were invalid".into(),
    )]);
    let started = Instant::now();
    let input = items(4, 1);
    let report = writer(&table)
        .write(
            input.puts(),
            started + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(8),
            &input.items,
        )
        .await;
    assert!(
        report.outcomes.iter().all(Outcome::is_written),
        "{:?}",
        report.outcomes
    );
    assert_eq!(
        table.calls().iter().map(Vec::len).collect::<Vec<_>>(),
        [4, 2, 2]
    );
    assert_eq!(Instant::now(), started, "splitting does not sleep");
}

#[tokio::test(start_paused = true)]
async fn s08_the_same_reading_twice_is_written_once_without_validation_error() {
    let table = MemoryTable::new();
    let input = Batch::of(&[("p", "a"), ("p", "b"), ("p", "a"), ("q", "a")]);
    let report = writer(&table)
        .write(
            input.puts(),
            Instant::now() + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(9),
            &input.items,
        )
        .await;
    assert!(report.outcomes.iter().all(Outcome::is_written));
    assert_eq!(
        table.calls(),
        vec![table.items().keys().cloned().collect::<Vec<_>>()]
    );
    assert_eq!(table.items().len(), 3);
    assert_eq!(report.stats.duplicates, 1);
}

#[tokio::test(start_paused = true)]
async fn s13_injected_latency_stops_at_the_deadline_and_reports_the_rest() {
    let table = MemoryTable::new();
    table.set_latency(Duration::from_secs(2));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3);
    let writer = BatchWriter::new(
        table.clone(),
        store::batch::WriterConfig {
            max_inflight: 1,
            backoff: BACKOFF,
        },
    );
    let input = items(75, 5);
    let report = writer
        .write(
            input.puts(),
            deadline,
            &mut StdRng::seed_from_u64(13),
            &input.items,
        )
        .await;
    assert!(Instant::now() <= deadline);
    let written = report.outcomes.iter().filter(|o| o.is_written()).count();
    assert_eq!(written, 25, "one call of 25 fits in 3 s at 2 s per call");
    assert!(
        report
            .outcomes
            .iter()
            .all(|o| o.is_written() || matches!(o, Outcome::FailedRetryable { .. }))
    );
}

/// Declares a key stale once a throttle of it was heard.
#[derive(Default)]
struct StaleOnThrottle {
    heard: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl store::WriteObserver for StaleOnThrottle {
    fn throttled(&self, pk: &str) {
        self.heard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(pk.to_owned());
    }

    fn stale(&self, pk: &str) -> bool {
        self.heard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(pk)
    }
}

#[tokio::test(start_paused = true)]
async fn items_of_a_key_declared_stale_come_back_unwritten_and_are_never_sent_again() {
    let table = MemoryTable::new();
    table.throttle_pk("p0");
    let observer = StaleOnThrottle::default();
    let input = items(40, 4);
    let writer = writer(&table);
    let report = writer
        .write_in(
            input.puts(),
            Instant::now() + Duration::from_secs(10),
            &mut StdRng::seed_from_u64(8),
            &observer,
            &writer.slots(),
            &input.items,
        )
        .await;
    for (i, outcome) in report.outcomes.iter().enumerate() {
        if i % 4 == 0 {
            assert_eq!(outcome, &Outcome::Stale, "item {i}");
        } else {
            assert_eq!(outcome, &Outcome::Written, "item {i}");
        }
    }
    assert_eq!(report.stats.stale, 10);
    // Each p0 item was sent at most twice: left unprocessed in its mixed chunk (no
    // throttle named yet), then refused alone by a key-range throttle unless another
    // chunk's throttle was heard first; then given back, never retried (a writer without
    // the observer sends each of them BACKOFF.max_attempts = 6 times).
    let p0_sends = table
        .calls()
        .iter()
        .flatten()
        .filter(|k| k.pk == "p0")
        .count();
    assert!((10..=20).contains(&p0_sends), "{p0_sends}");
}

#[tokio::test(start_paused = true)]
async fn writes_sharing_slots_stay_within_max_inflight_together() {
    let table = MemoryTable::new();
    table.set_latency(Duration::from_millis(10));
    let writer = BatchWriter::new(table.clone(), config());
    let deadline = Instant::now() + Duration::from_secs(30);
    let all = items(1_000, 40);
    let (front, back) = (all.slice(0..300), all.slice(300..1_000));
    let (mut rng_a, mut rng_b) = (StdRng::seed_from_u64(1), StdRng::seed_from_u64(2));
    let slots = writer.slots();
    let (a, b) = tokio::join!(
        writer.write_in(
            front.puts(),
            deadline,
            &mut rng_a,
            &(),
            &slots,
            &front.items
        ),
        writer.write_in(back.puts(), deadline, &mut rng_b, &(), &slots, &back.items),
    );
    assert!(
        a.outcomes
            .iter()
            .chain(&b.outcomes)
            .all(|o| *o == Outcome::Written)
    );
    assert_eq!(table.items().len(), 1_000);
    assert_eq!(table.most_in_flight(), config().max_inflight);
}

/// Makes items again from the input, counting how many it made.
struct Counting {
    input: Batch,
    made: std::sync::atomic::AtomicUsize,
}

impl store::Remake for Counting {
    fn remake(&self, index: usize, key: &ItemKey) -> Option<store::Item> {
        self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The writer asks for an input put by its index and the key it was given with.
        assert_eq!(self.input.keys.get(index), Some(key));
        self.input.items.get(index).cloned()
    }
}

#[tokio::test(start_paused = true)]
async fn items_a_failed_call_consumed_are_made_again_and_unprocessed_ones_are_sent_as_given_back() {
    let table = MemoryTable::new();
    table.set_unprocessed_fraction(0.3);
    // The first two calls fail whole: their 50 items are gone with them.
    table.fail_next([
        StoreError::Transient("HTTP 500".into()),
        StoreError::Throttled {
            kind: ThrottleKind::Table,
            reason: "ThrottlingException".into(),
        },
    ]);
    let input = items(100, 10);
    let remake = Counting {
        input: input.clone(),
        made: 0.into(),
    };
    let writer = writer(&table);
    let report = writer
        .write_in(
            input.puts(),
            Instant::now() + Duration::from_secs(60),
            &mut StdRng::seed_from_u64(21),
            &(),
            &writer.slots(),
            &remake,
        )
        .await;
    assert!(report.outcomes.iter().all(Outcome::is_written));
    // Stored exactly as given, under the keys given, whichever attempt stored them.
    let expected: BTreeMap<ItemKey, store::Item> =
        input.keys.into_iter().zip(input.items).collect();
    assert_eq!(table.items(), expected);
    // Only the items of the two failed calls were made again; the unprocessed ones went
    // out again as the answers gave them back.
    assert!(report.stats.unprocessed > 0);
    assert_eq!(
        remake.made.load(std::sync::atomic::Ordering::Relaxed),
        2 * MAX_BATCH_ITEMS
    );
}
