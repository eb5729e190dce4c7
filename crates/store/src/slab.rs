//! A slab or run item (`shardline-slab-v2`, docs/design-slabs.md): the readings of many
//! devices in one item, columnar, as a block (`store::block`) is, with a column of
//! devices, the columns compressed together: the format, its encoder ([`marshal`]), the
//! cut of sorted members into items by their encoded size ([`cut`]) and its decoder
//! ([`decode`]). Slabs and runs share it; only their keys differ (`sharding::slab`).
//!
//! The columns are a block's, in DynamoDB's own types (a plain item, format 1, holds
//! each as an attribute of its own; [`decode`] still reads one):
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `devs` | L of S | the distinct devices, in member order |
//! | `dn` | L of N | each device's number of members (their sum is `n`) |
//! | `t0` | N | the smallest member `ts_ms` |
//! | `dt` | L of N | each member's `ts_ms` less `t0`, under [`MAX_SPAN_MS`] |
//! | `idp`, `ids` | S, L of S | as a block's: the prefix every member's event id shares (omitted when none), each one's rest, never empty |
//! | `m` | M of L | per metric name, a column: one number per member, `NULL` where the member has none, or, for a name listed in `mi`, one number per member that has one |
//! | `mi` | M of L of N | per sparse metric column, the members (their places, from 0, ascending) its numbers are of; omitted when every column is dense |
//! | `tg`, `ti` | M of L, M of L of N | the same for tags; `tg` omitted when no member has tags |
//! | `w` | N | the smallest member write order (`sharding::written`); omitted when the oldest |
//! | `dw` | L of N | each member's write order less `w`; omitted when every member's is `w` |
//!
//! The item (format 2) holds its key, `slab` (N, 2), `n` (N, the number of members, 1
//! to [`MAX_MEMBERS`], in order of (device, ts, event id), each identity once), `ttl`
//! and `z` (B): the columns as one JSON object, its names sorted, a metric's number as
//! the string of its canonical decimal, every other number a JSON integer, compressed
//! by zlib ([`PACKED_ATTRIBUTE`]). A fleet's readings repeat themselves (devices,
//! event ids, metric names and values): compressed, a two-metric reading costs 10 to 20
//! bytes, where it costs 45 to 60 as attributes.
//!
//! A slab has no `ts_ms`, `ts`, `device_id` or `event_id`: the readings table's local
//! index on `ts_ms` projects every item that has one, and a slab in it would cost its
//! write a second time.
//!
//! A column is sparse when that is smaller than its `NULL`s (as attributes). A cut
//! ([`cut`]) sizes each item as it is encoded, so no item is over its limit and each
//! fills it.
//!
//! The decoder trusts nothing it reads: `z` must inflate to at most [`MAX_INFLATED`]
//! bytes of one JSON object of the columns alone, every column must hold one entry per
//! member, the devices must be ids, sorted and distinct, the members in order with
//! distinct identities, each id an id, the counts consistent and the item no larger
//! than DynamoDB stores; an item that breaks any rule is refused whole with the rule it
//! broke, never half read.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use item_size as rule;
use serde::Deserialize;
use sharding::key::validate_id;
use sharding::time::Timestamp;
use sharding::written::WriteOrder;

use crate::batch::Item;
use crate::block::{list, metric_columns, null, put_ids, put_write_orders, row};
use crate::decimal::Decimal;
use crate::error::StoreError;
use crate::item::{Encoded, ItemBuilder, Reading, ReadingItem, SizedValue, number, string};
use crate::size::MAX_ITEM_BYTES;

/// The attribute only a slab or run item has: its format version.
pub const SLAB_ATTRIBUTE: &str = "slab";

/// The format version a slab or run item carries in [`SLAB_ATTRIBUTE`]: its columns
/// packed into [`PACKED_ATTRIBUTE`].
pub const SLAB_FORMAT: u32 = 2;

/// The format version of an item whose columns are attributes of their own: read, no
/// longer written.
pub const SLAB_FORMAT_PLAIN: u32 = 1;

/// The attribute (B) a packed item holds its columns in, compressed.
pub const PACKED_ATTRIBUTE: &str = "z";

/// The most bytes an item's columns may inflate to: a cut never packs more, and a
/// reader refuses an item whose columns would.
pub const MAX_INFLATED: usize = 4 * 1024 * 1024;

/// The columns: every attribute of a plain item but its key, `slab`, `n` and `ttl`.
const COLUMNS: [&str; 12] = [
    "devs", "dn", "dt", "dw", "idp", "ids", "m", "mi", "t0", "tg", "ti", "w",
];

/// The columns whose values are strings; every other column's are numbers.
const TEXT_COLUMNS: [&str; 4] = ["devs", "idp", "ids", "tg"];

