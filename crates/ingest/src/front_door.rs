//! The AWS IoT Core front door: readings a thing published over its own MQTT
//! connection, forwarded to the queue by the template's IoT rule.
//!
//! The rule's SELECT writes one envelope per publish: the published bytes under
//! `payload`, base64-encoded (`encode(*, 'base64')`), and beside it what the connection
//! proved, the thing its topic names (`thing`, read from either form of a thing's topic,
//! [`thing_of_topic`]; the thing policy lets a thing publish only under its own name),
//! the connection's MQTT client id (`client`;
//! the policy lets a thing connect only as itself) and the principal it authenticated
//! with (`principal`, `principal()`). The payload is one opaque string, so nothing a
//! thing publishes can stand in for the others; decoded, it is a publisher's body. An
//! envelope is read only from a message the rule's role sent (or the ingest's copy of
//! one), by its SenderId; every reading of it must be of the thing that published it.
//! As everywhere in the ingest, a message is refused as a whole: one reading of another
//! device sends the whole message to the DLQ with a reason naming both ids, and the
//! other messages of the batch go on.
//!
//! The rule's error action writes AWS IoT's error-action message to the DLQ when its
//! send to the queue fails: the published bytes (`base64OriginalPayload`), the topic
//! and the client id, but no principal. Redriven, such a message is read as the
//! envelope it stands for ([`ErrorAction`]), with the same checks; a dead letter of
//! either carries the ingest's seal, which makes it the rule's again whoever redrives
//! it (`crate::seal`).
//!
//! The thing policy binds a connection to its thing only for a certificate: an IAM
//! identity (MQTT over WebSocket or HTTPS, signed with SigV4) publishes wherever its
//! IAM policy lets it, `iot:*` included, whatever thing its topic names. So by default
//! ([`Principals::Certificate`]) an envelope is taken only when `principal()` has the
//! shape AWS IoT gives a certificate; see [`is_certificate_id`] for the shapes told
//! apart.
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sharding::key::validate_id;
use store::Reading;
use store::queue::MAX_MESSAGE_BYTES;

use std::borrow::Cow;

use crate::body::{Envelope, RawBody, Scalar};
use crate::message::{ENVELOPE_FIELD, Limits, Refusal, parse_raw, read};
use crate::seal::{Broken, SEAL_ATTRIBUTE};

/// Who sent a message, as its SenderId (or the ingest's seal) proves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A publisher on the queue (or the ingest's copy of a message): its body is
    /// readings, and an envelope in it is refused.
    Publisher,
    /// The IoT rule's role (or the ingest's whole copy of such a message, or a dead
    /// letter of one whose seal holds): its body must be the rule's envelope, or AWS
    /// IoT's error-action message of one.
    IotRule,
    /// A message carrying the ingest's seal that does not hold: refused with why, never
    /// read as a publisher's.
    BrokenSeal(Broken),
}

/// The topic filter of the rule: a thing publishes its readings on
/// `shardline/devices/<thing>/readings` through the message broker.
pub const TOPIC_FILTER: &str = "shardline/devices/+/readings";

/// What begins a Basic Ingest topic, before the rule's name: a thing publishing on
/// `$aws/rules/<rule name>/devices/<thing>/readings` reaches the rule without the
/// message broker (the template's `IotBasicIngest`).
pub const BASIC_INGEST_PREFIX: &str = "$aws/rules/";

/// A thing's Basic Ingest topic as the rule sees it. AWS IoT Core documents that the
/// `$aws/rules/<rule name>/` prefix is not available to the rule SQL's `topic(n)`: the
/// rule sees the topic after it, `devices/<thing>/readings`.
pub const BASIC_INGEST_TOPIC: &str = "devices/+/readings";

