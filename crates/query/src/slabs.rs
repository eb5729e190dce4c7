//! A device's readings held by slabs and runs (docs/design-slabs.md): which of its
//! group's slab and run partitions a device's read of a range reads ([`streams`]), how
//! a page of one is asked for ([`request`]), and what the page holds of the device's
//! readings ([`take`]).
//!
//! Each partition is one stream of the read's merge (`crate::exec`), beside the
//! device's own keys, arriving in no useful order (`sharding::merge::Arrival::Unordered`):
//! it is read whole when the merge reaches its span, then sorted. So whatever holds
//! for the device's own items holds for its slab-held readings too: the merge opens a
//! partition only when the answer can need it, every Query of one counts against the
//! request's budgets before it is sent, a page a budget ends resumes from where the
//! merge settled (no reading dropped or repeated at a page boundary), and a reading
//! held twice (two slabs of a batch written twice, a slab and the device's own item, a
//! run and a slab) is answered once, the copy written last
//! (`sharding::written::keep_last`).
//!
//! The partitions come from `sharding::slab::plan_device`, for every epoch of the
//! table's layout that has slabs: runs for the windows compacted (the compaction
//! progress, `store::rollup::compaction::Compacted`, trusted only within its
//! `[from_ms, to_ms)`), slabs for the others, on every fan-out key of the group. A
//! run partition is read newest sort key first from the device's own, each item's sort
//! key handed to its `RunCover`, and the stream ends once the cover is done: the rest
//! of the partition is never read. Each item kept is expanded (`store::block::expand`)
//! and only the device's readings kept; the merge keeps those within the stream's span.

use std::collections::BTreeSet;

use sharding::epoch::TableHistory;
use sharding::slab::{RunCover, SlabLayout, SlabOwner, SlabQuery, Take, Window, plan_device};
use sharding::time::{TimeRange, Timestamp};
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::{ItemsPage, ItemsRequest, LastKey, Page};
use store::rollup::compaction::Compacted;

use crate::exec::StreamSpec;

/// A stream of slab or run items, of which a read keeps one device's readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlabStream {
    /// The device whose readings are kept.
    pub device: String,
    /// The partition and how it is read.
    pub query: SlabQuery,
}

/// The slab layouts of `table` in force over `range`, each with the part of the range
/// it is in force over.
pub fn slab_epochs(table: &TableHistory, range: TimeRange) -> Vec<(TimeRange, SlabLayout)> {
    table
        .spans(range)
        .into_iter()
        .filter_map(|(piece, layout)| layout.slabs.map(|slabs| (piece, slabs)))
        .collect()
}

/// The slab partitions `device`'s readings over `range` can be in: its group's of each
/// slab layout in force over it, and the shared one where a layout shares slabs.
pub fn owners(table: &TableHistory, device: &str, range: TimeRange) -> BTreeSet<SlabOwner> {
    slab_epochs(table, range)
        .iter()
        .flat_map(|(_, slabs)| slabs.owners(slabs.group(device)))
        .collect()
}