/// The column whose numbers are decimals, packed as their text; every other column's
/// numbers are integers, packed as JSON integers.
const DECIMAL_COLUMN: &str = "m";

/// The most members an item holds: far more than a 400 KB item can, and few enough
/// that a count or a member's place is a number of at most 5 digits.
pub const MAX_MEMBERS: usize = 99_999;

/// How far apart an item's members' times may be: an hour, the longest window.
pub const MAX_SPAN_MS: i64 = 3_600_000;

/// Why a set of readings cannot be a slab.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlabError {
    #[error("a slab needs at least one member")]
    Empty,
    #[error("a slab holds at most {MAX_MEMBERS} members, not {0}")]
    TooMany(usize),
    #[error(
        "a slab's members must be in order of (device, ts, event id), each once: {device:?} {event_id:?} at {ts_ms}"
    )]
    Order {
        device: String,
        ts_ms: i64,
        event_id: String,
    },
    #[error("a slab's members must lie less than {MAX_SPAN_MS} ms apart, not {0} ms")]
    Span(i64),
}

/// Whether a stored item of the readings table is a slab or a run.
#[must_use]
pub fn is_slab(item: &Item) -> bool {
    item.contains_key(SLAB_ATTRIBUTE)
}

/// The attribute only a window's marker has (N, 1): the item a compaction writes in a
/// group's run partition once the window's runs are written
/// (`sharding::slab::marker_sk`), which holds no reading.
pub const MARKER_ATTRIBUTE: &str = "marker";

/// Whether a stored item of the readings table is a window's marker.
#[must_use]
pub fn is_marker(item: &Item) -> bool {
    item.contains_key(MARKER_ATTRIBUTE)
}

/// The marker item under `pk`, `sk`, expiring at `ttl` (epoch seconds): its key, its
/// [`MARKER_ATTRIBUTE`] and its `ttl`, no `ts_ms`, so the time index never holds it.
#[must_use]
pub fn marker(pk: &str, sk: &str, ttl: i64) -> Encoded {
    let mut builder = ItemBuilder::keyed(pk, sk, 4);
    builder.put(MARKER_ATTRIBUTE, number("1".to_owned()));
    builder.put("ttl", number(ttl.to_string()));
    builder.finish()
}

/// The SDK attribute map of the slab or run of `members` (sorted by (device, ts,
/// event id), each identity once) under `pk`, `sk`, expiring at `ttl` (epoch seconds),
/// its columns packed, and its size by DynamoDB's rule. The same members make the same
/// item, byte for byte.
pub fn marshal<R: Borrow<Reading>>(
    members: &[R],
    pk: &str,
    sk: &str,
    ttl: i64,
) -> Result<Encoded, SlabError> {
    Ok(encode(members, pk, sk, ttl)?.0)
}

/// [`marshal`]'s item and the bytes its columns inflate to.
fn encode<R: Borrow<Reading>>(
    members: &[R],
    pk: &str,
    sk: &str,
    ttl: i64,
) -> Result<(Encoded, usize), SlabError> {
    let members: Vec<&Reading> = members.iter().map(Borrow::borrow).collect();
    Ok(pack(plain(&members, pk, sk, ttl)?.item))
}

/// Cuts `members`, sorted by (device, ts, event id), each identity once, into items as
/// [`marshal`] makes them under keys of at most `key_lens` (partition, sort) bytes:
/// contiguous ranges, in order, covering every member once, each item at most
/// `max_bytes` by DynamoDB's rule (and its columns at most [`MAX_INFLATED`]) and as
/// full as that allows. A member too large for an item with another is an item of its
/// own. Each item is sized as it is encoded: the longest range that fits is found by
/// doubling, then halving, from one member. The cut depends on the members alone, so
/// the same members are cut the same way.
pub fn cut<R: Borrow<Reading>>(
    members: &[R],
    max_bytes: usize,
    (pk_len, sk_len): (usize, usize),
) -> Result<Vec<Range<usize>>, SlabError> {
    let (pk, sk) = ("p".repeat(pk_len), "s".repeat(sk_len));
    // An item's size and the bytes its columns inflate to.
    let measure = |range: Range<usize>| -> Result<(usize, usize), SlabError> {
        let (encoded, inflated) = encode(&members[range], &pk, &sk, i64::MIN)?;
        Ok((encoded.size, inflated))
    };
    let fits = |(size, inflated): (usize, usize)| size <= max_bytes && inflated <= MAX_INFLATED;
    let mut items = Vec::new();
    let mut start = 0;
    while start < members.len() {
        let last = members.len().min(start.saturating_add(MAX_MEMBERS));
        // `good` fits (one member always goes); `bad`, when known, does not.
        let (mut good, mut bad) = (start + 1, None);
        let mut step = 1;
        while good < last && bad.is_none() {
            let probe = last.min(good + step);
            if fits(measure(start..probe)?) {
                good = probe;
                step = step.saturating_mul(2);
            } else {
                bad = Some(probe);
            }
        }
        if let Some(mut bad) = bad {
            while bad - good > 1 {
                let mid = good + (bad - good) / 2;
                if fits(measure(start..mid)?) {
                    good = mid;
                } else {
                    bad = mid;
                }
            }
        }
        items.push(start..good);
        start = good;
    }
    Ok(items)
}

