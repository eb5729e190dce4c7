//! A block item (`shardline-block-v1`, docs/design-blocks.md): readings of one device
//! in one item, in DynamoDB's own types, columnar, so the console, PartiQL, exports
//! and Streams consumers read a block without this code: the format, its encoders (the
//! ingest's, [`BlockItem::marshal`], and `serde_dynamo`'s) and its decoder.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `PK` | S | the first member's partition key |
//! | `SK` | S | the first member's sort key in the blocks' lane (`b#` before the time), `#` and the digest of the members' identities (`sharding::block::block_sk`) |
//! | `device_id` | S | the device of every member |
//! | `event_id`, `ts`, `ts_ms` | S, S, N | the first member's, as a reading's item has them (the time index sorts a block by its first member) |
//! | `block` | N | the format's version, 1 |
//! | `n` | N | the number of members |
//! | `dt` | L of N | each member's `ts_ms` less the first's, in member order (by time, then event id) |
//! | `idp` | S | the prefix every member's event id shares (omitted when none): time-ordered and counter ids share most of theirs |
//! | `ids` | L of S | each member's event id after `idp`, never empty |
//! | `m` | M of L of N or NULL | per metric name, one number per member, `NULL` where the member has none |
//! | `tg` | M of L of S or NULL | per tag name, likewise; omitted when no member has tags |
//! | `ttl` | N | the last member's `ts` plus the retention, in epoch seconds |
//! | `w` | N | the first member's write order (`sharding::written`: its message's `SentTimestamp`), as a reading's item has it; omitted when the oldest (a block stored before it) |
//! | `dw` | L of N | each member's write order less the first's; omitted when every member shares the first's (one message's block) |
//!
//! The decoder trusts nothing it reads: every column must have one entry per member,
//! the members must be in order with distinct identities, each id must be an id, and
//! the offsets must keep every member within the format's window; a block that breaks
//! any rule is refused whole with the rule it broke, never half read.

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use item_size as rule;
use serde::{Deserialize, Serialize};
use sharding::block::{MAX_WINDOW_MS, block_sk};
use sharding::key::{ItemKey, validate_id};
use sharding::time::Timestamp;
use sharding::written::WriteOrder;

use crate::batch::Item;
use crate::decimal::Decimal;
use crate::error::StoreError;
use crate::item::{
    Encoded, ItemBuilder, Reading, ReadingItem, SizedValue, WRITTEN, expiry, number, number_of,
    oldest, string,
};

/// The format version a block item carries in `block`.
pub const BLOCK_FORMAT: u32 = 1;

/// A block item as stored. Written and read by [`BlockItem::to_item`] and
/// [`BlockItem::from_item`] only: it is no `serde` type, since `serde_dynamo` would
/// carry its numbers through a double.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockItem {
    pub pk: String,
    pub sk: String,
    pub device_id: String,
    pub event_id: String,
    pub ts: String,
    pub ts_ms: i64,
    pub block: u32,
    pub n: u32,
    pub dt: Vec<i64>,
    /// Empty when the members' ids share no prefix (the attribute is omitted).
    pub idp: String,
    pub ids: Vec<String>,
    pub m: BTreeMap<String, Vec<Option<Decimal>>>,
    /// Empty when no member has tags (the attribute is omitted).
    pub tg: BTreeMap<String, Vec<Option<String>>>,
    pub ttl: i64,
    /// The first member's write order; 0, the oldest, for a block stored without one.
    pub w: i64,
    /// Each member's write order less `w`; empty when every member's is `w`.
    pub dw: Vec<i64>,
}

