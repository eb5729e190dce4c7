//! The device list, `GET /devices`: the sealer's directory (`store::rollup`, partition
//! `dir`, one item per device, sorted by id), a page at a time.
//!
//! A page reads the directory in id order after its cursor's position, the last id it
//! evaluated, so each device is answered once across the pages however many are added
//! while a client pages (one added before the position shows on the next listing).
//! `prefix` is a `begins_with` on the sort key, not a filter: it bounds what is read.
//! `seen_since` is a filter, applied as items arrive: the items it leaves out are
//! evaluated, and count against the budget.
//!
//! A scoped caller's grants are read as key ranges of their own: an id prefix is a
//! `begins_with` Query, an id one GetItem (a claim lists at most
//! `crate::scope::MAX_GRANTS` entries). So a page evaluates only devices the token
//! grants, and no answer, position or cursor names another; each item is checked
//! against the scope as it arrives all the same.
//!
//! Where the table's layout has slabs after the watermark, a device's `last_seen` is
//! moved to its newest slab-held reading compaction has read, when later
//! (`super::seen`): one GetItem of the compaction progress, then for each page of the
//! directory read, two Queries of each unsealed hour's latest map, for the page's ids.
//! `seen_since` selects by the moved `last_seen`.
//!
//! What a page costs: one GetItem of the watermark, then a Query a `limit` (plus one,
//! to learn whether another follows) for an unscoped caller, each granted id a GetItem
//! and each prefix a Query for a scoped one, within the request's budgets: a page that
//! reaches one ends early with a cursor from the last item it evaluated, or is
//! refused with 400 `budget_exceeded` when it evaluated none.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde::Serialize;
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{DIRECTORY_PK, DirEntry, RollupItem, RollupQuery, keys};

use super::answer::{PAGE_OVERHEAD_BYTES, json_body, store_error};
use super::rollups::{Fetch, Spend, instant, not_configured};
use super::seen::{FreshSeen, fresh_seen};
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice};
use crate::cursor::{Binding, decode_cursor, encode_cursor};
use crate::error::ApiError;
use crate::exec::Exhausted;
use crate::model::ReadingKey;
use crate::params::MAX_TS_MS;
use crate::scope::{DeviceGrants, ReadScope};

/// A validated device-list request.
#[derive(Debug, Clone, Copy)]
pub(super) struct DevicesRequest<'a> {
    pub(super) prefix: Option<&'a str>,
    pub(super) seen_since_ms: Option<i64>,
    pub(super) limit: u32,
    pub(super) cursor: Option<&'a str>,
}

impl DevicesRequest<'_> {
    /// What its cursors are bound to: the parameters, and the caller's grants.
    fn binding(&self, scope: &ReadScope) -> Binding {
        Binding {
            route: "devices",
            device: None,
            from_ms: 0,
            to_ms: MAX_TS_MS + 1,
            descending: false,
            limit: self.limit,
            detail: format!(
                "prefix={} seen_since={}",
                self.prefix.unwrap_or(""),
                self.seen_since_ms
                    .map_or_else(String::new, |s| s.to_string())
            ),
            scope: scope.grants().map(DeviceGrants::canonical),
        }
    }
}

/// One device as the list answers it.
#[derive(Debug, Serialize)]
struct DeviceOut {
    device_id: String,
    first_seen: String,
    last_seen: String,
    last_event_id: String,
    metrics: BTreeSet<String>,
    tags: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
struct DevicesPage {
    devices: Vec<DeviceOut>,
    next_cursor: Option<String>,
    as_of: Option<String>,
    /// Where the layout has slabs: the end of the compacted windows whose slab-held
    /// readings move `last_seen` past `as_of` (`super::seen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_to: Option<String>,
}

/// A key range of the directory a page reads: the ids starting with a prefix (the
/// empty one: every id), or one id.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Prefix(String),
    Id(String),
}

impl Segment {
    fn start(&self) -> &str {
        match self {
            Segment::Prefix(s) | Segment::Id(s) => s,
        }
    }
}

/// The directory's key ranges a caller of `scope` reads for ids starting with
/// `prefix`: disjoint, in id order (of two disjoint prefix ranges, or a prefix range
/// and an id outside it, every id of one sorts before every id of the other).
fn segments(scope: &ReadScope, prefix: &str) -> Vec<Segment> {
    let Some(grants) = scope.grants() else {
        return vec![Segment::Prefix(prefix.to_owned())];
    };
    let mut prefixes = Vec::new();
    let mut ids = Vec::new();
    // The canonical spelling lists the grants separated by spaces, each prefix ending
    // in `*`: neither character is in any id.
    for entry in grants.canonical().split(' ').filter(|e| !e.is_empty()) {
        match entry.strip_suffix('*') {
            Some(p) if p.starts_with(prefix) => prefixes.push(p.to_owned()),
            Some(p) if prefix.starts_with(p) => prefixes.push(prefix.to_owned()),
            Some(_) => {}
            None if entry.starts_with(prefix) => ids.push(entry.to_owned()),
            None => {}
        }
    }
    prefixes.sort();
    // Sorted, a prefix comes right after any prefix of it (or one inside that one).
    let mut kept: Vec<String> = Vec::new();
    for p in prefixes {
        if !kept.last().is_some_and(|k| p.starts_with(k.as_str())) {
            kept.push(p);
        }
    }
    ids.retain(|id| !kept.iter().any(|k| id.starts_with(k.as_str())));
    let mut out: Vec<Segment> = ids
        .into_iter()
        .map(Segment::Id)
        .chain(kept.into_iter().map(Segment::Prefix))
        .collect();
    out.sort_by(|a, b| a.start().cmp(b.start()));
    out.dedup();
    out
}

