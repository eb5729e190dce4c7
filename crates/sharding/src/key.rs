//! Write keys and point-lookup keys, and the rules of the names a key is made of: ids
//! ([`validate_id`]) and metric names ([`is_metric_name`]), each written once for the
//! ingest, which refuses what breaks them, and the query, which refuses to look for it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::epoch::{FanoutHistory, TableHistory};
use crate::hash::shard_index;
use crate::layout::{Layout, Strategy};
use crate::time::{RFC3339_LEN, Timestamp};

/// Longest accepted entity or event id, in bytes (every accepted character is one
/// byte). Keeps every key far below DynamoDB's 2,048-byte partition key and 1,024-byte
/// sort key limits.
pub const MAX_ID_LEN: usize = 128;

/// Longest metric name, in bytes.
pub const MAX_METRIC_NAME: usize = 64;

/// Separator between key components; never allowed inside one.
pub const SEPARATOR: char = '#';

/// Name under which `Calculated { attribute }` hashes the reading's event id.
pub const EVENT_ID_ATTRIBUTE: &str = "event_id";

/// Name under which `Calculated { attribute }` hashes the reading's entity (its device).
pub const ENTITY_ATTRIBUTE: &str = "device_id";

/// Whether `name` is a metric name: 1..=[`MAX_METRIC_NAME`] bytes of `[A-Za-z0-9_]`. A
/// metric name is an attribute name inside the stored item's `metrics` map.
#[must_use]
pub fn is_metric_name(name: &str) -> bool {
    (1..=MAX_METRIC_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Why no key could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// An empty id.
    #[error("{field} is empty")]
    Empty {
        /// `entity` or `event_id`.
        field: &'static str,
    },
    /// An id containing the key separator `#`.
    #[error("{field} contains the key separator '#'")]
    Separator {
        /// `entity` or `event_id`.
        field: &'static str,
    },
    /// An id with a character outside `[A-Za-z0-9._:-]`.
    #[error("{field} contains {ch:?}; ids are limited to [A-Za-z0-9._:-]")]
    InvalidChar {
        /// `entity` or `event_id`.
        field: &'static str,
        /// The first refused character.
        ch: char,
    },
    /// An id longer than [`MAX_ID_LEN`] bytes.
    #[error("{field} is {len} bytes long; the limit is {MAX_ID_LEN}")]
    TooLong {
        /// `entity` or `event_id`.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A `Calculated` layout hashes an attribute the reading does not carry.
    #[error("the layout hashes attribute {attribute:?}, which the reading does not carry")]
    MissingAttribute {
        /// The attribute the layout names.
        attribute: String,
    },
}

impl KeyError {
    /// Every key error is caused by the input (never worth a retry).
    #[must_use]
    pub const fn is_invalid_input(&self) -> bool {
        true
    }
}

/// Checks an entity or event id: 1..=[`MAX_ID_LEN`] bytes of `[A-Za-z0-9._:-]`.
///
/// The charset keeps `#` out of ids (it separates key components) and keeps every id
/// byte below `~`, which read plans use as the upper bound after the last `#`.
pub fn validate_id(field: &'static str, value: &str) -> Result<(), KeyError> {
    // Every id of every ingested reading passes here twice: one pass over its bytes for
    // the common case, and the checks below only to name what is wrong.
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-');
    if (1..=MAX_ID_LEN).contains(&value.len()) && value.bytes().all(allowed) {
        return Ok(());
    }
    if value.is_empty() {
        return Err(KeyError::Empty { field });
    }
    if value.contains(SEPARATOR) {
        return Err(KeyError::Separator { field });
    }
    if let Some(ch) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(KeyError::InvalidChar { field, ch });
    }
    if value.len() > MAX_ID_LEN {
        return Err(KeyError::TooLong {
            field,
            len: value.len(),
        });
    }
    Ok(())
}

/// The identity of one reading, as far as keys are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadingRef<'a> {
    /// Device, sensor, log stream...
    pub entity: &'a str,
    /// Unique id of the reading (from the producer, stable across redeliveries).
    pub event_id: &'a str,
    /// The reading's own timestamp; it selects the epochs that shape the key.
    pub ts: Timestamp,
    /// The reading's tags: a `Calculated` layout on an attribute other than the entity
    /// or the event id hashes the tag of that name ([`ReadingRef::hashed`]).
    pub tags: &'a BTreeMap<String, String>,
}

