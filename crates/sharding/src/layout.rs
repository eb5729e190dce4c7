//! Table layouts: the sharding strategy and the table-level shard count N.

use std::fmt;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::block::BlockLayout;
use crate::slab::SlabLayout;
use crate::time::Bucket;

/// How a reading's partition key is chosen. See the crate docs for the key formats.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// Legacy layout `PK = entity`, so an existing table can be adopted.
    Unsharded,
    /// `PK = entity#r`, r derived from the event id (a redelivery lands on the same key).
    Random,
    /// `PK = entity#(hash(attribute value) % k)`.
    Calculated {
        /// Name of the attribute whose value is hashed (`event_id` names the event id).
        attribute: String,
    },
    /// The adaptive hybrid `PK = shard#bucket`; a raised entity's sub-shards live where
    /// `sub_shards` says.
    TimeBucket {
        /// Granularity of the bucket in the partition key.
        bucket: Bucket,
        /// Where a raised entity's sub-shards live. A stored layout without the field
        /// predates base placement: it reads as `Dedicated`.
        #[serde(default)]
        sub_shards: SubShards,
    },
}

/// Where sub-shard `j` (1-based) of a raised `TimeBucket` entity with base shard `s` lives,
/// N being the table's shard count.
///
/// Either way the home of sub-shard j depends on (s, j, N) alone, never on the fan-out,
/// so the keys of fan-out k are among those of any k' >= k (keys nest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubShards {
    /// On a key of its own, `{s}.{j}#{bucket}`. A raise adds partition keys that carry
    /// only the entity's share: tables created before base placement keep it.
    #[default]
    Dedicated,
    /// On the base shard `(s + j) mod N`, `{(s + j) mod N}#{bucket}`, for j < N (so the
    /// entity's sub-shards are distinct keys and never its own cold key); on
    /// `{s}.{j}#{bucket}` beyond. A raise spreads the entity over keys that exist anyway
    /// and carry the table's mean load, so the loop can afford to spread every entity
    /// above a small share of a key; the entity's sort-key prefix keeps its readings apart.
    Base,
}

impl SubShards {
    /// The base shard and the dedicated suffix (if any) of sub-shard `j` of an entity
    /// whose base shard is `s`: the partition key is `{shard}#{bucket}` or
    /// `{shard}.{j}#{bucket}`.
    #[must_use]
    pub const fn home(self, s: u32, j: u32, shards: NonZeroU32) -> (u32, Option<u32>) {
        let n = shards.get();
        match self {
            SubShards::Base if j < n => {
                // In u64: s + j can exceed u32::MAX for N above 2^31; the remainder fits.
                let shard = ((s % n) as u64 + j as u64) % n as u64;
                (shard as u32, None)
            }
            SubShards::Base | SubShards::Dedicated => (s, Some(j)),
        }
    }

    /// Whether sub-shard `j` has a key of its own (the every-entity read lists it).
    #[must_use]
    pub const fn is_dedicated(self, j: u32, shards: NonZeroU32) -> bool {
        self.home(0, j, shards).1.is_some()
    }
}

impl Strategy {
    /// Short name: `unsharded`, `random`, `calculated`, `time_bucket`.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Strategy::Unsharded => "unsharded",
            Strategy::Random => "random",
            Strategy::Calculated { .. } => "calculated",
            Strategy::TimeBucket { .. } => "time_bucket",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Calculated { attribute } => write!(f, "calculated({attribute})"),
            Strategy::TimeBucket {
                bucket,
                sub_shards: SubShards::Base,
            } => write!(f, "time_bucket({bucket})"),
            Strategy::TimeBucket {
                bucket,
                sub_shards: SubShards::Dedicated,
            } => write!(f, "time_bucket({bucket}, dedicated sub-shards)"),
            other => f.write_str(other.name()),
        }
    }
}

/// A table layout: strategy plus table-level shard count N, and whether readings are
/// packed into blocks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Key strategy.
    pub strategy: Strategy,
    /// Table-level shard count N (ignored by `Unsharded`).
    pub shards: NonZeroU32,
    /// How one device's readings are packed into blocks (`crate::block`); `None`: one
    /// item a reading. A stored layout without the field predates blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockLayout>,
    /// How the readings of devices that would pay a write unit each are written into
    /// slabs of many devices and compacted into runs (`crate::slab`); `None`: never. A
    /// stored layout without the field predates slabs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slabs: Option<SlabLayout>,
}

impl Layout {
    /// The legacy layout `PK = entity`.
    #[must_use]
    pub const fn unsharded() -> Self {
        Layout {
            strategy: Strategy::Unsharded,
            shards: NonZeroU32::MIN,
            blocks: None,
            slabs: None,
        }
    }

    /// `Random` with N suffixes per entity by default.
    #[must_use]
    pub const fn random(shards: NonZeroU32) -> Self {
        Layout {
            strategy: Strategy::Random,
            shards,
            blocks: None,
            slabs: None,
        }
    }

    /// `Calculated` on the named attribute with N suffixes per entity by default.
    #[must_use]
    pub fn calculated(attribute: impl Into<String>, shards: NonZeroU32) -> Self {
        Layout {
            strategy: Strategy::Calculated {
                attribute: attribute.into(),
            },
            shards,
            blocks: None,
            slabs: None,
        }
    }

    /// The hybrid `TimeBucket` layout with N table shards, sub-shards on base shards.
    #[must_use]
    pub const fn time_bucket(bucket: Bucket, shards: NonZeroU32) -> Self {
        Layout {
            strategy: Strategy::TimeBucket {
                bucket,
                sub_shards: SubShards::Base,
            },
            shards,
            blocks: None,
            slabs: None,
        }
    }

    /// The hybrid `TimeBucket` layout with N table shards and dedicated sub-shard keys,
    /// the layout of tables created before base placement.
    #[must_use]
    pub const fn time_bucket_dedicated(bucket: Bucket, shards: NonZeroU32) -> Self {
        Layout {
            strategy: Strategy::TimeBucket {
                bucket,
                sub_shards: SubShards::Dedicated,
            },
            shards,
            blocks: None,
            slabs: None,
        }
    }

    /// This layout with readings packed into blocks of `blocks`.
    #[must_use]
    pub fn with_blocks(self, blocks: BlockLayout) -> Self {
        Layout {
            blocks: Some(blocks),
            ..self
        }
    }

    /// This layout with the readings of devices that would pay a write unit each written
    /// into slabs of `slabs`.
    #[must_use]
    pub fn with_slabs(self, slabs: SlabLayout) -> Self {
        Layout {
            slabs: Some(slabs),
            ..self
        }
    }

    /// The block window, when readings are packed into blocks: how far after its own
    /// sort key an item can hold a reading.
    #[must_use]
    pub fn block_window_ms(&self) -> Option<u32> {
        self.blocks.map(|b| b.window_ms)
    }

    /// Number of partition keys one entity uses when it has no fan-out of its own:
    /// N for `Random` and `Calculated`, 1 otherwise.
    #[must_use]
    pub const fn default_fanout(&self) -> u32 {
        match self.strategy {
            Strategy::Random | Strategy::Calculated { .. } => self.shards.get(),
            Strategy::Unsharded | Strategy::TimeBucket { .. } => 1,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.strategy {
            Strategy::Unsharded => write!(f, "{}", self.strategy)?,
            _ => write!(f, "{} N={}", self.strategy, self.shards)?,
        }
        match self.blocks {
            Some(blocks) => write!(f, ", blocks of {} ms", blocks.window_ms),
            None => Ok(()),
        }
    }
}
