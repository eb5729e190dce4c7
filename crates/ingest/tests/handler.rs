//! The handler against the in-memory fakes, fed the events in `events/`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use ingest::{Fate, IngestError};
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::fanout::ShardMeta;
use store::{StoreError, ThrottleKind};
use tokio::time::Instant;

use crate::support::{Fixture, event, ids, now};

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(2026)
}

fn failures(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> BTreeSet<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn s01_valid_batch_of_10_all_written_no_failures() {
    let fx = Fixture::new();
    let ev = event("sqs-batch.json");
    assert_eq!(ev.records.len(), 10);
    let response = fx
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(response.batch_item_failures.is_empty());
    // Nine single readings plus one message holding two.
    assert_eq!(fx.table.items().len(), 11);
    assert!(fx.dlq.letters().is_empty());
    let single = fx
        .service(&[])
        .handle(&event("sqs-single.json"), now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(single.batch_item_failures.is_empty());
    assert_eq!(fx.table.items().len(), 12);
}

#[tokio::test(start_paused = true)]
async fn s02_one_malformed_body_goes_to_the_dlq_at_once_and_nine_are_written() {
    let fx = Fixture::new();
    let ev = event("sqs-mixed-bad.json");
    let response = fx
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(
        response.batch_item_failures.is_empty(),
        "a permanent error is not reported"
    );
    assert_eq!(fx.table.items().len(), 9);
    let letters = fx.dlq.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].message_id, ids(&ev)[4]);
    assert_eq!(letters[0].field, "body");
    assert!(
        letters[0].rule.contains("valid JSON"),
        "{}",
        letters[0].rule
    );
    assert_eq!(Some(&letters[0].body), ev.records[4].body.as_ref());
}

#[tokio::test(start_paused = true)]
async fn s02_a_failed_dlq_send_is_reported_instead() {
    let fx = Fixture::new();
    fx.dlq.set_failing(true);
    let ev = event("sqs-mixed-bad.json");
    let response = fx
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert_eq!(failures(&response), BTreeSet::from([ids(&ev)[4].clone()]));
    assert_eq!(fx.table.items().len(), 9);
}

#[tokio::test(start_paused = true)]
async fn s03_thirty_percent_unprocessed_every_call_all_written() {
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(0.3);
    let service = fx.service(&[]);
    let report = service
        .process(&event("sqs-hot-burst.json"), now(), deadline(), &mut rng())
        .await;
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Written { readings: 10 }))
    );
    assert_eq!(fx.table.items().len(), 100);
    assert!(report.writes.retries > 0);
    assert!(
        report.writes.calls <= 4 * 6,
        "calls bounded by chunks x attempts"
    );
}

#[tokio::test(start_paused = true)]
async fn s04_one_key_permanently_throttled_only_its_messages_are_reported() {
    let ev = event("sqs-batch.json");
    // Learn where each message's readings land, then make one partition key hot.
    let probe = Fixture::new();
    probe
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    let items = probe.table.items();
    let hot_pk = items.keys().next().expect("items").pk.clone();
    let owning: BTreeSet<String> = ev
        .records
        .iter()
        .filter(|r| {
            let body = r.body.as_deref().unwrap_or_default();
            items.values().any(|item| {
                item.get("PK") == Some(&AttributeValue::S(hot_pk.clone()))
                    && matches!(item.get("event_id"), Some(AttributeValue::S(e)) if body.contains(e.as_str()))
            })
        })
        .map(|r| r.message_id.clone().expect("id"))
        .collect();
    assert!(!owning.is_empty() && owning.len() < ev.records.len());

    let fx = Fixture::new();
    fx.table.throttle_pk(hot_pk.clone());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10);
    let response = fx
        .service(&[])
        .handle(&ev, now(), deadline, &mut rng())
        .await
        .expect("not all failed");
    assert_eq!(failures(&response), owning);
    assert!(Instant::now() < deadline);
    assert!(fx.table.items().keys().all(|k| k.pk != hot_pk));
    let hot_items = items.keys().filter(|k| k.pk == hot_pk).count();
    assert_eq!(fx.table.items().len(), items.len() - hot_items);
}

/// The fan-outs (from, to) of every change won, in order.
fn raises(fx: &Fixture) -> Vec<(String, u32)> {
    fx.shards
        .changes()
        .into_iter()
        .map(|(entity, meta)| (entity, meta.number_of_shards))
        .collect()
}