/// The item of `item`'s columns packed: each taken out into one JSON object, names
/// sorted, compressed into [`PACKED_ATTRIBUTE`]; and the bytes of the JSON.
fn pack(mut item: Item) -> (Encoded, usize) {
    let mut columns = serde_json::Map::new();
    for name in COLUMNS {
        if let Some(value) = item.remove(name) {
            columns.insert(name.to_owned(), to_json(&value, name == DECIMAL_COLUMN));
        }
    }
    let text = serde_json::Value::Object(columns).to_string().into_bytes();
    let packed = crate::zlib::compress(&text);
    item.insert(
        SLAB_ATTRIBUTE.to_owned(),
        AttributeValue::N(SLAB_FORMAT.to_string()),
    );
    item.insert(
        PACKED_ATTRIBUTE.to_owned(),
        AttributeValue::B(Blob::new(packed)),
    );
    let size = crate::size::item_size(&item);
    (Encoded { item, size }, text.len())
}

/// A column's value as packed: strings as strings, a decimal as its text, an integer as
/// a JSON integer, lists and maps (names sorted) as arrays and objects.
fn to_json(value: &AttributeValue, decimal: bool) -> serde_json::Value {
    use serde_json::Value;
    match value {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) if !decimal => n
            .parse::<i64>()
            .map_or_else(|_| Value::String(n.clone()), Value::from),
        AttributeValue::N(n) => Value::String(n.clone()),
        AttributeValue::L(list) => Value::Array(list.iter().map(|v| to_json(v, decimal)).collect()),
        AttributeValue::M(map) => {
            let sorted: BTreeMap<&String, &AttributeValue> = map.iter().collect();
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(k, v)| (k.clone(), to_json(v, decimal)))
                    .collect(),
            )
        }
        // The plain encoder makes nothing else.
        _ => Value::Null,
    }
}

/// `item` (format 2) with its columns unpacked into attributes of their own, as a plain
/// item holds them, or the rule it breaks.
fn unpack(mut item: Item) -> Result<Item, String> {
    let Some(packed) = item.remove(PACKED_ATTRIBUTE) else {
        return Err(format!("format {SLAB_FORMAT} with no `{PACKED_ATTRIBUTE}`"));
    };
    let AttributeValue::B(packed) = packed else {
        return Err(format!("`{PACKED_ATTRIBUTE}` is not binary"));
    };
    if let Some(name) = COLUMNS.iter().find(|name| item.contains_key(**name)) {
        return Err(format!("`{name}` outside `{PACKED_ATTRIBUTE}`"));
    }
    let text = crate::zlib::inflate(packed.as_ref(), MAX_INFLATED)
        .map_err(|e| format!("`{PACKED_ATTRIBUTE}` {e}"))?;
    let columns: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&text)
        .map_err(|e| format!("`{PACKED_ATTRIBUTE}` is not a JSON object: {e}"))?;
    for (name, value) in columns {
        if !COLUMNS.contains(&name.as_str()) {
            return Err(format!(
                "`{PACKED_ATTRIBUTE}` holds unknown column `{name}`"
            ));
        }
        let value = from_json(value, TEXT_COLUMNS.contains(&name.as_str()))
            .map_err(|e| format!("{name}: {e}"))?;
        item.insert(name, value);
    }
    item.insert(
        SLAB_ATTRIBUTE.to_owned(),
        AttributeValue::N(SLAB_FORMAT_PLAIN.to_string()),
    );
    Ok(item)
}