/// A block item's attributes but `m`, as `serde_dynamo` writes and reads them.
#[derive(Serialize, Deserialize)]
struct Attributes<'a> {
    #[serde(rename = "PK")]
    pk: Cow<'a, str>,
    #[serde(rename = "SK")]
    sk: Cow<'a, str>,
    device_id: Cow<'a, str>,
    event_id: Cow<'a, str>,
    ts: Cow<'a, str>,
    ts_ms: i64,
    block: u32,
    n: u32,
    dt: Cow<'a, [i64]>,
    #[serde(default, skip_serializing_if = "str::is_empty")]
    idp: Cow<'a, str>,
    ids: Cow<'a, [String]>,
    #[serde(default, skip_serializing_if = "no_tags")]
    tg: Cow<'a, BTreeMap<String, Vec<Option<String>>>>,
    ttl: i64,
    #[serde(default, skip_serializing_if = "oldest")]
    w: i64,
    #[serde(default, skip_serializing_if = "<[i64]>::is_empty")]
    dw: Cow<'a, [i64]>,
}

fn no_tags(tg: &impl AsRef<BTreeMap<String, Vec<Option<String>>>>) -> bool {
    tg.as_ref().is_empty()
}

/// Why a set of readings cannot be a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error("a block needs at least one member")]
    Empty,
    #[error("a block's members must be of one device: {0:?} and {1:?}")]
    Devices(String, String),
    #[error("a block's members must be in order of (ts, event id), each once: {0:?} at {1}")]
    Order(String, i64),
}

impl BlockItem {
    /// The block of `members` (one device's readings, sorted by `(ts, event id)`, each
    /// identity once), stored under `first_key`, its first member's write key, and
    /// expiring `retention` after its last member.
    pub fn new(
        members: &[Reading],
        first_key: &ItemKey,
        retention: Duration,
    ) -> Result<Self, BlockError> {
        Self::at(members, &Self::key(members, first_key), retention)
    }

    /// The key of the block of `members` whose first member's write key is
    /// `first_key`: its partition key, and the sort key of [`block_sk`].
    #[must_use]
    pub fn key<R: Borrow<Reading>>(members: &[R], first_key: &ItemKey) -> ItemKey {
        ItemKey {
            pk: first_key.pk.clone(),
            sk: block_sk(
                &first_key.sk,
                members.iter().map(|r| {
                    let r = r.borrow();
                    (r.ts.as_millis(), r.event_id.as_str())
                }),
            ),
        }
    }

    /// The block of `members` stored under `key`, the block's own key
    /// ([`BlockItem::key`]).
    pub fn at(members: &[Reading], key: &ItemKey, retention: Duration) -> Result<Self, BlockError> {
        let (first, last) = ends(members)?;
        let first_ms = first.ts.as_millis();
        let n = members.len();
        let mut m: BTreeMap<String, Vec<Option<Decimal>>> = BTreeMap::new();
        let mut tg: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
        for (i, r) in members.iter().enumerate() {
            for (name, value) in &r.metrics {
                m.entry(name.clone()).or_insert_with(|| vec![None; n])[i] = Some(value.clone());
            }
            for (name, value) in &r.tags {
                tg.entry(name.clone()).or_insert_with(|| vec![None; n])[i] = Some(value.clone());
            }
        }
        let idp = ids_prefix(members.iter());
        Ok(Self {
            pk: key.pk.clone(),
            sk: key.sk.clone(),
            device_id: first.device_id.clone(),
            event_id: first.event_id.clone(),
            ts: first.ts.to_rfc3339(),
            ts_ms: first_ms,
            block: BLOCK_FORMAT,
            n: u32::try_from(n).unwrap_or(u32::MAX),
            dt: members
                .iter()
                .map(|r| r.ts.as_millis() - first_ms)
                .collect(),
            idp: idp.to_owned(),
            ids: members
                .iter()
                .map(|r| r.event_id[idp.len()..].to_owned())
                .collect(),
            m,
            tg,
            ttl: expiry(last.ts, retention),
            w: first.written.0,
            dw: if members.iter().all(|r| r.written == first.written) {
                Vec::new()
            } else {
                members
                    .iter()
                    .map(|r| r.written.0.saturating_sub(first.written.0))
                    .collect()
            },
        })
    }