/// The slab and run streams of `device`'s read of `range` under `table`: for every
/// epoch whose layout has slabs, its group's runs for the windows `compacted` holds,
/// its group's slabs and the shared ones for the others, on each of the
/// `fanout(owner, window)` keys of each.
/// Runs are trusted only inside the compacted span: a window before its first one is
/// read from its slabs. No progress (`None`): slabs everywhere.
pub fn streams(
    table: &TableHistory,
    device: &str,
    range: TimeRange,
    compacted: Option<Compacted>,
    fanout: impl Fn(SlabOwner, Window) -> u32,
) -> Vec<StreamSpec> {
    let mut specs = Vec::new();
    for (piece, slabs) in slab_epochs(table, range) {
        let (from, to) = piece.as_millis();
        // Where runs may be read: [from_ms, to_ms) of the progress, at whole windows.
        let (runs_from, runs_to) = compacted.map_or((to, to), |c| (c.from_ms, c.to_ms));
        let cut = runs_from.clamp(from, to);
        let parts = [(from, cut, Timestamp::MIN), (cut, to, at(runs_to))];
        for (lo, hi, compacted_to) in parts {
            let Ok(part) = TimeRange::of_millis(lo, hi) else {
                continue;
            };
            let queries = plan_device(&slabs, device, part, compacted_to, &fanout);
            specs.extend(
                queries
                    .into_iter()
                    .map(|query| spec(device, query, (lo, hi))),
            );
        }
    }
    specs
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// The merge stream of `query`, its windows' span within `[lo, hi)`.
fn spec(device: &str, query: SlabQuery, (lo, hi): (i64, i64)) -> StreamSpec {
    let (first, last) = match &query {
        SlabQuery::Runs { windows, .. } => (
            windows.first().map_or(lo, |w| w.start_ms()),
            windows.last().map_or(hi, |w| w.end_ms()),
        ),
        SlabQuery::Slabs { window, .. } => (window.start_ms(), window.end_ms()),
    };
    let span = (first.max(lo), last.min(hi));
    let pk = match &query {
        SlabQuery::Runs { pk, .. } | SlabQuery::Slabs { pk, .. } => pk.clone(),
    };
    StreamSpec {
        pk,
        sk_between: None,
        span,
        starts: span,
        filter_time: false,
        time_ordered: false,
        index: None,
        block_window_ms: None,
        slab: Some(SlabStream {
            device: device.to_owned(),
            query,
        }),
    }
}

/// The cover of a run stream's read, `None` for a slab stream.
pub(crate) fn cover(stream: &SlabStream) -> Option<RunCover> {
    match &stream.query {
        SlabQuery::Runs { windows, .. } => Some(RunCover::new(&stream.device, windows)),
        SlabQuery::Slabs { .. } => None,
    }
}

/// The next page of `stream` after `pages` of it, at most `limit` items, after
/// `start_after`: a slab partition whole; a run partition newest first from the
/// device's sort keys down, its first page one item a window it covers and at least a
/// read unit's worth of items (`SlabLayout::run_page_items`: a page of fewer pays as
/// much), each page after twice the one before. A window needs one item when the
/// device's first readings of it start in an earlier device's item, so a read of a
/// whole hour usually ends with its first page; one of a few windows of an hour passes
/// the other windows' items of the devices in between (sort keys order by device, then
/// window), which the doubling reaches in a few round trips. DynamoDB evaluates a
/// page's whole `Limit`, so a page that overshoots is paid for: doubling pays at most
/// twice what the read needed.
pub(crate) fn request(
    stream: &SlabStream,
    limit: Option<u32>,
    (start_after, pages): (Option<&LastKey>, u32),
    consistent: bool,
) -> ItemsRequest {
    let (pk, sk_at_most, ascending, limit) = match &stream.query {
        SlabQuery::Runs {
            pk,
            sk_upper,
            windows,
            page_items,
        } => {
            let first = u32::try_from(windows.len())
                .unwrap_or(u32::MAX)
                .max(*page_items)
                .max(1);
            let page = first.saturating_mul(1 << pages.min(16));
            let limit = limit.map_or(page, |l| l.min(page));
            (pk, Some(sk_upper.clone()), false, Some(limit))
        }
        SlabQuery::Slabs { pk, .. } => (pk, None, true, limit),
    };
    ItemsRequest {
        pk: pk.clone(),
        sk_at_most,
        limit,
        ascending,
        start_after: start_after.map(|k| k.key.clone()),
        consistent,
    }
}

/// What a page of `stream` holds of its device's readings, as a page of the merge: its
/// next page's start is `None` once the stream has nothing more (the partition read to
/// its end, or, for runs, the cover done: the items after it are not looked at).
pub(crate) fn take(
    stream: &SlabStream,
    cover: Option<&mut RunCover>,
    page: ItemsPage,
) -> Result<Page, StoreError> {
    let mut readings = Vec::new();
    let mut done = page.last_key.is_none();
    match cover {
        Some(cover) => {
            for stored in page.items {
                if cover.is_done() {
                    break;
                }
                if cover.take(&stored.sk) == Take::Keep {
                    keep_device(&stream.device, stored.item, &mut readings)?;
                }
            }
            done |= cover.is_done();
        }
        None => {
            for stored in page.items {
                keep_device(&stream.device, stored.item, &mut readings)?;
            }
        }
    }
    Ok(Page {
        items: readings,
        last_key: page
            .last_key
            .filter(|_| !done)
            .map(|key| LastKey { key, ts_ms: None }),
        items_read: page.items_read,
        last_ts: None,
    })
}

/// Adds `device`'s readings of a slab or run item to `out`.
fn keep_device(
    device: &str,
    item: store::batch::Item,
    out: &mut Vec<ReadingItem>,
) -> Result<(), StoreError> {
    out.extend(
        store::block::expand(item)?
            .into_iter()
            .filter(|r| r.device_id == device),
    );
    Ok(())
}
