//! One device's sealed cells (`store::rollup`): what `GET /devices/{device_id}/stats`
//! and `GET /devices/{device_id}/series` read instead of the readings over the hours
//! the sealer has sealed, `[from_ms, end_ms)` of its watermark.
//!
//! A range splits into three parts ([`split`]): the readings before the sealed cells
//! (`head`: before the first sealed hour, and the part of a minute the range starts
//! inside), the sealed cells (whole minutes of sealed hours), and the readings after
//! them (`tail`: the unsealed hours from the watermark on, and the part of a minute the
//! range ends inside). The sealed part reads a device's hour summaries (`dev#{device}`,
//! one Query over the hours) where the interval is a whole number of hours, and its
//! device-hours' minute cells (`dh#{hour}#{part}`/`{device}`, one GetItem an hour,
//! sent at once up to the service's concurrency) for every other whole-minute interval
//! and for the hours the range cuts. The sealer writes every device-hour it read, so an
//! hour without an item is an hour without a reading: nothing is missing.
//!
//! A device with a late mark in a sealed hour of the range (a reading written after
//! its hour was sealed, or a device-hour the sealer isolated) is answered from its
//! readings over the whole range until the next run seals it again: one Query of its
//! part of the marks says so (`Spend::marked`), so a sealed cell is never answered
//! where the readings say otherwise.
//!
//! Each unit (a minute or an hour) lies inside one bucket, since buckets are aligned to
//! multiples of a whole-minute interval (a whole-hour one for summaries) since the
//! epoch; a bucket's cell is the merge of its units' and its readings' cells
//! (`store::rollup::Cell::merge`), which is the cell of its readings: the answer equals
//! the raw one.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use store::rollup::{Cell, DeviceHour, HOUR_MS, MINUTE_MS, RollupQuery, hour_label, hour_of, keys};

use super::answer::store_error;
use super::rollups::{Fetch, Spend};
use super::stats::CellsRead;
use crate::error::ApiError;
use crate::exec::Exhausted;
use crate::params::ceil_to;
use store::rollup::watermark::Watermark;

/// How a range `[from, to)` splits between readings and sealed cells. Each part is
/// half-open and they follow one another: `head`, `sealed`, `tail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Split {
    /// Read from the readings; the whole range when nothing of it is sealed.
    pub(super) head: Option<(i64, i64)>,
    /// Whole minutes of sealed hours, answered from sealed cells.
    pub(super) sealed: Option<(i64, i64)>,
    /// The whole hours of `sealed` answered from the device's hour summaries (a
    /// whole-hour interval); its other minutes come from device-hours.
    pub(super) summaries: Option<(i64, i64)>,
    /// Read from the readings.
    pub(super) tail: Option<(i64, i64)>,
}

fn part(a: i64, b: i64) -> Option<(i64, i64)> {
    (a < b).then_some((a, b))
}

fn floor_to(ms: i64, unit: i64) -> i64 {
    ms.div_euclid(unit) * unit
}

/// The split of `[from, to)` at `interval_ms` over the sealed hours `span`: sealed cells
/// only where the interval is a whole number of minutes.
pub(super) fn split(from: i64, to: i64, interval_ms: i64, span: Option<Watermark>) -> Split {
    let all_raw = Split {
        head: part(from, to),
        sealed: None,
        summaries: None,
        tail: None,
    };
    let Some(span) = span.filter(|_| interval_ms % MINUTE_MS == 0) else {
        return all_raw;
    };
    let a = ceil_to(from.max(span.from_ms), MINUTE_MS);
    let b = floor_to(to.min(span.end_ms), MINUTE_MS);
    if a >= b {
        return all_raw;
    }
    let summaries = if interval_ms % HOUR_MS == 0 {
        part(ceil_to(a, HOUR_MS), floor_to(b, HOUR_MS))
    } else {
        None
    };
    Split {
        head: part(from, a),
        sealed: Some((a, b)),
        summaries,
        tail: part(b, to),
    }
}