    /// The SDK attribute map of the block of `members` under `key`, and its size: the
    /// same item as `BlockItem::at(members, key, retention)?.to_item()`, built directly
    /// and sized by DynamoDB's rule as it is built, as [`ReadingItem::marshal`] builds
    /// a reading's. The ingest encodes every block it writes with it, and measures a
    /// device's rate by it before the keys are known, so it borrows the members and
    /// clones no name per member; `tests/block.rs` holds it equal to `serde_dynamo`.
    pub fn marshal<R: Borrow<Reading>>(
        members: &[R],
        key: &ItemKey,
        retention: Duration,
    ) -> Result<Encoded, BlockError> {
        let (first, last) = ends(members)?;
        let first_ms = first.ts.as_millis();
        let members = || members.iter().map(Borrow::borrow);
        let metric_names: BTreeSet<&str> = members()
            .flat_map(|r| r.metrics.keys().map(String::as_str))
            .collect();
        let tag_names: BTreeSet<&str> = members()
            .flat_map(|r| r.tags.keys().map(String::as_str))
            .collect();
        let mut item = ItemBuilder::under(key, first, 17);
        item.put(BLOCK_ATTRIBUTE, number(BLOCK_FORMAT.to_string()));
        item.put("n", number(members().count().to_string()));
        item.put(
            "dt",
            list(members().map(|r| number((r.ts.as_millis() - first_ms).to_string()))),
        );
        put_ids(&mut item, members());
        item.put(
            "m",
            columns(&metric_names, |name| {
                list(members().map(|r| {
                    r.metrics
                        .get(name)
                        .map_or_else(null, |v| number(v.as_str().to_owned()))
                }))
            }),
        );
        if !tag_names.is_empty() {
            item.put(
                "tg",
                columns(&tag_names, |name| {
                    list(
                        members()
                            .map(|r| r.tags.get(name).map_or_else(null, |v| string(v.clone()))),
                    )
                }),
            );
        }
        item.put("ttl", number(expiry(last.ts, retention).to_string()));
        put_write_orders(&mut item, first.written, members());
        Ok(item.finish())
    }

    /// The SDK attribute map: through `serde_dynamo`, but for `m`, whose numbers are
    /// their canonical text.
    pub fn to_item(&self) -> Result<Item, StoreError> {
        let attributes = Attributes {
            pk: Cow::Borrowed(&self.pk),
            sk: Cow::Borrowed(&self.sk),
            device_id: Cow::Borrowed(&self.device_id),
            event_id: Cow::Borrowed(&self.event_id),
            ts: Cow::Borrowed(&self.ts),
            ts_ms: self.ts_ms,
            block: self.block,
            n: self.n,
            dt: Cow::Borrowed(&self.dt),
            idp: Cow::Borrowed(&self.idp),
            ids: Cow::Borrowed(&self.ids),
            tg: Cow::Borrowed(&self.tg),
            ttl: self.ttl,
            w: self.w,
            dw: Cow::Borrowed(&self.dw),
        };
        let mut item: Item =
            serde_dynamo::to_item(attributes).map_err(|e| StoreError::Malformed(e.to_string()))?;
        let column = |values: &[Option<Decimal>]| {
            AttributeValue::L(
                values
                    .iter()
                    .map(|v| {
                        v.as_ref().map_or(AttributeValue::Null(true), |v| {
                            AttributeValue::N(v.as_str().to_owned())
                        })
                    })
                    .collect(),
            )
        };
        let m = self
            .m
            .iter()
            .map(|(name, values)| (name.clone(), column(values)));
        item.insert("m".to_owned(), AttributeValue::M(m.collect()));
        Ok(item)
    }

