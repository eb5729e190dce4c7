//! The device directory (`dir`/`{device}`): each device's entry merged newest-wins
//! (`store::rollup::DirEntry::merged`) with a conditional write on the version read.

use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{DIRECTORY_PK, DirEntry, RollupItem, RollupTable};

use crate::{SealError, Sealer};

/// Attempts at a directory entry's conditional write before it is isolated.
const DIRECTORY_ATTEMPTS: u32 = 8;

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Merges `entry` into the device's directory entry (newest wins, earliest first
    /// seen, every metric up to the bound): a conditional write on the version read,
    /// retried when another run wrote in between. `true` when it changed the entry.
    pub(crate) async fn merge_directory(&self, entry: &DirEntry) -> Result<bool, SealError> {
        for _ in 0..DIRECTORY_ATTEMPTS {
            let stored = self.rollups.get(DIRECTORY_PK, &entry.device, true).await?;
            let (merged, expected) = match &stored {
                Some(item) => match item.body::<DirEntry>() {
                    Ok(current) => {
                        let merged = current.merged(entry);
                        if merged == current {
                            return Ok(false);
                        }
                        (merged, Some(item.version))
                    }
                    // An entry this code cannot read is replaced by what the readings
                    // say, rather than stopping its device's hours for ever.
                    Err(e) => {
                        tracing::warn!(device = %entry.device, error = %e, "unreadable directory entry replaced");
                        (entry.clone(), Some(item.version))
                    }
                },
                None => (entry.clone(), None),
            };
            let version = expected.map_or(1, |v| v + 1);
            let item = RollupItem::with_body(
                (DIRECTORY_PK.to_owned(), entry.device.clone()),
                version,
                &merged,
                None,
            )?;
            if self.rollups.put_if_version(&item, expected).await? {
                return Ok(true);
            }
        }
        Err(SealError::DirectoryContended(entry.device.clone()))
    }
}
