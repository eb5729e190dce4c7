//! Scenario 27: a refusal SQS cannot carry as it is, and a message with many
//! attributes. Every refused message reaches the DLQ with a readable reason on its first
//! receive, a message with 10 attributes can still be requeued, and a device cannot set
//! the ingest's own `shardline.*` attributes. Against the in-memory queue, which refuses
//! what SQS refuses (character set, 10 attributes, 256 KiB).

use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use ingest::Fate;
use ingest::handler::{REQUEUES_ATTRIBUTE, SENT_ATTRIBUTE, SOURCE_ID_ATTRIBUTE};
use rand::SeedableRng;
use rand::rngs::StdRng;
use store::queue::{MAX_ATTRIBUTES, MAX_MESSAGE_BYTES, MAX_TEXT_CHARS, check_message};
use tokio::time::Instant;

use crate::support::{Fixture, event, now};

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(27)
}

/// A device's SenderId (an IAM user's id): not the ingest's.
const DEVICE: &str = "AIDADEVICE00000000001";
/// The ingest's role id, as `INGEST_SENDER_ID`; its sends carry `"<RoleId>:<session>"`.
const INGEST_ROLE: (&str, &str) = ("INGEST_SENDER_ID", "AROAINGESTROLE0000001");
const SOURCE: (&str, &str) = ("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest");

/// A valid reading's body (the single event's).
fn valid_body() -> String {
    event("sqs-single.json").records[0]
        .body
        .clone()
        .expect("a body")
}

/// A record of message `id` holding `body`, sent by `sender`, at receive `receives`.
fn record(id: &str, body: String, sender: &str, receives: u32) -> SqsMessage {
    let mut record = event("sqs-single.json").records.remove(0);
    record.message_id = Some(id.to_owned());
    record.receipt_handle = Some(format!("handle-{id}"));
    record.body = Some(body);
    record
        .attributes
        .insert("SenderId".to_owned(), sender.to_owned());
    record
        .attributes
        .insert("ApproximateReceiveCount".to_owned(), receives.to_string());
    record
}

fn with_attribute(record: &mut SqsMessage, name: &str, data_type: &str, value: &str) {
    let mut attribute = SqsMessageAttribute::default();
    attribute.data_type = Some(data_type.to_owned());
    attribute.string_value = Some(value.to_owned());
    record.message_attributes.insert(name.to_owned(), attribute);
}

fn batch(records: Vec<SqsMessage>) -> SqsEvent {
    let mut ev = SqsEvent::default();
    ev.records = records;
    ev
}

/// The valid reading with one more member `"name": 1` at the top (an unknown field).
fn with_unknown_field(name_json: &str) -> String {
    let body = valid_body();
    format!("{{\"{name_json}\":1,{}", &body[1..])
}

