//! Shared helpers.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sharding::backoff::Backoff;
use sharding::key::ItemKey;
use store::batch::{Item, ItemTooLarge, Put, SizedItem, WriterConfig};
use store::size::item_size;

/// The key `(pk, sk)`.
pub fn key(pk: &str, sk: &str) -> ItemKey {
    ItemKey {
        pk: pk.to_owned(),
        sk: sk.to_owned(),
    }
}

/// An item with key `(pk, sk)` and a small payload.
pub fn item(pk: &str, sk: &str) -> Item {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
        ("v".to_owned(), AttributeValue::N("1".to_owned())),
    ])
}

/// The put of `item` under `key`, sized by [`store::size::item_size`]; refused over
/// 400 KB.
pub fn put<'k>(key: &'k ItemKey, item: &Item) -> Result<Put<'k>, ItemTooLarge> {
    let sized = SizedItem::new(item.clone(), item_size(item))?;
    Ok(Put::new(key, sized))
}

/// Items and the keys they were made with, side by side: `keys[i]` is the `(PK, SK)` of
/// `items[i]`, both built from the same `(pk, sk)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub keys: Vec<ItemKey>,
    pub items: Vec<Item>,
}

impl Batch {
    /// One item per `(pk, sk)`, by [`item`].
    pub fn of(pairs: &[(&str, &str)]) -> Self {
        let mut batch = Self::default();
        for (pk, sk) in pairs {
            batch.push(pk, sk);
        }
        batch
    }

    /// Adds the item `(pk, sk)` by [`item`], and answers it (to be padded).
    pub fn push(&mut self, pk: &str, sk: &str) -> &mut Item {
        self.keys.push(key(pk, sk));
        self.items.push(item(pk, sk));
        self.items.last_mut().expect("just pushed")
    }

    /// Adds `other`'s items after these.
    pub fn extend(&mut self, other: Batch) {
        self.keys.extend(other.keys);
        self.items.extend(other.items);
    }

    /// The items at `range`, with their keys.
    pub fn slice(&self, range: Range<usize>) -> Batch {
        Batch {
            keys: self.keys[range.clone()].to_vec(),
            items: self.items[range].to_vec(),
        }
    }

    /// The puts of a write: each item with its key and its size by
    /// [`store::size::item_size`]. Every item must be within 400 KB.
    pub fn puts(&self) -> Vec<Put<'_>> {
        self.keys
            .iter()
            .zip(&self.items)
            .map(|(key, item)| put(key, item).expect("items within 400 KB"))
            .collect()
    }
}

/// `n` items spread over `pks` partition keys.
pub fn items(n: usize, pks: usize) -> Batch {
    let mut batch = Batch::default();
    for i in 0..n {
        batch.push(&format!("p{}", i % pks), &format!("s{i:05}"));
    }
    batch
}

pub const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(10),
    cap: Duration::from_millis(200),
    max_attempts: 6,
};

pub fn config() -> WriterConfig {
    WriterConfig {
        max_inflight: 4,
        backoff: BACKOFF,
    }
}

/// The most time `attempts` sleeps of [`BACKOFF`] can take.
pub fn max_sleep(attempts: u32) -> Duration {
    (0..attempts).map(|a| BACKOFF.ceiling(a)).sum()
}