/// A hot entity whose every key is throttled: the first throttle raises its fan-out,
/// in force at once, the writer gives back the items it has not written, and the next
/// round writes them under the new keys, all in the same invocation.
#[tokio::test(start_paused = true)]
async fn a_throttled_hot_key_is_raised_at_once_and_the_batch_rekeyed_and_written() {
    let fx = Fixture::new();
    let ev = event("sqs-hot-burst.json");
    // The hot entity has metadata from long ago.
    fx.shards.put_entity(
        "hot-1",
        ShardMeta::initial(
            now()
                .checked_sub(Duration::from_secs(86_400))
                .expect("in range"),
        ),
    );
    let probe = Fixture::new();
    probe
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    let cold: BTreeSet<String> = probe.table.items().keys().map(|k| k.pk.clone()).collect();
    for pk in &cold {
        fx.table.throttle_pk(pk.clone());
    }
    let report = fx
        .service(&[])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Written { .. })),
        "{report:?}"
    );
    assert_eq!(report.fanout_raises, 1);
    assert!(report.stale > 0);
    assert!(
        report
            .writes
            .throttles
            .contains_key("TableWriteKeyRangeThroughputExceeded")
    );
    // Every reading once, none on a throttled key: nothing written was written again.
    let items = fx.table.items();
    assert_eq!(items.len(), probe.table.items().len());
    assert!(items.keys().all(|k| !cold.contains(&k.pk)));
    assert_eq!(raises(&fx), [("hot-1".to_owned(), 2)]);
    // Decided at the first throttle, in force from then.
    let history = fx.shards.entity("hot-1").expect("stored").shard_history;
    assert_eq!(history.epochs().len(), 1);
    assert!(history.epochs()[0].effective_from < now().saturating_add(Duration::from_secs(1)));
    assert!(
        fx.shards
            .hot_entities()
            .await
            .expect("ok")
            .contains("hot-1")
    );
}

/// When the raised keys are throttled too, the next raise comes after the cooldown
/// (seconds, not minutes), within the same invocation.
#[tokio::test(start_paused = true)]
async fn raises_follow_each_other_a_cooldown_apart_within_one_invocation() {
    let fx = Fixture::new();
    let ev = event("sqs-hot-burst.json");
    let mut throttled = BTreeSet::new();
    for k in [1, 2] {
        let probe = Fixture::new();
        if k > 1 {
            let mut meta = ShardMeta::initial(now());
            meta.shard_history =
                sharding::epoch::FanoutHistory::from_epochs(vec![sharding::epoch::Epoch {
                    effective_from: now(),
                    value: k,
                }])
                .expect("valid");
            probe.shards.put_entity("hot-1", meta);
        }
        probe
            .service(&[])
            .handle(&ev, now(), deadline(), &mut rng())
            .await
            .expect("ok");
        for key in probe.table.items().keys() {
            fx.table.throttle_pk(key.pk.clone());
            throttled.insert(key.pk.clone());
        }
    }
    // Retries that outlast the cooldown, so the second raise falls in this invocation.
    let service = fx.service(&[
        ("FANOUT_MAX", "4"),
        ("RETRY_MAX_ATTEMPTS", "1000"),
        ("RETRY_CAP_MS", "100"),
    ]);
    let report = service.process(&ev, now(), deadline(), &mut rng()).await;
    assert_eq!(
        raises(&fx),
        [("hot-1".to_owned(), 2), ("hot-1".to_owned(), 4)],
        "{report:?}"
    );
    let history = fx.shards.entity("hot-1").expect("stored").shard_history;
    let epochs = history.epochs();
    let apart = epochs[1].effective_from.as_millis() - epochs[0].effective_from.as_millis();
    assert!((2_000..=3_500).contains(&apart), "{apart} ms apart");
    // Sub-shards 3 and 4 took what they could; keys 1 and 2 stay throttled for good.
    let items = fx.table.items();
    assert!(!items.is_empty());
    assert!(items.keys().all(|k| !throttled.contains(&k.pk)));
}

