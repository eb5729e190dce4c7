//! What the ingest reads of an SQS record beyond its body: how often it was received
//! and requeued, who sent it and when, and the sender's own attributes; and the fresh
//! copy of a record the ingest sends back to the queue.

use aws_lambda_events::event::sqs::SqsMessage;
use store::WriteOrder;
use store::queue::{Attributes, MAX_DELAY_SECS, MAX_MESSAGE_BYTES, Requeue, with_attributes};

use crate::front_door::Sender;
use crate::seal::{SEAL_ATTRIBUTE, SealKeys, open};

/// The message attribute counting how often a message was requeued.
pub const REQUEUES_ATTRIBUTE: &str = "shardline.requeues";
/// The message attribute carrying a requeued copy's first message id.
pub const SOURCE_ID_ATTRIBUTE: &str = "shardline.source_message_id";
/// The message attribute carrying a requeued copy's first `SentTimestamp`: its
/// readings' write order (`sharding::written`).
pub const SENT_ATTRIBUTE: &str = "shardline.sent_timestamp";
/// The message attribute marking the ingest's whole copy of a message the IoT rule
/// sent, whose body is still the rule's envelope.
pub const FRONT_DOOR_ATTRIBUTE: &str = "shardline.front_door";
/// The value of [`FRONT_DOOR_ATTRIBUTE`].
const FRONT_DOOR: &str = "iot";
/// The message attribute marking the ingest's copy of readings already stored once
/// (sent for their late marks): such a copy is never dead-lettered for running out of
/// receives (`crate::fate::leave`).
pub const STORED_ATTRIBUTE: &str = "shardline.stored";
/// The value of [`STORED_ATTRIBUTE`].
const STORED: &str = "1";
/// The prefix of the ingest's own message attributes. A sender's attributes under it
/// are neither read (unless the ingest sent the message) nor carried on a copy.
pub const OWN_ATTRIBUTE_PREFIX: &str = "shardline.";

/// How often SQS delivered this record (`ApproximateReceiveCount`, 1 when absent).
pub(super) fn receive_count(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Whether `id` sent `record`, by its `SenderId`, which SQS sets from the caller's
/// identity and no sender can choose: `id` itself or one of its sessions
/// (`"<RoleId>:<session>"`, as a Lambda's role or the IoT rule's sends). Without `id`,
/// nothing is taken for its.
fn sent_by(record: &SqsMessage, id: Option<&str>) -> bool {
    let (Some(id), Some(sender)) = (id, record.attributes.get("SenderId")) else {
        return false;
    };
    sender
        .strip_prefix(id)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

/// Whether the ingest itself sent `record` (a requeued copy).
fn sent_by_ingest(record: &SqsMessage, own: Option<&str>) -> bool {
    sent_by(record, own)
}

/// Who sent `record`: the IoT rule's role (`iot`), the ingest's whole copy of a
/// message it sent, or a dead letter of one whose seal holds under `keys`, whoever
/// redrove it; a seal that does not hold is [`Sender::BrokenSeal`]; anyone else is a
/// publisher, whatever its body or attributes say.
pub(super) fn sender(
    record: &SqsMessage,
    own: Option<&str>,
    iot: Option<&str>,
    keys: Option<&SealKeys>,
) -> Sender {
    let copy_of_rules = own_attribute(record, own, FRONT_DOOR_ATTRIBUTE) == Some(FRONT_DOOR);
    if sent_by(record, iot) || copy_of_rules {
        return Sender::IotRule;
    }
    let Some(seal) = record.message_attributes.get(SEAL_ATTRIBUTE) else {
        return Sender::Publisher;
    };
    let body = record.body.as_deref().unwrap_or_default();
    match open(keys, body, seal.string_value.as_deref().unwrap_or_default()) {
        Ok(()) => Sender::IotRule,
        Err(broken) => Sender::BrokenSeal(broken),
    }
}

/// The seal attribute of a dead letter of `body`, which `sender` read as `from`: only a
/// message read as the rule's is sealed, and only when the ingest holds a key.
pub(super) fn seal_of(body: &str, from: Sender, keys: Option<&SealKeys>) -> Attributes {
    match (from, keys) {
        (Sender::IotRule, Some(keys)) => [(
            SEAL_ATTRIBUTE.to_owned(),
            ("String".to_owned(), keys.seal(body)),
        )]
        .into_iter()
        .collect(),
        _ => Attributes::new(),
    }
}

/// The value of the ingest's attribute `name` on `record`, when the ingest sent it.
fn own_attribute<'r>(record: &'r SqsMessage, own: Option<&str>, name: &str) -> Option<&'r str> {
    if !sent_by_ingest(record, own) {
        return None;
    }
    record
        .message_attributes
        .get(name)
        .and_then(|a| a.string_value.as_deref())
}

/// Whether this record is the ingest's copy of readings already stored once: never for
/// a device's message, whatever attributes it carries.
pub(super) fn holds_stored(record: &SqsMessage, own: Option<&str>) -> bool {
    own_attribute(record, own, STORED_ATTRIBUTE) == Some(STORED)
}

