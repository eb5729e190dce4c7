//! The SQS message body: parsing and validation.
//!
//! A body is one reading or `{"readings": [...]}`. A message is accepted or refused as a
//! whole: one bad reading refuses the message, so a message is either stored or
//! dead-lettered, never half of each. Every refusal names the field (with its path,
//! `readings[3].metrics.temp`) and the rule it broke.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use sharding::key::{MAX_ID_LEN, MAX_METRIC_NAME, is_metric_name, validate_id};
use sharding::time::Timestamp;
use store::{Decimal, Reading};

use crate::body::{self, Element, Members, RawBody, RawReading, Readings, Scalar};

/// Most metrics per reading.
pub const MAX_METRICS: usize = 64;
/// Most tags per reading.
pub const MAX_TAGS: usize = 32;
/// Longest tag name.
pub const MAX_TAG_NAME: usize = 64;
/// Longest tag value, in characters.
pub const MAX_TAG_VALUE: usize = 256;

/// Why a message was refused: the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct Refusal {
    /// Path of the offending field (`body` for the message as a whole).
    pub field: String,
    /// The rule it broke.
    pub rule: String,
}

/// The field a refusal of an unexpected envelope names.
pub const ENVELOPE_FIELD: &str = "payload";

impl Refusal {
    pub(crate) fn new(field: impl fmt::Display, rule: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            rule: rule.into(),
        }
    }
}

/// What validation needs to know.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The clock reading of this invocation.
    pub now: Timestamp,
    /// How far ahead of `now` a ts may be.
    pub max_future: Duration,
    /// How far behind `now` a ts may be.
    pub retention: Duration,
    /// Most readings in one message.
    pub max_readings: usize,
}

/// Parses and validates one message body into its readings (at least one).
///
/// Runs once per message on the ingest hot path: the body is read straight into the
/// shapes the rules look at (`body.rs`), strings borrowed from it, and field paths and
/// rule texts are only formatted for a refusal.
///
/// A body in the IoT front door's envelope is refused here: only a message the IoT
/// rule sent may carry one, and [`crate::front_door::parse_message`] reads it.
pub fn parse_body(body: &str, limits: &Limits) -> Result<Vec<Reading>, Refusal> {
    parse_raw(read(body)?, limits)
}

/// The body read as JSON, or the refusal of a body that is not JSON.
pub(crate) fn read(body: &str) -> Result<RawBody<'_>, Refusal> {
    body::read(body).map_err(|e| Refusal::new("body", format!("must be valid JSON ({e})")))
}

/// The readings of a body read as JSON, which must not be an envelope.
pub(crate) fn parse_raw(raw: RawBody<'_>, limits: &Limits) -> Result<Vec<Reading>, Refusal> {
    let RawBody::Object {
        reading,
        readings,
        other,
        envelope,
    } = raw
    else {
        return Err(Refusal::new(
            "body",
            "must be a JSON object (one reading or {\"readings\": [...]})",
        ));
    };
    if envelope.is_present() {
        return Err(Refusal::new(
            ENVELOPE_FIELD,
            "an IoT front-door envelope (payload, thing, client, principal) is taken only \
             from the IoT rule's role (IOT_SENDER_ID), and never inside another",
        ));
    }
    let Some(readings) = readings else {
        return Ok(vec![parse_reading(reading, None, limits)?]);
    };
    if let Some(other) = other {
        return Err(Refusal::new(
            other,
            "unknown field (a batch holds only \"readings\")",
        ));
    }
    let Readings::Array(list) = readings else {
        return Err(Refusal::new("readings", "must be an array"));
    };
    if list.is_empty() {
        return Err(Refusal::new("readings", "must hold at least one reading"));
    }
    if list.len() > limits.max_readings {
        return Err(Refusal::new(
            "readings",
            format!(
                "must hold at most {} readings, not {}",
                limits.max_readings,
                list.len()
            ),
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, element)| match element {
            Element::Reading(r) => parse_reading(r, Some(i), limits),
            Element::NotObject => Err(Refusal::new(
                format_args!("readings[{i}]"),
                "must be a JSON object",
            )),
        })
        .collect()
}

/// The body of a message holding `readings`, in the documented format: what
/// [`parse_body`] parses back into the same readings (a requeued remainder of a
/// message is sent as one). A tag may hold a character SQS refuses in a body (U+FFFF,
/// sent as the escape `\uffff`): it is written as its escape again, so SQS takes the
/// copy.
pub fn to_body(readings: &[Reading]) -> String {
    /// A reading as a body holds it; a metric is written as its decimal text.
    #[derive(Serialize)]
    struct Sent<'a> {
        device_id: &'a str,
        event_id: &'a str,
        ts: String,
        metrics: &'a BTreeMap<String, Decimal>,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        tags: &'a BTreeMap<String, String>,
    }
    #[derive(Serialize)]
    struct Batch<'a> {
        readings: Vec<Sent<'a>>,
    }
    let readings = readings
        .iter()
        .map(|r| Sent {
            device_id: &r.device_id,
            event_id: &r.event_id,
            ts: r.ts.to_rfc3339(),
            metrics: &r.metrics,
            tags: &r.tags,
        })
        .collect();
    let body = serde_json::to_string(&Batch { readings })
        .expect("strings, and numbers in canonical text (valid JSON), always serialize");
    store::queue::sqs_json(body)
}