/// Part of a message written, the rest held back by a throttle no raise can relieve
/// (FANOUT_MAX 1): the message is acknowledged and only its unwritten readings are sent
/// back, as a fresh copy in the documented format.
#[tokio::test(start_paused = true)]
async fn a_partly_written_message_requeues_only_its_unwritten_readings() {
    let reading = |event: &str, ts: &str| serde_json::json!({"device_id": "dev-7", "event_id": event, "ts": ts, "metrics": {"t": 1.5}});
    let mut ev = event("sqs-single.json");
    ev.records[0].body = Some(
        serde_json::json!({"readings": [
            reading("e-1", "2026-06-22T02:59:58Z"),
            reading("e-2", "2026-06-22T02:59:59Z"),
            reading("e-3", "2026-06-22T03:00:01Z"),
        ]})
        .to_string(),
    );
    let probe = Fixture::new();
    probe
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    let two_o_clock = probe
        .table
        .items()
        .keys()
        .find(|k| k.sk.contains("T02:59:58"))
        .map(|k| k.pk.clone())
        .expect("written");
    let fx = Fixture::new();
    fx.table.throttle_pk(two_o_clock);
    let report = fx
        .service(&[SOURCE, ("FANOUT_MAX", "1")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(
        matches!(
            &report.messages[0].fate,
            Fate::Split {
                written: 1,
                requeued: 2,
                ..
            }
        ),
        "{report:?}"
    );
    assert_eq!(report.split, 1);
    assert!(
        report
            .response()
            .expect("ids")
            .batch_item_failures
            .is_empty()
    );
    assert_eq!(fx.table.items().len(), 1);
    let copies = fx.dlq.copies();
    assert_eq!(copies.len(), 1);
    let limits = ingest::Limits {
        now: now(),
        max_future: Duration::from_secs(300),
        retention: Duration::from_secs(30 * 86_400),
        max_readings: 500,
    };
    let requeued = ingest::parse_body(&copies[0].body, &limits).expect("a valid body");
    let events: Vec<&str> = requeued.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(events, ["e-1", "e-2"]);
    // Progress was made: the copy keeps the requeue count.
    assert_eq!(
        copies[0]
            .attributes
            .get(ingest::handler::REQUEUES_ATTRIBUTE),
        Some(&("Number".to_owned(), "0".to_owned()))
    );
}

#[tokio::test(start_paused = true)]
async fn s06_table_level_throttle_backs_off_without_raising() {
    let fx = Fixture::new();
    fx.shards.put_entity(
        "hot-1",
        ShardMeta::initial(
            now()
                .checked_sub(Duration::from_secs(86_400))
                .expect("in range"),
        ),
    );
    fx.table.fail_next(vec![
        StoreError::Throttled {
            kind: ThrottleKind::Table,
            reason: "TableWriteAccountLimitExceeded".into(),
        };
        1000
    ]);
    let report = fx
        .service(&[])
        .process(&event("sqs-hot-burst.json"), now(), deadline(), &mut rng())
        .await;
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Reported { .. }))
    );
    assert_eq!(report.fanout_raises, 0);
    assert!(fx.shards.changes().is_empty());
    assert!(report.writes.retries > 0, "it backed off and retried");
}