/// Where a page stands after a directory item is offered to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    /// The page takes more items (this one taken, or not for it: not granted, or not
    /// seen since the range's start).
    Open,
    /// The page is full: the item is left to the next page.
    Full,
}

/// What a page holds so far, and where it stands.
struct Listing<'a> {
    scope: &'a ReadScope,
    /// The fleet's fresh last-seen read for the ids taken.
    fresh: FreshSeen,
    seen_since_ms: Option<i64>,
    limit: usize,
    room: usize,
    devices: Vec<DeviceOut>,
    /// The last id evaluated and taken: the next page starts after it.
    position: Option<String>,
    /// The page is full: another device was found past its limit, or did not fit.
    full: bool,
}

impl Listing<'_> {
    /// Takes the directory item at `id` (`None`: no item there) in id order;
    /// [`Page::Full`] once the page is full, the item then left to the next page.
    fn take(&mut self, id: &str, item: Option<&RollupItem>) -> Result<Page, ApiError> {
        if self.full {
            return Ok(Page::Full);
        }
        if !self.scope.allows(id) {
            // Never read (the ranges are the grants'), and never named if it were.
            return Ok(Page::Open);
        }
        let entry = item
            .map(|item| item.body::<DirEntry>().map_err(store_error))
            .transpose()?;
        let entry = entry.map(|mut e| {
            e.last_seen_ms = self.fresh.last_seen(id, e.last_seen_ms);
            e
        });
        if let Some(entry) =
            entry.filter(|e| self.seen_since_ms.is_none_or(|s| e.last_seen_ms >= s))
        {
            if self.devices.len() >= self.limit {
                self.full = true;
                return Ok(Page::Full);
            }
            let out = DeviceOut {
                device_id: id.to_owned(),
                first_seen: instant(entry.first_seen_ms)?,
                last_seen: instant(entry.last_seen_ms)?,
                last_event_id: entry.last_event,
                metrics: entry.metrics,
                tags: entry.tags,
            };
            let size = budget::json_len(&out) + 1;
            if size > self.room {
                self.full = true;
                return Ok(Page::Full);
            }
            self.room -= size;
            self.devices.push(out);
        }
        self.position = Some(id.to_owned());
        Ok(Page::Open)
    }

    /// Items to ask a Query for: what the page still takes, and one more to learn
    /// whether another follows.
    fn want(&self) -> u64 {
        (self.limit.saturating_sub(self.devices.len()) + 1) as u64
    }
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// A page of the devices `scope` grants.
    pub(super) async fn devices(
        &self,
        scope: &ReadScope,
        request: &DevicesRequest<'_>,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        let binding = request.binding(scope);
        let after = match request.cursor {
            Some(raw) => Some(
                decode_cursor(raw, &binding, &self.config.cursor_keys.get(), now)
                    .map_err(|e| ApiError::bad_cursor(e.to_string()))?
                    .device_id,
            ),
            None => None,
        };
        let table = self
            .rollups
            .as_ref()
            .ok_or_else(|| not_configured("GET /devices"))?;
        let spend = Spend::new(table, self.config.budget.read(deadline));
        // The watermark first: the directory read after it holds every reading sealed
        // before it.
        let refuse = |budget| budget::refusal(budget, &self.config.budget, Advice::NarrowRange);
        let sealed_end = match spend.watermark().await? {
            Fetch::Got(w) => w,
            Fetch::Cut(budget) => return Err(refuse(budget)),
        };
        let as_of = sealed_end.map(instant).transpose()?;
        let layout = self.stored_layout(now).await?;
        let fresh = match fresh_seen(&spend, layout.as_ref(), sealed_end.unwrap_or(0), now).await? {
            Fetch::Got(fresh) => fresh,
            Fetch::Cut(budget) => return Err(refuse(budget)),
        };
        let fresh_to = fresh.to_ms.map(instant).transpose()?;
        let mut listing = Listing {
            fresh,
            scope,
            seen_since_ms: request.seen_since_ms,
            limit: request.limit as usize,
            room: self
                .config
                .budget
                .answer_bytes
                .saturating_sub(PAGE_OVERHEAD_BYTES),
            devices: Vec::new(),
            position: after.clone(),
            full: false,
        };
        let mut stopped = None;
        for segment in segments(scope, request.prefix.unwrap_or("")) {
            if listing.full || stopped.is_some() {
                break;
            }
            let read = match &segment {
                Segment::Id(id) => self.read_id(&spend, &mut listing, id).await?,
                Segment::Prefix(p) => self.read_prefix(&spend, &mut listing, p).await?,
            };
            stopped = read;
        }
        let moved = listing.position != after;
        let next = match (listing.full || stopped.is_some(), &listing.position) {
            (false, _) => None,
            (true, Some(position)) if moved => Some(position.clone()),
            // Ended before it evaluated anything.
            _ if listing.full => return Err(budget::too_large(&self.config.budget)),
            _ => {
                let budget = stopped.unwrap_or(Exhausted::Queries);
                return Err(budget::refusal(
                    budget,
                    &self.config.budget,
                    Advice::NarrowRange,
                ));
            }
        };
        let next_cursor = next.map(|device_id| {
            let position = ReadingKey {
                ts_ms: 0,
                device_id,
                event_id: String::new(),
            };
            encode_cursor(&position, &binding, &self.config.cursor_keys.get(), now)
        });
        let stats = ReadStats {
            items_read: spend.evaluated(),
            items_returned: listing.devices.len() as u64,
            calls: spend.calls(),
            plan_queries: spend.calls(),
            rounds: spend.calls(),
            duplicates: 0,
        };
        let page = DevicesPage {
            devices: listing.devices,
            next_cursor,
            as_of,
            fresh_to,
        };
        Ok((json_body(&page)?, stats))
    }

    /// Reads one granted id, unless the page is past it.
    async fn read_id(
        &self,
        spend: &Spend<'_>,
        listing: &mut Listing<'_>,
        id: &str,
    ) -> Result<Option<Exhausted>, ApiError> {
        if listing.position.as_deref().is_some_and(|p| id <= p) {
            return Ok(None);
        }
        if let Some(budget) = listing.fresh.load(spend, id, id).await? {
            return Ok(Some(budget));
        }
        let key = keys::directory_entry(id);
        match spend.get(&key.pk, &key.sk).await? {
            Fetch::Got(item) => {
                listing.take(id, item.as_ref())?;
                Ok(None)
            }
            Fetch::Cut(budget) => Ok(Some(budget)),
        }
    }

    /// Reads the ids starting with `prefix` after the page's position, until the page
    /// is full, the range ends or a budget stops it.
    async fn read_prefix(
        &self,
        spend: &Spend<'_>,
        listing: &mut Listing<'_>,
        prefix: &str,
    ) -> Result<Option<Exhausted>, ApiError> {
        let mut q = RollupQuery::partition(DIRECTORY_PK, false);
        if !prefix.is_empty() {
            q.sk_prefix = Some(prefix.to_owned());
        }
        match listing.position.as_deref() {
            // Inside the range: resume after it (an exclusive start DynamoDB accepts,
            // since it lies within the key condition).
            Some(p) if p.starts_with(prefix) => q.after = Some(p.to_owned()),
            // Past every id of the range.
            Some(p) if p > prefix => return Ok(None),
            _ => {}
        }
        loop {
            let page = match spend.query(&q, listing.want()).await? {
                Fetch::Got(page) => page,
                Fetch::Cut(budget) => return Ok(Some(budget)),
            };
            // The fresh last-seen of the page's ids, before any is taken.
            if let (Some(first), Some(last)) = (page.items.first(), page.items.last())
                && let Some(budget) = listing.fresh.load(spend, &first.sk, &last.sk).await?
            {
                return Ok(Some(budget));
            }
            for item in &page.items {
                if listing.take(&item.sk, Some(item))? == Page::Full {
                    return Ok(None);
                }
            }
            match page.last_sk {
                Some(last) => q.after = Some(last),
                None => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(scope: &str, prefix: &str) -> Vec<Segment> {
        let scope = ReadScope::from_claim("c", scope).unwrap();
        segments(&scope, prefix)
    }

    #[test]
    fn a_scope_is_read_as_disjoint_key_ranges_in_id_order() {
        use Segment::{Id, Prefix};
        assert_eq!(
            ids("site-b-* site-* x-1 site-a-9 a", ""),
            vec![Id("a".into()), Prefix("site-".into()), Id("x-1".into())]
        );
        assert_eq!(
            ids("site-b-* site-a-1 site-a-2 zz-*", "site-"),
            vec![
                Id("site-a-1".into()),
                Id("site-a-2".into()),
                Prefix("site-b-".into())
            ]
        );
        // A request prefix inside a granted one reads the request's.
        assert_eq!(ids("site-*", "site-a-"), vec![Prefix("site-a-".into())]);
        assert_eq!(ids("site-b-*", "site-a"), vec![]);
        assert_eq!(segments(&ReadScope::Every, "p"), vec![Prefix("p".into())]);
    }
}
