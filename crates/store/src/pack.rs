//! How a writer packs readings into its writes (docs/design-blocks.md): where the table
//! layout in force at a reading packs blocks, the readings of one device, one table
//! epoch and one time bucket are cut into blocks by `sharding::block::group`; elsewhere
//! a reading is its own item, as before. A block of one member is that reading's own
//! item, byte for byte.
//!
//! The cut follows from the readings alone (their identities, timestamps and contents)
//! and the layout, never from the batch or the clock, so the same readings are packed
//! into the same blocks, under the same sort keys, and overwrite them: a message packed
//! alone, redelivered, rebuilds its blocks. The ingest packs one device's messages of a
//! batch together (`ingest::handler::pack`), and a message redelivered into another
//! batch can then be packed with other readings (docs/design-blocks.md).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use item_size as rule;
use sharding::block::{BLOCK_SK_EXTRA, BlockLayout, group};
use sharding::epoch::TableHistory;
use sharding::key::{ItemKey, MAX_ID_LEN};
use sharding::layout::Strategy;
use sharding::time::RFC3339_LEN;

use crate::block::BlockItem;
use crate::error::StoreError;
use crate::item::{BUCKET_PK_BOUND, Encoded, INTEGER_BOUND, PK, Reading, ReadingItem, SK, WRITTEN};

/// The longest a block's offset `dt` takes: under an hour in milliseconds, 7 digits.
const OFFSET_BOUND: usize = 5;

/// The scope a block is cut within: readings may share a block only when they share
/// their device, table epoch and bucket.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BlockScope<'a> {
    device: &'a str,
    epoch: usize,
    bucket_start: i64,
}

/// `readings` packed into writes: each entry is the indices, into `readings`, of the
/// members of one item, in order of `(ts, event id)`. Readings whose layout packs no
/// blocks are each an entry of one, in their input order, first; then the blocks, by
/// device, epoch and bucket. Within a scope a repeated identity `(ts, event id)` is
/// kept once, the copy written last (`sharding::written`; of one message's, the first
/// sent): its repeats are in no entry.
#[must_use]
pub fn pack(readings: &[Reading], table: &TableHistory) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut scopes: BTreeMap<BlockScope<'_>, (BlockLayout, Vec<usize>)> = BTreeMap::new();
    for (i, reading) in readings.iter().enumerate() {
        match block_scope(reading, table) {
            Some((scope, layout)) => scopes
                .entry(scope)
                .or_insert_with(|| (layout, Vec::new()))
                .1
                .push(i),
            None => units.push(vec![i]),
        }
    }
    let identity = |i: &usize| {
        let r = &readings[*i];
        (r.ts.as_millis(), r.event_id.as_str())
    };
    for (layout, mut scope) in scopes.into_values() {
        // Stable: of two readings with one identity, the one written last stays first
        // (`sharding::written`), and of one message's, the first sent.
        scope.sort_by(|a, b| {
            let written = |i: &usize| std::cmp::Reverse(readings[*i].written);
            identity(a)
                .cmp(&identity(b))
                .then_with(|| written(a).cmp(&written(b)))
        });
        scope.dedup_by(|a, b| identity(a) == identity(b));
        let members: Vec<&Reading> = scope.iter().map(|&i| &readings[i]).collect();
        let bound = BlockBound::of(&members);
        for cut in group(
            &members,
            &layout,
            bound.overhead,
            |r| r.ts.as_millis(),
            |r| bound.member(r),
        ) {
            units.push(scope[cut].to_vec());
        }
    }
    units
}

/// The item of `members` (an entry of [`pack`]), encoded before it is keyed: under a
/// placeholder key as long as the longest any fan-out gives it (a raise lengthens only
/// the partition key, and the sort key is the longest form, `{entity}#{ts}#{event_id}`,
/// a block's with its lane and digest). Its size bounds the item as stored under any
/// key, so a writer measures a device's rate by it before the keys are known: the
/// block's own size, not [`BlockBound`]'s, which assumes every id and number at its
/// longest and would count a block of 50 short readings three times over. [`with_key`]
/// then sets the real key: each item is encoded once.
pub fn encode_unkeyed<R: Borrow<Reading>>(
    members: &[R],
    retention: Duration,
) -> Result<Encoded, StoreError> {
    let first = members
        .first()
        .ok_or_else(|| StoreError::Malformed("a write of no reading".to_owned()))?
        .borrow();
    let extra = if members.len() > 1 { BLOCK_SK_EXTRA } else { 0 };
    // A key is sized by its length alone.
    let placeholder = ItemKey {
        pk: "#".repeat(BUCKET_PK_BOUND.max(first.device_id.len() + 11)),
        sk: "#".repeat(first.device_id.len() + 1 + RFC3339_LEN + 1 + first.event_id.len() + extra),
    };
    match members {
        [single] => Ok(ReadingItem::marshal(
            single.borrow(),
            &placeholder,
            retention,
        )),
        _ => BlockItem::marshal(members, &placeholder, retention)
            .map_err(|e| StoreError::Malformed(e.to_string())),
    }
}

/// `encoded` (from [`encode_unkeyed`]) under `key`, from [`item_key`]: the item
/// [`encode`] makes of the same members under that key, without encoding it again.
#[must_use]
pub fn with_key(mut encoded: Encoded, key: &ItemKey) -> Encoded {
    for (name, value) in [(PK, &key.pk), (SK, &key.sk)] {
        match encoded.item.get_mut(name) {
            Some(AttributeValue::S(old)) => {
                encoded.size = encoded.size - rule::string_size(old) + rule::string_size(value);
                old.clone_from(value);
            }
            _ => {
                encoded.size += rule::attribute_size(name, rule::string_size(value));
                encoded
                    .item
                    .insert(name.to_owned(), AttributeValue::S(value.clone()));
            }
        }
    }
    encoded
}

