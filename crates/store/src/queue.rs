//! The queue port: the two things the handler asks of SQS besides the batch it got.
//!
//! - **Dead letters**: a permanent error is sent straight to the dead-letter queue with
//!   its reason rather than reported as a failure, so SQS does not redeliver it five
//!   times before the redrive does the same. Only a failed send is reported, so the
//!   message comes back and nothing is lost.
//! - **Redelivery delays**: a message reported for a transient reason (a throttle, the
//!   deadline) gets a visibility timeout that grows with its receive count
//!   (`ChangeMessageVisibilityBatch`), so a throttled burst does not use up the redrive
//!   policy's receives within a few fixed timeouts. A failed change loses nothing: the
//!   message comes back after the queue's own timeout.
//! - **Requeues**: a message still failing transiently at its last receive before the
//!   redrive is sent back to the source queue as a fresh copy (its receive count starts
//!   again), a bounded number of times, so a valid reading is never redriven to the DLQ
//!   without a reason just because its key was throttled for long.
//!
//! Everything the ingest sends is held to what SQS accepts, here, once: attribute
//! values in SQS's character set and at most [`MAX_TEXT_CHARS`] long ([`sqs_text`]), at
//! most [`MAX_ATTRIBUTES`] attributes, and body plus attributes within
//! [`MAX_MESSAGE_BYTES`] ([`check_message`], which the in-memory fake enforces). A
//! refusal is echoed from what a sender wrote, so without these rules the DLQ send of
//! an odd field name would fail, the message would be retried, and the redrive would
//! move it to the DLQ without a reason.
//!
//! The port lives here with its types; the SQS adapter is `sqs::SqsQueue`
//! (feature `sqs`), the in-memory fake [`crate::memory::MemoryQueue`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;

use sha2::{Digest, Sha256};

/// SQS's most message attributes on one message.
pub const MAX_ATTRIBUTES: usize = 10;
/// SQS's most entries of one batch call (`SendMessageBatch`, `DeleteMessageBatch`,
/// `ChangeMessageVisibilityBatch`) and messages of one `ReceiveMessage`.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// The message size the ingest sends within, in bytes: the body plus every
/// attribute's name, data type and value, as SQS counts them. 256 KiB, the smallest
/// maximum of a queue created without `MaximumMessageSize` (older queues keep it).
pub const MAX_MESSAGE_BYTES: usize = 262_144;
/// Longest text the ingest puts in an attribute value, in characters.
pub const MAX_TEXT_CHARS: usize = 256;
/// How a text cut to fit ends.
pub const TRUNCATED: &str = "...";
/// The value of an empty text (SQS refuses an empty attribute value).
pub const EMPTY_TEXT: &str = "(empty)";
/// The shortest cap [`sqs_text`] honours: room for the marker and one escape.
const MIN_TEXT_CAP: usize = 16;
/// Characters of the field kept in the `reason` attribute, so the rule always shows.
const REASON_FIELD_CHARS: usize = 96;

/// Message attributes: name -> (data type, string value).
pub type Attributes = BTreeMap<String, (String, String)>;

/// Whether SQS accepts `c` in a message body or a String attribute value:
/// `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`.
pub fn is_sqs_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `text` as an attribute value SQS accepts, at most `cap` characters (at least 16):
/// each character SQS refuses written as its JSON escape (`\u0000`, `\uFFFF`), so the
/// replacement is visible and says what was there; an empty text as [`EMPTY_TEXT`];
/// a longer text cut on a character boundary (an escape is kept whole or not at all)
/// and ended with [`TRUNCATED`]. A text already so made comes back unchanged.
pub fn sqs_text(text: &str, cap: usize) -> String {
    let cap = cap.max(MIN_TEXT_CAP);
    if text.is_empty() {
        return EMPTY_TEXT.to_owned();
    }
    let keep = cap - TRUNCATED.len();
    let mut out = String::with_capacity(text.len().min(cap));
    let (mut chars, mut cut) = (0, None);
    for c in text.chars() {
        // Every refused character is below U+10000: its escape is 6 characters.
        let width = if is_sqs_char(c) { 1 } else { 6 };
        if chars + width > keep && cut.is_none() {
            cut = Some(out.len());
        }
        if chars + width > cap {
            out.truncate(cut.unwrap_or(out.len()));
            out.push_str(TRUNCATED);
            return out;
        }
        if width == 1 {
            out.push(c);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\u{:04X}", u32::from(c));
        }
        chars += width;
    }
    out
}

