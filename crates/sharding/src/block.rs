//! Blocks (`shardline-block-v1`): readings of one device written as one item, so a
//! write unit carries many readings (docs/design-blocks.md). This module holds what is
//! pure about them: how a table's layout packs readings ([`BlockLayout`]), how a set of
//! readings is cut into blocks ([`group`]), and a block's sort key, which follows from
//! its members alone ([`block_sk`]).
//!
//! # Grouping
//! The members, sorted by `(ts, event id)` with every identity once, are cut greedily:
//! a block starts at the first member not yet placed and takes the members after it
//! while their timestamps stay within the window, the block's size within the byte cap
//! and its count within the count cap. The cut depends on the members alone (their
//! timestamps and sizes), never on the batch they came in or the time of the write, so
//! the same readings are cut the same way. Which readings are packed together is the
//! writer's choice: the ingest packs one device's messages of a batch together, so a
//! message redelivered into another batch can be cut with other readings.
//!
//! # The sort key
//! A block lives in a lane of its own in its entity's sort keys: its first member's sort
//! key with `b#` before the time, followed by `#` and the first 8 bytes, in hex, of the
//! SHA-256 of its members' identities in order
//! (`sensor-7#b#2026-06-22T01:00:00.000Z#e-0001#657a7e6975e64c22`). Each identity is
//! encoded as the member's `ts_ms` (8 bytes, big-endian, two's complement), the length
//! of its event id (1 byte; an id is at most 128 bytes) and the id's bytes. Two
//! different member sets never share a key, and a member set always gets the same one.
//! `b` sorts above every digit, so an entity's blocks sort after all its readings' own
//! items and apart from them: a read of a time range reads the readings' lane over the
//! range and the blocks' lane from a block window before it, and evaluates no item of
//! one reading outside the range.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::key::{MAX_ID_LEN, SEPARATOR};

/// The version of the block format and of its key's digest.
pub const BLOCK_VERSION: &str = "shardline-block-v1";

/// What a block's sort key has before the time, where its first member's has the time.
pub const BLOCK_LANE: &str = "b#";

/// What a block's sort key adds to its first member's: the lane and `#` with 16 hex
/// digits of digest.
pub const BLOCK_SK_EXTRA: usize = BLOCK_LANE.len() + 1 + 16;

/// How a table's layout packs one device's readings into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockLayout {
    /// A block's members lie in `[first, first + window_ms)`: what a range read reads
    /// back before its start, since a block that starts before a range can hold
    /// readings inside it.
    pub window_ms: u32,
    /// Most bytes of a block item, as the writer sizes it.
    pub max_bytes: u32,
    /// Most members of a block.
    pub max_readings: u32,
}

impl Default for BlockLayout {
    /// A minute, 16 KiB (16 write units), 1,000 readings: a message of up to 500
    /// readings of a device reporting up to a few times a second is one or a few
    /// blocks, and a read before a range reads back one minute of the device.
    fn default() -> Self {
        Self {
            window_ms: DEFAULT_WINDOW_SECS * 1000,
            max_bytes: 16 * 1024,
            max_readings: 1_000,
        }
    }
}

/// Why a block layout was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockLayoutError {
    #[error("block window_ms must be 1..={MAX_WINDOW_MS} (an hour), got {0}")]
    Window(u32),
    #[error("block max_bytes must be {MIN_BLOCK_BYTES}..={MAX_BLOCK_BYTES}, got {0}")]
    Bytes(u32),
    #[error("block max_readings must be at least 2, got {0}")]
    Readings(u32),
}

/// The longest block window: a bucket of an hour.
pub const MAX_WINDOW_MS: u32 = 3_600_000;
/// The block window a new table gets (`BLOCK_WINDOW_SECS`): a minute.
pub const DEFAULT_WINDOW_SECS: u32 = 60;
/// The smallest byte cap: one write unit.
pub const MIN_BLOCK_BYTES: u32 = 1024;
/// The largest byte cap, well under DynamoDB's 400 KB item.
pub const MAX_BLOCK_BYTES: u32 = 256 * 1024;