/// No tags.
static NO_TAGS: BTreeMap<String, String> = BTreeMap::new();

impl<'a> ReadingRef<'a> {
    /// A reading without tags.
    #[must_use]
    pub fn new(entity: &'a str, event_id: &'a str, ts: Timestamp) -> Self {
        Self {
            entity,
            event_id,
            ts,
            tags: &NO_TAGS,
        }
    }

    /// The reading with `tags`.
    #[must_use]
    pub fn with_tags(self, tags: &'a BTreeMap<String, String>) -> Self {
        Self { tags, ..self }
    }

    /// The value a `Calculated { attribute }` layout hashes: the event id
    /// ([`EVENT_ID_ATTRIBUTE`]), the entity ([`ENTITY_ATTRIBUTE`]), or else the tag named
    /// `attribute`, if the reading carries it.
    #[must_use]
    pub fn hashed(&self, attribute: &str) -> Option<&'a str> {
        match attribute {
            EVENT_ID_ATTRIBUTE => Some(self.event_id),
            ENTITY_ATTRIBUTE => Some(self.entity),
            tag => self.tags.get(tag).map(String::as_str),
        }
    }
}

/// A reading's write key, with the fan-out it was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteKey {
    /// The key.
    pub key: ItemKey,
    /// The entity's fan-out the key was made with (the layout's default when the entity
    /// has none of its own).
    pub fanout: u32,
}

/// Primary key of one item.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemKey {
    /// Partition key (`PK`).
    pub pk: String,
    /// Sort key (`SK`).
    pub sk: String,
}

/// The key a writer at `now` gives a reading: the table layout in force at the
/// reading's own timestamp, and the entity's fan-out in force at its keying time
/// ([`crate::epoch::keying_time`]: the later of `now` and `ts`, at most
/// [`crate::epoch::REKEY_HORIZON`] after `ts`). A raise therefore re-keys every reading
/// not yet written, and readers still find it: fan-out keys nest.
pub fn write_key(
    reading: &ReadingRef<'_>,
    table: &TableHistory,
    fanout: &FanoutHistory,
    now: Timestamp,
) -> Result<WriteKey, KeyError> {
    let layout = table.at(reading.ts);
    let k = fanout_count(layout, fanout.for_write(reading.ts, now));
    Ok(WriteKey {
        key: key_for_layout(reading, layout, Some(k.get()))?,
        fanout: k.get(),
    })
}