    /// Back from an SDK attribute map, checked ([`BlockItem::readings`] reads it):
    /// through `serde_dynamo`, but for `m`.
    pub fn from_item(mut item: Item) -> Result<Self, StoreError> {
        let bad = |e: String| StoreError::Malformed(format!("block item: {e}"));
        let m = item
            .remove("m")
            .ok_or_else(|| bad("missing field `m`".to_owned()))?;
        let m = metric_columns(m).map_err(bad)?;
        let a: Attributes<'static> =
            serde_dynamo::from_item(item).map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            pk: a.pk.into_owned(),
            sk: a.sk.into_owned(),
            device_id: a.device_id.into_owned(),
            event_id: a.event_id.into_owned(),
            ts: a.ts.into_owned(),
            ts_ms: a.ts_ms,
            block: a.block,
            n: a.n,
            dt: a.dt.into_owned(),
            idp: a.idp.into_owned(),
            ids: a.ids.into_owned(),
            m,
            tg: a.tg.into_owned(),
            ttl: a.ttl,
            w: a.w,
            dw: a.dw.into_owned(),
        })
    }

    /// Its members as reading items, in member order, each under the block's partition
    /// key and the sort key it would have on its own (`{device}#{ts}#{event id}`), or
    /// the rule the block breaks.
    pub fn readings(&self) -> Result<Vec<ReadingItem>, StoreError> {
        let bad = |why: String| StoreError::Malformed(format!("block {}: {why}", self.sk));
        self.check_shape().map_err(bad)?;
        let n = self.ids.len();
        let mut out: Vec<ReadingItem> = Vec::with_capacity(n);
        for i in 0..n {
            let ts_ms = self.ts_ms + self.dt[i];
            let ts = Timestamp::from_millis(ts_ms).map_err(|e| bad(format!("dt[{i}]: {e}")))?;
            let event_id = self.event_id(i);
            if let Some(prev) = out.last()
                && (prev.ts_ms, &prev.event_id) >= (ts_ms, &event_id)
            {
                return Err(bad(format!("member {i} is not after member {}", i - 1)));
            }
            let written = match self.dw.get(i) {
                None => self.w,
                Some(dw) => self
                    .w
                    .checked_add(*dw)
                    .ok_or_else(|| bad(format!("dw[{i}] overflows")))?,
            };
            let rfc3339 = ts.to_rfc3339();
            out.push(ReadingItem {
                pk: self.pk.clone(),
                sk: format!("{}#{rfc3339}#{event_id}", self.device_id),
                device_id: self.device_id.clone(),
                event_id,
                ts: rfc3339,
                ts_ms,
                metrics: row(&self.m, i),
                tags: row(&self.tg, i),
                ttl: self.ttl,
                written: WriteOrder(written),
            });
        }
        Ok(out)
    }

    /// Member `i`'s event id: the shared prefix and its own rest.
    fn event_id(&self, i: usize) -> String {
        let mut id = String::with_capacity(self.idp.len() + self.ids[i].len());
        id.push_str(&self.idp);
        id.push_str(&self.ids[i]);
        id
    }

    /// Every rule of the format's shape: the version, one entry per member in every
    /// column, ids that are ids, offsets within the window, a first member that is
    /// the one the item names.
    fn check_shape(&self) -> Result<(), String> {
        if self.block != BLOCK_FORMAT {
            return Err(format!("format {} is not {BLOCK_FORMAT}", self.block));
        }
        let n = self.ids.len();
        if n == 0 || self.n as usize != n || self.dt.len() != n {
            return Err(format!(
                "n is {}, with {} ids and {} offsets",
                self.n,
                n,
                self.dt.len()
            ));
        }
        if !self.dw.is_empty() && self.dw.len() != n {
            return Err(format!("dw has {} entries, not {n}", self.dw.len()));
        }
        let short = |columns: usize| columns != n;
        if let Some((name, _)) = self.m.iter().find(|(_, c)| short(c.len())) {
            return Err(format!("metric {name:?} has not {n} entries"));
        }
        if let Some((name, _)) = self.tg.iter().find(|(_, c)| short(c.len())) {
            return Err(format!("tag {name:?} has not {n} entries"));
        }
        validate_id("device_id", &self.device_id).map_err(|e| e.to_string())?;
        if let Some(id) = (0..n)
            .map(|i| self.event_id(i))
            .find(|id| validate_id("event_id", id).is_err() || id.len() == self.idp.len())
        {
            return Err(format!(
                "event id {id:?} is not an id, or holds nothing after idp"
            ));
        }
        if self.dt[0] != 0 || self.event_id(0) != self.event_id {
            return Err("its first member is not the one it names".to_owned());
        }
        let window = i64::from(MAX_WINDOW_MS);
        if let Some(dt) = self.dt.iter().find(|dt| !(0..window).contains(*dt)) {
            return Err(format!("offset {dt} is outside 0..{window} ms"));
        }
        Ok(())
    }
}