/// JSON text with every character SQS refuses written as its `\uXXXX` escape: the same
/// JSON value, now a body SQS accepts. Such a character can only stand inside a string
/// (JSON's structural characters are all accepted), where the escape means the same.
pub fn sqs_json(json: String) -> String {
    if json.chars().all(is_sqs_char) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_sqs_char(c) {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{:04X}", u32::from(c));
        }
    }
    out
}

/// The bytes one attribute adds to a message's size: name, data type and value.
pub fn attribute_bytes(name: &str, (data_type, value): &(String, String)) -> usize {
    name.len() + data_type.len() + value.len()
}

/// A message's size as SQS counts it against its maximum: the body and every
/// attribute's name, data type and value, in bytes.
pub fn message_bytes(body: &str, attributes: &Attributes) -> usize {
    body.len()
        + attributes
            .iter()
            .map(|(name, value)| attribute_bytes(name, value))
            .sum::<usize>()
}

/// Whether SQS accepts `name` as a message attribute name: 1 to 256 characters of
/// `[A-Za-z0-9_.-]`, no leading, trailing or doubled `.`, no `AWS.` or `Amazon.` prefix.
fn is_attribute_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
}

/// Why SQS would refuse to send a message of this `body` and these `attributes` to a
/// queue whose maximum message size is `max_bytes`, if it would: an empty body, a
/// character outside SQS's set in the body or a value, more than [`MAX_ATTRIBUTES`],
/// an invalid name or data type, an empty value, or more than `max_bytes` in all.
pub fn check_message(
    body: &str,
    attributes: &Attributes,
    max_bytes: usize,
) -> Result<(), QueueError> {
    message_rule(body, attributes, max_bytes).map_err(QueueError::Invalid)
}

/// [`check_message`]'s rules, the first broken named.
fn message_rule(body: &str, attributes: &Attributes, max_bytes: usize) -> Result<(), String> {
    if body.is_empty() {
        return Err("the message body must not be empty".to_owned());
    }
    if let Some(c) = body.chars().find(|c| !is_sqs_char(*c)) {
        return Err(format!(
            "the message body holds U+{:04X}, which SQS does not accept",
            u32::from(c)
        ));
    }
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(format!(
            "{} message attributes, SQS allows {MAX_ATTRIBUTES}",
            attributes.len()
        ));
    }
    for (name, (data_type, value)) in attributes {
        let shown = sqs_text(name, 64);
        if !is_attribute_name(name) {
            return Err(format!("invalid message attribute name {shown}"));
        }
        if !["String", "Number", "Binary"]
            .iter()
            .any(|t| data_type.split('.').next() == Some(*t))
        {
            return Err(format!("attribute {shown}: invalid data type"));
        }
        if value.is_empty() {
            return Err(format!("attribute {shown}: empty value"));
        }
        if let Some(c) = value.chars().find(|c| !is_sqs_char(*c)) {
            return Err(format!(
                "attribute {shown}: value holds U+{:04X}, which SQS does not accept",
                u32::from(c)
            ));
        }
    }
    let size = message_bytes(body, attributes);
    if size > max_bytes {
        return Err(format!(
            "message of {size} bytes (body and attributes), the queue takes {max_bytes}"
        ));
    }
    Ok(())
}

/// `ours`, then a sender's attributes `theirs` as far as SQS takes them beside a body
/// of `body_bytes`: in name order (a stable order, whatever order they arrived in),
/// each one whose name is not among ours, while there are fewer than
/// [`MAX_ATTRIBUTES`] and the message stays within `max_bytes`. One that would not fit
/// in bytes is skipped and a smaller later one still taken; one SQS would refuse (a
/// bad name, an empty value or a character outside its set) is skipped too. So the
/// dropped ones are the last in name order once the count is reached, and any too
/// large for the room left. Returns the attributes and the names dropped.
pub fn with_attributes(
    mut ours: Attributes,
    theirs: &Attributes,
    body_bytes: usize,
    max_bytes: usize,
) -> (Attributes, Vec<String>) {
    let mut size = body_bytes
        + ours
            .iter()
            .map(|(name, value)| attribute_bytes(name, value))
            .sum::<usize>();
    let mut dropped = Vec::new();
    for (name, value) in theirs {
        if ours.contains_key(name) {
            continue;
        }
        let bytes = attribute_bytes(name, value);
        let valid =
            is_attribute_name(name) && !value.1.is_empty() && value.1.chars().all(is_sqs_char);
        if ours.len() < MAX_ATTRIBUTES && size + bytes <= max_bytes && valid {
            size += bytes;
            ours.insert(name.clone(), value.clone());
        } else {
            dropped.push(name.clone());
        }
    }
    (ours, dropped)
}

