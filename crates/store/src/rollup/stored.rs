//! How a derived item is stored within DynamoDB's limits, whatever its body: the
//! rows both adapters of [`RollupTable`](super::RollupTable) write and read, and the
//! item-size rule the memory fake refuses by.
//!
//! A body grows with what senders send (a device of many metric names, an hour of
//! thousands across the fleet), and DynamoDB refuses an item over 400 KB. So a body of
//! at most [`CHUNK_BYTES`] is stored in its item (the head, at `(PK, SK)`), and a longer
//! one is cut into chunks of at most [`CHUNK_BYTES`] each, stored under a partition of
//! their own, `chunk#{PK}#{SK}#{digest}`, sort keys `00000`, `00001`, ...; the head then
//! holds the body's `digest` (SHA-256, 32 hex digits) and how many `chunks` there are.
//!
//! Why this keeps every guarantee of one item:
//! - **Bounded.** A head holds its keys (a partition key and a sort key of at most a few
//!   hundred bytes: a device id is at most 128) and a few numbers; a chunk its keys and
//!   at most [`CHUNK_BYTES`] of body: both far under 400 KB.
//! - **Atomic.** The chunks are written first, the head last, with the head's condition
//!   (`put_if_version`, `put_if_newer`): a reader reads the head, then the chunks it
//!   names. Chunks of one digest hold one body, so two writers of different bodies
//!   never write the same chunk, and two of the same body write the same bytes; a
//!   writer whose head's condition fails leaves chunks no head names.
//! - **Never torn.** Chunks are never deleted by a writer (a head's chunks outlive it;
//!   they expire with the item's `ttl`), so a head read is always followed by its
//!   chunks. A replaced body's chunks stay until then: storage, not an answer.
//!   [`join`] checks the count and the digest all the same, and names the item when
//!   they do not hold.
//!
//! A row's body of at least [`PACK_FROM`] bytes is stored compressed by zlib, as binary
//! in [`PACKED_BODY`] in place of the text in [`BODY`], where that is smaller: a body
//! is JSON whose names and figures repeat (a device-hour's sixty minute cells, a map of
//! devices), so it takes a third to a fifth of its text and a write unit or two where
//! the text took several. The digest, the chunks and every comparison stay the text's:
//! only the stored row differs, and a reader inflates it (at most [`CHUNK_BYTES`], the
//! most a row holds) before anything else.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest as _, Sha256};

use super::RollupItem;
use crate::error::StoreError;
use crate::item::{PK, SK};

/// The most body bytes one stored row holds. A quarter of DynamoDB's 400 KB item
/// limit leaves room for any key, and keeps a read of one under 25 read units.
pub const CHUNK_BYTES: usize = 100 * 1024;

/// Attribute names of a stored row.
pub const VERSION: &str = "version";
pub const BODY: &str = "body";
pub const TTL: &str = "ttl";
pub const DIGEST: &str = "digest";
pub const CHUNKS: &str = "chunks";
/// A row's body compressed by zlib (B), in place of [`BODY`].
pub const PACKED_BODY: &str = "bz";

/// The shortest body stored compressed: a shorter one gains at most a few bytes, and
/// a late mark or a progress stays readable as text.
pub const PACK_FROM: usize = 256;

/// One stored row: a head (a derived item's key, version and its body or the digest
/// of its chunks) or one chunk of a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub pk: String,
    pub sk: String,
    /// A head's version; `None` on a chunk.
    pub version: Option<u64>,
    pub body: String,
    pub ttl: Option<i64>,
    /// A head whose body is in chunks: its digest and how many.
    pub chunked: Option<(String, u32)>,
}

/// The partition of the chunks of `(pk, sk)`'s body with `digest`.
pub fn chunk_pk(pk: &str, sk: &str, digest: &str) -> String {
    format!("chunk#{pk}#{sk}#{digest}")
}

