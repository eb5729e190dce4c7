//! Which copy of a reading stands: the one written last.
//!
//! A publisher may send one identity `(device, ts, event id)` again with new metrics
//! or tags. Under one key the second put replaces the first, but across a fan-out raise
//! (two keys) or in blocks (two items) both copies stay stored, and every read meets
//! both. Each copy therefore carries its [`WriteOrder`], and every de-duplication keeps
//! the copy whose order is the greatest ([`keep_last`]): the merge
//! (`crate::merge::BoundedMerge`), the expansion of stored items into readings, and
//! the sealer's read of an hour. Pure: nothing here reads a clock.
//!
//! # What the order is
//! The `SentTimestamp` of the SQS message that carried the copy: the millisecond SQS
//! took the message in, which SQS sets and no sender can. A redelivery is the same
//! message and keeps it; a copy the ingest requeues carries its first message's
//! (`shardline.sent_timestamp`, honoured on the ingest's own messages only), since a
//! requeued copy holds what was sent then, not anything newer. A raise changes the
//! key, never the order. Two different messages of one millisecond tie; the tie is
//! broken by the copies' contents ([`Written::written_cmp`]), so every reader keeps
//! the same copy whatever order it meets them in, and two copies equal in both are the
//! same reading. An item stored before the order existed has none and reads as the
//! oldest, [`WriteOrder::OLDEST`].

use std::cmp::Ordering;

/// When a copy of a reading was written, as the queue saw it: the carrying message's
/// `SentTimestamp` in epoch milliseconds (see the module's doc); 0, the oldest, for a
/// copy stored without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WriteOrder(pub i64);

impl WriteOrder {
    /// The order of a copy stored before copies carried one: older than any other.
    pub const OLDEST: WriteOrder = WriteOrder(0);

    /// Whether this is [`WriteOrder::OLDEST`], which is stored as no attribute.
    #[must_use]
    pub fn is_oldest(self) -> bool {
        self == Self::OLDEST
    }
}

/// A copy that can say, against another copy of the same item (equal merge keys),
/// which was written last.
pub trait Written {
    /// `self` against `other` in write order: `Greater` when `self` was written later.
    /// It must be a total order over distinct copies (break ties of [`WriteOrder`] by
    /// content), so that every reader keeps the same one; `Equal` only for copies
    /// interchangeable in every answer.
    fn written_cmp(&self, other: &Self) -> Ordering;
}

/// Of two copies of one item, leaves in `kept` the one written last and in `copy` the
/// other: the one rule every de-duplication of copies follows. On a tie `kept` stays.
pub fn keep_last<T: Written>(kept: &mut T, copy: &mut T) {
    if copy.written_cmp(kept) == Ordering::Greater {
        std::mem::swap(kept, copy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Copy(WriteOrder, u8);

    impl Written for Copy {
        fn written_cmp(&self, other: &Self) -> Ordering {
            (self.0, self.1).cmp(&(other.0, other.1))
        }
    }

    #[test]
    fn the_later_copy_is_kept_whichever_comes_first() {
        let check = |a: Copy, b: Copy, expected: Copy| {
            let (mut kept, mut copy) = (a, b);
            keep_last(&mut kept, &mut copy);
            assert_eq!(kept, expected);
        };
        check(
            Copy(WriteOrder(1), 9),
            Copy(WriteOrder(2), 0),
            Copy(WriteOrder(2), 0),
        );
        check(
            Copy(WriteOrder(2), 0),
            Copy(WriteOrder(1), 9),
            Copy(WriteOrder(2), 0),
        );
        check(
            Copy(WriteOrder::OLDEST, 9),
            Copy(WriteOrder(1), 0),
            Copy(WriteOrder(1), 0),
        );
        // One millisecond: the content decides, the same way both ways round.
        check(
            Copy(WriteOrder(5), 1),
            Copy(WriteOrder(5), 2),
            Copy(WriteOrder(5), 2),
        );
        check(
            Copy(WriteOrder(5), 2),
            Copy(WriteOrder(5), 1),
            Copy(WriteOrder(5), 2),
        );
    }
}