/// A refused message on its way to the DLQ, as SQS will get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The source message's id (as [`sqs_text`] makes it).
    pub message_id: String,
    /// The body sent: the original, unchanged, so it can be inspected and replayed; or,
    /// when the original and the reason do not fit one message (or SQS would refuse the
    /// original as a body), a wrapper: `{"shardline_dead_letter": {"reason", "body_bytes",
    /// "body_sha256", "body_head"}}`, the reason, the original's size and SHA-256 (hex,
    /// of its UTF-8 bytes) and as much of its beginning as fits.
    pub body: String,
    /// The refused field (`body` for the message as a whole), as [`sqs_text`] makes it.
    pub field: String,
    /// The rule it broke, as [`sqs_text`] makes it.
    pub rule: String,
    /// Every attribute sent: `reason`, `field`, `rule` and `source_message_id`, then the
    /// sender's own as far as [`with_attributes`] keeps them.
    pub attributes: Attributes,
}

impl DeadLetter {
    /// The letter for message `message_id` of `body`, refused at `field` for `rule`,
    /// carrying the sender's attributes `theirs` as far as they fit, to a DLQ taking
    /// messages of `max_bytes`. Whatever the inputs, SQS accepts the letter
    /// ([`check_message`]) when `max_bytes` is at least [`MAX_MESSAGE_BYTES`] and
    /// `theirs` came from SQS.
    pub fn new(
        message_id: &str,
        body: &str,
        field: &str,
        rule: &str,
        theirs: &Attributes,
        max_bytes: usize,
    ) -> Self {
        Self::with_body_attributes(
            message_id,
            body,
            field,
            rule,
            Attributes::new(),
            theirs,
            max_bytes,
        )
    }

    /// [`DeadLetter::new`], with attributes `of_body` that speak of the body as it is
    /// (a seal of it): sent before the sender's, and only with the body unchanged; a
    /// letter whose body must be wrapped carries none of them.
    pub fn with_body_attributes(
        message_id: &str,
        body: &str,
        field: &str,
        rule: &str,
        of_body: Attributes,
        theirs: &Attributes,
        max_bytes: usize,
    ) -> Self {
        let text = |s: &str| ("String".to_owned(), sqs_text(s, MAX_TEXT_CHARS));
        let reason = format!("{}: {rule}", sqs_text(field, REASON_FIELD_CHARS));
        let mut ours: Attributes = [
            ("reason", text(&reason)),
            ("field", text(field)),
            ("rule", text(rule)),
            ("source_message_id", text(message_id)),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        let sendable = !body.is_empty() && body.chars().all(is_sqs_char);
        let room =
            |attributes: &Attributes| max_bytes.saturating_sub(message_bytes("", attributes));
        let mut with_body = ours.clone();
        with_body.extend(of_body);
        let body = if sendable && body.len() <= room(&with_body) {
            ours = with_body;
            body.to_owned()
        } else if sendable && body.len() <= room(&ours) {
            body.to_owned()
        } else {
            wrapper(body, &ours["reason"].1, room(&ours))
        };
        let (attributes, _) = with_attributes(ours, theirs, body.len(), max_bytes);
        let get = |name: &str| {
            attributes
                .get(name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        Self {
            message_id: get("source_message_id"),
            field: get("field"),
            rule: get("rule"),
            body,
            attributes,
        }
    }

    /// The `reason` attribute: `field: rule`.
    pub fn reason(&self) -> String {
        self.attributes.get("reason").map_or_else(
            || format!("{}: {}", self.field, self.rule),
            |(_, v)| v.clone(),
        )
    }
}

/// The wrapper body of a dead letter whose `original` cannot be sent as it is: the
/// reason, the original's size and digest and its longest beginning (on a character
/// boundary) that keeps the wrapper within `room` bytes.
fn wrapper(original: &str, reason: &str, room: usize) -> String {
    let digest: String =
        Sha256::digest(original.as_bytes())
            .iter()
            .fold(String::with_capacity(64), |mut hex, b| {
                let _ = write!(hex, "{b:02x}");
                hex
            });
    let make = |head: &str| {
        let value = serde_json::json!({
            "shardline_dead_letter": {
                "reason": reason,
                "body_bytes": original.len(),
                "body_sha256": digest,
                "body_head": head,
            }
        });
        sqs_json(value.to_string())
    };
    let mut keep = original.len().min(room);
    loop {
        while !original.is_char_boundary(keep) {
            keep -= 1;
        }
        let body = make(&original[..keep]);
        // Each byte taken off the head takes at least one off the wrapper, so this
        // ends within a few rounds; with no head left it is a few hundred bytes.
        if body.len() <= room || keep == 0 {
            return body;
        }
        keep = keep.saturating_sub(body.len() - room);
    }
}

/// A received message to keep invisible for a while before SQS delivers it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delay {
    /// The receipt handle of this receive.
    pub receipt_handle: String,
    /// How long, from now, in whole seconds.
    pub visibility_secs: u32,
}

/// SQS's longest `DelaySeconds`: 15 minutes.
pub const MAX_DELAY_SECS: u32 = 900;

/// A message sent back to the source queue as a fresh copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeue {
    /// The body, unchanged.
    pub body: String,
    /// Message attributes to carry, name -> (data type, string value): at most
    /// [`MAX_ATTRIBUTES`] (the ingest builds them with [`with_attributes`]).
    pub attributes: Attributes,
    /// How long before the copy can be received, in seconds (at most [`MAX_DELAY_SECS`]).
    pub delay_secs: u32,
}

/// Why a letter, delay or copy did not reach its queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// It breaks one of SQS's rules, found before any call ([`check_message`], or the
    /// SDK's builder).
    #[error("{0}")]
    Invalid(String),
    /// SQS refused this entry of a batch call.
    #[error("{code}: {message}")]
    Refused {
        /// SQS's error code.
        code: String,
        /// SQS's message.
        message: String,
    },
    /// The whole batch call failed (a transport, throttling or service error).
    #[error("{call} failed: {reason}")]
    CallFailed {
        /// The SQS action.
        call: &'static str,
        /// The SDK's error, with its context.
        reason: String,
    },
    /// A source-queue action with no source queue URL configured.
    #[error("no source queue URL configured")]
    NoSourceQueue,
    /// The invocation's deadline came first.
    #[error("deadline reached while {doing}")]
    Deadline {
        /// What was under way.
        doing: &'static str,
    },
    /// A failure a test injected into the in-memory queue.
    #[error("injected {0} failure")]
    Injected(&'static str),
}

/// The port: one result per letter, delay or copy, in order.
pub trait Queue: Send + Sync {
    /// Sends `letters` to the dead-letter queue, each with its body and attributes as
    /// they are; an error for each one not accepted.
    fn dead_letter(
        &self,
        letters: &[DeadLetter],
    ) -> impl Future<Output = Vec<Result<(), QueueError>>> + Send;