/// Whether a partition key is a chunk partition's (no derived item's is).
pub fn is_chunk_pk(pk: &str) -> bool {
    pk.starts_with("chunk#")
}

/// A body's digest: the first 16 bytes of its SHA-256, in hex. Equal digests are
/// equal bodies, for any body a sender can make.
pub fn digest(body: &str) -> String {
    let hash = Sha256::digest(body.as_bytes());
    hash[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The rows of `item`: its head, and the chunks to write before it (none when its
/// body fits in the head).
pub fn rows(item: &RollupItem) -> (Row, Vec<Row>) {
    let mut head = Row {
        pk: item.pk.clone(),
        sk: item.sk.clone(),
        version: Some(item.version),
        body: String::new(),
        ttl: item.ttl,
        chunked: None,
    };
    if item.body.len() <= CHUNK_BYTES {
        head.body = item.body.clone();
        return (head, Vec::new());
    }
    let digest = digest(&item.body);
    let pk = chunk_pk(&item.pk, &item.sk, &digest);
    let chunks: Vec<Row> = cut(&item.body)
        .enumerate()
        .map(|(i, part)| Row {
            pk: pk.clone(),
            sk: format!("{i:05}"),
            version: None,
            body: part.to_owned(),
            ttl: item.ttl,
            chunked: None,
        })
        .collect();
    head.chunked = Some((digest, u32::try_from(chunks.len()).unwrap_or(u32::MAX)));
    (head, chunks)
}

/// `body` in pieces of at most [`CHUNK_BYTES`], each cut at a character boundary.
fn cut(body: &str) -> impl Iterator<Item = &str> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(CHUNK_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (part, tail) = rest.split_at(end);
        rest = tail;
        Some(part)
    })
}

/// The item of a head and, when its body is chunked, its chunks in sort-key order.
pub fn join(head: Row, chunks: &[Row]) -> Result<RollupItem, StoreError> {
    let version = head.version.ok_or_else(|| {
        StoreError::Malformed(format!(
            "derived item {}/{} without version",
            head.pk, head.sk
        ))
    })?;
    let body = match &head.chunked {
        None => head.body,
        Some((want, count)) => {
            let body: String = chunks.iter().map(|c| c.body.as_str()).collect();
            if chunks.len() != *count as usize || digest(&body) != *want {
                return Err(StoreError::Malformed(format!(
                    "derived item {}/{}: {} of its {count} chunks, digest {want}",
                    head.pk,
                    head.sk,
                    chunks.len()
                )));
            }
            body
        }
    };
    Ok(RollupItem {
        pk: head.pk,
        sk: head.sk,
        version,
        body,
        ttl: head.ttl,
    })
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A row as DynamoDB's attributes.
pub fn to_attributes(row: &Row) -> HashMap<String, AttributeValue> {
    let mut map = HashMap::from([(PK.to_owned(), s(&row.pk)), (SK.to_owned(), s(&row.sk))]);
    if let Some(version) = row.version {
        map.insert(VERSION.to_owned(), n(version));
    }
    if !row.body.is_empty() {
        match packed(&row.body) {
            Some(z) => map.insert(PACKED_BODY.to_owned(), AttributeValue::B(Blob::new(z))),
            None => map.insert(BODY.to_owned(), s(&row.body)),
        };
    }
    if let Some(ttl) = row.ttl {
        map.insert(TTL.to_owned(), n(ttl));
    }
    if let Some((digest, count)) = &row.chunked {
        map.insert(DIGEST.to_owned(), s(digest));
        map.insert(CHUNKS.to_owned(), n(count));
    }
    map
}

/// `body` compressed, where it is at least [`PACK_FROM`] bytes and that is smaller.
fn packed(body: &str) -> Option<Vec<u8>> {
    if body.len() < PACK_FROM {
        return None;
    }
    let packed = crate::zlib::compress(body.as_bytes());
    (packed.len() < body.len()).then_some(packed)
}

/// The body a row stored in [`PACKED_BODY`], or why it is none: it must inflate to at
/// most [`CHUNK_BYTES`] of UTF-8.
fn unpacked(z: &[u8]) -> Result<String, String> {
    let body = crate::zlib::inflate(z, CHUNK_BYTES)?;
    String::from_utf8(body).map_err(|e| format!("is not UTF-8: {e}"))
}

/// A stored row from DynamoDB's attributes.
pub fn from_attributes(mut map: HashMap<String, AttributeValue>) -> Result<Row, StoreError> {
    let packed = match map.remove(PACKED_BODY) {
        None => None,
        Some(AttributeValue::B(z)) => Some(z),
        Some(other) => {
            return Err(StoreError::Malformed(format!(
                "derived item attribute {PACKED_BODY}: {other:?}"
            )));
        }
    };
    let mut text = |name: &str| match map.remove(name) {
        Some(AttributeValue::S(v) | AttributeValue::N(v)) => Ok(Some(v)),
        None => Ok(None),
        Some(other) => Err(StoreError::Malformed(format!(
            "derived item attribute {name}: {other:?}"
        ))),
    };
    let pk = text(PK)?;
    let sk = text(SK)?;
    let version = text(VERSION)?;
    let body = text(BODY)?.unwrap_or_default();
    let ttl = text(TTL)?;
    let digest = text(DIGEST)?;
    let chunks = text(CHUNKS)?;
    let (Some(pk), Some(sk)) = (pk, sk) else {
        return Err(StoreError::Malformed(
            "derived item without its key".to_owned(),
        ));
    };
    let body = match packed {
        None => body,
        Some(_) if !body.is_empty() => {
            return Err(StoreError::Malformed(format!(
                "derived item {pk}/{sk} holds both {BODY} and {PACKED_BODY}"
            )));
        }
        Some(z) => unpacked(z.as_ref()).map_err(|e| {
            StoreError::Malformed(format!("derived item {pk}/{sk} {PACKED_BODY} {e}"))
        })?,
    };
    // Numbers as DynamoDB returns them; a late mark's nonce may be any u64.
    let number = |v: Option<String>, name: &str| {
        v.map(|v| {
            v.parse::<i128>().map_err(|e| {
                StoreError::Malformed(format!("derived item {pk}/{sk} {name} {v:?}: {e}"))
            })
        })
        .transpose()
    };
    let narrow = |v: Option<i128>, name: &str| {
        v.map(|v| {
            i64::try_from(v)
                .map_err(|e| StoreError::Malformed(format!("derived item {pk}/{sk} {name}: {e}")))
        })
        .transpose()
    };
    let version = number(version, VERSION)?
        .map(|v| {
            u64::try_from(v)
                .map_err(|e| StoreError::Malformed(format!("derived item {pk}/{sk} version: {e}")))
        })
        .transpose()?;
    let ttl = narrow(number(ttl, TTL)?, TTL)?;
    let chunked = match (digest, narrow(number(chunks, CHUNKS)?, CHUNKS)?) {
        (Some(digest), Some(count)) => Some((digest, u32::try_from(count).unwrap_or(0))),
        _ => None,
    };
    Ok(Row {
        version,
        body,
        ttl,
        chunked,
        pk,
        sk,
    })
}

/// A row's size by DynamoDB's rule (`store::size`): what the 400 KB limit is held to.
pub fn row_size(row: &Row) -> usize {
    crate::size::item_size(&to_attributes(row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::MAX_ITEM_BYTES;

    fn item(body: String) -> RollupItem {
        RollupItem {
            pk: "dh#0000000000000#3".to_owned(),
            sk: "d".repeat(128),
            version: 7,
            body,
            ttl: Some(1),
        }
    }

    #[test]
    fn a_body_of_any_length_is_stored_in_rows_within_the_item_limit() {
        for len in [
            0,
            10,
            CHUNK_BYTES,
            CHUNK_BYTES + 1,
            3 * CHUNK_BYTES + 17,
            5_000_000,
        ] {
            // Characters of two and three bytes, so cuts fall inside some.
            let body: String = "é€x".chars().cycle().take(len / 2).collect();
            let want = item(body);
            let (head, chunks) = rows(&want);
            for row in std::iter::once(&head).chain(&chunks) {
                assert!(
                    row_size(row) < MAX_ITEM_BYTES / 3,
                    "{} bytes",
                    row_size(row)
                );
                let back = from_attributes(to_attributes(row)).unwrap();
                assert_eq!(&back, row);
            }
            assert_eq!(head.chunked.is_some(), want.body.len() > CHUNK_BYTES);
            assert_eq!(join(head, &chunks).unwrap(), want);
        }
    }

    /// A body of many repeats is stored compressed, in a fraction of its text's bytes,
    /// and reads back as its text; a short one, or one compression does not shrink,
    /// stays text; a packed body that does not inflate to UTF-8 within a row's bound,
    /// or a row holding both, is refused by name.
    #[test]
    fn a_long_body_is_stored_compressed_and_reads_back_as_its_text() {
        let cells: String = (0..60)
            .map(|m| format!(r#"{{"m":{m},"n":6,"sum":"123.{m}","min":"20.5","max":"22.25"}},"#))
            .collect();
        let (head, _) = rows(&item(cells.clone()));
        let stored = to_attributes(&head);
        assert!(stored.contains_key(PACKED_BODY) && !stored.contains_key(BODY));
        assert!(
            row_size(&head) * 3 < cells.len(),
            "{} of {}",
            row_size(&head),
            cells.len()
        );
        assert_eq!(from_attributes(stored.clone()).unwrap(), head);
        let short = item("x".repeat(PACK_FROM - 1));
        assert!(to_attributes(&rows(&short).0).contains_key(BODY));
        // Printable bytes of no pattern: stored whichever way is smaller.
        for len in [PACK_FROM, 4 * PACK_FROM] {
            let noise: String = (0..len / 32)
                .flat_map(|i| Sha256::digest(i.to_string().as_bytes()))
                .map(|b| char::from(0x21 + b % 94))
                .collect();
            let (head, _) = rows(&item(noise.clone()));
            let mut as_text = to_attributes(&head);
            as_text.remove(PACKED_BODY);
            as_text.insert(BODY.to_owned(), s(&noise));
            assert!(row_size(&head) <= crate::size::item_size(&as_text));
            assert_eq!(from_attributes(to_attributes(&head)).unwrap(), head);
        }
        let refused = |value: AttributeValue, also_text: bool| {
            let mut bad = stored.clone();
            bad.insert(PACKED_BODY.to_owned(), value);
            if also_text {
                bad.insert(BODY.to_owned(), s("x"));
            }
            from_attributes(bad).unwrap_err().to_string()
        };
        let zlib = |bytes: &[u8]| AttributeValue::B(Blob::new(crate::zlib::compress(bytes)));
        assert!(
            refused(AttributeValue::B(Blob::new(vec![7, 7])), false).contains("does not inflate")
        );
        assert!(refused(zlib(&[0xff, 0xfe]), false).contains("UTF-8"));
        assert!(refused(zlib(&vec![b'x'; CHUNK_BYTES + 1]), false).contains("more than"));
        assert!(refused(s("x"), false).contains(PACKED_BODY));
        assert!(refused(zlib(b"{}"), true).contains("both"));
    }

    #[test]
    fn a_head_without_all_its_chunks_is_refused_by_name() {
        let (head, chunks) = rows(&item("x".repeat(2 * CHUNK_BYTES + 1)));
        assert_eq!(chunks.len(), 3);
        let err = join(head.clone(), &chunks[..2]).unwrap_err();
        assert!(err.to_string().contains("2 of its 3 chunks"), "{err}");
        let (_, other) = rows(&item("y".repeat(2 * CHUNK_BYTES + 1)));
        assert!(join(head, &other).is_err(), "another body's chunks");
    }
}
