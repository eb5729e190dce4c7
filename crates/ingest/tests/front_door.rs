//! Scenario 29: the AWS IoT Core front door. `events/sqs-iot-front-door.json` holds
//! what the template's IoT rule sends: each body the rule's SELECT output (the
//! published bytes base64-encoded under `payload`, the thing its topic names, the
//! connection's client id and the certificate it authenticated with beside it), each
//! SenderId a session of the rule's role. A thing's own readings are written; a message
//! holding a reading of another device goes to the DLQ with a reason naming both ids
//! (the message as a whole, as every refusal), and the other messages go on; the same
//! envelope from any other sender is refused, and so is one published by an IAM or
//! Cognito identity rather than a certificate, unless `IOT_PRINCIPALS` is `any`.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ingest::Fate;
use ingest::handler::FRONT_DOOR_ATTRIBUTE;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use crate::support::{Fixture, event, ids, now};

/// The rule role's id, as the template passes it (`IOT_SENDER_ID`); the event's
/// SenderIds are sessions of it.
const IOT_ROLE: (&str, &str) = ("IOT_SENDER_ID", "AROAIOTRULEROLE000001");
/// A publisher with sqs:SendMessage on the queue (an IAM user's id).
const DEVICE: &str = "AIDADEVICE00000000001";
const EVENT: &str = "sqs-iot-front-door.json";

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(29)
}

