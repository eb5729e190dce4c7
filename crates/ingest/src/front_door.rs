//! The AWS IoT Core front door: readings a thing published over its own MQTT
//! connection, forwarded to the queue by the template's IoT rule.
//!
//! The rule's SELECT writes one envelope per publish: the published payload under
//! `payload`, and beside it what the connection proved, the thing its topic names
//! (`thing`, `topic(3)`; the thing policy lets a thing publish only under its own name)
//! and the connection's MQTT client id (`client`; the policy lets a thing connect only
//! as itself). The payload is nested, so nothing a thing publishes can stand in for
//! `thing` or `client`. An envelope is read only from a message the rule's role sent
//! (or the ingest's copy of one), by its SenderId; every reading of it must be of the
//! thing that published it. As everywhere in the ingest, a message is refused as a
//! whole: one reading of another device sends the whole message to the DLQ with a
//! reason naming both ids, and the other messages of the batch go on.

use sharding::key::validate_id;
use store::Reading;

use crate::body::{Envelope, RawBody, Scalar};
use crate::message::{ENVELOPE_FIELD, Limits, Refusal, parse_raw, read};

/// Who sent a message, as its SenderId proves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A publisher on the queue (or the ingest's copy of a message): its body is
    /// readings, and an envelope in it is refused.
    Publisher,
    /// The IoT rule's role (or the ingest's whole copy of such a message): its body
    /// must be the rule's envelope.
    IotRule,
}

/// The envelope's member holding the thing its topic names.
pub const THING_FIELD: &str = "thing";
/// The envelope's member holding the connection's MQTT client id.
pub const CLIENT_FIELD: &str = "client";

/// Parses and validates one message body from `sender` into its readings.
pub fn parse_message(body: &str, sender: Sender, limits: &Limits) -> Result<Vec<Reading>, Refusal> {
    let raw = read(body)?;
    match sender {
        Sender::Publisher => parse_raw(raw, limits),
        Sender::IotRule => parse_envelope(raw, limits),
    }
}

fn parse_envelope(raw: RawBody<'_>, limits: &Limits) -> Result<Vec<Reading>, Refusal> {
    let not_envelope = || {
        Refusal::new(
            "body",
            "a message from the IoT rule's role must be its envelope \
             ({\"payload\": ..., \"thing\": ..., \"client\": ...})",
        )
    };
    let RawBody::Object {
        readings,
        other,
        envelope,
        ..
    } = raw
    else {
        return Err(not_envelope());
    };
    if !envelope.is_present() {
        return Err(not_envelope());
    }
    if let Some(key) = other.or(readings.map(|_| "readings".into())) {
        return Err(Refusal::new(
            key,
            "unknown field (an envelope holds only payload, thing and client)",
        ));
    }
    let Envelope {
        payload,
        thing,
        client,
    } = envelope;
    let thing = identity(thing, THING_FIELD)?;
    let client = identity(client, CLIENT_FIELD)?;
    if client != thing {
        return Err(Refusal::new(
            CLIENT_FIELD,
            format!(
                "the MQTT client {client:?} is not the thing {thing:?} its topic names \
                 (the thing policy lets a thing publish only as itself)"
            ),
        ));
    }
    let payload = payload.ok_or_else(|| Refusal::new(ENVELOPE_FIELD, "is required"))?;
    let batch = matches!(
        &*payload,
        RawBody::Object {
            readings: Some(_),
            ..
        }
    );
    let readings = parse_raw(*payload, limits).map_err(in_payload)?;
    for (i, reading) in readings.iter().enumerate() {
        if reading.device_id != thing {
            let field = if batch {
                format!("{ENVELOPE_FIELD}.readings[{i}].device_id")
            } else {
                format!("{ENVELOPE_FIELD}.device_id")
            };
            return Err(Refusal::new(
                field,
                format!(
                    "is {:?}, not {thing:?}, the thing whose IoT connection published it",
                    reading.device_id
                ),
            ));
        }
    }
    Ok(readings)
}

/// A name the rule wrote: a string, and an id the ingest can store (a thing name is).
fn identity(value: Option<Scalar<'_>>, field: &str) -> Result<String, Refusal> {
    match value {
        Some(Scalar::Str(s)) if validate_id("thing", &s).is_ok() => Ok(s.into_owned()),
        None | Some(Scalar::Null) => Err(Refusal::new(field, "is required")),
        Some(_) => Err(Refusal::new(
            field,
            "must be a thing name: a string of [A-Za-z0-9._:-], 1 to 128 characters",
        )),
    }
}