/// Whether any epoch of `table` packs blocks.
#[must_use]
pub fn packs_blocks(table: &TableHistory) -> bool {
    table.epochs().iter().any(|e| e.value.blocks.is_some())
}

/// `readings` taken into the entries of `units` (what [`pack`] made of them).
#[must_use]
pub fn take(readings: Vec<Reading>, units: &[Vec<usize>]) -> Vec<Vec<Reading>> {
    let mut slots: Vec<Option<Reading>> = readings.into_iter().map(Some).collect();
    units
        .iter()
        .map(|unit| {
            unit.iter()
                .filter_map(|&i| slots.get_mut(i)?.take())
                .collect()
        })
        .collect()
}

/// The block scope of `reading`, and how its layout packs it, where it does.
fn block_scope<'a>(
    reading: &'a Reading,
    table: &TableHistory,
) -> Option<(BlockScope<'a>, BlockLayout)> {
    let layout = table.at(reading.ts);
    let blocks = layout.blocks?;
    let epoch = table
        .epochs()
        .iter()
        .rposition(|e| e.effective_from <= reading.ts)
        .unwrap_or(0);
    let bucket_start = match &layout.strategy {
        Strategy::TimeBucket { bucket, .. } => bucket.start(reading.ts).as_millis(),
        _ => i64::MIN,
    };
    Some((
        BlockScope {
            device: &reading.device_id,
            epoch,
            bucket_start,
        },
        blocks,
    ))
}

/// An upper bound of a block's size over one block scope: what the block costs with no
/// member, and what each member adds, with every metric and tag name of the scope a
/// column (a member lacking one adds a `NULL`, 1 byte). A block of some of the
/// scope's members is never larger than the bound says.
struct BlockBound {
    overhead: usize,
    metric_names: usize,
    tags: Vec<String>,
    /// What a member's entry in `dw` takes at most: nothing when the scope's readings
    /// share one write order (one message's), so no block of them has the column.
    written: usize,
}

impl BlockBound {
    fn of(scope: &[&Reading]) -> Self {
        let metrics: BTreeSet<&str> = scope
            .iter()
            .flat_map(|r| r.metrics.keys().map(String::as_str))
            .collect();
        let tags: BTreeSet<&str> = scope
            .iter()
            .flat_map(|r| r.tags.keys().map(String::as_str))
            .collect();
        let device = scope.first().map_or(0, |r| r.device_id.len());
        let orders = scope.iter().map(|r| r.written.0);
        let spread = orders.clone().max().unwrap_or(0) - orders.min().unwrap_or(0);
        // An offset is at most the spread either way: its size is that of `-spread`.
        let written = (spread > 0).then(|| 1 + rule::number_size(&(-spread).to_string()));
        let first_sk = device + 1 + RFC3339_LEN + 1 + MAX_ID_LEN + BLOCK_SK_EXTRA;
        let columns = |names: &BTreeSet<&str>| {
            rule::MAP_OVERHEAD
                + names
                    .iter()
                    .map(|name| rule::map_element_size(name, rule::list_size([])))
                    .sum::<usize>()
        };
        let overhead = rule::item_size([
            (PK, BUCKET_PK_BOUND.max(device + 11)),
            (SK, first_sk),
            ("device_id", device),
            ("event_id", MAX_ID_LEN),
            ("ts", RFC3339_LEN),
            ("ts_ms", INTEGER_BOUND),
            ("block", INTEGER_BOUND),
            ("n", INTEGER_BOUND),
            ("dt", rule::list_size([])),
            ("ids", rule::list_size([])),
            ("m", columns(&metrics)),
            ("tg", columns(&tags)),
            ("ttl", INTEGER_BOUND),
            (WRITTEN, INTEGER_BOUND),
            ("dw", written.map_or(0, |_| rule::list_size([]))),
        ]);
        Self {
            overhead,
            metric_names: metrics.len(),
            tags: tags.into_iter().map(str::to_owned).collect(),
            written: written.unwrap_or(0),
        }
    }

    /// What `r` adds to a block: its offset, its id, and an entry in every column (its
    /// number, or a NULL in a column of a metric it has not).
    fn member(&self, r: &Reading) -> usize {
        let tags: usize = self
            .tags
            .iter()
            .map(|name| 1 + r.tags.get(name).map_or(rule::SCALAR_SIZE, String::len))
            .sum();
        let metrics: usize = r
            .metrics
            .values()
            .map(|v| 1 + v.stored_size())
            .sum::<usize>()
            + self.metric_names.saturating_sub(r.metrics.len()) * (1 + rule::SCALAR_SIZE);
        (1 + OFFSET_BOUND) + (1 + r.event_id.len()) + metrics + tags + self.written
    }
}

/// The key of the item of `members` (an entry of [`pack`]) whose first member's write
/// key is `first_key`: that key when the member is alone, else its block's
/// ([`BlockItem::key`]).
#[must_use]
pub fn item_key(members: &[Reading], first_key: &ItemKey) -> ItemKey {
    match members {
        [_] => first_key.clone(),
        _ => BlockItem::key(members, first_key),
    }
}

/// The item of `members` (an entry of [`pack`]) under `key`, from [`item_key`]: that
/// reading's own item when it is alone, else their block.
pub fn encode(
    members: &[Reading],
    key: &ItemKey,
    retention: Duration,
) -> Result<Encoded, StoreError> {
    match members {
        [single] => Ok(ReadingItem::marshal(single, key, retention)),
        _ => BlockItem::marshal(members, key, retention)
            .map_err(|e| StoreError::Malformed(e.to_string())),
    }
}
