//! Scenario 29: the AWS IoT Core front door. `events/sqs-iot-front-door.json` holds
//! what the template's IoT rule sends: each body the rule's SELECT output (the
//! published bytes base64-encoded under `payload`, the thing its topic names, the
//! connection's client id and the certificate it authenticated with beside it), each
//! SenderId a session of the rule's role. A thing's own readings are written; a message
//! holding a reading of another device goes to the DLQ with a reason naming both ids
//! (the message as a whole, as every refusal), and the other messages go on; the same
//! envelope from any other sender is refused, and so is one published by an IAM or
//! Cognito identity rather than a certificate, unless `IOT_PRINCIPALS` is `any`.
//! `events/sqs-iot-basic-ingest.json` holds what the same rule sends of publishes
//! through Basic Ingest (`$aws/rules/<rule name>/devices/<thing>/readings`): the same
//! envelope, its thing read from the topic as the rule sees it, held to the same checks.

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
/// The same rule's messages of publishes through Basic Ingest.
const BASIC_INGEST_EVENT: &str = "sqs-iot-basic-ingest.json";

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

/// What the rule sends of publishes through Basic Ingest is the envelope it sends of
/// the broker's, member for member (the SQL reads the thing from either topic), and the
/// ingest holds it to the same checks: thermo-011's own readings are written, alone or
/// in a batch, and thermo-012 publishing a reading of thermo-011 is dead-lettered naming
/// both.
#[tokio::test(start_paused = true)]
async fn s29_a_basic_ingest_publish_is_the_same_envelope_held_to_the_same_checks() {
    let members = |ev: &SqsEvent| -> BTreeSet<Vec<String>> {
        ev.records
            .iter()
            .map(|r| {
                let body: serde_json::Value =
                    serde_json::from_str(r.body.as_deref().expect("a body")).expect("JSON");
                let object = body.as_object().expect("an object");
                object.keys().cloned().collect()
            })
            .collect()
    };
    let basic = event(BASIC_INGEST_EVENT);
    assert_eq!(members(&basic), members(&event(EVENT)));
    assert_eq!(members(&basic).len(), 1, "one shape of envelope");

    let fx = Fixture::new();
    let response = fx
        .service(&[IOT_ROLE])
        .handle(&basic, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        stored(&fx),
        pairs(&[
            ("thermo-011", "bi-0001"),
            ("thermo-011", "bi-0002"),
            ("thermo-011", "bi-0003"),
        ])
    );
    let letters = fx.dlq.letters();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].message_id, ids(&basic)[2]);
    assert_eq!(letters[0].field, "payload.device_id");
    assert!(
        letters[0].rule.contains("\"thermo-011\"") && letters[0].rule.contains("\"thermo-012\""),
        "{}",
        letters[0].rule
    );
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

/// A fresh fixture, and the report of an ingest configured with `vars` that processed
/// `ev` in it.
async fn run_once(vars: &[(&str, &str)], ev: &SqsEvent) -> (Fixture, ingest::Report) {
    let fx = Fixture::new();
    let report = fx
        .service(vars)
        .process(ev, now(), deadline(), &mut rng())
        .await;
    (fx, report)
}

/// The ingest's own role, as the template passes it (`INGEST_SENDER_ID`).
const INGEST_ROLE: (&str, &str) = ("INGEST_SENDER_ID", "AROAINGESTROLE0000001");
/// The front door's sealing key (`FRONT_DOOR_KEY`; the template's secret).
const KEY: (&str, &str) = ("FRONT_DOOR_KEY", "a-front-door-key-of-32-bytes-000");

/// `letter` as the queue delivers it again after a redrive: its body and attributes,
/// the SenderId `sender`, a first receive.
fn redriven(template: &SqsEvent, letter: &ingest::DeadLetter, sender: &str) -> SqsEvent {
    let mut ev = template.clone();
    ev.records.truncate(1);
    let record = &mut ev.records[0];
    record.body = Some(letter.body.clone());
    record.message_id = Some("moved-0001".to_owned());
    record
        .attributes
        .insert("SenderId".to_owned(), sender.to_owned());
    record
        .attributes
        .insert("ApproximateReceiveCount".to_owned(), "1".to_owned());
    record.message_attributes = letter
        .attributes
        .iter()
        .map(|(name, (data_type, value))| {
            let mut a = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
            a.data_type = Some(data_type.clone());
            a.string_value = Some(value.clone());
            (name.clone(), a)
        })
        .collect();
    ev
}