/// A block's (or slab's) `m` back from its attribute: M of L of N or NULL.
pub(crate) fn metric_columns(
    attribute: AttributeValue,
) -> Result<BTreeMap<String, Vec<Option<Decimal>>>, String> {
    let AttributeValue::M(columns) = attribute else {
        return Err("m: not a map".to_owned());
    };
    columns
        .into_iter()
        .map(|(name, column)| {
            let AttributeValue::L(values) = column else {
                return Err(format!("m.{name}: not a list"));
            };
            let values = values
                .iter()
                .enumerate()
                .map(|(i, value)| match value {
                    AttributeValue::Null(true) => Ok(None),
                    value => number_of(value)
                        .map(Some)
                        .map_err(|e| format!("m.{name}[{i}]: {e}")),
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok((name, values))
        })
        .collect()
}

/// Member `i`'s values of `columns` (each checked to hold an entry per member): the
/// names it has a value of, with it.
pub(crate) fn row<V: Clone>(
    columns: &BTreeMap<String, Vec<Option<V>>>,
    i: usize,
) -> BTreeMap<String, V> {
    columns
        .iter()
        .filter_map(|(name, column)| column[i].clone().map(|v| (name.clone(), v)))
        .collect()
}

/// The prefix the members' event ids share, stopped a character short of the shortest
/// id, so that no member's rest is empty.
fn ids_prefix<'a>(mut members: impl Iterator<Item = &'a Reading>) -> &'a str {
    let Some(first) = members.next() else {
        return "";
    };
    let rest = members;
    let mut len = first.event_id.len();
    for r in rest {
        len = first
            .event_id
            .bytes()
            .zip(r.event_id.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
        len = len.min(r.event_id.len().saturating_sub(1));
    }
    len = len.min(first.event_id.len().saturating_sub(1));
    while !first.event_id.is_char_boundary(len) {
        len -= 1;
    }
    &first.event_id[..len]
}

/// The first and last of `members`, once they are checked to be one device's readings
/// in order of `(ts, event id)`, each identity once.
fn ends<R: Borrow<Reading>>(members: &[R]) -> Result<(&Reading, &Reading), BlockError> {
    let (first, last) = members
        .first()
        .zip(members.last())
        .ok_or(BlockError::Empty)?;
    let (first, last) = (first.borrow(), last.borrow());
    for pair in members.windows(2) {
        let (a, b) = (pair[0].borrow(), pair[1].borrow());
        if b.device_id != first.device_id {
            return Err(BlockError::Devices(
                first.device_id.clone(),
                b.device_id.clone(),
            ));
        }
        if (a.ts, &a.event_id) >= (b.ts, &b.event_id) {
            return Err(BlockError::Order(b.event_id.clone(), b.ts.as_millis()));
        }
    }
    Ok((first, last))
}

/// Puts `idp`, the prefix the event ids of `members` share (when they share one), and
/// `ids`, each one's rest after it.
pub(crate) fn put_ids<'a>(
    item: &mut ItemBuilder,
    members: impl Iterator<Item = &'a Reading> + Clone,
) {
    let idp = ids_prefix(members.clone());
    if !idp.is_empty() {
        item.put("idp", string(idp.to_owned()));
    }
    item.put(
        "ids",
        list(members.map(|r| string(r.event_id[idp.len()..].to_owned()))),
    );
}

/// Puts `w`, the write order `base` (unless the oldest), and, when some member of
/// `members` has another, `dw`, each one's less `base`: only an item of several
/// messages' readings pays a column of write orders.
pub(crate) fn put_write_orders<'a>(
    item: &mut ItemBuilder,
    base: WriteOrder,
    members: impl Iterator<Item = &'a Reading> + Clone,
) {
    if !base.is_oldest() {
        item.put(WRITTEN, number(base.0.to_string()));
    }
    if members.clone().any(|r| r.written != base) {
        item.put(
            OFFSETS_WRITTEN,
            list(members.map(|r| number(r.written.0.saturating_sub(base.0).to_string()))),
        );
    }
}