impl BlockLayout {
    /// The layout, if its bounds are sensible.
    pub fn checked(self) -> Result<Self, BlockLayoutError> {
        if !(1..=MAX_WINDOW_MS).contains(&self.window_ms) {
            return Err(BlockLayoutError::Window(self.window_ms));
        }
        if !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&self.max_bytes) {
            return Err(BlockLayoutError::Bytes(self.max_bytes));
        }
        if self.max_readings < 2 {
            return Err(BlockLayoutError::Readings(self.max_readings));
        }
        Ok(self)
    }
}

/// Cuts `members` into blocks: contiguous ranges, in order, covering every member once.
/// `members` must be sorted by `(ts, event id)`, each identity once; `ts_ms` gives a
/// member's timestamp, `bytes` what it adds to a block, and `overhead` what a block
/// costs with no member. A member too large for any block with another is a block of
/// its own.
pub fn group<M>(
    members: &[M],
    layout: &BlockLayout,
    overhead: usize,
    ts_ms: impl Fn(&M) -> i64,
    bytes: impl Fn(&M) -> usize,
) -> Vec<Range<usize>> {
    let window = i64::from(layout.window_ms);
    let max_bytes = layout.max_bytes as usize;
    let max_count = layout.max_readings as usize;
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < members.len() {
        let first_ts = ts_ms(&members[start]);
        let mut size = overhead + bytes(&members[start]);
        let mut end = start + 1;
        while end < members.len() && end - start < max_count {
            let next = &members[end];
            let grown = size + bytes(next);
            if ts_ms(next).saturating_sub(first_ts) >= window || grown > max_bytes {
                break;
            }
            size = grown;
            end += 1;
        }
        blocks.push(start..end);
        start = end;
    }
    blocks
}

/// A block's sort key: its first member's sort key `first_sk` (`{prefix}{ts}#{event
/// id}`, the prefix `{entity}#` or nothing) with the lane before the time, and the
/// digest of the members' identities `(ts_ms, event id)`, in order.
pub fn block_sk<'a>(first_sk: &str, members: impl IntoIterator<Item = (i64, &'a str)>) -> String {
    let mut hasher = Sha256::new();
    for (ts_ms, event_id) in members {
        hasher.update(ts_ms.to_be_bytes());
        // Ids are at most MAX_ID_LEN (128) bytes; a longer one cannot be keyed at all.
        let len = u8::try_from(event_id.len().min(MAX_ID_LEN)).unwrap_or(u8::MAX);
        hasher.update([len]);
        hasher.update(event_id.as_bytes());
    }
    let digest = hasher.finalize();
    let time_at = time_start(first_sk);
    let mut sk = String::with_capacity(first_sk.len() + BLOCK_SK_EXTRA);
    sk.push_str(&first_sk[..time_at]);
    sk.push_str(BLOCK_LANE);
    sk.push_str(&first_sk[time_at..]);
    sk.push(SEPARATOR);
    for byte in &digest[..8] {
        sk.push_str(&format!("{byte:02x}"));
    }
    sk
}

/// Where the time starts in a reading's sort key `{prefix}{ts}#{event id}`: after the
/// last `#` before the event id (an id holds none), or at 0.
fn time_start(sk: &str) -> usize {
    sk.rsplit_once(SEPARATOR)
        .and_then(|(head, _event)| head.rfind(SEPARATOR).map(|i| i + 1))
        .unwrap_or(0)
}

