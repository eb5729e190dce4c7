//! The outcome of a conditional write to the metadata or rollups table: a refused
//! condition is an answer (another writer won, or nothing is to change), not an error.

/// What a conditional write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The condition held: the item was written (or deleted).
    Applied,
    /// The condition failed: what is stored stays (another writer won, the item exists
    /// already, or a newer version is stored).
    Refused,
}