impl Split {
    /// The hours whose device-hour is read, each with the minutes of it the sealed part
    /// holds, `[lo, hi)`: every hour of `sealed` outside `summaries`.
    pub(super) fn minute_hours(&self) -> Vec<(i64, i64, i64)> {
        let Some((a, b)) = self.sealed else {
            return Vec::new();
        };
        let (sa, sb) = self.summaries.unwrap_or((0, 0));
        let mut out = Vec::new();
        let mut hour = hour_of(a);
        while hour < b {
            if !(sa..sb).contains(&hour) {
                out.push((hour, a.max(hour), b.min(hour + HOUR_MS)));
            }
            hour += HOUR_MS;
        }
        out
    }
}

/// The sealed cells of one metric read for a split, by unit start (a minute or an
/// hour), and where the read stopped short.
#[derive(Debug, Default)]
pub(super) struct SealedCells {
    pub(super) cells: BTreeMap<i64, Cell>,
    /// Readings of the units read, with or without the metric.
    pub(super) readings: u64,
    /// The first instant of the sealed part not read, and the budget that stopped it
    /// (or the most hours a page reads): every cell before it is here, none after.
    pub(super) cut: Option<(i64, Exhausted)>,
}

impl SealedCells {
    fn cut_at(&mut self, at: i64, budget: Exhausted) {
        if self.cut.is_none_or(|(t, _)| at < t) {
            self.cut = Some((at, budget));
        }
    }

    fn add(&mut self, start: i64, readings: u64, cell: Option<&Cell>) {
        self.readings += readings;
        if let Some(cell) = cell {
            self.cells.insert(start, cell.clone());
        }
    }
}

/// Reads the sealed part of `split` for `read`'s device and metric: its summaries'
/// Query and at most `read.most_hours` device-hours (the first ones; the rest are
/// cut), concurrently.
pub(super) async fn read_sealed(
    spend: &Spend<'_>,
    read: &CellsRead<'_>,
    split: &Split,
    concurrency: usize,
) -> Result<SealedCells, ApiError> {
    let (device, metric, most_hours) = (read.device, read.metric, read.most_hours);
    let mut out = SealedCells::default();
    let mut hours = split.minute_hours();
    if hours.len() > most_hours {
        out.cut_at(hours[most_hours].1, Exhausted::Queries);
        hours.truncate(most_hours);
    }
    // The futures made first: a stream over a closure would not be `Send`.
    let gets: Vec<_> = hours
        .iter()
        .map(|&(hour, _, _)| read_device_hour(spend, device, hour))
        .collect();
    let gets = futures::stream::iter(gets)
        .buffered(concurrency.max(1))
        .collect::<Vec<_>>();
    let summaries = read_summaries(spend, device, split.summaries);
    let (got, summaries) = futures::join!(gets, summaries);
    for (&(hour, lo, hi), fetched) in hours.iter().zip(got) {
        match fetched? {
            Fetch::Got(None) => {}
            Fetch::Got(Some(dh)) => {
                for (minute, cells) in dh.minutes.range(..60) {
                    let start = hour + i64::from(*minute) * MINUTE_MS;
                    if (lo..hi).contains(&start) {
                        out.add(start, cells.readings, cells.metrics.get(metric));
                    }
                }
            }
            Fetch::Cut(budget) => out.cut_at(lo, budget),
        }
    }
    let (items, cut) = summaries?;
    for dh in items {
        out.add(dh.hour_ms, dh.hour.readings, dh.hour.metrics.get(metric));
    }
    if let Some((at, budget)) = cut {
        out.cut_at(at, budget);
    }
    if let Some((at, _)) = out.cut {
        out.cells.split_off(&at);
    }
    Ok(out)
}

/// One device-hour, `None` when the device had no reading in the hour.
async fn read_device_hour(
    spend: &Spend<'_>,
    device: &str,
    hour: i64,
) -> Result<Fetch<Option<DeviceHour>>, ApiError> {
    let key = keys::device_hour(device, hour);
    Ok(match spend.get(&key.pk, &key.sk).await? {
        Fetch::Got(item) => Fetch::Got(
            item.map(|i| i.body::<DeviceHour>())
                .transpose()
                .map_err(store_error)?,
        ),
        Fetch::Cut(budget) => Fetch::Cut(budget),
    })
}