/// The four bodies of the issue: field names with NUL or U+FFFF (as JSON escapes, the
/// only way SQS carries them), a metric name of 120,000 characters, and an unknown
/// field of 200,000 characters. With what the reason must show.
fn bad_bodies() -> Vec<(&'static str, String, &'static str)> {
    let body = valid_body();
    let long_metric = body.replace("\"humidity\"", &format!("\"{}\"", "m".repeat(120_000)));
    vec![
        (
            "nul",
            with_unknown_field("a\\u0000b"),
            "a\\u0000b: unknown field",
        ),
        (
            "ffff",
            with_unknown_field("x\\uffffy"),
            "x\\uFFFFy: unknown field",
        ),
        ("long-metric", long_metric, "metric names must be"),
        (
            "long-unknown",
            with_unknown_field(&"u".repeat(200_000)),
            "...: unknown field",
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn s27_each_bad_field_name_reaches_the_dlq_with_a_readable_reason_on_the_first_receive() {
    let bodies = bad_bodies();
    let ev = batch(
        bodies
            .iter()
            .map(|(id, body, _)| record(id, body.clone(), DEVICE, 1))
            .collect(),
    );
    let fx = Fixture::new();
    let report = fx
        .service(&[INGEST_ROLE, SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(fx.dlq.refused(), Vec::<String>::new());
    assert_eq!((report.dead_lettered, report.dlq_failures), (4, 0));
    assert!(
        report
            .response()
            .expect("ids")
            .batch_item_failures
            .is_empty(),
        "nothing is left to a redelivery"
    );
    let letters = fx.dlq.letters();
    assert_eq!(letters.len(), 4);
    for ((id, body, shows), letter) in bodies.iter().zip(&letters) {
        assert_eq!(
            check_message(&letter.body, &letter.attributes, MAX_MESSAGE_BYTES),
            Ok(()),
            "{id}"
        );
        let attribute = |name: &str| letter.attributes.get(name).map(|(_, v)| v.as_str());
        let reason = attribute("reason").expect("a reason");
        assert!(reason.contains(shows), "{id}: {reason}");
        assert!(reason.chars().count() <= MAX_TEXT_CHARS, "{id}");
        assert!(
            attribute("field").is_some_and(|f| f.chars().count() <= MAX_TEXT_CHARS),
            "{id}"
        );
        assert_eq!(attribute("source_message_id"), Some(*id));
        // Each of these bodies fits beside its reason: it is kept as it was sent.
        assert_eq!(&letter.body, body, "{id}");
    }
}

#[tokio::test(start_paused = true)]
async fn s27_a_body_that_cannot_take_its_reason_is_dead_lettered_in_a_wrapper() {
    // An unknown field filling the message: body and reason exceed 256 KiB together.
    let body = with_unknown_field(&"\\u0000".repeat((MAX_MESSAGE_BYTES - 200) / 6));
    assert!(body.len() < MAX_MESSAGE_BYTES);
    let ev = batch(vec![record("full", body.clone(), DEVICE, 1)]);
    let fx = Fixture::new();
    let report = fx
        .service(&[INGEST_ROLE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.dead_lettered, report.dlq_failures), (1, 0));
    let letter = &fx.dlq.letters()[0];
    let wrapper: serde_json::Value = serde_json::from_str(&letter.body).expect("a JSON wrapper");
    let inner = &wrapper["shardline_dead_letter"];
    assert!(
        inner["reason"]
            .as_str()
            .is_some_and(|r| r.contains("unknown field")),
        "{inner}"
    );
    assert_eq!(inner["body_bytes"], body.len());
    let head = inner["body_head"].as_str().expect("the head");
    assert!(body.starts_with(head) && head.len() > body.len() / 2);
    assert!(letter.reason().contains("unknown field"));
}

/// A record at its last receive (5) whose reading cannot be written.
fn failing_at_last_receive(id: &str, sender: &str) -> SqsMessage {
    record(id, valid_body(), sender, 5)
}

#[tokio::test(start_paused = true)]
async fn s27_a_message_with_ten_attributes_can_be_requeued() {
    let mut full = failing_at_last_receive("ten", DEVICE);
    for i in 0..MAX_ATTRIBUTES {
        with_attribute(&mut full, &format!("gw.{i}"), "String", &format!("v{i}"));
    }
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[INGEST_ROLE, SOURCE])
        .process(&batch(vec![full]), now(), deadline(), &mut rng())
        .await;
    assert_eq!(fx.dlq.refused(), Vec::<String>::new());
    assert_eq!(report.requeued, 1, "{:?}", report.messages);
    let copy = &fx.dlq.copies()[0];
    assert_eq!(copy.attributes.len(), MAX_ATTRIBUTES);
    assert_eq!(
        copy.attributes.get(REQUEUES_ATTRIBUTE),
        Some(&("Number".to_owned(), "1".to_owned()))
    );
    assert_eq!(
        copy.attributes
            .get(SOURCE_ID_ATTRIBUTE)
            .map(|(_, v)| v.as_str()),
        Some("ten")
    );
    assert!(
        copy.attributes.contains_key(SENT_ATTRIBUTE),
        "its write order"
    );
    // The sender's are kept in name order; the last three make room for the ingest's.
    let kept: Vec<&str> = copy
        .attributes
        .keys()
        .filter(|k| k.starts_with("gw."))
        .map(String::as_str)
        .collect();
    assert_eq!(
        kept,
        ["gw.0", "gw.1", "gw.2", "gw.3", "gw.4", "gw.5", "gw.6"]
    );
}

#[tokio::test(start_paused = true)]
async fn s27_a_refused_message_with_ten_attributes_reaches_the_dlq() {
    let mut full = record("ten-bad", with_unknown_field("a\\u0000"), DEVICE, 1);
    for i in 0..MAX_ATTRIBUTES {
        with_attribute(&mut full, &format!("gw.{i}"), "String", &format!("v{i}"));
    }
    let fx = Fixture::new();
    let report = fx
        .service(&[INGEST_ROLE])
        .process(&batch(vec![full]), now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.dead_lettered, report.dlq_failures), (1, 0));
    let letter = &fx.dlq.letters()[0];
    assert_eq!(letter.attributes.len(), MAX_ATTRIBUTES);
    assert!(letter.attributes.contains_key("gw.5") && !letter.attributes.contains_key("gw.6"));
}

#[tokio::test(start_paused = true)]
async fn s27_a_publisher_set_requeue_count_is_not_trusted() {
    let forged = |id: &str, sender: &str| {
        let mut r = failing_at_last_receive(id, sender);
        with_attribute(&mut r, REQUEUES_ATTRIBUTE, "Number", "99");
        with_attribute(&mut r, SOURCE_ID_ATTRIBUTE, "String", "someone-else");
        r
    };
    // A device, and a sender whose id merely starts with the ingest's role id.
    let (role, id) = INGEST_ROLE;
    let lookalike = format!("{id}X:session");
    let ev = batch(vec![
        forged("device", DEVICE),
        forged("lookalike", &lookalike),
    ]);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[(role, id), SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.requeued, report.dead_lettered), (2, 0));
    for (copy, id) in fx.dlq.copies().iter().zip(["device", "lookalike"]) {
        assert_eq!(copy.attributes[REQUEUES_ATTRIBUTE].1, "1", "{id}");
        assert_eq!(copy.attributes[SOURCE_ID_ATTRIBUTE].1, id);
    }

    // The ingest's own copy (a session of its role) is counted: out of requeues, it is
    // dead-lettered with its reason under its first id.
    let ev = batch(vec![forged("own", &format!("{id}:shardline-ingest"))]);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[(role, id), SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.requeued, report.dead_lettered), (0, 1));
    let letter = &fx.dlq.letters()[0];
    assert_eq!(letter.message_id, "someone-else");
    assert!(letter.rule.contains("99 requeues"), "{}", letter.rule);
    // The ingest's attributes are never carried onto a dead letter.
    assert!(
        !letter
            .attributes
            .keys()
            .any(|k| k.starts_with("shardline."))
    );
}

#[tokio::test(start_paused = true)]
async fn s27_without_its_sender_identity_the_ingest_dead_letters_rather_than_requeue_for_ever() {
    let ev = batch(vec![failing_at_last_receive("unknown", DEVICE)]);
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[("INGEST_SENDER_ID", ""), SOURCE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!((report.requeued, report.dead_lettered), (0, 1));
    assert!(matches!(report.messages[0].fate, Fate::DeadLettered { .. }));
    assert!(
        fx.dlq.letters()[0]
            .rule
            .contains("after 5 receives and 0 requeues")
    );
}