/// The thing a topic of the rule names, as the rule's SQL reads it
/// (`CASE topic(1) WHEN 'shardline' THEN topic(3) WHEN 'devices' THEN topic(2) END`):
/// the broker's [`TOPIC_FILTER`], or the Basic Ingest topic with or without its
/// `$aws/rules/<rule>/` prefix ([`BASIC_INGEST_TOPIC`]), `rule` the name of the rule
/// that read it. AWS IoT does not document which of the two a Basic Ingest publish's
/// error-action message holds, so both are read; any other topic names no thing.
pub fn thing_of_topic<'t>(topic: &'t str, rule: &str) -> Option<&'t str> {
    let topic = match topic.strip_prefix(BASIC_INGEST_PREFIX) {
        Some(rest) if !rule.is_empty() => rest.strip_prefix(rule)?.strip_prefix('/')?,
        Some(_) => return None,
        None => topic,
    };
    [TOPIC_FILTER, BASIC_INGEST_TOPIC]
        .iter()
        .find_map(|filter| {
            let (before, after) = filter.split_once('+')?;
            topic
                .strip_prefix(before)?
                .strip_suffix(after)
                .filter(|thing| !thing.is_empty() && !thing.contains('/'))
        })
}

/// The envelope's member holding the thing its topic names.
pub const THING_FIELD: &str = "thing";
/// The envelope's member holding the connection's MQTT client id.
pub const CLIENT_FIELD: &str = "client";
/// The envelope's member holding the principal the connection authenticated with.
pub const PRINCIPAL_FIELD: &str = "principal";
/// Length of a certificate's id: the hex digits of a SHA-256 digest.
pub const CERTIFICATE_ID_LEN: usize = 64;

/// Which connections' publishes the ingest takes (`IOT_PRINCIPALS`, the template's
/// `IotPrincipals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Principals {
    /// `certificate` (the default): only a connection authenticated with an X.509
    /// certificate, which the thing policy binds to its thing. Any other principal,
    /// and an envelope without one, is refused.
    #[default]
    Certificate,
    /// `any`: every principal the account's IoT and IAM policies let publish on a
    /// thing's topic, as before the rule wrote the principal (an envelope without one
    /// is taken too).
    Any,
}

impl std::str::FromStr for Principals {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "certificate" => Ok(Self::Certificate),
            "any" => Ok(Self::Any),
            _ => Err(()),
        }
    }
}

/// Whether `principal`, as the rule's `principal()` wrote it, is an X.509
/// certificate's.
///
/// AWS IoT documents what `principal()` returns by how the publish authenticated:
/// - an X.509 certificate (MQTT, a device SDK): the certificate's thumbprint, which is
///   its certificate id (the end of its `arn:...:cert/<id>`), 64 lowercase hex digits,
///   such as `ba67293af50bf2506f5f93469686da660c7c844e7b3950bfb16813e0d31e9373`;
/// - an IAM role (the console's MQTT client; MQTT over WebSocket or HTTP, signed with
///   its credentials): its role id and session name, `AROA...:my-session-name`;
/// - an IAM user (MQTT over WebSocket, HTTP): its user id, `AIDA...` (21 upper-case
///   letters and digits);
/// - an Amazon Cognito identity (not in that list) connects over WebSocket with the IAM
///   credentials of its pool's role: a role session's id as above; its identity id
///   (`<region>:<uuid>`) would not be a certificate's shape either.
///
/// Only the first is 64 characters of `[0-9a-f]`: an IAM id is upper-case and shorter,
/// and a session or Cognito id holds a colon. A custom authorizer (the template creates
/// none) names its principal as it likes; an account that adds one must keep its ids
/// off this shape, or its connections off the readings topics.
pub fn is_certificate_id(principal: &str) -> bool {
    principal.len() == CERTIFICATE_ID_LEN
        && principal
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
/// Most bytes a decoded payload may hold: the largest body the ingest sends, more than
/// one publish holds. Checked on the base64's length before decoding too, so the work
/// is bounded whatever message size the queue takes.
pub const MAX_PAYLOAD_BYTES: usize = MAX_MESSAGE_BYTES;

/// Parses and validates one message body from `sender` into its readings; an envelope
/// only from a connection `principals` takes.
pub fn parse_message(
    body: &str,
    sender: Sender,
    limits: &Limits,
    principals: Principals,
) -> Result<Vec<Reading>, Refusal> {
    if let Sender::BrokenSeal(broken) = sender {
        return Err(Refusal::new(SEAL_ATTRIBUTE, broken.rule()));
    }
    let raw = read(body)?;
    match sender {
        Sender::IotRule => parse_envelope(body, raw, limits, principals),
        Sender::Publisher | Sender::BrokenSeal(_) => parse_raw(raw, limits),
    }
}

/// AWS IoT's error-action message, as the rule's error action writes it to the DLQ
/// when its send to the queue fails (`failures` and `cloudwatchTraceId` are not read).
/// It names the publish by its topic and client id and holds its bytes; it holds no
/// principal.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorAction<'a> {
    /// The rule whose action failed.
    #[serde(borrow)]
    pub rule_name: Cow<'a, str>,
    /// The topic the thing published on.
    #[serde(borrow)]
    pub topic: Cow<'a, str>,
    /// The MQTT client id of the connection.
    #[serde(borrow)]
    pub client_id: Cow<'a, str>,
    /// The published bytes, base64-encoded.
    #[serde(borrow)]
    pub base64_original_payload: Cow<'a, str>,
}