/// Whether a sort key is a block's: `{prefix}b#{ts}#{event id}#{16 hex digits}`.
pub fn is_block_sk(sk: &str) -> bool {
    let mut parts = sk.rsplitn(4, SEPARATOR);
    let (Some(digest), Some(_event), Some(_ts), Some(rest)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    digest.len() == 16
        && digest.bytes().all(|b| b.is_ascii_hexdigit())
        && (rest == "b" || rest.ends_with("#b"))
}

/// A reading's sort key `{prefix}{ts}#{event id}` moved to the blocks' lane
/// (`{prefix}b#{ts}#{event id}`): where a block whose first member it is sorts, before
/// its digest. Sort-key bounds of a time range become the blocks' bounds so.
#[must_use]
pub fn in_block_lane(sk: &str) -> String {
    let at = time_start(sk);
    format!("{}{BLOCK_LANE}{}", &sk[..at], &sk[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(window_ms: u32, max_bytes: u32, max_readings: u32) -> BlockLayout {
        BlockLayout {
            window_ms,
            max_bytes,
            max_readings,
        }
    }

    /// `check(timestamps, sizes, layout, expected cuts)`.
    fn check(ts: &[i64], sizes: &[usize], l: BlockLayout, expected: &[Range<usize>]) {
        let members: Vec<(i64, usize)> = ts.iter().copied().zip(sizes.iter().copied()).collect();
        let got = group(&members, &l, 100, |m| m.0, |m| m.1);
        assert_eq!(got, expected, "{ts:?} {sizes:?} {l:?}");
    }

    #[test]
    fn the_window_the_bytes_and_the_count_each_end_a_block() {
        let big = layout(1_000, 1_024, 1_000);
        // The window: members at 0 and 999 share a block, 1,000 starts the next.
        check(&[0, 999, 1_000, 1_500], &[10; 4], big, &[0..2, 2..4]);
        // The bytes: 100 of overhead and 300 a member fit three members in 1,024.
        check(&[0, 1, 2, 3, 4], &[300; 5], big, &[0..3, 3..5]);
        // The count.
        check(
            &[0, 1, 2, 3, 4],
            &[1; 5],
            layout(1_000, 1_024, 2),
            &[0..2, 2..4, 4..5],
        );
        // A member larger than the cap is a block of its own.
        check(&[0, 1, 2], &[10, 2_000, 10], big, &[0..1, 1..2, 2..3]);
        check(&[], &[], big, &[]);
    }

    #[test]
    fn a_block_key_follows_from_its_members_alone() {
        let sk = "dev#2026-06-22T01:00:00.000Z#e1";
        let a = block_sk(sk, [(1, "e1"), (2, "e2")]);
        assert_eq!(a, block_sk(sk, [(1, "e1"), (2, "e2")]));
        assert!(a.starts_with("dev#b#2026-06-22T01:00:00.000Z#e1#"), "{a}");
        assert_eq!(a.len(), sk.len() + BLOCK_SK_EXTRA);
        assert!(is_block_sk(&a) && !is_block_sk(sk));
        // Another member, another time, another id: another key.
        assert_ne!(a, block_sk(sk, [(1, "e1"), (2, "e2"), (3, "e3")]));
        assert_ne!(a, block_sk(sk, [(1, "e1"), (3, "e2")]));
        assert_ne!(a, block_sk(sk, [(1, "e1"), (2, "e3")]));
        // Identities are length-prefixed: ("e1", "e2") is not ("e1e", "2").
        assert_ne!(a, block_sk(sk, [(1, "e1e"), (2, "2")]));
        // In the entity's blocks' lane: after all its readings' own items, inside the
        // lane's bounds of any range that holds its first member.
        assert!(a.as_str() > "dev#9999-12-31T23:59:59.999Z#~");
        assert!(a.as_str() >= in_block_lane(sk).as_str());
        assert!(a.as_str() < format!("{}~", in_block_lane(sk)).as_str());
        // Without an entity prefix (the layouts whose partition is the entity's).
        let plain = block_sk("2026-06-22T01:00:00.000Z#e1", [(1, "e1"), (2, "e2")]);
        assert!(
            plain.starts_with("b#2026-06-22T01:00:00.000Z#e1#"),
            "{plain}"
        );
        assert!(is_block_sk(&plain));
        assert!(!is_block_sk("b#2026-06-22T01:00:00.000Z#e1"));
    }

    #[test]
    fn layouts_out_of_bounds_are_refused() {
        assert!(BlockLayout::default().checked().is_ok());
        assert!(layout(0, 4_096, 10).checked().is_err());
        assert!(layout(MAX_WINDOW_MS + 1, 4_096, 10).checked().is_err());
        assert!(layout(1_000, 1_000, 10).checked().is_err());
        assert!(layout(1_000, 4_096, 1).checked().is_err());
    }
}