#[tokio::test(start_paused = true)]
async fn s07_validation_exception_on_a_chunk_is_isolated_and_the_rest_written() {
    let fx = Fixture::new();
    fx.table.fail_next([StoreError::Validation(
        "One or more parameter values were invalid".into(),
    )]);
    let response = fx
        .service(&[])
        .handle(&event("sqs-batch.json"), now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(fx.table.items().len(), 11);
}

#[tokio::test(start_paused = true)]
async fn s08_same_reading_twice_in_one_invocation_is_one_item() {
    let fx = Fixture::new();
    let mut ev = event("sqs-single.json");
    let mut copy = ev.records[0].clone();
    copy.message_id = Some("a-redelivered-copy".into());
    ev.records.push(copy);
    let report = fx
        .service(&[])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(
        report
            .messages
            .iter()
            .all(|m| m.fate == Fate::Written { readings: 1 })
    );
    assert_eq!(fx.table.items().len(), 1);
    assert_eq!(fx.table.calls().len(), 1);
    assert_eq!(report.writes.duplicates, 1);
}

#[tokio::test(start_paused = true)]
async fn s10_same_batch_twice_also_across_a_fanout_change_leaves_the_table_identical() {
    let fx = Fixture::new();
    let events = ["sqs-batch.json", "sqs-hot-burst.json", "sqs-mixed-bad.json"];
    for name in events {
        fx.service(&[])
            .handle(&event(name), now(), deadline(), &mut rng())
            .await
            .expect("ok");
    }
    let before = fx.table.items();
    // A change scheduled for later (as a shrink is) does not move readings already
    // accepted.
    let config = crate::support::config(&[]);
    let mut meta = ShardMeta::initial(now());
    meta.number_of_shards = 4;
    meta.shard_history
        .schedule(4, now(), config.shards.directory.policy.propagation_margin)
        .expect("schedulable");
    fx.shards.put_entity("hot-1", meta);
    for name in events {
        fx.service(&[])
            .handle(
                &event(name),
                now().saturating_add(Duration::from_secs(30)),
                deadline(),
                &mut rng(),
            )
            .await
            .expect("ok");
    }
    assert_eq!(fx.table.items(), before);
}

#[tokio::test(start_paused = true)]
async fn s11_a_panic_on_one_message_reports_it_and_answers_the_others() {
    let fx = Fixture::new();
    let ev = event("sqs-batch.json");
    let victim = ids(&ev)[3].clone();
    let target = victim.clone();
    let service = fx.service(&[]).with_message_hook(Arc::new(move |id: &str| {
        assert!(id != target, "injected panic");
    }));
    let response = service
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert_eq!(failures(&response), BTreeSet::from([victim]));
    assert_eq!(fx.table.items().len(), 10);
}

#[tokio::test(start_paused = true)]
async fn s12_partial_batch_response_uses_item_identifier_and_input_ids() {
    let fx = Fixture::new();
    fx.table.set_latency(Duration::from_secs(2));
    let ev = event("sqs-hot-burst.json");
    let response = fx
        .service(&[("MAX_INFLIGHT", "1")])
        .handle(
            &ev,
            now(),
            Instant::now() + Duration::from_millis(3500),
            &mut rng(),
        )
        .await
        .expect("some written");
    let json = serde_json::to_value(&response).expect("serializable");
    let list = json["batchItemFailures"].as_array().expect("array");
    assert!(!list.is_empty());
    let input: BTreeSet<String> = ids(&ev).into_iter().collect();
    for failure in list {
        let object = failure.as_object().expect("object");
        assert_eq!(object.keys().collect::<Vec<_>>(), ["itemIdentifier"]);
        assert!(input.contains(object["itemIdentifier"].as_str().expect("string")));
    }
}

#[tokio::test(start_paused = true)]
async fn s13_two_seconds_of_latency_answer_before_the_deadline_without_loss() {
    let fx = Fixture::new();
    fx.table.set_latency(Duration::from_secs(2));
    let ev = event("sqs-hot-burst.json");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3);
    let report = fx
        .service(&[("MAX_INFLIGHT", "2")])
        .process(&ev, now(), deadline, &mut rng())
        .await;
    assert!(Instant::now() < deadline);
    let written: Vec<_> = report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Written { .. }))
        .collect();
    let reported: Vec<_> = report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Reported { .. }))
        .collect();
    assert!(!written.is_empty() && !reported.is_empty(), "{report:?}");
    assert_eq!(
        written.len() + reported.len(),
        10,
        "every message written or reported"
    );
    // Every message called written has all of its readings stored.
    let stored: BTreeSet<String> = fx
        .table
        .items()
        .values()
        .filter_map(|i| match i.get("event_id") {
            Some(AttributeValue::S(e)) => Some(e.clone()),
            _ => None,
        })
        .collect();
    for m in written {
        let record = ev
            .records
            .iter()
            .find(|r| r.message_id.as_deref() == Some(m.message_id.as_str()))
            .expect("input");
        let body: serde_json::Value =
            serde_json::from_str(record.body.as_deref().expect("body")).expect("json");
        for r in body["readings"].as_array().expect("batch") {
            assert!(stored.contains(r["event_id"].as_str().expect("id")));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn every_message_failing_transiently_fails_the_invocation() {
    let fx = Fixture::new();
    fx.table
        .fail_next(vec![StoreError::Transient("HTTP 500".into()); 1000]);
    let report = fx
        .service(&[])
        .process(&event("sqs-batch.json"), now(), deadline(), &mut rng())
        .await;
    let main: serde_json::Value = serde_json::from_str(&report.emf_lines(now())[0]).expect("json");
    assert_eq!(
        main["BackoffInvocations"], 1.0,
        "counted for the errors alarm"
    );
    fx.table
        .fail_next(vec![StoreError::Transient("HTTP 500".into()); 1000]);
    let err = fx
        .service(&[])
        .handle(&event("sqs-batch.json"), now(), deadline(), &mut rng())
        .await
        .expect_err("all failed");
    assert!(
        matches!(err, IngestError::AllFailed { messages: 10, .. }),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn items_a_failed_call_consumed_are_stored_as_the_first_attempt_sent_them() {
    let ev = event("sqs-batch.json");
    let clean = Fixture::new();
    clean
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    // The first call fails whole and takes its items with it: the retry sends them
    // made again from their readings.
    let failing = Fixture::new();
    failing
        .table
        .fail_next([StoreError::Transient("HTTP 500".into())]);
    let response = failing
        .service(&[])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(failing.table.calls().len(), clean.table.calls().len() + 1);
    assert_eq!(failing.table.items(), clean.table.items());
}

#[test]
fn emf_lines_carry_the_counters() {
    let report = ingest::Report {
        messages: vec![],
        writes: store::WriteStats {
            written: 7,
            throttles: [("TableWriteKeyRangeThroughputExceeded".to_owned(), 2)].into(),
            ..Default::default()
        },
        readings_written: 120,
        fanout_raises: 1,
        fanout_shrinks: 0,
        stale: 0,
        split: 0,
        dead_lettered: 0,
        dlq_failures: 0,
        panics: 0,
        delayed: 3,
        delay_failures: 0,
        requeued: 0,
        late_marks: 2,
        late_mark_failures: 0,
    };
    let lines = report.emf_lines(now());
    assert_eq!(lines.len(), 2);
    let main: serde_json::Value = serde_json::from_str(&lines[0]).expect("json");
    assert_eq!(main["ReadingsWritten"], 120.0, "a block's members each");
    assert_eq!(main["ItemsWritten"], 7.0);
    assert_eq!(main["FanoutRaises"], 1.0);
    assert_eq!(main["LateMarks"], 2.0);
    assert_eq!(main["BackoffInvocations"], 0.0, "no message failed");
    let throttles: serde_json::Value = serde_json::from_str(&lines[1]).expect("json");
    assert_eq!(throttles["Reason"], "TableWriteKeyRangeThroughputExceeded");
    assert_eq!(throttles["Throttles"], 2.0);
}

#[tokio::test(start_paused = true)]
async fn reported_messages_wait_longer_the_more_often_they_were_received() {
    let mut ev = event("sqs-batch.json");
    for (i, record) in ev.records.iter_mut().enumerate() {
        record.attributes.insert(
            "ApproximateReceiveCount".to_owned(),
            (i % 4 + 1).to_string(),
        );
    }
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let source = [
        ("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest"),
        ("REDELIVERY_BASE_SECS", "10"),
        ("REDELIVERY_CAP_SECS", "60"),
    ];
    let report = fx
        .service(&source)
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.delayed, 10);
    assert_eq!(report.delay_failures, 0);
    let delays = fx.dlq.delays();
    assert_eq!(delays.len(), 10);
    for (i, (delay, record)) in delays.iter().zip(&ev.records).enumerate() {
        assert_eq!(Some(&delay.receipt_handle), record.receipt_handle.as_ref());
        // Receives 1..4 (the 5th is the last: requeued): ceilings 10, 20, 40 and 60
        // (capped); at least half of each.
        let ceiling = [10, 20, 40, 60][i % 4];
        assert!(
            (ceiling / 2..=ceiling).contains(&delay.visibility_secs),
            "receive {}: {} s, ceiling {ceiling} s",
            i % 4 + 1,
            delay.visibility_secs
        );
    }

    // Without the source queue's URL the queue's own timeout applies: no call is made.
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.delayed, report.delay_failures), (0, 0));
    assert!(fx.dlq.delays().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failed_visibility_change_still_reports_and_loses_nothing() {
    let ev = event("sqs-batch.json");
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    fx.dlq.set_failing(true);
    let report = fx
        .service(&[("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.delayed, report.delay_failures), (0, 10));
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Reported { .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn written_and_dead_lettered_messages_are_not_delayed() {
    let ev = event("sqs-mixed-bad.json");
    let fx = Fixture::new();
    let report = fx
        .service(&[("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(report.dead_lettered >= 1);
    assert_eq!(report.delayed, 0);
    assert!(fx.dlq.delays().is_empty());
}

fn at_receive(ev: &mut aws_lambda_events::event::sqs::SqsEvent, receives: u32) {
    for record in &mut ev.records {
        record
            .attributes
            .insert("ApproximateReceiveCount".to_owned(), receives.to_string());
    }
}

const SOURCE: (&str, &str) = ("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest");

#[tokio::test(start_paused = true)]
async fn at_the_last_receive_a_failing_message_is_requeued_as_a_fresh_copy() {
    let mut ev = event("sqs-batch.json");
    at_receive(&mut ev, 5);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let service = fx.service(&[SOURCE]);
    let report = service.process(&ev, now(), deadline(), &mut rng()).await;
    assert_eq!(report.requeued, 10);
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Requeued { .. }))
    );
    // Requeued messages are not reported: the originals are deleted, the copies stay.
    assert!(
        report
            .response()
            .expect("ids")
            .batch_item_failures
            .is_empty()
    );
    assert!(fx.dlq.delays().is_empty() && fx.dlq.letters().is_empty());
    let copies = fx.dlq.copies();
    assert_eq!(copies.len(), 10);
    for (copy, record) in copies.iter().zip(&ev.records) {
        assert_eq!(Some(&copy.body), record.body.as_ref());
        assert_eq!(
            copy.attributes.get(ingest::handler::REQUEUES_ATTRIBUTE),
            Some(&("Number".to_owned(), "1".to_owned()))
        );
        assert_eq!(
            copy.attributes
                .get(ingest::handler::SOURCE_ID_ATTRIBUTE)
                .map(|(_, v)| v),
            record.message_id.as_ref()
        );
        assert!(copy.delay_secs <= store::queue::MAX_DELAY_SECS);
    }

    // Before the last receive, the same failure is only reported.
    at_receive(&mut ev, 4);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.requeued, 0);
    assert!(fx.dlq.copies().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_copy_out_of_requeues_is_dead_lettered_with_its_reason_and_first_id() {
    let mut ev = event("sqs-batch.json");
    at_receive(&mut ev, 5);
    for record in &mut ev.records {
        for (name, value, data_type) in [
            (ingest::handler::REQUEUES_ATTRIBUTE, "3", "Number"),
            (ingest::handler::SOURCE_ID_ATTRIBUTE, "first-id", "String"),
        ] {
            let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
            attribute.string_value = Some(value.to_owned());
            attribute.data_type = Some(data_type.to_owned());
            record.message_attributes.insert(name.to_owned(), attribute);
        }
    }
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.requeued, report.dead_lettered), (0, 10));
    let letters = fx.dlq.letters();
    assert_eq!(letters.len(), 10);
    for letter in &letters {
        assert_eq!(letter.message_id, "first-id");
        assert_eq!(letter.field, "message");
        assert!(
            letter
                .rule
                .starts_with("still failing after 5 receives and 3 requeues: unprocessed"),
            "{}",
            letter.rule
        );
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_source_queue_the_last_receive_dead_letters_with_the_reason() {
    let mut ev = event("sqs-batch.json");
    at_receive(&mut ev, 5);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.dead_lettered, 10);
    assert!(fx.dlq.copies().is_empty());
    assert!(
        fx.dlq
            .letters()
            .iter()
            .all(|l| l.rule.contains("after 5 receives and 0 requeues"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_requeue_leaves_the_message_reported() {
    let mut ev = event("sqs-batch.json");
    at_receive(&mut ev, 5);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    fx.dlq.set_failing(true);
    let report = fx
        .service(&[SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.requeued, 0);
    assert_eq!(
        failures(&report.response().expect("ids")),
        ids(&ev).into_iter().collect()
    );
}

/// The hot-burst event (10 messages of 10 readings of `hot-1`), its messages received
/// by the queue `step_ms` apart (`SentTimestamp`) and every reading stamped with one
/// instant, as a clock of coarse resolution or a replayed buffer stamps them.
fn hot_burst_sent_every(step_ms: i64) -> aws_lambda_events::event::sqs::SqsEvent {
    let mut ev = event("sqs-hot-burst.json");
    let sent0 = now().as_millis() - 5_000;
    let instant = now().as_millis() - 60_000;
    for (i, record) in ev.records.iter_mut().enumerate() {
        let mut body: serde_json::Value =
            serde_json::from_str(record.body.as_deref().expect("body")).expect("json");
        for reading in body["readings"].as_array_mut().expect("readings") {
            reading["ts"] = serde_json::json!(instant);
        }
        record.body = Some(body.to_string());
        record.attributes.insert(
            "SentTimestamp".to_owned(),
            (sent0 + i as i64 * step_ms).to_string(),
        );
    }
    ev
}

#[tokio::test(start_paused = true)]
async fn a_batch_showing_a_rate_near_the_key_limit_raises_the_fan_out_ahead_of_throttles() {
    // 100 readings in messages the queue received over 2 s: 50 readings/s on one key.
    let ev = hot_burst_sent_every(2_000 / 9);
    let fx = Fixture::new();
    let report = fx
        .service(&[("RAISE_AHEAD_WCU", "40")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.fanout_raises, 1);
    assert!(
        report.writes.throttles.is_empty(),
        "no throttle asked for it"
    );
    let meta = fx.shards.entity("hot-1").expect("metadata created");
    assert_eq!(meta.number_of_shards, 2);

    // The same batch under the threshold, or with the signal off, raises nothing.
    for threshold in ["60", "0"] {
        let fx = Fixture::new();
        let report = fx
            .service(&[("RAISE_AHEAD_WCU", threshold)])
            .process(&ev, now(), deadline(), &mut rng())
            .await;
        assert_eq!(report.fanout_raises, 0, "threshold {threshold}");
        assert!(
            fx.shards
                .entity("hot-1")
                .is_none_or(|m| m.number_of_shards == 1)
        );
    }
}

/// One message of `n` readings of one device, every reading stamped with one instant.
fn one_instant_burst(n: usize) -> aws_lambda_events::event::sqs::SqsEvent {
    let instant = now().as_millis() - 60_000;
    let readings: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "device_id": "multi-channel-1",
                "event_id": format!("ch-{i:04}"),
                "ts": instant,
                "metrics": {"t": 21.5},
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": [{
        "messageId": "burst-1",
        "body": serde_json::json!({ "readings": readings }).to_string(),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": (now().as_millis() - 1_000).to_string(),
        },
    }]}))
    .expect("an SQS event")
}

/// A burst stamped with one instant is not a hot device: its fan-out follows the rate at
/// which its readings reached the queue (here one message, counted over the template's
/// 1-s batching window), never the span of the timestamps it claims.
#[tokio::test(start_paused = true)]
async fn a_one_instant_burst_leaves_k_at_what_the_arrival_rate_needs() {
    // The template's defaults: RAISE_AHEAD_WCU 100, batching window 1 s, batch 100.
    for (n, k) in [(20, 1), (500, 5)] {
        let fx = Fixture::new();
        let report = fx
            .service(&[])
            .process(&one_instant_burst(n), now(), deadline(), &mut rng())
            .await;
        assert!(failures(&report.response().expect("ids")).is_empty());
        assert_eq!(fx.table.items().len(), n);
        let fanout = fx
            .shards
            .entity("multi-channel-1")
            .map_or(1, |m| m.number_of_shards);
        assert_eq!(fanout, k, "{n} readings in one message");
    }
}

/// A key's limit is in write units, so a device whose readings are large is measured
/// in them: 40 readings of about 2.5 KB (3 write units each) in one window take 120
/// write units a second, over the 100 a key is raised ahead at (`RAISE_AHEAD_WCU`),
/// where 40 small readings take 40 and stay on one key.
#[tokio::test(start_paused = true)]
async fn a_device_of_large_readings_is_raised_by_the_write_units_it_takes() {
    for (tags, k) in [(0, 1), (10, 2)] {
        let readings: Vec<serde_json::Value> = (0..40)
            .map(|i| {
                let tags: serde_json::Map<String, serde_json::Value> = (0..tags)
                    .map(|t| (format!("tag{t:02}"), "v".repeat(240).into()))
                    .collect();
                serde_json::json!({
                    "device_id": "camera-1",
                    "event_id": format!("f-{i:04}"),
                    "ts": now().as_millis() - 60_000 + i,
                    "metrics": {"t": 21.5},
                    "tags": tags,
                })
            })
            .collect();
        let ev: aws_lambda_events::event::sqs::SqsEvent =
            serde_json::from_value(serde_json::json!({
                "Records": [{
                    "messageId": "large-1",
                    "body": serde_json::json!({ "readings": readings }).to_string(),
                    "attributes": { "SentTimestamp": (now().as_millis() - 1_000).to_string() },
                }]
            }))
            .expect("an SQS event");
        let fx = Fixture::new();
        fx.service(&[])
            .process(&ev, now(), deadline(), &mut rng())
            .await;
        let units: usize = fx
            .table
            .items()
            .values()
            .map(|item| store::size::write_units(store::size::item_size(item)))
            .sum();
        assert_eq!(units, 40 * if tags == 0 { 1 } else { 3 }, "{tags} tags");
        let fanout = fx
            .shards
            .entity("camera-1")
            .map_or(1, |m| m.number_of_shards);
        assert_eq!(fanout, k, "{tags} tags of 240 bytes");
    }
}

/// Many one-reading messages of one device in a batch that filled before its window
/// ended: the batch's own span by the queue's clock is the device's real arrival rate.
#[tokio::test(start_paused = true)]
async fn a_full_batch_of_one_reading_messages_shows_its_real_arrival_rate() {
    let sent0 = now().as_millis() - 1_000;
    let records: Vec<serde_json::Value> = (0..100)
        .map(|i| {
            serde_json::json!({
                "messageId": format!("m-{i:03}"),
                "body": serde_json::json!({
                    "device_id": "fast-1",
                    "event_id": format!("e-{i:03}"),
                    "ts": now().as_millis() - 60_000,
                    "metrics": {"t": 1},
                }).to_string(),
                // 100 messages over 99 ms: about 1,000 readings/s.
                "attributes": { "SentTimestamp": (sent0 + i).to_string() },
            })
        })
        .collect();
    let ev: aws_lambda_events::event::sqs::SqsEvent =
        serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event");
    let fx = Fixture::new();
    fx.service(&[("BATCH_SIZE", "100")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    // 100 readings / 0.099 s = 1,010/s: 11 keys of 100 readings/s.
    assert_eq!(
        fx.shards.entity("fast-1").map(|m| m.number_of_shards),
        Some(11)
    );
    // The same messages in a batch the window ended (a larger batch size): one window's worth.
    let fx = Fixture::new();
    fx.service(&[("BATCH_SIZE", "1000")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(
        fx.shards.entity("fast-1").map_or(1, |m| m.number_of_shards),
        1
    );
}

/// `messages` messages of `readings` readings each, every reading of a device of its own.
fn many_readings(messages: usize, readings: usize) -> aws_lambda_events::event::sqs::SqsEvent {
    let start = now()
        .checked_sub(Duration::from_secs(600))
        .expect("in range")
        .as_millis();
    let records: Vec<serde_json::Value> = (0..messages)
        .map(|m| {
            let body: Vec<serde_json::Value> = (0..readings)
                .map(|r| {
                    let n = m * readings + r;
                    serde_json::json!({
                        "device_id": format!("dev-{n:05}"),
                        "event_id": format!("e-{n:05}"),
                        "ts": start + n as i64,
                        "metrics": {"t": 21.5},
                    })
                })
                .collect();
            serde_json::json!({
                "messageId": format!("m-{m:03}"),
                "body": serde_json::json!({ "readings": body }).to_string(),
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event")
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_the_templates_size_is_written_once_within_max_inflight_calls_at_once() {
    // 4,000 readings: more than one call per slot, so the first round goes in two waves.
    let ev = many_readings(100, 40);
    let fx = Fixture::new();
    fx.table.set_latency(Duration::from_millis(10));
    let report = fx
        .service(&[("MAX_INFLIGHT", "16")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(failures(&report.response().expect("ids")).is_empty());
    assert_eq!(report.writes.written, 4_000);
    assert_eq!(fx.table.items().len(), 4_000);
    // Every item in exactly one call, and never more calls at once than the writer's slots.
    assert_eq!(fx.table.calls().iter().map(Vec::len).sum::<usize>(), 4_000);
    assert_eq!(fx.table.most_in_flight(), 16);
}

#[tokio::test(start_paused = true)]
async fn max_inflight_bounds_each_invocation_not_invocations_at_once() {
    // Two invocations at once on one service (as `run-local` runs them), each of
    // 8 calls' worth of readings under MAX_INFLIGHT = 4.
    let fx = Fixture::new();
    fx.table.set_latency(Duration::from_millis(10));
    let service = fx.service(&[("MAX_INFLIGHT", "4")]);
    let first = many_readings(5, 40);
    let mut second = many_readings(5, 40);
    for record in &mut second.records {
        record.message_id = record.message_id.as_ref().map(|id| format!("{id}-b"));
        record.body = record.body.as_ref().map(|b| b.replace("\"e-", "\"f-"));
    }
    let (mut rng_a, mut rng_b) = (rng(), rng());
    let (a, b) = tokio::join!(
        service.process(&first, now(), deadline(), &mut rng_a),
        service.process(&second, now(), deadline(), &mut rng_b),
    );
    assert_eq!(a.writes.written + b.writes.written, 400);
    assert_eq!(fx.table.items().len(), 400);
    assert_eq!(fx.table.most_in_flight(), 8);
}

/// A reading's write order (`w`, docs/formats.md) is its message's `SentTimestamp`, a
/// requeued copy's first (the ingest carries it, and a copy it requeues carries it on),
/// and never what a publisher's own `shardline.` attribute claims.
#[tokio::test(start_paused = true)]
async fn each_item_carries_its_messages_sent_timestamp_or_a_copys_first() {
    let ingest_role = ("INGEST_SENDER_ID", "AROAINGESTROLE0000001");
    let mut ev = event("sqs-batch.json");
    ev.records.truncate(3);
    let claim = |record: &mut aws_lambda_events::event::sqs::SqsMessage, value: &str| {
        let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
        attribute.string_value = Some(value.to_owned());
        attribute.data_type = Some("Number".to_owned());
        record
            .message_attributes
            .insert(ingest::handler::SENT_ATTRIBUTE.to_owned(), attribute);
    };
    // 0: a device's message; 1: the ingest's requeued copy of one sent earlier; 2: a
    // publisher claiming an order of its choosing.
    ev.records[1]
        .attributes
        .insert("SenderId".to_owned(), format!("{}:ingest", ingest_role.1));
    claim(&mut ev.records[1], "1782089000000");
    claim(&mut ev.records[2], "9999999999999");
    let sent: Vec<String> = ev
        .records
        .iter()
        .map(|r| r.attributes["SentTimestamp"].clone())
        .collect();
    let fx = Fixture::new();
    let report = fx
        .service(&[ingest_role, ("BLOCKS", "off")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.dead_lettered, 0, "{report:?}");
    let written: BTreeSet<String> = fx
        .table
        .items()
        .values()
        .filter_map(|item| match item.get("w") {
            Some(AttributeValue::N(w)) => Some(w.clone()),
            _ => None,
        })
        .collect();
    let expected: BTreeSet<String> =
        [sent[0].clone(), "1782089000000".to_owned(), sent[2].clone()].into();
    assert_eq!(written, expected);

    // A copy of that copy, requeued at its last receive, carries the first order on.
    at_receive(&mut ev, 5);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    fx.service(&[ingest_role, ("BLOCKS", "off"), SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    let carried: Vec<Option<String>> = fx
        .dlq
        .copies()
        .iter()
        .map(|c| {
            c.attributes
                .get(ingest::handler::SENT_ATTRIBUTE)
                .map(|(_, v)| v.clone())
        })
        .collect();
    assert_eq!(
        carried,
        [
            Some(sent[0].clone()),
            Some("1782089000000".to_owned()),
            Some(sent[2].clone())
        ]
    );
}
