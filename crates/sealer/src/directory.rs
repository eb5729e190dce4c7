//! The device directory (`dir`/`{device}`): each device's entry merged newest-wins
//! (`store::rollup::DirEntry::merged`) with a conditional write on the version read.
//!
//! A merge only adds: a device-hour sealed for the first time widens the entry. A
//! device-hour whose body was *replaced* (a late reading, a reading re-sent with other
//! metrics or tags, a rebuild after readings expired) may take something away, so the
//! entry is then rebuilt from the device's hour summaries, each the function of its
//! hour's readings ([`Sealer::rebuild_directory`]): one Query, paid only on a
//! replacement, never on the hour's first seal.

use store::Written;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{DeviceHour, DirEntry, RollupItem, RollupQuery, RollupTable, keys};

use crate::{SealError, Sealer};

/// What a merge or a rebuild did to a device's directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryChange {
    /// The entry was written (or deleted).
    Changed,
    /// The stored entry already said it (or there is none, and none is due).
    Unchanged,
}

/// Attempts at a directory entry's conditional write before it is isolated.
const DIRECTORY_ATTEMPTS: u32 = 8;

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Merges `entry` into the device's directory entry (newest wins, earliest first
    /// seen, every metric up to the bound): a conditional write on the version read,
    /// retried when another run wrote in between.
    pub(crate) async fn merge_directory(&self, entry: &DirEntry) -> Result<EntryChange, SealError> {
        for _ in 0..DIRECTORY_ATTEMPTS {
            let key = keys::directory_entry(&entry.device);
            let stored = self.rollups.get(&key.pk, &key.sk, true).await?;
            let (merged, expected) = match &stored {
                Some(item) => match item.body::<DirEntry>() {
                    Ok(current) => {
                        let merged = current.merged(entry);
                        if merged == current {
                            return Ok(EntryChange::Unchanged);
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
            let item = RollupItem::with_body(key, version, &merged, None)?;
            if self.rollups.put_if_version(&item, expected).await? == Written::Applied {
                return Ok(EntryChange::Changed);
            }
        }
        Err(SealError::DirectoryContended(entry.device.clone()))
    }

    /// Rebuilds the device's entry from its hour summaries: the merge of the entries
    /// each makes, written over the version read before them (deleted when it has
    /// none left).
    pub(crate) async fn rebuild_directory(&self, device: &str) -> Result<EntryChange, SealError> {
        for _ in 0..DIRECTORY_ATTEMPTS {
            let key = keys::directory_entry(device);
            let stored = self.rollups.get(&key.pk, &key.sk, true).await?;
            let mut rebuilt: Option<DirEntry> = None;
            let mut q = RollupQuery::partition(keys::device_summaries(device), true);
            loop {
                let page = self.rollups.query(&q).await?;
                for item in &page.items {
                    let entry = DirEntry::of(&item.body::<DeviceHour>()?);
                    rebuilt = Some(match rebuilt {
                        Some(so_far) => so_far.merged(&entry),
                        None => entry,
                    });
                }
                match page.last_sk {
                    Some(last) => q.after = Some(last),
                    None => break,
                }
            }
            let expected = stored.as_ref().map(|item| item.version);
            let done = match (rebuilt, &stored) {
                (None, None) => return Ok(EntryChange::Unchanged),
                (None, Some(item)) => {
                    self.rollups
                        .delete_if(&key.pk, &key.sk, item.version)
                        .await?
                }
                (Some(entry), stored) => {
                    if stored
                        .as_ref()
                        .and_then(|i| i.body::<DirEntry>().ok())
                        .as_ref()
                        == Some(&entry)
                    {
                        return Ok(EntryChange::Unchanged);
                    }
                    let item = RollupItem::with_body(
                        key.clone(),
                        expected.map_or(1, |v| v + 1),
                        &entry,
                        None,
                    )?;
                    self.rollups.put_if_version(&item, expected).await?
                }
            };
            if done == Written::Applied {
                return Ok(EntryChange::Changed);
            }
        }
        Err(SealError::DirectoryContended(device.to_owned()))
    }
}