/// How often this record's message was requeued before: 0 for a device's message,
/// whatever attributes it carries.
pub(super) fn requeue_count(record: &SqsMessage, own: Option<&str>) -> u32 {
    own_attribute(record, own, REQUEUES_ATTRIBUTE)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The id of the message as the device sent it: a requeued copy's first id, else `id`.
pub(super) fn source_id(record: &SqsMessage, own: Option<&str>, id: &str) -> String {
    own_attribute(record, own, SOURCE_ID_ATTRIBUTE)
        .unwrap_or(id)
        .to_owned()
}

/// The sender's own string-valued attributes of `record`: every one but those under
/// [`OWN_ATTRIBUTE_PREFIX`] (the ingest sets its own on what it sends). Binary ones are
/// not carried.
pub(super) fn sender_attributes(record: &SqsMessage) -> Attributes {
    record
        .message_attributes
        .iter()
        .filter(|(name, _)| !name.starts_with(OWN_ATTRIBUTE_PREFIX))
        .filter_map(|(name, a)| {
            let data_type = a.data_type.clone()?;
            let value = a.string_value.clone()?;
            Some((name.clone(), (data_type, value)))
        })
        .collect()
}

/// The size a copy or letter of `record` may have: SQS's [`MAX_MESSAGE_BYTES`], or the
/// record's own size (body and attributes) when its queue took a larger one, since the
/// ingest's queues share their settings.
pub(super) fn message_budget(record: &SqsMessage) -> usize {
    let attributes: usize = record
        .message_attributes
        .iter()
        .map(|(name, a)| {
            name.len()
                + a.data_type.as_deref().map_or(0, str::len)
                + a.string_value.as_deref().map_or(0, str::len)
                + a.binary_value.as_ref().map_or(0, |b| b.0.len())
        })
        .sum();
    let body = record.body.as_deref().map_or(0, str::len);
    MAX_MESSAGE_BYTES.max(body + attributes)
}

/// What a copy says of its body beyond the requeue count and the first message id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CopyFlags {
    /// The body is still the IoT rule's envelope ([`FRONT_DOOR_ATTRIBUTE`]).
    pub(super) front_door: bool,
    /// The body holds readings already stored ([`STORED_ATTRIBUTE`]).
    pub(super) stored: bool,
}

/// A fresh copy of `record` holding `body`. It carries at most SQS's 10 attributes:
/// the ingest's first (the requeue count `requeues`, the first message id and its
/// `SentTimestamp` ([`write_order`]: a copy holds what was sent then, so its readings
/// keep that order, not the copy's own, which would make an old value newer than a
/// re-send that reached the queue between them), and the `flags`: the mark of a body
/// that is still the IoT rule's envelope, and of one holding stored readings),
/// then the sender's own string attributes in name order as far as they fit
/// (`store::queue::with_attributes`). So of a message that arrived with 9 or 10, the
/// last in name order are dropped (logged): a copy that SQS refuses would instead
/// leave the message to the redrive. A sender's `shardline.*` attributes are never
/// carried as if they were the ingest's.
pub(super) fn copy_of(
    record: &SqsMessage,
    own: Option<&str>,
    id: &str,
    body: String,
    requeues: u32,
    delay_secs: u32,
    flags: CopyFlags,
) -> Requeue {
    let mut ours: Attributes = [
        (
            SOURCE_ID_ATTRIBUTE,
            ("String".to_owned(), source_id(record, own, id)),
        ),
        (
            REQUEUES_ATTRIBUTE,
            ("Number".to_owned(), requeues.to_string()),
        ),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    let written = write_order(record, own);
    if !written.is_oldest() {
        ours.insert(
            SENT_ATTRIBUTE.to_owned(),
            ("Number".to_owned(), written.0.to_string()),
        );
    }
    if flags.front_door {
        ours.insert(
            FRONT_DOOR_ATTRIBUTE.to_owned(),
            ("String".to_owned(), FRONT_DOOR.to_owned()),
        );
    }
    if flags.stored {
        ours.insert(
            STORED_ATTRIBUTE.to_owned(),
            ("String".to_owned(), STORED.to_owned()),
        );
    }
    let (attributes, dropped) = with_attributes(
        ours,
        &sender_attributes(record),
        body.len(),
        message_budget(record),
    );
    if !dropped.is_empty() {
        tracing::info!(message_id = %id, ?dropped, "attributes not carried on the copy (SQS allows 10)");
    }
    Requeue {
        body,
        attributes,
        delay_secs: delay_secs.min(MAX_DELAY_SECS),
    }
}

/// When SQS received `record`: its `SentTimestamp` (milliseconds), which SQS sets and
/// no sender can.
pub(super) fn sent_at(record: &SqsMessage) -> Option<i64> {
    record.attributes.get("SentTimestamp")?.parse().ok()
}

/// The write order of `record`'s readings (`sharding::written`): when SQS took in the
/// message the device sent, its `SentTimestamp`; a requeued copy's first, which the
/// ingest carries ([`SENT_ATTRIBUTE`], read only on its own messages); the oldest
/// without one. Never a time the sender chose: a redelivery keeps it, a requeue too.
pub(super) fn write_order(record: &SqsMessage, own: Option<&str>) -> WriteOrder {
    own_attribute(record, own, SENT_ATTRIBUTE)
        .and_then(|t| t.parse().ok())
        .or_else(|| sent_at(record))
        .filter(|t| *t > 0)
        .map_or(WriteOrder::OLDEST, WriteOrder)
}