/// The SenderIds a redriven letter may carry: SQS documents a redrive as a new message
/// sent with the redriving principal's sqs:SendMessage and does not say which SenderId
/// it keeps, and a redrive by hand carries the operator's. The ingest's role's (the
/// letter's sender), a session of a redrive role, an IAM user's, the rule role's.
fn redrive_senders() -> [String; 4] {
    [
        format!("{}:ingest", INGEST_ROLE.1),
        "AROAREDRIVEROLE000001:redrive".to_owned(),
        "AIDAOPERATOR00000001".to_owned(),
        format!("{}:iot-rule", IOT_ROLE.1),
    ]
}

/// The one envelope of the front door's event, failing at its last receive with no
/// requeue left (the table refusing every write), and its dead letter.
async fn sealed_letter() -> (SqsEvent, ingest::DeadLetter) {
    let mut ev = event(EVENT);
    ev.records.truncate(1);
    ev.records[0]
        .attributes
        .insert("ApproximateReceiveCount".to_owned(), "5".to_owned());
    let fx = Fixture::new();
    fx.table.set_unprocessed_fraction(1.0);
    let report = fx
        .service(&[IOT_ROLE, INGEST_ROLE, KEY, ("MAX_REQUEUES", "0")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let letter = fx.dlq.letters().remove(0);
    assert_eq!(Some(&letter.body), ev.records[0].body.as_ref());
    let seal = &letter.attributes[ingest::seal::SEAL_ATTRIBUTE].1;
    assert!(seal.starts_with("v1."), "{seal}");

    (ev, letter)
}

/// Scenario 55: a dead-lettered message of the rule, redriven, is still its thing's.
/// An envelope failing at its last receive (the table refusing every write, no requeue
/// left) is dead-lettered with the ingest's seal; sent back by whoever redrives it, it
/// is read as the rule's envelope again, with every check, and written. Changed on the
/// way, or its seal put on another body, it is refused with the reason naming the seal,
/// never read as a publisher's message; without the key, it is refused too.
#[tokio::test(start_paused = true)]
async fn s55_a_dead_letter_of_the_rules_message_redriven_is_still_its_things() {
    let (ev, letter) = sealed_letter().await;
    for sender in redrive_senders() {
        let (fx, report) = run_once(
            &[IOT_ROLE, INGEST_ROLE, KEY],
            &redriven(&ev, &letter, &sender),
        )
        .await;
        assert!(
            matches!(report.messages[0].fate, Fate::Written { readings: 1 }),
            "{sender}: {report:?}"
        );
        assert_eq!(
            stored(&fx),
            pairs(&[("thermo-007", "iot-0001")]),
            "{sender}"
        );
    }

    // Changed on the way: another thing's name, or the seal on a publisher's body.
    let mut changed = letter.clone();
    changed.body = letter.body.replace("thermo-007", "thermo-008");
    assert_ne!(changed.body, letter.body);
    let mut moved = letter.clone();
    moved.body = event("sqs-single.json").records[0]
        .body
        .clone()
        .expect("a body");
    for (what, forged) in [("changed", &changed), ("moved", &moved)] {
        for sender in redrive_senders().into_iter().take(3) {
            let (fx, report) = run_once(
                &[IOT_ROLE, INGEST_ROLE, KEY],
                &redriven(&ev, forged, &sender),
            )
            .await;
            assert!(fx.table.items().is_empty(), "{what} {sender}");
            let Fate::DeadLettered { reason } = &report.messages[0].fate else {
                panic!("{what} {sender}: {report:?}");
            };
            assert_eq!(reason.field, ingest::seal::SEAL_ATTRIBUTE, "{what}");
            assert!(reason.rule.contains("does not match"), "{what}: {reason}");
        }
    }
}

/// Scenario 55: a sealed letter needs the key that sealed it, and only the rule's
/// message is sealed.
#[tokio::test(start_paused = true)]
async fn s55_a_seal_is_opened_only_with_the_key_and_only_the_rules_message_has_one() {
    let (ev, letter) = sealed_letter().await;
    // An ingest that holds no key cannot tell, and refuses; so does one whose key is
    // not the one that sealed.
    for keys in [
        vec![],
        vec![("FRONT_DOOR_KEY", "another-key-of-the-front-door-9")],
    ] {
        let fx = Fixture::new();
        let mut vars = vec![IOT_ROLE, INGEST_ROLE];
        vars.extend(keys.iter().copied());
        let sender = "AIDAOPERATOR00000001";
        let report = fx
            .service(&vars)
            .process(
                &redriven(&ev, &letter, sender),
                now(),
                deadline(),
                &mut rng(),
            )
            .await;
        assert!(fx.table.items().is_empty(), "{keys:?}");
        let Fate::DeadLettered { reason } = &report.messages[0].fate else {
            panic!("{keys:?}: {report:?}");
        };
        assert_eq!(reason.field, ingest::seal::SEAL_ATTRIBUTE);
    }

    // A publisher's refused message is dead-lettered without a seal: redriven, it is a
    // publisher's again.
    let fx = Fixture::new();
    let mut plain = event(EVENT);
    plain.records.truncate(1);
    plain.records[0]
        .attributes
        .insert("SenderId".to_owned(), DEVICE.to_owned());
    fx.service(&[IOT_ROLE, INGEST_ROLE, KEY])
        .process(&plain, now(), deadline(), &mut rng())
        .await;
    let refused = fx.dlq.letters().remove(0);
    assert!(
        !refused
            .attributes
            .contains_key(ingest::seal::SEAL_ATTRIBUTE),
        "{refused:?}"
    );
}

/// AWS IoT's error-action message of a publish on `topic` by client `client`, as the
/// rule's error action writes it to the DLQ when its send to the queue fails.
fn error_action(published: &str, topic: &str, client: &str) -> String {
    serde_json::json!({
        "ruleName": "shardline_readings",
        "topic": topic,
        "cloudwatchTraceId": "7e146a2c-95b5-6caf-98b9-50e3969734c7",
        "clientId": client,
        "base64OriginalPayload": STANDARD.encode(published),
        "failures": [{
            "failedAction": "SqsAction",
            "failedResource": "https://sqs.eu-west-1.amazonaws.com/123456789012/ingest",
            "errorMessage": "Failed to send message to SQS queue."
        }]
    })
    .to_string()
}

/// A reading of `device`, as a thing publishes it.
fn body(device: &str, event_id: &str) -> String {
    format!(
        r#"{{"device_id":"{device}","event_id":"{event_id}","ts":"{}","metrics":{{"t":21.5}}}}"#,
        now().to_rfc3339()
    )
}

/// The one-record event of `body` sent by `sender`.
fn one(body: String, sender: &str) -> SqsEvent {
    let mut ev = event(EVENT);
    ev.records.truncate(1);
    ev.records[0].body = Some(body);
    ev.records[0]
        .attributes
        .insert("SenderId".to_owned(), sender.to_owned());
    ev
}

/// Scenario 55, the rule's error action: its message, from the rule's role, is read as
/// the envelope it stands for. It names no principal, so by default it is refused with
/// that reason (and sealed, so an operator can still redrive it once the ingest takes
/// any principal); with `IOT_PRINCIPALS=any` its readings are written, and a reading of
/// another thing, or a topic outside the rule's, is refused as in an envelope. From any
/// other sender it is not the rule's.
#[tokio::test(start_paused = true)]
async fn s55_the_rules_error_action_message_is_read_as_the_envelope_it_stands_for() {
    let rule = format!("{}:iot-rule", IOT_ROLE.1);
    let own = error_action(
        &body("thermo-007", "e-1"),
        "shardline/devices/thermo-007/readings",
        "thermo-007",
    );

    let fx = Fixture::new();
    let any = [IOT_ROLE, INGEST_ROLE, KEY, ("IOT_PRINCIPALS", "any")];
    let report = fx
        .service(&any)
        .process(&one(own.clone(), &rule), now(), deadline(), &mut rng())
        .await;
    assert!(
        matches!(report.messages[0].fate, Fate::Written { readings: 1 }),
        "{report:?}"
    );
    assert_eq!(stored(&fx), pairs(&[("thermo-007", "e-1")]));

    // By default: refused, naming the principal it lacks, and sealed.
    let (fx, report) = run_once(&[IOT_ROLE, INGEST_ROLE, KEY], &one(own.clone(), &rule)).await;
    let Fate::DeadLettered { reason } = &report.messages[0].fate else {
        panic!("{report:?}");
    };
    assert_eq!(reason.field, "principal");
    assert!(reason.rule.contains("error-action message"), "{reason}");
    let letter = fx.dlq.letters().remove(0);
    // Redriven by an operator to an ingest that takes any principal: written.
    let (_, report) = run_once(
        &any,
        &redriven(&one(own.clone(), &rule), &letter, "AIDAOPERATOR00000001"),
    )
    .await;
    assert!(
        matches!(report.messages[0].fate, Fate::Written { readings: 1 }),
        "{report:?}"
    );

    // A Basic Ingest publish's message, its topic as the rule sees it or whole (AWS IoT
    // does not document which the message holds): the same thing, written.
    for (topic, event_id) in [
        ("devices/thermo-007/readings", "e-2"),
        (
            "$aws/rules/shardline_readings/devices/thermo-007/readings",
            "e-3",
        ),
    ] {
        let message = error_action(&body("thermo-007", event_id), topic, "thermo-007");
        let (fx, report) = run_once(&any, &one(message, &rule)).await;
        assert!(
            matches!(report.messages[0].fate, Fate::Written { readings: 1 }),
            "{topic}: {report:?}"
        );
        assert_eq!(stored(&fx), pairs(&[("thermo-007", event_id)]), "{topic}");
    }

    // From a publisher, the same message is not the rule's: not written.
    let (fx, report) = run_once(&any, &one(own, DEVICE)).await;
    assert!(fx.table.items().is_empty());
    assert!(
        matches!(report.messages[0].fate, Fate::DeadLettered { .. }),
        "{report:?}"
    );
}

/// Scenario 55: what an envelope may not do, its error-action message may not either.
#[tokio::test(start_paused = true)]
async fn s55_an_error_action_message_is_held_to_the_envelopes_checks() {
    let rule = format!("{}:iot-rule", IOT_ROLE.1);
    let any = [IOT_ROLE, INGEST_ROLE, KEY, ("IOT_PRINCIPALS", "any")];
    for (message, field) in [
        (
            error_action(
                &body("thermo-008", "e-2"),
                "shardline/devices/thermo-007/readings",
                "thermo-007",
            ),
            "payload.device_id",
        ),
        (
            error_action(
                &body("thermo-007", "e-3"),
                "shardline/devices/thermo-007/readings",
                "thermo-008",
            ),
            "client",
        ),
        (
            error_action(
                &body("thermo-007", "e-4"),
                "shardline/devices/thermo-007/other",
                "thermo-007",
            ),
            "topic",
        ),
        (
            error_action(
                &body("thermo-007", "e-5"),
                "shardline/devices/a/b/readings",
                "thermo-007",
            ),
            "topic",
        ),
        // Through Basic Ingest: the same checks, and the rule's own name.
        (
            error_action(
                &body("thermo-008", "e-6"),
                "devices/thermo-007/readings",
                "thermo-007",
            ),
            "payload.device_id",
        ),
        (
            error_action(
                &body("thermo-007", "e-7"),
                "$aws/rules/shardline_readings/devices/thermo-007/readings",
                "thermo-008",
            ),
            "client",
        ),
        (
            error_action(
                &body("thermo-007", "e-8"),
                "$aws/rules/other_rule/devices/thermo-007/readings",
                "thermo-007",
            ),
            "topic",
        ),
        (
            error_action(
                &body("thermo-007", "e-9"),
                "devices/thermo-007/readings/x",
                "thermo-007",
            ),
            "topic",
        ),
    ] {
        let (fx, report) = run_once(&any, &one(message, &rule)).await;
        assert!(fx.table.items().is_empty(), "{field}");
        let Fate::DeadLettered { reason } = &report.messages[0].fate else {
            panic!("{field}: {report:?}");
        };
        assert_eq!(reason.field, field, "{reason}");
    }
}