/// The device's hour summaries of the hours `[a, b)`, page after page of one Query, and
/// the first hour not read when a budget stopped it.
async fn read_summaries(
    spend: &Spend<'_>,
    device: &str,
    hours: Option<(i64, i64)>,
) -> Result<(Vec<DeviceHour>, Option<(i64, Exhausted)>), ApiError> {
    let mut out = Vec::new();
    let Some((a, b)) = hours else {
        return Ok((out, None));
    };
    let mut q = RollupQuery::partition(keys::device_summaries(device), true);
    q.sk_between = Some((hour_label(a), hour_label(b - HOUR_MS)));
    // One more than the hours, so that the last page says it is the last.
    let want = u64::try_from((b - a) / HOUR_MS).unwrap_or(u64::MAX) + 1;
    let mut covered = a;
    loop {
        let page = match spend.query(&q, want).await? {
            Fetch::Got(page) => page,
            Fetch::Cut(budget) => return Ok((out, Some((covered, budget)))),
        };
        for item in &page.items {
            let dh: DeviceHour = item.body().map_err(store_error)?;
            if (a..b).contains(&dh.hour_ms) {
                out.push(dh);
            }
        }
        let Some(last) = page.last_sk else {
            return Ok((out, None));
        };
        // Every hour up to the last evaluated is read.
        covered = last
            .parse::<i64>()
            .map_err(|_| ApiError::internal(format!("a summary's sort key {last:?}")))?
            + HOUR_MS;
        q.after = Some(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = HOUR_MS;
    const M: i64 = MINUTE_MS;

    fn span(from_ms: i64, end_ms: i64) -> Option<Watermark> {
        Some(Watermark::span(from_ms, end_ms))
    }

    #[test]
    fn a_range_splits_into_readings_sealed_minutes_and_readings() {
        // Sealed [2h, 10h); the range starts inside a minute of hour 1 and ends inside a
        // minute of hour 12.
        let (from, to) = (H + 30 * M + 5, 12 * H + 7 * M + 1);
        let s = split(from, to, 5 * M, span(2 * H, 10 * H));
        assert_eq!(s.head, Some((from, 2 * H)), "before the first sealed hour");
        assert_eq!(s.sealed, Some((2 * H, 10 * H)));
        assert_eq!(s.summaries, None, "5m reads minute cells");
        assert_eq!(s.tail, Some((10 * H, to)), "from the watermark on");
        assert_eq!(s.minute_hours().len(), 8);
        // Inside the sealed hours: whole minutes sealed, the parts of minutes raw.
        let (from, to) = (3 * H + 10 * M + 1, 5 * H + 20 * M + 30);
        let s = split(from, to, H, span(2 * H, 10 * H));
        assert_eq!(s.head, Some((from, 3 * H + 11 * M)));
        assert_eq!(s.sealed, Some((3 * H + 11 * M, 5 * H + 20 * M)));
        assert_eq!(s.summaries, Some((4 * H, 5 * H)), "the one whole hour");
        assert_eq!(s.tail, Some((5 * H + 20 * M, to)));
        assert_eq!(
            s.minute_hours(),
            vec![
                (3 * H, 3 * H + 11 * M, 4 * H),
                (5 * H, 5 * H, 5 * H + 20 * M)
            ],
            "the hours the range cuts, by their minutes"
        );
        // A sub-minute interval, or nothing sealed in the range: all readings.
        for (interval, sealed) in [
            (30_000, span(2 * H, 10 * H)),
            (M, None),
            (M, span(20 * H, 30 * H)),
        ] {
            let s = split(from, to, interval, sealed);
            assert_eq!((s.head, s.sealed, s.tail), (Some((from, to)), None, None));
        }
        // Less than a whole minute of sealed time: all readings.
        let s = split(3 * H + 5, 3 * H + M - 5, M, span(2 * H, 10 * H));
        assert_eq!(s.sealed, None);
    }
}