/// The keys one known reading can be stored under (`GetItem` each until found): one per
/// fan-out a writer can have keyed it with, from the layout's default up to
/// [`FanoutHistory::read_fanout`] at its timestamp, the fan-out in force at its
/// timestamp first. `Calculated` on a tag also needs that tag in `reading.tags`.
pub fn point_keys(
    reading: &ReadingRef<'_>,
    table: &TableHistory,
    fanout: &FanoutHistory,
) -> Result<Vec<ItemKey>, KeyError> {
    let layout = table.at(reading.ts);
    let default = layout.default_fanout();
    let most_likely = fanout.at(reading.ts);
    let mut keys = vec![key_for_layout(reading, layout, most_likely)?];
    let lowest = match layout.strategy {
        // A time-bucket entity starts on its cold key (k = 1).
        Strategy::TimeBucket { .. } => 1,
        Strategy::Unsharded => return Ok(keys),
        Strategy::Random | Strategy::Calculated { .. } => default,
    };
    for k in lowest..=fanout.read_fanout(reading.ts, default) {
        let key = key_for_layout(reading, layout, Some(k))?;
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// The key of a reading under one layout and fan-out (`None` = the layout's default).
pub fn key_for_layout(
    reading: &ReadingRef<'_>,
    layout: &Layout,
    fanout: Option<u32>,
) -> Result<ItemKey, KeyError> {
    validate_id("entity", reading.entity)?;
    validate_id("event_id", reading.event_id)?;
    let ts = || reading.ts.to_rfc3339();
    let k = fanout_count(layout, fanout);
    match &layout.strategy {
        Strategy::Unsharded => Ok(ItemKey {
            pk: reading.entity.to_owned(),
            sk: plain_sk(&ts(), reading.event_id),
        }),
        Strategy::Random => {
            let r = shard_index(reading.event_id, k);
            Ok(ItemKey {
                pk: entity_pk(reading.entity, r),
                sk: plain_sk(&ts(), reading.event_id),
            })
        }
        Strategy::Calculated { attribute } => {
            let value = reading
                .hashed(attribute)
                .ok_or_else(|| KeyError::MissingAttribute {
                    attribute: attribute.clone(),
                })?;
            Ok(ItemKey {
                pk: entity_pk(reading.entity, shard_index(value, k)),
                sk: plain_sk(&ts(), reading.event_id),
            })
        }
        Strategy::TimeBucket { bucket, sub_shards } => {
            let s = shard_index(reading.entity, layout.shards);
            let (shard, dedicated) = if k.get() > 1 {
                let j = 1 + shard_index(reading.event_id, k);
                sub_shards.home(s, j, layout.shards)
            } else {
                (s, None)
            };
            // Built in place: this runs once per ingested reading.
            let mut pk = String::with_capacity(32);
            push_decimal(&mut pk, shard);
            if let Some(j) = dedicated {
                pk.push('.');
                push_decimal(&mut pk, j);
            }
            pk.push(SEPARATOR);
            bucket.write_label(reading.ts, &mut pk);
            let mut sk = String::with_capacity(
                reading.entity.len() + RFC3339_LEN + reading.event_id.len() + 2,
            );
            sk.push_str(reading.entity);
            sk.push(SEPARATOR);
            reading.ts.write_rfc3339(&mut sk);
            sk.push(SEPARATOR);
            sk.push_str(reading.event_id);
            Ok(ItemKey { pk, sk })
        }
    }
}

/// Appends `v` in decimal, as `Display` writes it, without the formatting machinery
/// (a shard number is written into every ingested reading's key).
fn push_decimal(out: &mut String, mut v: u32) {
    let mut digits = [b'0'; 10];
    let mut start = digits.len();
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + u8::try_from(v % 10).unwrap_or(0);
        start -= 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let text = digits.get(start..).unwrap_or_default();
    // ASCII digits only: always UTF-8.
    out.push_str(std::str::from_utf8(text).unwrap_or_default());
}

/// The number of partition keys of one entity under `layout` with fan-out `fanout`.
pub(crate) fn fanout_count(layout: &Layout, fanout: Option<u32>) -> NonZeroU32 {
    fanout
        .and_then(NonZeroU32::new)
        .or_else(|| NonZeroU32::new(layout.default_fanout()))
        .unwrap_or(NonZeroU32::MIN)
}

/// `{entity}#{r}`
pub(crate) fn entity_pk(entity: &str, r: u32) -> String {
    format!("{entity}#{r}")
}

/// `{s}#{label}` for a base shard, `{s}.{j}#{label}` for a dedicated sub-shard j.
pub(crate) fn bucket_pk(s: u32, sub: Option<u32>, label: &str) -> String {
    match sub {
        None => format!("{s}#{label}"),
        Some(j) => format!("{s}.{j}#{label}"),
    }
}

/// `{ts}#{event_id}`
fn plain_sk(ts: &str, event_id: &str) -> String {
    format!("{ts}#{event_id}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimals_are_written_as_display_writes_them() {
        for v in [0, 1, 9, 10, 63, 100, 4_096, 99_999, u32::MAX] {
            let mut out = String::from("x");
            super::push_decimal(&mut out, v);
            assert_eq!(out, format!("x{v}"));
        }
    }
}
