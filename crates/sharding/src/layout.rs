//! Table layouts: the sharding strategy and the table-level shard count N.

use std::fmt;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

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
    /// The adaptive hybrid `PK = shard#bucket` (hot entities: `shard.j#bucket`).
    TimeBucket {
        /// Granularity of the bucket in the partition key.
        bucket: Bucket,
    },
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
            Strategy::TimeBucket { bucket } => write!(f, "time_bucket({bucket})"),
            other => f.write_str(other.name()),
        }
    }
}

/// A table layout: strategy plus table-level shard count N.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Key strategy.
    pub strategy: Strategy,
    /// Table-level shard count N (ignored by `Unsharded`).
    pub shards: NonZeroU32,
}

impl Layout {
    /// The legacy layout `PK = entity`.
    #[must_use]
    pub const fn unsharded() -> Self {
        Layout {
            strategy: Strategy::Unsharded,
            shards: NonZeroU32::MIN,
        }
    }

    /// `Random` with N suffixes per entity by default.
    #[must_use]
    pub const fn random(shards: NonZeroU32) -> Self {
        Layout {
            strategy: Strategy::Random,
            shards,
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
        }
    }

    /// The hybrid `TimeBucket` layout with N table shards.
    #[must_use]
    pub const fn time_bucket(bucket: Bucket, shards: NonZeroU32) -> Self {
        Layout {
            strategy: Strategy::TimeBucket { bucket },
            shards,
        }
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
            Strategy::Unsharded => write!(f, "{}", self.strategy),
            _ => write!(f, "{} N={}", self.strategy, self.shards),
        }
    }
}
