//! How far a merge expects to read: the density its pages show (or an earlier read's),
//! the horizon where the answer ends at the latest, the cutoff where it is expected to
//! end, the streams read ahead or refilled, and each page's `Limit`. The module header
//! of [`super`] says why each is what it is.

use std::cmp::Ordering;

use super::stream::{overlaps, refill};
use super::{Arrival, BoundedMerge, TimedKey};

/// What one round of pages is planned by.
#[derive(Debug, Clone, Copy)]
pub(super) struct Round {
    /// Items the answer still needs, plus one to know whether more follow (at most the
    /// window).
    pub(super) remaining: usize,
    /// Items per millisecond of one stream's span, and over how many streams.
    pub(super) density: Option<(f64, usize)>,
    /// Where the answer is expected to end.
    pub(super) cutoff: Option<i64>,
    /// Where a time-indexed page stops: the cutoff with a quarter to spare.
    pub(super) page_end: Option<i64>,
}

impl<K: TimedKey, T> BoundedMerge<K, T> {
    /// A bounded merge: clips every stream's span to the horizon of the distinct
    /// items read and not yet emitted (see "Clipping to the horizon").
    pub(super) fn clip_to_horizon(&mut self) {
        if self.window != usize::MAX {
            return;
        }
        let remaining = self.limit.saturating_add(1).saturating_sub(self.emitted);
        let Some(end) = self.distinct_horizon(remaining) else {
            return;
        };
        let order = self.order;
        for s in &mut self.streams {
            s.clip(end, order);
        }
    }

    /// The timestamp of the `remaining`-th distinct key, in merge order, among those
    /// read and not yet emitted, when there are that many. Copies of one item count
    /// once, so at least `remaining` different items lie at or before it.
    fn distinct_horizon(&self, remaining: usize) -> Option<i64> {
        let order = self.order;
        let last = self.last.as_ref();
        let mut known: Vec<&K> = self
            .streams
            .iter()
            .flat_map(|s| s.buffer.iter().chain(&s.held).map(|(k, _)| k))
            .filter(|k| last.is_none_or(|l| order.before(l, k)))
            .collect();
        if remaining == 0 || known.len() < remaining {
            return None;
        }
        known.sort_unstable_by(|a, b| order.cmp(a, b));
        known.dedup();
        known.get(remaining - 1).map(|k| k.ts_ms())
    }

    /// Items per millisecond of one stream's span, over every ordered stream read so
    /// far, and how many streams that is; before any span is covered, the hint (over
    /// no stream), if there is one.
    pub(super) fn density(&self) -> Option<(f64, usize)> {
        self.measured_density()
            .or_else(|| self.hint.map(|hint| (hint, 0)))
    }

    /// The density this read's own pages show, and over how many streams.
    pub(super) fn measured_density(&self) -> Option<(f64, usize)> {
        let order = self.order;
        let (mut kept, mut covered, mut started) = (0u64, 0i64, 0usize);
        for s in self.streams.iter().filter(|s| s.started && s.ordered()) {
            started += 1;
            kept += s.kept;
            covered += (s.shape.span.1 - s.shape.span.0) - s.unread_ms(order);
        }
        (started > 0 && covered > 0).then(|| (kept as f64 / covered as f64, started))
    }