    /// Sets each message's visibility timeout on the source queue; an error for each one
    /// not changed (it then comes back after the queue's own timeout).
    fn delay(&self, delays: &[Delay]) -> impl Future<Output = Vec<Result<(), QueueError>>> + Send;

    /// Sends `copies` to the source queue; an error for each one not accepted.
    fn requeue(
        &self,
        copies: &[Requeue],
    ) -> impl Future<Output = Vec<Result<(), QueueError>>> + Send;
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> Attributes {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ("String".to_owned(), (*v).to_owned())))
            .collect()
    }

    #[test]
    fn refused_characters_are_escaped_visibly_and_long_texts_cut_with_a_marker() {
        assert_eq!(sqs_text("a\u{0}b\u{FFFF}c", 256), "a\\u0000b\\uFFFFc");
        assert_eq!(
            sqs_text("tab\there\u{FFFD}\u{1F600}", 256),
            "tab\there\u{FFFD}\u{1F600}"
        );
        assert_eq!(sqs_text("", 256), EMPTY_TEXT);
        let long = "é".repeat(120_000);
        let cut = sqs_text(&long, 256);
        assert_eq!(cut.chars().count(), 256);
        assert!(cut.starts_with("éé") && cut.ends_with(TRUNCATED));
        // An escape straddling the cut is dropped whole, never left half written.
        let text = format!("{}\u{0}{}", "x".repeat(250), "y".repeat(10));
        assert_eq!(sqs_text(&text, 256), format!("{}...", "x".repeat(250)));
        let exact = "z".repeat(256);
        assert_eq!(sqs_text(&exact, 256), exact);
    }

    #[test]
    fn json_bodies_escape_what_sqs_refuses_and_mean_the_same() {
        let json = serde_json::json!({ "tag": "a\u{FFFF}b\u{0}" }).to_string();
        let body = sqs_json(json);
        assert!(body.chars().all(is_sqs_char), "{body}");
        let back: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
        assert_eq!(back["tag"], "a\u{FFFF}b\u{0}");
    }

    #[test]
    fn a_letter_whose_body_cannot_take_the_reason_is_wrapped_with_its_digest() {
        let body = "x".repeat(MAX_MESSAGE_BYTES);
        let letter = DeadLetter::new(
            "m-1",
            &body,
            "body",
            "too big",
            &Attributes::new(),
            MAX_MESSAGE_BYTES,
        );
        assert_eq!(
            check_message(&letter.body, &letter.attributes, MAX_MESSAGE_BYTES),
            Ok(())
        );
        let wrapped: serde_json::Value = serde_json::from_str(&letter.body).expect("JSON");
        let inner = &wrapped["shardline_dead_letter"];
        assert_eq!(inner["reason"], "body: too big");
        assert_eq!(inner["body_bytes"], MAX_MESSAGE_BYTES);
        assert_eq!(
            inner["body_sha256"].as_str().map(str::len),
            Some(64),
            "{inner}"
        );
        let head = inner["body_head"].as_str().expect("head");
        assert!(head.len() > MAX_MESSAGE_BYTES - 4096 && body.starts_with(head));
        // A body that fits is sent unchanged; a missing one is wrapped, not sent empty.
        let small = DeadLetter::new(
            "m-2",
            "{}",
            "body",
            "no",
            &Attributes::new(),
            MAX_MESSAGE_BYTES,
        );
        assert_eq!(small.body, "{}");
        let empty = DeadLetter::new(
            "m-3",
            "",
            "body",
            "is missing",
            &Attributes::new(),
            MAX_MESSAGE_BYTES,
        );
        assert!(empty.body.contains("\"body_bytes\":0"), "{}", empty.body);
    }

    #[test]
    fn attributes_are_ours_first_then_the_senders_in_name_order_up_to_ten() {
        let theirs: Attributes = attrs(
            &(0..10)
                .map(|i| (format!("a{i}"), "v".to_owned()))
                .collect::<Vec<_>>()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        );
        let (all, dropped) = with_attributes(
            attrs(&[("ours", "1"), ("a3", "mine")]),
            &theirs,
            10,
            MAX_MESSAGE_BYTES,
        );
        assert_eq!(all.len(), MAX_ATTRIBUTES);
        assert_eq!(all["a3"].1, "mine");
        assert_eq!(dropped, ["a9"]);
        let big = attrs(&[("a", &"v".repeat(1000)), ("b", "small")]);
        let (kept, dropped) = with_attributes(Attributes::new(), &big, 0, 600);
        assert_eq!((kept.len(), dropped), (1, vec!["a".to_owned()]));
    }

    proptest! {
        /// Any text in: a value SQS accepts, within the cap, the same text when it
        /// already was one.
        #[test]
        fn any_text_becomes_a_value_sqs_accepts(text in any::<String>(), cap in 0usize..400) {
            let value = sqs_text(&text, cap);
            let attributes = attrs(&[("reason", &value)]);
            prop_assert_eq!(check_message("b", &attributes, MAX_MESSAGE_BYTES), Ok(()));
            prop_assert!(value.chars().count() <= cap.max(MIN_TEXT_CAP));
            prop_assert_eq!(sqs_text(&value, cap), value.clone());
            if !text.is_empty() && text.chars().count() <= cap.max(MIN_TEXT_CAP) && text.chars().all(is_sqs_char) {
                prop_assert_eq!(value, text);
            }
        }

        /// Any refusal of any body, with up to 12 sender attributes: a letter SQS accepts.
        #[test]
        fn any_letter_is_one_sqs_accepts(
            field in any::<String>(),
            rule in any::<String>(),
            body in prop_oneof![any::<String>(), "[a-z]{0,8}".prop_map(|s| s.repeat(40_000))],
            theirs in prop::collection::btree_map("[a-z]{1,8}", "[a-z]{1,40}", 0..12),
        ) {
            let theirs: Attributes = theirs
                .into_iter()
                .map(|(k, v)| (k, ("String".to_owned(), v)))
                .collect();
            let letter = DeadLetter::new("id", &body, &field, &rule, &theirs, MAX_MESSAGE_BYTES);
            prop_assert_eq!(check_message(&letter.body, &letter.attributes, MAX_MESSAGE_BYTES), Ok(()));
            prop_assert!(letter.attributes.len() <= MAX_ATTRIBUTES);
            prop_assert!(letter.reason().chars().count() <= MAX_TEXT_CHARS);
        }
    }
}
