//! What the writer is given: an item with the key it was made under and its size,
//! checked against DynamoDB's 400 KB once, when it is sized.

use aws_sdk_dynamodb::types::AttributeValue;
use sharding::key::ItemKey;

use super::Item;
use crate::item::{PK, SK};
use crate::size::MAX_ITEM_BYTES;

/// An item over DynamoDB's 400 KB limit: no call could ever store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the stored item would be {size} bytes; DynamoDB's limit is 400 KB ({MAX_ITEM_BYTES} bytes)"
)]
pub struct ItemTooLarge {
    /// The item's size, by [`crate::size::item_size`]'s rule.
    pub size: usize,
}

/// An item with its size by DynamoDB's rule ([`crate::size::item_size`]), as its maker
/// measured it, known to fit the 400 KB limit: [`SizedItem::new`] is the one place the
/// limit is checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SizedItem {
    pub(super) item: Item,
    pub(super) size: usize,
}

impl SizedItem {
    /// `item`, of `size` bytes; refused over 400 KB.
    pub fn new(item: Item, size: usize) -> Result<Self, ItemTooLarge> {
        if size > MAX_ITEM_BYTES {
            return Err(ItemTooLarge { size });
        }
        Ok(Self { item, size })
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The item.
    pub fn into_item(self) -> Item {
        self.item
    }
}

/// One item to put, with the key it was made under (its `PK` and `SK` attributes) and
/// its size, both as its caller made them: the writer reads neither out of the item.
#[derive(Debug, Clone, PartialEq)]
pub struct Put<'k> {
    pub(super) key: &'k ItemKey,
    pub(super) item: SizedItem,
}

impl<'k> Put<'k> {
    /// `item`, keyed `key`: its `PK` and `SK` attributes must be `key`'s.
    pub fn new(key: &'k ItemKey, item: SizedItem) -> Self {
        debug_assert_eq!(
            answered_key(&item.item),
            Some((key.pk.as_str(), key.sk.as_str())),
            "a put's item must carry its key"
        );
        Self { key, item }
    }

    /// Its key.
    pub fn key(&self) -> &'k ItemKey {
        self.key
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.item.size
    }
}

/// The `(PK, SK)` an answer's item names, borrowed: how the writer finds which of its
/// puts an unprocessed item is.
pub(super) fn answered_key(item: &Item) -> Option<(&str, &str)> {
    let string = |name| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    };
    Some((string(PK)?, string(SK)?))
}