/// A packed column's value back in DynamoDB's types: a string is a string in a text
/// column and a number's text in any other, a JSON number is a number only outside a
/// text column; the plain decoder then holds each to its column's rules.
fn from_json(value: serde_json::Value, text: bool) -> Result<AttributeValue, String> {
    use serde_json::Value;
    Ok(match value {
        Value::String(s) if text => AttributeValue::S(s),
        Value::String(n) => AttributeValue::N(n),
        Value::Number(n) if !text => AttributeValue::N(n.to_string()),
        Value::Null => AttributeValue::Null(true),
        Value::Array(list) => AttributeValue::L(
            list.into_iter()
                .map(|v| from_json(v, text))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => AttributeValue::M(
            map.into_iter()
                .map(|(k, v)| Ok((k, from_json(v, text)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Number(n) => return Err(format!("number {n} where a string belongs")),
        Value::Bool(b) => return Err(format!("{b}, which is no value of a column")),
    })
}

/// The item of `members` with every column an attribute of its own (format 1), sized.
fn plain(members: &[&Reading], pk: &str, sk: &str, ttl: i64) -> Result<Encoded, SlabError> {
    let (t0, w) = check_members(members)?;
    let devices = device_counts(members);
    let mut item = ItemBuilder::keyed(pk, sk, 17);
    item.put(SLAB_ATTRIBUTE, number(SLAB_FORMAT_PLAIN.to_string()));
    item.put("n", number(members.len().to_string()));
    item.put(
        "devs",
        list(devices.iter().map(|(d, _)| string((*d).to_owned()))),
    );
    item.put(
        "dn",
        list(devices.iter().map(|(_, count)| number(count.to_string()))),
    );
    item.put("t0", number(t0.to_string()));
    item.put(
        "dt",
        list(
            members
                .iter()
                .map(|r| number((r.ts.as_millis() - t0).to_string())),
        ),
    );
    put_ids(&mut item, members.iter().copied());
    let (m, mi) = columns(members, |r| {
        r.metrics
            .iter()
            .map(|(name, v)| (name.as_str(), number(v.as_str().to_owned())))
            .collect()
    });
    // Every item has its `m`, as a block has, even of members without a metric.
    item.put(
        "m",
        m.unwrap_or_else(|| (AttributeValue::M(HashMap::new()), rule::MAP_OVERHEAD)),
    );
    let (tg, ti) = columns(members, |r| {
        r.tags
            .iter()
            .map(|(name, v)| (name.as_str(), string(v.clone())))
            .collect()
    });
    for (name, value) in [("mi", mi), ("tg", tg), ("ti", ti)] {
        if let Some(value) = value {
            item.put(name, value);
        }
    }
    item.put("ttl", number(ttl.to_string()));
    put_write_orders(&mut item, w, members.iter().copied());
    Ok(item.finish())
}

/// The smallest time and write order of `members`, once they are checked to be sorted
/// by (device, ts, event id), each identity once, and few and close enough for an item.
fn check_members(members: &[&Reading]) -> Result<(i64, WriteOrder), SlabError> {
    if members.is_empty() {
        return Err(SlabError::Empty);
    }
    if members.len() > MAX_MEMBERS {
        return Err(SlabError::TooMany(members.len()));
    }
    if let Some(pair) = members
        .windows(2)
        .find(|pair| identity(pair[0]) >= identity(pair[1]))
    {
        let r = pair[1];
        return Err(SlabError::Order {
            device: r.device_id.clone(),
            ts_ms: r.ts.as_millis(),
            event_id: r.event_id.clone(),
        });
    }
    let times = members.iter().map(|r| r.ts.as_millis());
    let (t0, last) = (times.clone().min(), times.max());
    let (Some(t0), Some(last)) = (t0, last) else {
        return Err(SlabError::Empty);
    };
    if last - t0 >= MAX_SPAN_MS {
        return Err(SlabError::Span(last - t0));
    }
    let w = members.iter().map(|r| r.written).min().unwrap_or_default();
    Ok((t0, w))
}

/// A member's identity, in the order of an item's members.
fn identity(r: &Reading) -> (&str, Timestamp, &str) {
    (&r.device_id, r.ts, &r.event_id)
}

/// The distinct devices of `members` (sorted by device), each with its count.
fn device_counts<'a>(members: &[&'a Reading]) -> Vec<(&'a str, usize)> {
    let mut devices: Vec<(&str, usize)> = Vec::new();
    for r in members {
        match devices.last_mut() {
            Some((device, count)) if *device == r.device_id => *count += 1,
            _ => devices.push((&r.device_id, 1)),
        }
    }
    devices
}

/// The columns `values` gives the members (their metrics or tags, by name), as `m` or
/// `tg` holds them (`None`: no member has any), and the places of the members of each
/// sparse column, as `mi` or `ti` (`None`: every column is dense). A column is sparse
/// when its places cost less than its `NULL`s, so no column costs more than its values
/// and places.
fn columns<'a>(
    members: &[&'a Reading],
    values: impl Fn(&'a Reading) -> Vec<(&'a str, SizedValue)>,
) -> (Option<SizedValue>, Option<SizedValue>) {
    let mut cells: BTreeMap<&str, Vec<Option<SizedValue>>> = BTreeMap::new();
    for (i, r) in members.iter().enumerate() {
        for (name, value) in values(r) {
            cells
                .entry(name)
                .or_insert_with(|| vec![None; members.len()])[i] = Some(value);
        }
    }
    if cells.is_empty() {
        return (None, None);
    }
    let mut columns = (HashMap::with_capacity(cells.len()), rule::MAP_OVERHEAD);
    let mut places = (HashMap::new(), rule::MAP_OVERHEAD);
    for (name, column) in cells {
        let nulls = column.iter().filter(|cell| cell.is_none()).count();
        let place_list = || {
            list(
                column
                    .iter()
                    .enumerate()
                    .filter(|(_, cell)| cell.is_some())
                    .map(|(i, _)| number(i.to_string())),
            )
        };
        let sparse = (nulls > 0).then(place_list).filter(|(_, size)| {
            rule::map_element_size(name, *size) < nulls * (1 + rule::SCALAR_SIZE)
        });
        let (value, size) = if let Some((place_list, size)) = sparse {
            places.1 += rule::map_element_size(name, size);
            places.0.insert(name.to_owned(), place_list);
            list(column.into_iter().flatten())
        } else {
            list(column.into_iter().map(|cell| cell.unwrap_or_else(null)))
        };
        columns.1 += rule::map_element_size(name, size);
        columns.0.insert(name.to_owned(), value);
    }
    let map = |(map, size)| (AttributeValue::M(map), size);
    let places = (!places.0.is_empty()).then(|| map(places));
    (Some(map(columns)), places)
}

/// A slab's attributes but `m`, as `serde_dynamo` reads them; any other attribute
/// (a `ts_ms`, say) refuses the item.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Attributes {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    slab: u32,
    n: u32,
    devs: Vec<String>,
    dn: Vec<u32>,
    t0: i64,
    dt: Vec<i64>,
    #[serde(default)]
    idp: String,
    ids: Vec<String>,
    #[serde(default)]
    mi: BTreeMap<String, Vec<u32>>,
    #[serde(default)]
    tg: BTreeMap<String, Vec<Option<String>>>,
    #[serde(default)]
    ti: BTreeMap<String, Vec<u32>>,
    ttl: i64,
    #[serde(default)]
    w: i64,
    #[serde(default)]
    dw: Vec<i64>,
}

/// Every member of the slab or run `item`, of every device, in member order, each a
/// reading item under the item's partition key and the sort key it would have on its
/// own (`{device}#{ts}#{event id}`), with its write order; or the rule the item breaks.
pub fn decode(mut item: Item) -> Result<Vec<ReadingItem>, StoreError> {
    let bad = |e: String| StoreError::Malformed(format!("slab item: {e}"));
    let size = crate::size::item_size(&item);
    if size > MAX_ITEM_BYTES {
        return Err(bad(format!(
            "{size} bytes, more than DynamoDB stores ({MAX_ITEM_BYTES})"
        )));
    }
    let packed = item
        .get(SLAB_ATTRIBUTE)
        .is_some_and(|v| v.as_n().is_ok_and(|n| *n == SLAB_FORMAT.to_string()));
    if packed {
        item = unpack(item).map_err(bad)?;
    }
    let m = item
        .remove("m")
        .ok_or_else(|| bad("missing field `m`".to_owned()))?;
    let m = metric_columns(m).map_err(bad)?;
    let a: Attributes = serde_dynamo::from_item(item).map_err(|e| bad(e.to_string()))?;
    let sk = a.sk.clone();
    members(a, m).map_err(|e| StoreError::Malformed(format!("slab {sk}: {e}")))
}

/// The members of a slab read as `a` and `m`, once every rule holds.
fn members(
    mut a: Attributes,
    m: BTreeMap<String, Vec<Option<Decimal>>>,
) -> Result<Vec<ReadingItem>, String> {
    check_counts(&a)?;
    let n = a.ids.len();
    let m = dense(m, &a.mi, n).map_err(|e| format!("m: {e}"))?;
    let tg = dense(std::mem::take(&mut a.tg), &a.ti, n).map_err(|e| format!("tg: {e}"))?;
    let mut out: Vec<ReadingItem> = Vec::with_capacity(n);
    let devices = a
        .devs
        .iter()
        .zip(&a.dn)
        .flat_map(|(device, count)| std::iter::repeat_n(device, *count as usize));
    for (i, device) in devices.enumerate() {
        let ts_ms =
            a.t0.checked_add(a.dt[i])
                .ok_or_else(|| format!("t0 + dt[{i}] overflows"))?;
        let ts = Timestamp::from_millis(ts_ms).map_err(|e| format!("dt[{i}]: {e}"))?;
        let event_id = format!("{}{}", a.idp, a.ids[i]);
        if validate_id("event_id", &event_id).is_err() {
            return Err(format!("event id {event_id:?} is not an id"));
        }
        if let Some(prev) = out.last()
            && (&prev.device_id, prev.ts_ms, &prev.event_id) >= (device, ts_ms, &event_id)
        {
            return Err(format!("member {i} is not after member {}", i - 1));
        }
        let written = match a.dw.get(i) {
            None => a.w,
            Some(dw) => {
                a.w.checked_add(*dw)
                    .ok_or_else(|| format!("dw[{i}] overflows"))?
            }
        };
        let ts = ts.to_rfc3339();
        out.push(ReadingItem {
            pk: a.pk.clone(),
            sk: format!("{device}#{ts}#{event_id}"),
            device_id: device.clone(),
            event_id,
            ts,
            ts_ms,
            metrics: row(&m, i),
            tags: row(&tg, i),
            ttl: a.ttl,
            written: WriteOrder(written),
        });
    }
    Ok(out)
}

/// The rules of the item's counts and columns but `m` and `tg`: the version, a count of
/// members in bounds that every column and the devices' counts agree with, devices that
/// are ids, sorted and distinct, offsets in the span with `t0` the smallest time, `w`
/// the smallest write order, and rests of ids that are not empty.
fn check_counts(a: &Attributes) -> Result<(), String> {
    if a.slab != SLAB_FORMAT_PLAIN {
        return Err(format!(
            "format {} is not {SLAB_FORMAT_PLAIN} or {SLAB_FORMAT}",
            a.slab
        ));
    }
    let n = a.ids.len();
    if n == 0 || n > MAX_MEMBERS || a.n as usize != n || a.dt.len() != n {
        return Err(format!(
            "n is {}, with {n} ids and {} offsets (1 to {MAX_MEMBERS})",
            a.n,
            a.dt.len()
        ));
    }
    if !a.dw.is_empty() && a.dw.len() != n {
        return Err(format!("dw has {} entries, not {n}", a.dw.len()));
    }
    let counted: u64 = a.dn.iter().map(|c| u64::from(*c)).sum();
    if a.devs.is_empty() || a.dn.len() != a.devs.len() || a.dn.contains(&0) || counted != n as u64 {
        return Err(format!(
            "{} devices with {} counts summing to {counted}, not {n} members",
            a.devs.len(),
            a.dn.len()
        ));
    }
    for device in &a.devs {
        validate_id("device_id", device).map_err(|e| e.to_string())?;
    }
    if a.devs.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err("devs are not sorted and distinct".to_owned());
    }
    if let Some(dt) = a.dt.iter().find(|dt| !(0..MAX_SPAN_MS).contains(*dt)) {
        return Err(format!("offset {dt} is outside 0..{MAX_SPAN_MS} ms"));
    }
    if !a.dt.contains(&0) {
        return Err("t0 is not the smallest member time".to_owned());
    }
    if !a.dw.is_empty() && (a.dw.iter().any(|dw| *dw < 0) || !a.dw.contains(&0)) {
        return Err("w is not the smallest member write order".to_owned());
    }
    if a.ids.iter().any(String::is_empty) {
        return Err("an id's rest after idp is empty".to_owned());
    }
    Ok(())
}

/// `columns` with each sparse one (named in `places`) spread to one entry per member of
/// `n`, or the rule a column breaks: a dense one holds `n` entries, a sparse one a
/// value for each of its places, which ascend below `n`.
fn dense<V>(
    mut columns: BTreeMap<String, Vec<Option<V>>>,
    places: &BTreeMap<String, Vec<u32>>,
    n: usize,
) -> Result<BTreeMap<String, Vec<Option<V>>>, String> {
    for (name, at) in places {
        let column = columns
            .get_mut(name)
            .ok_or_else(|| format!("places of {name:?}, which is no column"))?;
        if at.len() != column.len() || column.iter().any(Option::is_none) {
            return Err(format!(
                "{name:?}: a sparse column of NULLs or not of its places"
            ));
        }
        if at.windows(2).any(|pair| pair[0] >= pair[1])
            || at.last().is_some_and(|i| *i as usize >= n)
        {
            return Err(format!("{name:?}: its places do not ascend below {n}"));
        }
        let mut spread: Vec<Option<V>> = std::iter::repeat_with(|| None).take(n).collect();
        for (i, value) in at.iter().zip(column.drain(..)) {
            spread[*i as usize] = value;
        }
        *column = spread;
    }
    match columns.iter().find(|(_, column)| column.len() != n) {
        Some((name, column)) => Err(format!("{name:?} has {} entries, not {n}", column.len())),
        None => Ok(columns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-06-22T01:00:00Z
    const T: i64 = 1_782_090_000_000;

    fn reading(device: &str, dt: i64, event: &str, metrics: &[(&str, &str)]) -> Reading {
        Reading {
            device_id: device.into(),
            event_id: event.into(),
            ts: Timestamp::from_millis(T + dt).expect("in range"),
            metrics: metrics
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.parse().expect("a number")))
                .collect(),
            tags: BTreeMap::new(),
            written: WriteOrder(T + 5_000),
        }
    }

    fn members() -> Vec<Reading> {
        let mut tagged = reading("dev-a", 1_000, "e-2", &[("t", "21.5")]);
        tagged.tags.insert("site".into(), "lab".into());
        tagged.written = WriteOrder(T + 6_250);
        vec![
            reading("dev-a", 0, "e-1", &[("t", "21.25"), ("h", "40")]),
            tagged,
            reading("dev-b", 500, "e-1", &[("h", "41")]),
        ]
    }

    const PK_: &str = "s#3#2026-06-22T01:00";

    /// The item of `members` with every column an attribute of its own (format 1).
    fn plain_of(members: &[Reading], sk: &str, ttl: i64) -> Encoded {
        let refs: Vec<&Reading> = members.iter().collect();
        plain(&refs, PK_, sk, ttl).unwrap()
    }

    #[test]
    fn every_member_comes_back_under_its_own_sort_key_with_its_write_order() {
        let members = members();
        let encoded = marshal(&members, PK_, "0123456789abcdef", 1_782_262_860).unwrap();
        assert_eq!(encoded.size, crate::size::item_size(&encoded.item));
        assert!(is_slab(&encoded.item));
        let mut names: Vec<&str> = encoded.item.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["PK", "SK", "n", "slab", "ttl", "z"]);
        let columns = plain_of(&members, "0123456789abcdef", 1_782_262_860);
        for absent in ["ts_ms", "ts", "device_id", "event_id", "mi", "ti"] {
            assert!(!columns.item.contains_key(absent), "{absent}");
        }
        assert_eq!(
            columns.item["devs"],
            AttributeValue::L(vec![
                AttributeValue::S("dev-a".into()),
                AttributeValue::S("dev-b".into())
            ])
        );
        let back = crate::block::expand(encoded.item).unwrap();
        let sks: Vec<&str> = back.iter().map(|r| r.sk.as_str()).collect();
        assert_eq!(
            sks,
            [
                "dev-a#2026-06-22T01:00:00.000Z#e-1",
                "dev-a#2026-06-22T01:00:01.000Z#e-2",
                "dev-b#2026-06-22T01:00:00.500Z#e-1"
            ]
        );
        assert!(back.iter().all(|r| r.pk == PK_ && r.ttl == 1_782_262_860));
        let readings: Vec<Reading> = back
            .into_iter()
            .map(|r| r.into_reading().unwrap())
            .collect();
        assert_eq!(readings, members);
    }

    #[test]
    fn members_not_sorted_each_once_and_close_are_no_slab() {
        let none: [Reading; 0] = [];
        assert_eq!(marshal(&none, PK_, "s", 0), Err(SlabError::Empty));
        let m = members();
        let swapped = [m[2].clone(), m[0].clone()];
        assert!(matches!(
            marshal(&swapped, PK_, "s", 0),
            Err(SlabError::Order { .. })
        ));
        let twice = [m[0].clone(), m[0].clone()];
        assert!(matches!(
            marshal(&twice, PK_, "s", 0),
            Err(SlabError::Order { .. })
        ));
        let far = [m[0].clone(), reading("dev-b", MAX_SPAN_MS, "e-1", &[])];
        assert_eq!(
            marshal(&far, PK_, "s", 0),
            Err(SlabError::Span(MAX_SPAN_MS))
        );
        let near = [m[0].clone(), reading("dev-b", MAX_SPAN_MS - 1, "e-1", &[])];
        assert!(marshal(&near, PK_, "s", 0).is_ok());
    }

    /// Forty devices of one reading, each with a metric of its own name and one they
    /// share: the shared column stays dense, each own one is sparse, and all read back.
    #[test]
    fn a_column_mostly_nulls_is_stored_sparse_and_reads_back() {
        let members: Vec<Reading> = (0..40)
            .map(|d| {
                let own = format!("m{d}");
                reading(&format!("dev-{d:02}"), d, "e", &[("t", "1"), (&own, "2")])
            })
            .collect();
        let encoded = marshal(&members, PK_, "s", 0).unwrap();
        assert_eq!(encoded.size, crate::size::item_size(&encoded.item));
        let columns = plain_of(&members, "s", 0);
        let AttributeValue::M(places) = &columns.item["mi"] else {
            panic!("no mi");
        };
        assert_eq!(places.len(), 40);
        assert!(!places.contains_key("t"));
        assert_eq!(
            places["m7"],
            AttributeValue::L(vec![AttributeValue::N("7".into())])
        );
        let back: Vec<Reading> = decode(encoded.item)
            .unwrap()
            .into_iter()
            .map(|r| r.into_reading().unwrap())
            .collect();
        assert_eq!(back, members);
    }

    /// A packed item whose `z` does not inflate, inflates past its bound or to anything
    /// but an object of the columns, or whose columns are also outside it, is refused
    /// whole, naming the rule; a rule of the columns is named as in a plain item.
    #[test]
    fn a_packed_item_that_breaks_a_rule_is_refused_whole_naming_it() {
        let item = marshal(&members(), PK_, "s", 0).unwrap().item;
        let zlib = |text: &[u8]| AttributeValue::B(Blob::new(crate::zlib::compress(text)));
        let bomb = zlib(&vec![b' '; MAX_INFLATED + 1]);
        let broken: [(&str, AttributeValue, &str); 8] = [
            ("z", AttributeValue::S("x".into()), "not binary"),
            (
                "z",
                AttributeValue::B(Blob::new(vec![1, 2, 3])),
                "does not inflate",
            ),
            ("z", bomb, "inflates to more than"),
            ("z", zlib(b"[1]"), "not a JSON object"),
            ("z", zlib(br#"{"PK":"x"}"#), "unknown column `PK`"),
            (
                "z",
                zlib(br#"{"devs":[1]}"#),
                "devs: number 1 where a string",
            ),
            ("z", zlib(br#"{"dt":[true]}"#), "dt: true"),
            ("dt", AttributeValue::L(vec![]), "`dt` outside `z`"),
        ];
        for (attribute, value, rule) in broken {
            let mut bad = item.clone();
            bad.insert(attribute.to_owned(), value);
            let err = decode(bad).expect_err(rule).to_string();
            assert!(err.contains(rule), "{rule}: {err}");
        }
        let mut missing = item.clone();
        missing.remove("z");
        assert!(decode(missing).unwrap_err().to_string().contains("no `z`"));
        let short = zlib(br#"{"devs":["dev-a","dev-b"],"dn":[2,1],"dt":[0,1000],"ids":["1","2","3"],"m":{},"t0":1}"#);
        let mut bad = item.clone();
        bad.insert("z".into(), short);
        assert!(decode(bad).unwrap_err().to_string().contains("offsets"));
        assert_eq!(decode(item).unwrap().len(), 3);
    }

    #[test]
    fn an_item_that_breaks_a_rule_is_refused_whole_naming_it() {
        let item = plain_of(&members(), "s", 0).item;
        let n = |v: &str| AttributeValue::N(v.into());
        let s = |v: &str| AttributeValue::S(v.into());
        let l = AttributeValue::L;
        let broken: [(&str, &str, AttributeValue); 16] = [
            ("slab", "format 3", n("3")),
            ("slab", "no `z`", n("2")),
            ("n", "n is 4", n("4")),
            ("dt", "offsets", l(vec![n("0"), n("1000")])),
            ("dn", "counts summing", l(vec![n("1"), n("1")])),
            ("dn", "counts summing", l(vec![n("3"), n("0")])),
            (
                "devs",
                "devs are not sorted",
                l(vec![s("dev-b"), s("dev-a")]),
            ),
            ("devs", "device_id", l(vec![s("dev#a"), s("dev-b")])),
            ("dt", "outside", l(vec![n("0"), n("3600000"), n("500")])),
            (
                "dt",
                "t0 is not the smallest",
                l(vec![n("1"), n("1000"), n("500")]),
            ),
            ("dt", "not after", l(vec![n("1000"), n("0"), n("500")])),
            (
                "dw",
                "smallest member write order",
                l(vec![n("1"), n("1250"), n("1")]),
            ),
            ("ids", "not an id", l(vec![s("1"), s("2#"), s("1")])),
            ("ts_ms", "unknown field", n("1782090000000")),
            ("t0", "outside the years", n(&i64::MAX.to_string())),
            (
                "mi",
                "no column",
                AttributeValue::M([("x".to_owned(), l(vec![n("0")]))].into()),
            ),
        ];
        for (attribute, rule, value) in broken {
            let mut bad = item.clone();
            bad.insert(attribute.to_owned(), value);
            let err = decode(bad).expect_err(rule).to_string();
            assert!(err.contains(rule), "{attribute}: {err}");
        }
        let mut late = item.clone();
        late.insert("t0".into(), n(&i64::MAX.to_string()));
        late.insert("dt".into(), l(vec![n("1000"), n("0"), n("500")]));
        assert!(decode(late).unwrap_err().to_string().contains("overflows"));
        let mut short = item.clone();
        let AttributeValue::M(m) = short.get_mut("m").unwrap() else {
            panic!("no m");
        };
        m.insert("t".into(), l(vec![n("1")]));
        assert!(
            decode(short)
                .unwrap_err()
                .to_string()
                .contains("entries, not 3")
        );
        assert_eq!(decode(item).unwrap().len(), 3);
    }
}