/// The path of field `name` of the reading at `index` of a batch (`None`: the body is
/// the reading).
fn path(index: Option<usize>, name: &str) -> String {
    match index {
        Some(i) => format!("readings[{i}].{name}"),
        None => name.to_owned(),
    }
}

fn parse_reading(
    raw: RawReading<'_>,
    index: Option<usize>,
    limits: &Limits,
) -> Result<Reading, Refusal> {
    if let Some(unknown) = raw.unknown {
        return Err(Refusal::new(
            path(index, &unknown),
            "unknown field (allowed: device_id, event_id, ts, metrics, tags)",
        ));
    }
    let device_id = id(raw.device_id, index, "device_id")?;
    let event_id = id(raw.event_id, index, "event_id")?;
    let ts = timestamp(raw.ts.as_ref(), index, limits)?;
    let metrics = metrics(raw.metrics, index)?;
    let tags = tags(raw.tags, index)?;
    Ok(Reading {
        device_id,
        event_id,
        ts,
        metrics,
        tags,
        // What the body cannot say: the ingest's parse stage sets it from the record.
        written: store::WriteOrder::OLDEST,
    })
}

fn id(v: Option<Scalar<'_>>, index: Option<usize>, name: &str) -> Result<String, Refusal> {
    let rule = || format!("must be 1 to {MAX_ID_LEN} characters of [A-Za-z0-9._:-]");
    match v {
        None | Some(Scalar::Null) => Err(Refusal::new(path(index, name), "is required")),
        Some(Scalar::Str(s)) => {
            if validate_id("id", &s).is_ok() {
                Ok(s.into_owned())
            } else {
                Err(Refusal::new(path(index, name), rule()))
            }
        }
        Some(_) => Err(Refusal::new(
            path(index, name),
            format!("must be a string; {}", rule()),
        )),
    }
}

fn timestamp(
    v: Option<&Scalar<'_>>,
    index: Option<usize>,
    limits: &Limits,
) -> Result<Timestamp, Refusal> {
    let refuse = |rule: String| Refusal::new(path(index, "ts"), rule);
    let format_rule =
        || refuse("must be an RFC 3339 timestamp or integer epoch milliseconds".into());
    let ts = match v {
        None | Some(Scalar::Null) => return Err(refuse("is required".into())),
        Some(Scalar::Str(s)) => Timestamp::parse(s).map_err(|_| format_rule())?,
        Some(Scalar::Int(ms)) => Timestamp::from_millis(*ms).map_err(|_| format_rule())?,
        Some(_) => return Err(format_rule()),
    };
    let latest = limits.now.saturating_add(limits.max_future);
    if ts > latest {
        return Err(refuse(format!(
            "must be at most {} s in the future ({ts} is after {latest})",
            limits.max_future.as_secs()
        )));
    }
    let earliest = limits
        .now
        .checked_sub(limits.retention)
        .unwrap_or(Timestamp::MIN);
    if ts < earliest {
        return Err(refuse(format!(
            "must not be older than the retention of {} days ({ts} is before {earliest})",
            limits.retention.as_secs() / 86_400
        )));
    }
    Ok(ts)
}

