//! The input of one write deduplicated by key and cut into chunks of one call each.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use sharding::key::ItemKey;
use sharding::written::WriteOrder;

use super::{MAX_BATCH_ITEMS, MAX_REQUEST_BYTES, Put};
use crate::item::WRITTEN;
use crate::size::{WCU_BYTES, wire_bound, wire_size};

/// The input, deduplicated and cut into chunks; pure, see [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// For each input put, the input index of the put written in its place (itself, or
    /// of the puts with the same key, the one written last: see [`prepare`]).
    pub canonical: Vec<usize>,
    /// Chunks of input indices; every index appears at most once over all chunks.
    pub chunks: Vec<Vec<usize>>,
    /// Items over 1 KB among the chunked ones.
    pub large_items: u64,
}

/// Dedups by key, and cuts the rest into chunks of at most [`MAX_BATCH_ITEMS`] items
/// and [`MAX_REQUEST_BYTES`] of estimated request size, in input order. Of the puts of
/// one key (one reading sent twice in a batch, with new values), the one whose item
/// carries the greatest write order `w` is kept, the first on a tie: the copy written
/// last, as every read keeps it (`sharding::written`).
pub fn prepare(puts: &[Put<'_>]) -> Prepared {
    let mut canonical = Vec::with_capacity(puts.len());
    let mut first_of: HashMap<&ItemKey, usize> = HashMap::with_capacity(puts.len());
    // For each first put of a key, the put kept in its place.
    let mut kept: Vec<usize> = (0..puts.len()).collect();
    for (i, put) in puts.iter().enumerate() {
        match first_of.get(put.key) {
            Some(&first) => {
                canonical.push(first);
                if written(&puts[i]) > written(&puts[kept[first]]) {
                    kept[first] = i;
                }
            }
            None => {
                first_of.insert(put.key, i);
                canonical.push(i);
            }
        }
    }
    for c in &mut canonical {
        *c = kept[*c];
    }
    let mut chunks = Chunker {
        puts,
        chunks: Vec::new(),
        bytes: 0,
        exact: false,
    };
    let mut large_items = 0;
    for (i, put) in puts.iter().enumerate() {
        if canonical[i] != i {
            continue;
        }
        if put.size() > WCU_BYTES {
            large_items += 1;
        }
        chunks.push(i, wire_bound(&put.item.item));
    }
    Prepared {
        canonical,
        chunks: chunks.chunks,
        large_items,
    }
}

/// The write order a put's item carries (`w`), the oldest without one.
fn written(put: &Put<'_>) -> WriteOrder {
    match put.item.item.get(WRITTEN) {
        Some(AttributeValue::N(w)) => WriteOrder(w.parse().unwrap_or(0)),
        _ => WriteOrder::OLDEST,
    }
}

/// Chunks being cut from `puts`, in input order: at most [`MAX_BATCH_ITEMS`] items
/// and [`MAX_REQUEST_BYTES`] of estimated request each.
struct Chunker<'i, 'k> {
    puts: &'i [Put<'k>],
    chunks: Vec<Vec<usize>>,
    /// The last chunk's bytes: a sum of bounds that read no string, or of exact
    /// estimates once the bounds could cut it (`exact`).
    bytes: usize,
    exact: bool,
}

impl Chunker<'_, '_> {
    /// Adds item `i`, whose wire-size bound is `bound`, to the last chunk if it fits
    /// there by the exact estimate, else to a new one.
    fn push(&mut self, i: usize, bound: usize) {
        if self
            .chunks
            .last()
            .is_none_or(|c| c.len() >= MAX_BATCH_ITEMS)
        {
            return self.start(i, bound);
        }
        let mut bytes = if self.exact {
            wire_size(&self.puts[i].item.item)
        } else {
            bound
        };
        if !self.exact && self.bytes + bytes > MAX_REQUEST_BYTES {
            // The bounds could cut the chunk: count it exactly from here on.
            let last = self.chunks.last().into_iter().flatten();
            self.bytes = last.map(|&j| wire_size(&self.puts[j].item.item)).sum();
            bytes = wire_size(&self.puts[i].item.item);
            self.exact = true;
        }
        if self.bytes + bytes > MAX_REQUEST_BYTES {
            return self.start(i, bound);
        }
        self.bytes += bytes;
        if let Some(last) = self.chunks.last_mut() {
            last.push(i);
        }
    }

    /// Starts a chunk with item `i`, counted by its bound.
    fn start(&mut self, i: usize, bound: usize) {
        self.chunks.push(vec![i]);
        self.bytes = bound;
        self.exact = false;
    }
}