impl<'a> ErrorAction<'a> {
    /// The envelope the rule would have sent: the payload, the thing the topic names
    /// ([`thing_of_topic`]; a topic of neither form names none, and is refused), the
    /// client id, and no principal.
    fn envelope(self) -> Result<Envelope<'a>, Refusal> {
        let thing = thing_of_topic(&self.topic, &self.rule_name).ok_or_else(|| {
            Refusal::new(
                "topic",
                format!(
                    "is {:?}, not a topic of the rule ({TOPIC_FILTER}, or \
                     {BASIC_INGEST_PREFIX}{}/{BASIC_INGEST_TOPIC} through Basic Ingest)",
                    self.topic.chars().take(300).collect::<String>(),
                    self.rule_name.chars().take(300).collect::<String>(),
                ),
            )
        })?;
        Ok(Envelope {
            payload: Some(Scalar::Str(self.base64_original_payload)),
            thing: Some(Scalar::Str(Cow::Owned(thing.to_owned()))),
            client: Some(Scalar::Str(self.client_id)),
            principal: None,
        })
    }
}

/// Where an envelope came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The rule's SELECT.
    Rule,
    /// AWS IoT's error-action message of a publish.
    ErrorAction,
}

fn parse_envelope(
    body: &str,
    raw: RawBody<'_>,
    limits: &Limits,
    principals: Principals,
) -> Result<Vec<Reading>, Refusal> {
    let not_envelope = || {
        Refusal::new(
            "body",
            "a message from the IoT rule's role must be its envelope ({\"payload\": \
             \"<base64>\", \"thing\": ..., \"client\": ..., \"principal\": ...}) or \
             AWS IoT's error-action message of one (ruleName, topic, clientId, \
             base64OriginalPayload)",
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
    let (envelope, origin) = if envelope.is_present() {
        if let Some(key) = other.or(readings.map(|_| "readings".into())) {
            return Err(Refusal::new(
                key,
                "unknown field (an envelope holds only payload, thing, client and principal)",
            ));
        }
        (envelope, Origin::Rule)
    } else {
        let action: ErrorAction<'_> = serde_json::from_str(body).map_err(|_| not_envelope())?;
        (action.envelope()?, Origin::ErrorAction)
    };
    let Envelope {
        payload,
        thing,
        client,
        principal,
    } = envelope;
    if principals == Principals::Certificate {
        certificate(principal, origin)?;
    }
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
    let payload = decode(payload)?;
    let raw = read(&payload).map_err(in_payload)?;
    let batch = matches!(
        raw,
        RawBody::Object {
            readings: Some(_),
            ..
        }
    );
    let readings = parse_raw(raw, limits).map_err(in_payload)?;
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

/// The published bytes from the rule's `encode(*, 'base64')`: standard base64 with its
/// padding, of UTF-8 text of at most [`MAX_PAYLOAD_BYTES`].
fn decode(payload: Option<Scalar<'_>>) -> Result<String, Refusal> {
    const ENCODED: &str = "the published bytes base64-encoded, as the rule's \
                           encode(*, 'base64') sends them";
    let refuse = |rule: String| Refusal::new(ENVELOPE_FIELD, rule);
    let text = match payload {
        Some(Scalar::Str(text)) => text,
        None => return Err(refuse("is required".to_owned())),
        Some(Scalar::Object) => {
            return Err(refuse(format!(
                "must be a string, {ENCODED}, not a JSON object"
            )));
        }
        Some(_) => return Err(refuse(format!("must be a string, {ENCODED}"))),
    };
    let too_large = || refuse(format!("must decode to at most {MAX_PAYLOAD_BYTES} bytes"));
    // Padded base64 of n bytes is 4 * ceil(n / 3) characters: anything longer decodes
    // to more than the limit, and is refused before any decoding.
    if text.len() > MAX_PAYLOAD_BYTES.div_ceil(3) * 4 {
        return Err(too_large());
    }
    let bytes = STANDARD
        .decode(text.as_bytes())
        .map_err(|e| refuse(format!("must be {ENCODED} (standard base64, padded): {e}")))?;
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        refuse(format!(
            "must be the base64 of UTF-8 text (one reading or {{\"readings\": [...]}}): {e}"
        ))
    })
}

/// A name the rule wrote: a string, and an id the ingest can store (a thing name is).
fn identity(value: Option<Scalar<'_>>, field: &str) -> Result<String, Refusal> {
    match value {
        Some(Scalar::Str(s)) if validate_id("thing", &s).is_ok() => Ok(s.into_owned()),
        None | Some(Scalar::Null) => Err(Refusal::new(field, "is required")),
        Some(_) => Err(Refusal::new(
            field,
            format!(
                "must be a thing name: a string of [A-Za-z0-9._:-], 1 to {} characters",
                sharding::key::MAX_ID_LEN
            ),
        )),
    }
}

/// The principal of a connection the default takes: a certificate's id.
fn certificate(principal: Option<Scalar<'_>>, origin: Origin) -> Result<(), Refusal> {
    const WHY: &str = "the thing policy binds only a certificate to its thing, and an \
                       IAM or Cognito identity publishes wherever its IAM policy lets it \
                       (IOT_PRINCIPALS=certificate)";
    let refuse = |rule: String| Refusal::new(PRINCIPAL_FIELD, rule);
    if origin == Origin::ErrorAction {
        return Err(refuse(format!(
            "is unknown: AWS IoT's error-action message names no principal, so the \
             publish it holds cannot be shown to come from a certificate's connection, \
             and is not written under IOT_PRINCIPALS=certificate ({WHY}); the thing \
             publishes it again"
        )));
    }
    match principal {
        Some(Scalar::Str(id)) if is_certificate_id(&id) => Ok(()),
        Some(Scalar::Str(id)) => Err(refuse(format!(
            "is {:?}, not an X.509 certificate's id (64 hex digits): {WHY}",
            id.chars().take(2 * CERTIFICATE_ID_LEN).collect::<String>()
        ))),
        None | Some(Scalar::Null) => Err(refuse(format!(
            "is required, the certificate the thing connected with: {WHY}"
        ))),
        Some(_) => Err(refuse(format!(
            "must be a string, an X.509 certificate's id: {WHY}"
        ))),
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

    use base64::engine::general_purpose::URL_SAFE;
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

    /// A certificate's id, as `principal()` gives it.
    const CERT: &str = "ba67293af50bf2506f5f93469686da660c7c844e7b3950bfb16813e0d31e9373";

    /// The rule's envelope of a publish of `published` over a certificate's connection.
    fn envelope(published: &str, thing: &str, client: &str) -> String {
        let encoded = STANDARD.encode(published);
        raw_envelope(&format!("\"{encoded}\""), thing, client)
    }

    /// An envelope whose `payload` is the JSON value `payload`.
    fn raw_envelope(payload: &str, thing: &str, client: &str) -> String {
        format!(
            r#"{{"payload":{payload},"thing":"{thing}","client":"{client}","principal":"{CERT}"}}"#
        )
    }

    /// `expected`: `Ok(n)` readings, or `Err((field, fragment of the rule))`.
    fn check(body: &str, sender: Sender, expected: Result<usize, (&str, &str)>) {
        check_taking(Principals::Certificate, body, sender, expected);
    }

    fn check_taking(
        principals: Principals,
        body: &str,
        sender: Sender,
        expected: Result<usize, (&str, &str)>,
    ) {
        match (parse_message(body, sender, &limits(), principals), expected) {
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
        let unnamed = format!(r#"{{"payload":{{}},"client":"a","principal":"{CERT}"}}"#);
        check(&unnamed, Sender::IotRule, Err(("thing", "is required")));
        let bad = envelope(r#"{"readings":7}"#, "dev-1", "dev-1");
        check(&bad, Sender::IotRule, Err(("payload.readings", "array")));
        let not_json = envelope("t=21.5", "dev-1", "dev-1");
        check(&not_json, Sender::IotRule, Err(("payload", "valid JSON")));
    }

    #[test]
    fn the_payload_is_the_published_bytes_in_padded_standard_base64() {
        let r = reading("dev-1", "e-1");
        // The old nested shape, and any other JSON value, is not what the rule sends.
        let nested = raw_envelope(&r, "dev-1", "dev-1");
        check(
            &nested,
            Sender::IotRule,
            Err(("payload", "not a JSON object")),
        );
        for value in ["7", "true", "[]", "null"] {
            let other = raw_envelope(value, "dev-1", "dev-1");
            check(
                &other,
                Sender::IotRule,
                Err(("payload", "must be a string")),
            );
        }
        let missing = format!(r#"{{"thing":"dev-1","client":"dev-1","principal":"{CERT}"}}"#);
        check(&missing, Sender::IotRule, Err(("payload", "is required")));
        let encoded = STANDARD.encode(format!("{r} "));
        let unpadded = encoded.trim_end_matches('=');
        assert_ne!(unpadded, encoded, "the base64 is padded");
        for text in [unpadded, "not base64!", &URL_SAFE.encode([0xfb, 0xff])] {
            let bad = raw_envelope(&format!("\"{text}\""), "dev-1", "dev-1");
            check(&bad, Sender::IotRule, Err(("payload", "standard base64")));
        }
        let latin1 = raw_envelope(&format!("\"{}\"", STANDARD.encode([0xff])), "a", "a");
        check(&latin1, Sender::IotRule, Err(("payload", "UTF-8")));
        // A JSON escape in the string (`\/`) is the same base64.
        let tagged = r.replace(r#""metrics""#, r#""tags":{"q":"???"},"metrics""#);
        let slashes = STANDARD.encode(tagged).replace('/', r"\/");
        assert!(slashes.contains(r"\/"), "{slashes}");
        let escaped = raw_envelope(&format!("\"{slashes}\""), "dev-1", "dev-1");
        check(&escaped, Sender::IotRule, Ok(1));
    }

    #[test]
    fn a_payload_decodes_to_at_most_the_limit() {
        let r = reading("dev-1", "e-1");
        let full = r.clone() + &" ".repeat(MAX_PAYLOAD_BYTES - r.len());
        check(&envelope(&full, "dev-1", "dev-1"), Sender::IotRule, Ok(1));
        let over = format!("{full} ");
        let refused = Err(("payload", "at most 262144 bytes"));
        check(&envelope(&over, "dev-1", "dev-1"), Sender::IotRule, refused);
        // Longer than any base64 of the limit: refused before decoding.
        let long = "A".repeat(MAX_PAYLOAD_BYTES.div_ceil(3) * 4 + 4);
        let long = raw_envelope(&format!("\"{long}\""), "dev-1", "dev-1");
        check(&long, Sender::IotRule, refused);
    }

    /// The thing of each form of a thing's topic, as the rule's SQL reads it: the
    /// broker's, and Basic Ingest's as the rule sees it or whole, under this rule's name
    /// alone; nothing else names a thing.
    #[test]
    fn a_things_topic_names_it_in_either_form() {
        let rule = "shardline_prod_readings";
        for topic in [
            "shardline/devices/thermo-007/readings",
            "devices/thermo-007/readings",
            "$aws/rules/shardline_prod_readings/devices/thermo-007/readings",
            "$aws/rules/shardline_prod_readings/shardline/devices/thermo-007/readings",
        ] {
            assert_eq!(thing_of_topic(topic, rule), Some("thermo-007"), "{topic}");
        }
        for topic in [
            "$aws/rules/other_rule/devices/thermo-007/readings",
            "$aws/rules/shardline_prod_readings_2/devices/thermo-007/readings",
            "$aws/rules/shardline_prod_readings/thermo-007/readings",
            "$aws/rules/devices/thermo-007/readings",
            "devices/thermo-007/readings/x",
            "devices/a/b/readings",
            "devices//readings",
            "shardline/devices/thermo-007/other",
            "x/devices/thermo-007/readings",
            "thermo-007",
            "",
        ] {
            assert_eq!(thing_of_topic(topic, rule), None, "{topic}");
        }
        assert_eq!(thing_of_topic("$aws/rules//devices/a/readings", ""), None);
    }

    #[test]
    fn an_envelope_from_any_other_sender_is_refused() {
        let one = envelope(&reading("dev-1", "e-1"), "dev-1", "dev-1");
        check(&one, Sender::Publisher, Err(("payload", "IOT_SENDER_ID")));
        check(&reading("dev-1", "e-1"), Sender::Publisher, Ok(1));
    }

    /// By default only a certificate's connection publishes: an IAM user's, an IAM
    /// role session's (the console's MQTT client, a WebSocket client), a Cognito
    /// identity's, or none at all is refused naming `principal`; with `any`, each is
    /// taken.
    #[test]
    fn by_default_only_a_certificates_connection_publishes() {
        let published = STANDARD.encode(reading("dev-1", "e-1"));
        let from = |principal: &str| {
            format!(r#"{{"payload":"{published}","thing":"dev-1","client":"dev-1"{principal}}}"#)
        };
        let with = |id: &str| from(&format!(r#","principal":"{id}""#));
        check(&with(CERT), Sender::IotRule, Ok(1));
        let not_a_certificate = Err(("principal", "not an X.509 certificate's id"));
        for id in [
            "AIDAEXAMPLEUSER000001",
            "AROAEXAMPLEROLE000001:my-session-name",
            "us-east-1:0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
            // The shape's neighbours: upper-case, one digit short or long, not hex.
            &CERT.to_uppercase(),
            &CERT[1..],
            &format!("{CERT}0"),
            &CERT.replace('a', "g"),
            "",
        ] {
            check(&with(id), Sender::IotRule, not_a_certificate);
            check_taking(Principals::Any, &with(id), Sender::IotRule, Ok(1));
        }
        check(
            &from(""),
            Sender::IotRule,
            Err(("principal", "is required")),
        );
        check_taking(Principals::Any, &from(""), Sender::IotRule, Ok(1));
        let number = from(r#","principal":7"#);
        check(
            &number,
            Sender::IotRule,
            Err(("principal", "must be a string")),
        );
        // The reason says why, and shows what the rule wrote.
        let Err(refusal) = parse_message(
            &with("AROAEXAMPLEROLE000001:console"),
            Sender::IotRule,
            &limits(),
            Principals::Certificate,
        ) else {
            panic!("a role session's publish was taken");
        };
        assert!(
            refusal.rule.contains("AROAEXAMPLEROLE000001:console")
                && refusal.rule.contains("IOT_PRINCIPALS"),
            "{refusal}"
        );
        assert_eq!("certificate".parse(), Ok(Principals::Certificate));
        assert_eq!("any".parse(), Ok(Principals::Any));
        assert_eq!("".parse::<Principals>(), Err(()));
        assert_eq!(Principals::default(), Principals::Certificate);
    }
}
