//! The outcome of a conditional write: every change of the metadata and rollups tables
//! is made on a condition, and a refused condition is an answer, not an error.

/// What a conditional write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The condition held: the item was written (or deleted).
    Applied,
    /// The condition failed: what is stored stays (another writer won, the item exists
    /// already, or a newer version is stored).
    Refused,
}

impl Written {
    /// Whether the write was made.
    pub const fn is_applied(self) -> bool {
        matches!(self, Self::Applied)
    }
}