/// A reading's metrics: numbers DynamoDB stores (`store::decimal`: at most 38
/// significant digits, 0 or a magnitude from 1e-130 to below 1e126; a larger one would
/// fail the whole `BatchWriteItem` call), each kept as sent.
fn metrics(
    v: Option<Members<'_>>,
    index: Option<usize>,
) -> Result<BTreeMap<String, Decimal>, Refusal> {
    let at = || path(index, "metrics");
    let shape = || format!("must be an object of 1 to {MAX_METRICS} numbers");
    let object = match v {
        None | Some(Members::Other(Scalar::Null)) => {
            return Err(Refusal::new(at(), "is required"));
        }
        Some(Members::Object(o)) => o,
        Some(Members::Other(_)) => return Err(Refusal::new(at(), shape())),
    };
    if object.is_empty() || object.len() > MAX_METRICS {
        return Err(Refusal::new(
            at(),
            format!("{}, not {}", shape(), object.len()),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, value) in object {
        if !is_metric_name(&name) {
            return Err(Refusal::new(
                format_args!("{}.{name}", at()),
                format!("metric names must be 1 to {MAX_METRIC_NAME} characters of [A-Za-z0-9_]"),
            ));
        }
        let Scalar::Number(text) = value else {
            return Err(Refusal::new(
                format_args!("{}.{name}", at()),
                "must be a finite number",
            ));
        };
        let number = Decimal::parse(text)
            .map_err(|e| Refusal::new(format_args!("{}.{name}", at()), e.to_string()))?;
        out.insert(name.into_owned(), number);
    }
    Ok(out)
}

fn tags(v: Option<Members<'_>>, index: Option<usize>) -> Result<BTreeMap<String, String>, Refusal> {
    let at = || path(index, "tags");
    let shape = || format!("must be an object of at most {MAX_TAGS} strings");
    let object = match v {
        None | Some(Members::Other(Scalar::Null)) => return Ok(BTreeMap::new()),
        Some(Members::Object(o)) => o,
        Some(Members::Other(_)) => return Err(Refusal::new(at(), shape())),
    };
    if object.len() > MAX_TAGS {
        return Err(Refusal::new(
            at(),
            format!("{}, not {}", shape(), object.len()),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, value) in object {
        let tag = || format!("{}.{name}", at());
        if name.is_empty() || name.chars().count() > MAX_TAG_NAME {
            return Err(Refusal::new(
                tag(),
                format!("tag names must be 1 to {MAX_TAG_NAME} characters"),
            ));
        }
        let Scalar::Str(s) = value else {
            return Err(Refusal::new(tag(), "must be a string"));
        };
        if s.chars().count() > MAX_TAG_VALUE {
            return Err(Refusal::new(
                tag(),
                format!("must be at most {MAX_TAG_VALUE} characters"),
            ));
        }
        out.insert(name.into_owned(), s.into_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            now: Timestamp::parse("2026-06-22T12:00:00Z").expect("valid"),
            max_future: Duration::from_secs(300),
            retention: Duration::from_secs(30 * 86_400),
            max_readings: 3,
        }
    }

    /// `expected`: `Ok(n)` readings, or `Err((field, fragment of the rule))`.
    fn check(body: &str, expected: Result<usize, (&str, &str)>) {
        match (parse_body(body, &limits()), expected) {
            (Ok(readings), Ok(n)) => assert_eq!(readings.len(), n, "{body}"),
            (Err(refusal), Err((field, rule))) => {
                assert_eq!(refusal.field, field, "{body}: {refusal}");
                assert!(refusal.rule.contains(rule), "{body}: {refusal}");
            }
            (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
        }
    }

    const OK: &str = r#"{"device_id":"dev-1","event_id":"e-1","ts":"2026-06-22T11:59:00Z","metrics":{"t":21.5}}"#;

    #[test]
    fn a_remainder_body_parses_back_into_the_same_readings() {
        let tagged = r#"{"device_id":"dev-2","event_id":"e-2","ts":1782129540123,"metrics":{"t":-0.1,"h":1e125},"tags":{"site":"a b"}}"#;
        let body = format!(r#"{{"readings":[{OK},{tagged}]}}"#);
        let readings = parse_body(&body, &limits()).expect("valid");
        let again = parse_body(&to_body(&readings), &limits()).expect("valid");
        assert_eq!(again, readings);
        assert_eq!(
            parse_body(&to_body(&readings[1..]), &limits()).expect("valid"),
            readings[1..]
        );
    }

    #[test]
    fn a_remainder_body_holding_what_sqs_refuses_is_escaped_and_parses_back() {
        let body = OK.replace(
            r#""metrics""#,
            r#""tags":{"\uffff":"a\ufffeb\u0000"},"metrics""#,
        );
        let readings = parse_body(&body, &limits()).expect("valid");
        assert_eq!(
            readings[0].tags.get("\u{FFFF}").map(String::as_str),
            Some("a\u{FFFE}b\u{0}")
        );
        let copy = to_body(&readings);
        assert!(copy.chars().all(store::queue::is_sqs_char), "{copy}");
        assert_eq!(parse_body(&copy, &limits()).expect("valid"), readings);
    }

    #[test]
    fn valid_single_and_batch() {
        check(OK, Ok(1));
        check(&format!(r#"{{"readings":[{OK},{OK}]}}"#), Ok(2));
        check(
            r#"{"device_id":"a.b:c_d-9","event_id":"x","ts":1782129540000,"metrics":{"a_1":-1e10,"b":0},"tags":{"site":"north"}}"#,
            Ok(1),
        );
    }

    /// Members are read in key order with the last of repeated keys winning, as a
    /// `serde_json::Value` holds them: the refusal names the same member.
    #[test]
    fn members_are_judged_in_key_order_and_the_last_repeat_wins() {
        let tail = r#""event_id":"e-1","ts":"2026-06-22T11:59:00Z","metrics":{"t":1}"#;
        check(
            &format!(r#"{{"zeta":1,"alpha":2,"device_id":"dev-1",{tail}}}"#),
            Err(("alpha", "unknown field (allowed")),
        );
        check(
            &format!(r#"{{"x":1,"readings":[{OK}],"a":2}}"#),
            Err(("a", "a batch holds only")),
        );
        check(
            &format!(r#"{{"device_id":"bad#","device_id":"dev-1",{tail}}}"#),
            Ok(1),
        );
        check(
            &format!(r#"{{"device_id":"dev-1",{tail},"device_id":"bad#"}}"#),
            Err(("device_id", "[A-Za-z0-9._:-]")),
        );
        check(
            &OK.replace(r#"{"t":21.5}"#, r#"{"b":"x","a":"y"}"#),
            Err(("metrics.a", "finite number")),
        );
        check(
            r#"{"readings":[{"readings":[]}]}"#,
            Err(("readings[0].readings", "unknown field (allowed")),
        );
        check(
            &format!(r#"{{"readings":[{OK}],"readings":7}}"#),
            Err(("readings", "must be an array")),
        );
    }

    #[test]
    fn escaped_strings_and_every_json_type_are_read() {
        let escaped = OK.replace(r#""dev-1""#, r#""dev\u002d1""#);
        let readings = parse_body(&escaped, &limits()).expect("valid");
        assert_eq!(readings[0].device_id, "dev-1");
        for value in [
            "true",
            "[1,[2]]",
            r#"{"a":{"b":1}}"#,
            "-1.5",
            "18446744073709551615",
        ] {
            check(
                &OK.replace(r#""dev-1""#, value),
                Err(("device_id", "must be a string")),
            );
            check(
                &OK.replace(r#"{"t":21.5}"#, &format!(r#"{{"t":21.5,"u":{value}}}"#)),
                if value.starts_with(['-', '1']) {
                    Ok(1)
                } else {
                    Err(("metrics.u", "finite number"))
                },
            );
        }
        let ts = |v: &str| OK.replace(r#""2026-06-22T11:59:00Z""#, v);
        check(&ts("1782129540000.0"), Err(("ts", "RFC 3339")));
        check(&ts("18446744073709551615"), Err(("ts", "RFC 3339")));
        check(&ts("[1782129540000]"), Err(("ts", "RFC 3339")));
        check(&ts("1782129540000"), Ok(1));
        check(r#""a string""#, Err(("body", "JSON object")));
        check("null", Err(("body", "JSON object")));
    }

    #[test]
    fn body_shape() {
        check("not json", Err(("body", "valid JSON")));
        check("[1]", Err(("body", "JSON object")));
        check(r#"{"readings":{}}"#, Err(("readings", "array")));
        check(r#"{"readings":[]}"#, Err(("readings", "at least one")));
        check(
            &format!(r#"{{"readings":[{OK},{OK},{OK},{OK}]}}"#),
            Err(("readings", "at most 3")),
        );
        check(
            &format!(r#"{{"readings":[{OK}],"x":1}}"#),
            Err(("x", "unknown field")),
        );
        check(r#"{"readings":[7]}"#, Err(("readings[0]", "JSON object")));
    }

    #[test]
    fn ids() {
        let with = |id: &str| OK.replace("\"dev-1\"", id);
        check(&with("\"\""), Err(("device_id", "1 to 128")));
        check(&with("\"a#b\""), Err(("device_id", "[A-Za-z0-9._:-]")));
        check(&with("\"é\""), Err(("device_id", "[A-Za-z0-9._:-]")));
        check(
            &with(&format!("\"{}\"", "a".repeat(129))),
            Err(("device_id", "1 to 128")),
        );
        check(&with(&format!("\"{}\"", "a".repeat(128))), Ok(1));
        check(&with("7"), Err(("device_id", "must be a string")));
        check(
            &OK.replace(r#""event_id":"e-1","#, ""),
            Err(("event_id", "is required")),
        );
    }

    #[test]
    fn timestamps() {
        let with = |ts: &str| OK.replace("\"2026-06-22T11:59:00Z\"", ts);
        check(&with("\"2026-06-22T12:05:00Z\""), Ok(1));
        check(
            &with("\"2026-06-22T12:05:00.001Z\""),
            Err(("ts", "at most 300 s in the future")),
        );
        check(&with("\"2026-05-23T12:00:00Z\""), Ok(1));
        check(
            &with("\"2026-05-23T11:59:59.999Z\""),
            Err(("ts", "retention of 30 days")),
        );
        check(&with("\"yesterday\""), Err(("ts", "RFC 3339")));
        check(&with("1.5"), Err(("ts", "RFC 3339")));
        check(&with("true"), Err(("ts", "RFC 3339")));
    }

    #[test]
    fn metrics_and_tags() {
        let with = |m: &str| OK.replace(r#"{"t":21.5}"#, m);
        check(&with("{}"), Err(("metrics", "1 to 64")));
        check(&with("[1]"), Err(("metrics", "1 to 64")));
        check(
            &with(r#"{"bad-name":1}"#),
            Err(("metrics.bad-name", "[A-Za-z0-9_]")),
        );
        check(&with(r#"{"t":"21"}"#), Err(("metrics.t", "finite number")));
        check(&with(r#"{"t":null}"#), Err(("metrics.t", "finite number")));
        check(&with(r#"{"t":1e126}"#), Err(("metrics.t", "below 1e126")));
        check(&with(r#"{"t":-1e126}"#), Err(("metrics.t", "below 1e126")));
        check(&with(r#"{"t":1e-131}"#), Err(("metrics.t", "1e-130")));
        check(&with(r#"{"t":9.99e125}"#), Ok(1));
        check(&with(r#"{"t":-2e-130}"#), Ok(1));
        check(&with(r#"{"t":-0.0}"#), Ok(1));
        let many: Vec<String> = (0..65).map(|i| format!("\"m{i}\":1")).collect();
        check(
            &with(&format!("{{{}}}", many.join(","))),
            Err(("metrics", "1 to 64")),
        );
        let tagged = |t: &str| format!(r#"{},"tags":{t}}}"#, &OK[..OK.len() - 1]);
        check(&tagged(r#"{"site":"a"}"#), Ok(1));
        check(
            &tagged(r#"{"site":1}"#),
            Err(("tags.site", "must be a string")),
        );
        check(
            &tagged(&format!(r#"{{"site":"{}"}}"#, "x".repeat(257))),
            Err(("tags.site", "at most 256")),
        );
        let many: Vec<String> = (0..33).map(|i| format!("\"t{i}\":\"v\"")).collect();
        check(
            &tagged(&format!("{{{}}}", many.join(","))),
            Err(("tags", "at most 32")),
        );
        check(
            &OK.replace("\"ts\"", "\"extra\":1,\"ts\""),
            Err(("extra", "unknown field")),
        );
        check(
            &format!(r#"{{"readings":[{OK},{}]}}"#, OK.replace("21.5", "\"x\"")),
            Err(("readings[1].metrics.t", "finite number")),
        );
    }
}