    /// The timestamps of the items read and not yet emitted (buffered or held back).
    fn unemitted(&self) -> impl Iterator<Item = i64> + '_ {
        self.streams
            .iter()
            .flat_map(|s| s.buffer.iter().chain(&s.held).map(|(k, _)| k.ts_ms()))
    }

    /// Where the answer ends at the latest: the timestamp of the `remaining`-th item
    /// in merge order among those already read and not yet emitted (buffered or held
    /// back), when there are that many. The merge emits at most `remaining` more items,
    /// so nothing a stream holds beyond this timestamp can be among them (see "Refill
    /// pages" in the module header).
    pub(super) fn horizon(&self, remaining: usize) -> Option<i64> {
        let order = self.order;
        let mut known: Vec<i64> = self.unemitted().collect();
        if remaining == 0 || known.len() < remaining {
            return None;
        }
        let (_, nth, _) = known.select_nth_unstable_by(remaining - 1, |a, b| order.cmp(a, b));
        Some(*nth)
    }

    /// Where the answer is expected to end: the first timestamp, in merge order, by
    /// which the items read and not yet emitted, plus `density` times the unread time
    /// of every live ordered stream up to it, add up to `remaining`. `None` when even
    /// all of it would not.
    pub(super) fn cutoff(&self, remaining: usize, density: f64) -> Option<i64> {
        // Positions grow in merge order.
        let pos = |ts: i64| if self.order.descending() { -ts } else { ts };
        let known: Vec<i64> = self.unemitted().map(pos).collect();
        // Each live ordered stream's unread stretch, [from, to) in positions.
        let unread: Vec<(i64, i64)> = self
            .streams
            .iter()
            .filter(|s| s.ordered() && !s.done)
            .map(|s| {
                let (lo, hi) = s.shape.span;
                let (start, end) = if self.order.descending() {
                    (pos(hi - 1), pos(lo) + 1)
                } else {
                    (lo, hi)
                };
                let from = if s.started {
                    s.reached().map_or(end, pos)
                } else {
                    start
                };
                (from, end)
            })
            .collect();
        let supply = |c: i64| {
            known.iter().filter(|&&k| k <= c).count() as f64
                + unread
                    .iter()
                    .map(|&(from, to)| density * (c.min(to) - from).max(0) as f64)
                    .sum::<f64>()
        };
        let need = remaining as f64;
        let (mut lo, mut hi) = (
            self.min_bound().map(|i| pos(self.streams[i].bound.ts_ms))?,
            known
                .iter()
                .copied()
                .chain(unread.iter().map(|u| u.1))
                .max()?,
        );
        if supply(hi) < need {
            return None;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if supply(mid) >= need {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(pos(lo))
    }

    /// Not-yet-read ordered streams to open now beside `fetching` (see "Reading
    /// ahead" in the module header), in merge order of their starts.
    pub(super) fn read_ahead(
        &self,
        fetching: &[usize],
        remaining: usize,
        density: Option<(f64, usize)>,
        concurrency: usize,
    ) -> Vec<usize> {
        let order = self.order;
        let streams = &self.streams;
        if fetching.iter().any(|&i| !streams[i].ordered()) {
            return Vec::new();
        }
        let Some((density, started)) = density else {
            return Vec::new();
        };
        let need = remaining as f64;
        let mut supply: f64 = streams.iter().map(|s| s.buffer.len() as f64).sum::<f64>()
            + fetching
                .iter()
                .map(|&i| density * streams[i].unread_ms(order) as f64)
                .sum::<f64>();
        // A stream the horizon clipped away whole is done before its first page: it
        // holds nothing the answer can need, and reading it would cost a Query.
        let mut candidates: Vec<usize> = streams
            .iter()
            .enumerate()
            .filter(|(i, s)| s.ordered() && !s.started && !s.done && !fetching.contains(i))
            .map(|(i, _)| i)
            .collect();
        candidates.sort_by(|&a, &b| streams[a].bound.cmp(&streams[b].bound, order));
        // Without a usable density, grow by doubling rather than open everything.
        let open = concurrency.saturating_sub(fetching.len());
        let cap = if density == 0.0 {
            started.min(open)
        } else {
            open
        };
        let mut out = Vec::new();
        for i in candidates {
            if supply >= need || out.len() >= cap {
                break;
            }
            supply += density * streams[i].unread_ms(order) as f64;
            out.push(i);
        }
        out
    }

    /// Streams that will run dry before the expected end (`cutoff`), to refill in the
    /// same round as those that already did: the least reached first, within the
    /// concurrency left beside `fetching`.
    pub(super) fn running_dry(
        &self,
        fetching: &[usize],
        cutoff: i64,
        concurrency: usize,
    ) -> Vec<usize> {
        let order = self.order;
        let mut dry: Vec<(i64, usize)> = (0..self.streams.len())
            .filter(|i| !fetching.contains(i))
            .filter_map(|i| self.streams[i].reached().map(|r| (r, i)))
            .filter(|(r, _)| order.cmp(r, &cutoff) == Ordering::Less)
            .collect();
        dry.sort_by(|a, b| order.cmp(&a.0, &b.0));
        let room = concurrency.saturating_sub(fetching.len());
        dry.into_iter().take(room).map(|(_, i)| i).collect()
    }

    /// The `Limit` of stream `i`'s page in `round`, where `fetch` are the streams the
    /// round reads; `None` for an unordered stream (read whole).
    pub(super) fn page_limit(&self, i: usize, fetch: &[usize], round: &Round) -> Option<u32> {
        let order = self.order;
        let Round {
            remaining,
            density,
            cutoff,
            page_end,
        } = *round;
        let s = &self.streams[i];
        if !s.ordered() {
            return None;
        }
        // Streams competing with this one for the remaining need: those whose spans
        // overlap its own, already read and still live, or about to be read.
        let competing = self
            .streams
            .iter()
            .enumerate()
            .filter(|(j, o)| {
                o.live() && (o.started || fetch.contains(j)) && overlaps(o.shape.span, s.shape.span)
            })
            .count()
            .max(1);
        let share = (remaining + remaining / 4).div_ceil(competing);
        let page = match (s.reached(), density, cutoff) {
            (Some(r), Some((d, _)), Some(c)) => {
                let own = refill(r, d.max(s.own_density(order)), c, order);
                if s.shape.arrival == Arrival::TimeIndexed {
                    own.max(share)
                } else {
                    own
                }
            }
            // Not read yet, bounded by time where the answer is expected to end: four
            // times its share up to there, so that a stream denser than the average
            // (more devices on its shard) is read to the end in this round too, and no
            // more than that if the density was wrong.
            (None, Some(_), Some(_))
                if s.shape.arrival == Arrival::TimeIndexed && page_end.is_some() =>
            {
                share * 4
            }
            _ => share,
        };
        Some(u32::try_from(page.clamp(1, remaining)).unwrap_or(u32::MAX))
    }
}