/// A `NULL`: a member's entry in a column it has no value in.
pub(crate) fn null() -> SizedValue {
    (AttributeValue::Null(true), rule::SCALAR_SIZE)
}

/// A list of `elements`, sized.
pub(crate) fn list(elements: impl Iterator<Item = SizedValue>) -> SizedValue {
    let mut list = Vec::with_capacity(elements.size_hint().0);
    let mut size = 0;
    for (value, value_size) in elements {
        size += 1 + value_size;
        list.push(value);
    }
    (AttributeValue::L(list), rule::list_size([]) + size)
}

/// A map of one column per name of `names`, sized.
fn columns(names: &BTreeSet<&str>, column: impl Fn(&str) -> SizedValue) -> SizedValue {
    let mut map = HashMap::with_capacity(names.len());
    let mut size = rule::MAP_OVERHEAD;
    for name in names {
        let (value, value_size) = column(name);
        size += rule::map_element_size(name, value_size);
        map.insert((*name).to_owned(), value);
    }
    (AttributeValue::M(map), size)
}

/// A block's column of its members' write orders, each less the first's (a slab's, less
/// the smallest).
pub(crate) const OFFSETS_WRITTEN: &str = "dw";

/// The attribute only a block item has: its format version.
pub const BLOCK_ATTRIBUTE: &str = "block";

/// Whether a stored item of the readings table is a block.
#[must_use]
pub fn is_block(item: &Item) -> bool {
    item.contains_key(BLOCK_ATTRIBUTE)
}