/// A refusal of the payload, with the payload's path.
fn in_payload(refusal: Refusal) -> Refusal {
    let field = if refusal.field == "body" {
        ENVELOPE_FIELD.to_owned()
    } else {
        format!("{ENVELOPE_FIELD}.{}", refusal.field)
    };
    Refusal { field, ..refusal }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sharding::time::Timestamp;

    use super::*;

    fn limits() -> Limits {
        Limits {
            now: Timestamp::parse("2026-06-22T12:00:00Z").expect("valid"),
            max_future: Duration::from_secs(300),
            retention: Duration::from_secs(30 * 86_400),
            max_readings: 3,
        }
    }

    fn reading(device: &str, event: &str) -> String {
        format!(
            r#"{{"device_id":"{device}","event_id":"{event}","ts":"2026-06-22T11:59:00Z","metrics":{{"t":1}}}}"#
        )
    }

    fn envelope(payload: &str, thing: &str, client: &str) -> String {
        format!(r#"{{"payload":{payload},"thing":"{thing}","client":"{client}"}}"#)
    }

    /// `expected`: `Ok(n)` readings, or `Err((field, fragment of the rule))`.
    fn check(body: &str, sender: Sender, expected: Result<usize, (&str, &str)>) {
        match (parse_message(body, sender, &limits()), expected) {
            (Ok(readings), Ok(n)) => assert_eq!(readings.len(), n, "{body}"),
            (Err(refusal), Err((field, rule))) => {
                assert_eq!(refusal.field, field, "{body}: {refusal}");
                assert!(refusal.rule.contains(rule), "{body}: {refusal}");
            }
            (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn an_envelope_from_the_rule_yields_the_things_own_readings() {
        let one = envelope(&reading("dev-1", "e-1"), "dev-1", "dev-1");
        check(&one, Sender::IotRule, Ok(1));
        let batch = format!(
            r#"{{"readings":[{},{}]}}"#,
            reading("dev-1", "e-1"),
            reading("dev-1", "e-2")
        );
        check(&envelope(&batch, "dev-1", "dev-1"), Sender::IotRule, Ok(2));
    }

    #[test]
    fn a_reading_of_another_device_refuses_the_message_naming_both_ids() {
        let one = envelope(&reading("dev-2", "e-1"), "dev-1", "dev-1");
        check(
            &one,
            Sender::IotRule,
            Err(("payload.device_id", "\"dev-2\", not \"dev-1\"")),
        );
        let batch = format!(
            r#"{{"readings":[{},{}]}}"#,
            reading("dev-1", "e-1"),
            reading("dev-2", "e-2")
        );
        check(
            &envelope(&batch, "dev-1", "dev-1"),
            Sender::IotRule,
            Err(("payload.readings[1].device_id", "\"dev-2\", not \"dev-1\"")),
        );
    }

    #[test]
    fn what_the_publisher_cannot_set_is_checked() {
        let r = reading("dev-1", "e-1");
        check(
            &envelope(&r, "dev-1", "dev-2"),
            Sender::IotRule,
            Err(("client", "is not the thing")),
        );
        // A thing cannot nest an envelope of its own choosing in its payload.
        let forged = envelope(&envelope(&r, "dev-1", "dev-1"), "dev-9", "dev-9");
        check(
            &forged,
            Sender::IotRule,
            Err(("payload.payload", "envelope")),
        );
        check(&r, Sender::IotRule, Err(("body", "must be its envelope")));
        let extra = r#"{"payload":{},"thing":"a","client":"a","device_id":"a"}"#;
        check(extra, Sender::IotRule, Err(("device_id", "unknown field")));
        let unnamed = r#"{"payload":{},"client":"a"}"#;
        check(unnamed, Sender::IotRule, Err(("thing", "is required")));
        let bad = envelope(r#"{"readings":7}"#, "dev-1", "dev-1");
        check(&bad, Sender::IotRule, Err(("payload.readings", "array")));
    }

    #[test]
    fn an_envelope_from_any_other_sender_is_refused() {
        let one = envelope(&reading("dev-1", "e-1"), "dev-1", "dev-1");
        check(&one, Sender::Publisher, Err(("payload", "IOT_SENDER_ID")));
        check(&reading("dev-1", "e-1"), Sender::Publisher, Ok(1));
    }
}
