//! The compaction progress (`compact`/`state`): every slab window in `[from_ms, to_ms)`
//! is compacted into runs for every slab group (docs/design-slabs.md). Its `to_ms`, the
//! start of the first window not compacted, is its item's version, so moving it is a
//! conditional write that only grows it (as the watermark's end, [`super::watermark`]);
//! its body holds the first window compacted. The sealer's compaction writes it; every
//! reader of slabs reads runs before `to_ms` and slabs from it on, and the ingest falls
//! back to per-device items when it lags too far (`sharding::slab::SlabLayout::writes_slabs`).

use serde::{Deserialize, Serialize};

use super::{RollupItem, RollupTable, keys};
use crate::error::StoreError;
use crate::written::Written;

/// The compacted windows: every window in `[from_ms, to_ms)`, for every slab group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compacted {
    /// The start of the first window compacted.
    pub from_ms: i64,
    /// The start of the first window not compacted: the item's version, not in the body.
    #[serde(skip)]
    pub to_ms: i64,
}

impl Compacted {
    /// The progress `item` holds: its body, and its version as `to_ms`.
    pub fn of(item: &RollupItem) -> Result<Self, StoreError> {
        let mut compacted: Compacted = item.body()?;
        compacted.to_ms = i64::try_from(item.version).unwrap_or(i64::MAX);
        Ok(compacted)
    }

    /// Its `to_ms` as its item's version: refused before 1970.
    pub fn version(&self) -> Result<u64, StoreError> {
        u64::try_from(self.to_ms).map_err(|_| {
            StoreError::Malformed(format!(
                "a compaction progress ending before 1970: {}",
                self.to_ms
            ))
        })
    }

    /// Its item at `compact`/`state`.
    pub fn item(&self) -> Result<RollupItem, StoreError> {
        RollupItem::with_body(keys::compaction(), self.version()?, self, None)
    }
}

/// Reads the compaction progress (strongly consistent); `None`: nothing compacted yet.
pub async fn read_compacted<R: RollupTable>(rollups: &R) -> Result<Option<Compacted>, StoreError> {
    let key = keys::compaction();
    match rollups.get(&key.pk, &key.sk, true).await? {
        Some(item) => Compacted::of(&item).map(Some),
        None => Ok(None),
    }
}

/// Moves the progress to `compacted` if that grows it: [`Written::Refused`] when the
/// stored `to_ms` is already as far (another compaction got there first).
pub async fn advance_compacted<R: RollupTable>(
    rollups: &R,
    compacted: &Compacted,
) -> Result<Written, StoreError> {
    rollups.put_if_newer(&compacted.item()?).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryRollups;

    #[test]
    fn a_progress_is_its_body_and_its_version() {
        let progress = Compacted {
            from_ms: 60_000,
            to_ms: 180_000,
        };
        let item = progress.item().unwrap();
        assert_eq!((item.pk.as_str(), item.sk.as_str()), ("compact", "state"));
        assert_eq!(item.version, 180_000);
        assert!(!item.body.contains("to_ms"), "to_ms is the version");
        assert_eq!(Compacted::of(&item).unwrap(), progress);
        let before_1970 = Compacted {
            from_ms: 0,
            to_ms: -1,
        };
        assert!(before_1970.item().is_err());
    }

    #[tokio::test]
    async fn the_progress_only_grows() {
        let rollups = MemoryRollups::default();
        assert_eq!(read_compacted(&rollups).await.unwrap(), None);
        let at = |to_ms| Compacted { from_ms: 0, to_ms };
        let moved = advance_compacted(&rollups, &at(120_000)).await.unwrap();
        assert_eq!(moved, Written::Applied);
        for behind in [60_000, 120_000] {
            let refused = advance_compacted(&rollups, &at(behind)).await.unwrap();
            assert_eq!(refused, Written::Refused);
        }
        assert_eq!(read_compacted(&rollups).await.unwrap(), Some(at(120_000)));
        advance_compacted(&rollups, &at(180_000)).await.unwrap();
        assert_eq!(read_compacted(&rollups).await.unwrap(), Some(at(180_000)));
    }
}