/// (device_id, event_id) of every stored reading.
fn stored(fx: &Fixture) -> BTreeSet<(String, String)> {
    let text = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| match item
        .get(name)
    {
        Some(AttributeValue::S(s)) => s.clone(),
        other => panic!("{name}: {other:?}"),
    };
    fx.table
        .items()
        .values()
        .map(|item| (text(item, "device_id"), text(item, "event_id")))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(d, e)| ((*d).to_owned(), (*e).to_owned()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn s29_a_things_own_readings_are_written_and_a_reading_of_another_device_is_dead_lettered_naming_both()
 {
    let fx = Fixture::new();
    let ev = event(EVENT);
    let response = fx
        .service(&[IOT_ROLE])
        .handle(&ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        stored(&fx),
        pairs(&[
            ("thermo-007", "iot-0001"),
            ("thermo-007", "iot-0002"),
            ("thermo-007", "iot-0003"),
            ("thermo-007", "iot-0004"),
            ("thermo-008", "iot-0005"),
        ])
    );
    let letters = fx.dlq.letters();
    let ids = ids(&ev);
    let refused: Vec<(&str, &str, &str)> = letters
        .iter()
        .map(|l| (l.message_id.as_str(), l.field.as_str(), l.rule.as_str()))
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    // thermo-008 claimed a reading of thermo-007.
    assert_eq!(refused[0].0, ids[3]);
    assert_eq!(refused[0].1, "payload.device_id");
    assert!(
        refused[0].2.contains("\"thermo-007\"") && refused[0].2.contains("\"thermo-008\""),
        "{}",
        refused[0].2
    );
    // A batch is checked reading by reading, and refused as a whole: thermo-009's own
    // reading beside one of thermo-001 is not written either.
    assert_eq!(refused[1].0, ids[4]);
    assert_eq!(refused[1].1, "payload.readings[1].device_id");
    assert!(
        refused[1].2.contains("\"thermo-001\"") && refused[1].2.contains("\"thermo-009\""),
        "{}",
        refused[1].2
    );
    // The letter holds the message as the rule sent it.
    assert_eq!(Some(&letters[0].body), ev.records[3].body.as_ref());
}

/// The event with every SenderId replaced by `sender`.
fn sent_by(sender: &str) -> SqsEvent {
    let mut ev = event(EVENT);
    for record in &mut ev.records {
        record
            .attributes
            .insert("SenderId".to_owned(), sender.to_owned());
    }
    ev
}

#[tokio::test(start_paused = true)]
async fn s29_the_envelope_from_any_other_sender_is_not_trusted() {
    let (_, role) = IOT_ROLE;
    for (sender, front_door) in [
        (DEVICE.to_owned(), IOT_ROLE),
        // A sender whose id merely starts with the rule role's id.
        (format!("{role}X:session"), IOT_ROLE),
        // The rule's own SenderId, while the front door is off.
        (format!("{role}:iot-rule"), ("IOT_SENDER_ID", "")),
    ] {
        let fx = Fixture::new();
        let ev = sent_by(&sender);
        let report = fx
            .service(&[front_door])
            .process(&ev, now(), deadline(), &mut rng())
            .await;
        assert!(fx.table.items().is_empty(), "{sender}");
        assert_eq!(report.dead_lettered, 5, "{sender}");
        for letter in fx.dlq.letters() {
            assert_eq!(letter.field, "payload", "{sender}");
            assert!(letter.rule.contains("IOT_SENDER_ID"), "{}", letter.rule);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn s29_a_plain_body_from_the_rules_role_is_refused() {
    let mut ev = event("sqs-single.json");
    ev.records[0]
        .attributes
        .insert("SenderId".to_owned(), format!("{}:iot-rule", IOT_ROLE.1));
    let fx = Fixture::new();
    let report = fx
        .service(&[IOT_ROLE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(fx.table.items().is_empty());
    let Fate::DeadLettered { reason } = &report.messages[0].fate else {
        panic!("dead-lettered: {report:?}");
    };
    assert!(reason.rule.contains("must be its envelope"), "{reason}");
}

/// The payload is the published bytes base64-encoded: the same publish nested as a
/// JSON object is refused, naming `payload`.
#[tokio::test(start_paused = true)]
async fn s29_a_payload_not_base64_encoded_is_refused() {
    let mut ev = event(EVENT);
    ev.records.truncate(1);
    let body = ev.records[0].body.as_deref().expect("a body");
    let envelope: serde_json::Value = serde_json::from_str(body).expect("JSON");
    let published = STANDARD
        .decode(envelope["payload"].as_str().expect("a string"))
        .expect("base64");
    let mut nested = envelope.clone();
    nested["payload"] = serde_json::from_slice(&published).expect("a JSON publish");
    ev.records[0].body = Some(nested.to_string());
    let fx = Fixture::new();
    let report = fx
        .service(&[IOT_ROLE])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(fx.table.items().is_empty());
    let Fate::DeadLettered { reason } = &report.messages[0].fate else {
        panic!("dead-lettered: {report:?}");
    };
    assert_eq!(reason.field, "payload", "{reason}");
    assert!(reason.rule.contains("base64"), "{reason}");
}

/// A message of the rule failing at its last receive is requeued whole by the ingest,
/// marked as the rule's envelope, and that copy is read as one; the mark from anyone
/// but the ingest counts for nothing.
#[tokio::test(start_paused = true)]
async fn s29_the_ingests_whole_copy_of_a_rules_message_keeps_its_envelope() {
    let ingest = ("INGEST_SENDER_ID", "AROAINGESTROLE0000001");
    let source = ("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest");
    let mut ev = event(EVENT);
    ev.records.truncate(1);
    ev.records[0]
        .attributes
        .insert("ApproximateReceiveCount".to_owned(), "5".to_owned());
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[IOT_ROLE, ingest, source])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.requeued, 1, "{report:?}");
    let copy = fx.dlq.copies().remove(0);
    assert_eq!(Some(&copy.body), ev.records[0].body.as_ref());
    assert_eq!(copy.attributes[FRONT_DOOR_ATTRIBUTE].1, "iot");

    // The copy comes back from the ingest's role, with the mark: written.
    let as_received = |sender: &str| {
        let mut back = ev.clone();
        let record = &mut back.records[0];
        record
            .attributes
            .insert("SenderId".to_owned(), sender.to_owned());
        record
            .attributes
            .insert("ApproximateReceiveCount".to_owned(), "1".to_owned());
        let mut mark = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
        mark.data_type = Some(copy.attributes[FRONT_DOOR_ATTRIBUTE].0.clone());
        mark.string_value = Some(copy.attributes[FRONT_DOOR_ATTRIBUTE].1.clone());
        record
            .message_attributes
            .insert(FRONT_DOOR_ATTRIBUTE.to_owned(), mark);
        back
    };
    let fx = Fixture::new();
    let report = fx
        .service(&[IOT_ROLE, ingest, source])
        .process(
            &as_received(&format!("{}:ingest", ingest.1)),
            now(),
            deadline(),
            &mut rng(),
        )
        .await;
    assert!(
        matches!(report.messages[0].fate, Fate::Written { readings: 1 }),
        "{report:?}"
    );
    // The same mark set by a publisher: refused.
    let fx = Fixture::new();
    let report = fx
        .service(&[IOT_ROLE, ingest, source])
        .process(&as_received(DEVICE), now(), deadline(), &mut rng())
        .await;
    assert!(
        matches!(report.messages[0].fate, Fate::DeadLettered { .. }),
        "{report:?}"
    );
}

/// The event with every envelope's `principal` replaced by `principal` (none when
/// `None`).
fn published_by(principal: Option<&str>) -> SqsEvent {
    let mut ev = event(EVENT);
    for record in &mut ev.records {
        let body = record.body.as_deref().expect("a body");
        let mut envelope: serde_json::Value = serde_json::from_str(body).expect("JSON");
        let members = envelope.as_object_mut().expect("an object");
        match principal {
            Some(id) => members.insert("principal".to_owned(), id.into()),
            None => members.remove("principal"),
        };
        record.body = Some(envelope.to_string());
    }
    ev
}

/// A publish by anything but a certificate (an IAM user's or role's connection over
/// WebSocket, the console's MQTT client, a Cognito identity), which the thing policy
/// does not bind to the thing its topic names, goes to the DLQ with the reason naming
/// `principal`, whatever its readings; with `IOT_PRINCIPALS=any` it is read as before.
#[tokio::test(start_paused = true)]
async fn s29_an_envelope_published_by_an_iam_or_cognito_identity_is_dead_lettered_with_the_reason()
{
    for principal in [
        Some("AIDAEXAMPLEUSER000001"),
        Some("AROAEXAMPLEROLE000001:iot-console"),
        Some("us-east-1:0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"),
        None,
    ] {
        let ev = published_by(principal);
        let fx = Fixture::new();
        let report = fx
            .service(&[IOT_ROLE])
            .process(&ev, now(), deadline(), &mut rng())
            .await;
        assert!(fx.table.items().is_empty(), "{principal:?}");
        assert_eq!(report.dead_lettered, 5, "{principal:?}");
        for letter in fx.dlq.letters() {
            assert_eq!(letter.field, "principal", "{principal:?}");
            assert!(
                letter.rule.contains("certificate") && letter.rule.contains("IOT_PRINCIPALS"),
                "{}",
                letter.rule
            );
            if let Some(id) = principal {
                assert!(letter.rule.contains(id), "{}", letter.rule);
            }
        }

        // Told to take any principal, the same messages are read as the thing's.
        let fx = Fixture::new();
        let report = fx
            .service(&[IOT_ROLE, ("IOT_PRINCIPALS", "any")])
            .process(&ev, now(), deadline(), &mut rng())
            .await;
        assert_eq!(report.dead_lettered, 2, "{principal:?}: {report:?}");
        assert_eq!(stored(&fx).len(), 5, "{principal:?}");
    }
}