/// The readings a stored item of the readings table holds: a slab's or a run's members
/// (every device's), a block's, in order, each under the sort key it would have on its
/// own, none of a window's marker, or the reading the item is. The one way the
/// workspace reads a whole item back into readings (pages, scans, tallies); a block
/// that breaks the format is refused whole.
pub fn expand(item: Item) -> Result<Vec<ReadingItem>, StoreError> {
    if crate::slab::is_marker(&item) {
        Ok(Vec::new())
    } else if crate::slab::is_slab(&item) {
        crate::slab::decode(item)
    } else if is_block(&item) {
        BlockItem::from_item(item)?.readings()
    } else {
        Ok(vec![ReadingItem::from_item(item)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(ts_ms: i64, event: &str, metrics: &[(&str, f64)], tags: &[(&str, &str)]) -> Reading {
        Reading {
            device_id: "dev-1".into(),
            event_id: event.into(),
            ts: Timestamp::from_millis(ts_ms).expect("in range"),
            metrics: metrics
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Decimal::from_f64(*v).expect("stored")))
                .collect(),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            written: WriteOrder::OLDEST,
        }
    }

    const T: i64 = 1_782_086_400_000;

    fn key() -> ItemKey {
        ItemKey {
            pk: "3#2026-06-22T00".into(),
            sk: "dev-1#2026-06-22T00:00:00.000Z#e1".into(),
        }
    }

    #[test]
    fn members_come_back_with_their_own_metrics_and_tags() {
        let members = [
            reading(T, "e1", &[("t", 21.5), ("h", 40.0)], &[("site", "a")]),
            reading(T + 1_000, "e2", &[("t", -0.0)], &[]),
            reading(T + 1_000, "e3", &[("h", 1e-130)], &[("zone", "b")]),
        ];
        let block = BlockItem::new(&members, &key(), Duration::from_secs(86_400)).unwrap();
        assert_eq!(block.dt, [0, 1_000, 1_000]);
        let t: Vec<Option<&str>> = block.m["t"]
            .iter()
            .map(|v| v.as_ref().map(Decimal::as_str))
            .collect();
        assert_eq!(t, [Some("21.5"), Some("0"), None]);
        assert_eq!(
            block.ttl,
            (T + 1_000) / 1000 + 86_400,
            "expires with its last member"
        );
        let stored = BlockItem::from_item(block.to_item().unwrap()).unwrap();
        assert_eq!(stored, block);
        let back = stored.readings().unwrap();
        let as_readings: Vec<Reading> = back
            .into_iter()
            .map(|r| r.into_reading().unwrap())
            .collect();
        assert_eq!(as_readings, members);
    }

    #[test]
    fn readings_not_one_devices_in_order_are_no_block() {
        let a = reading(T, "e1", &[("t", 1.0)], &[]);
        let b = reading(T + 1, "e2", &[("t", 1.0)], &[]);
        let mut other = b.clone();
        other.device_id = "dev-2".into();
        let k = key();
        let day = Duration::from_secs(86_400);
        assert_eq!(BlockItem::new(&[], &k, day), Err(BlockError::Empty));
        assert!(matches!(
            BlockItem::new(&[a.clone(), other], &k, day),
            Err(BlockError::Devices(..))
        ));
        assert!(matches!(
            BlockItem::new(&[b.clone(), a.clone()], &k, day),
            Err(BlockError::Order(..))
        ));
        assert!(matches!(
            BlockItem::new(&[a.clone(), a], &k, day),
            Err(BlockError::Order(..))
        ));
    }

    #[test]
    fn ids_sharing_a_prefix_store_it_once_and_read_back_whole() {
        let ids = [
            "0190a1b2-c3d4-0009",
            "0190a1b2-c3d4-0010",
            "0190a1b2-c3d4-0011",
        ];
        let members: Vec<Reading> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| reading(T + i as i64, id, &[("t", 1.0)], &[]))
            .collect();
        let block = BlockItem::new(&members, &key(), Duration::from_secs(60)).unwrap();
        assert_eq!(block.idp, "0190a1b2-c3d4-00");
        assert_eq!(block.ids, ["09", "10", "11"]);
        let back: Vec<String> = block
            .readings()
            .unwrap()
            .into_iter()
            .map(|r| r.event_id)
            .collect();
        assert_eq!(back, ids);
        // One id the prefix of another: every rest keeps a character.
        let members = [reading(T, "e-1", &[], &[]), reading(T, "e-12", &[], &[])];
        let block = BlockItem::new(&members, &key(), Duration::from_secs(60)).unwrap();
        assert_eq!(
            (block.idp.as_str(), block.ids.clone()),
            ("e-", vec!["1".to_owned(), "12".to_owned()])
        );
        // No shared prefix: no idp attribute.
        let members = [reading(T, "a", &[], &[]), reading(T, "b", &[], &[])];
        let block = BlockItem::new(&members, &key(), Duration::from_secs(60)).unwrap();
        assert!(!block.to_item().unwrap().contains_key("idp"));
    }

    #[test]
    fn a_block_that_breaks_a_rule_is_refused_whole() {
        let members = [
            reading(T, "e1", &[("t", 1.0)], &[]),
            reading(T + 5, "e2", &[("t", 2.0)], &[]),
        ];
        let block = BlockItem::new(&members, &key(), Duration::from_secs(60)).unwrap();
        type Breaks = Box<dyn Fn(&mut BlockItem)>;
        let broken: [(&str, Breaks); 8] = [
            ("version", Box::new(|b| b.block = 2)),
            ("count", Box::new(|b| b.n = 3)),
            ("column", Box::new(|b| b.m.get_mut("t").unwrap().push(None))),
            (
                "order",
                Box::new(|b| {
                    b.dt[1] = 0;
                    b.ids[1] = "0".into();
                }),
            ),
            ("id", Box::new(|b| b.ids[1] = "#2".into())),
            ("empty rest", Box::new(|b| b.ids[1] = String::new())),
            ("window", Box::new(|b| b.dt[1] = i64::from(MAX_WINDOW_MS))),
            ("first", Box::new(|b| b.event_id = "e9".into())),
        ];
        for (rule, breaks) in broken {
            let mut b = block.clone();
            breaks(&mut b);
            assert!(b.readings().is_err(), "{rule}");
        }
        assert_eq!(block.readings().unwrap().len(), 2);
    }
}
