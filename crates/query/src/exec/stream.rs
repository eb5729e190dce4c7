//! What a merged read keeps of each stream between its pages, and a page as a Query
//! answered it.

use sharding::slab::RunCover;
use store::error::StoreError;
use store::read::{ItemsPage, LastKey, Page};

use super::StreamSpec;
use crate::slabs;

/// What a read knows of one stream between its pages.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamState {
    /// Where its next page starts.
    pub(super) next_start: Option<LastKey>,
    /// Pages of it read so far.
    pub(super) pages: u32,
    /// How many readings an item of it held, where its items are blocks.
    pub(super) members: Option<f64>,
    /// A run stream's cover: which items hold the device's readings, and when none is
    /// left to read.
    pub(super) cover: Option<RunCover>,
}

impl StreamState {
    pub(super) fn of(specs: &[StreamSpec]) -> Vec<Self> {
        specs
            .iter()
            .map(|spec| Self {
                cover: spec.slab.as_ref().and_then(slabs::cover),
                ..Self::default()
            })
            .collect()
    }
}

/// A page as a Query answered it: readings, or a slab or run partition's items.
pub(super) enum Fetched {
    Readings(Page),
    Items(ItemsPage),
}

impl Fetched {
    /// The page as the merge takes it: a slab or run partition's items as the readings
    /// of the stream's device they hold, with the next page's start `None` once the
    /// stream has nothing more (its cover, in `state`, done).
    pub(super) fn into_page(
        self,
        spec: &StreamSpec,
        state: &mut StreamState,
    ) -> Result<Page, StoreError> {
        state.pages += 1;
        match (self, &spec.slab) {
            (Fetched::Readings(page), _) => Ok(page),
            (Fetched::Items(page), Some(stream)) => slabs::take(stream, state.cover.as_mut(), page),
            (Fetched::Items(_), None) => Err(StoreError::Malformed(
                "a page of items for a stream of readings".to_owned(),
            )),
        }
    }
}
