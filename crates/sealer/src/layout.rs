//! Which table layouts the sealer can seal, checked before a run seals any hour.
//!
//! The sealer reads an hour of every device through `sharding::read_plan::plan_all`,
//! whose keys must be listed without knowing the devices. Only a time-bucket layout's
//! are: `{s}#{bucket}` for s in 0..N, plus the dedicated sub-shard keys of the entities
//! the hot index lists. An unsharded (`{device}`), random or calculated
//! (`{device}#{r}`) key begins with the device id, and nothing lists every device that
//! wrote in an hour: the shard table holds a record only for a device whose fan-out was
//! decided, and the sealer's own directory only devices it sealed before, never a new
//! one. Reading such an hour whole would take a Scan of the readings table (every item
//! of every hour; the sealer's role grants none). So such an epoch is not sealed: a
//! run whose hours reach it (it is in force from the run's first hour on, or
//! scheduled) seals no hour and fails with [`UnsealableLayout`], naming the layout and
//! the epoch's start, and the Lambda prints the [`METRIC`] the template's
//! `SealerLayoutAlarm` watches. Late marks of hours already sealed are still sealed
//! first: one device's read (`plan_entity`) works under every layout.
//!
//! The template refuses a `ShardStrategy` other than `time-bucket` at deploy (rule
//! `SealerReadsTimeBuckets`), and `shardline blocks` refuses to schedule an epoch the
//! sealer cannot read unless told `--without-sealing`.

use sharding::epoch::TableHistory;
use sharding::layout::{Layout, Strategy};
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{RollupTable, hour_label};

use crate::{SealError, Sealer};

/// The EMF metric (dimension `Function=sealer`) of a run refused for its layout.
pub const METRIC: &str = "UnsealableLayout";

/// Whether the sealer can read an hour of every device under `layout` (without a scan).
#[must_use]
pub const fn sealable(layout: &Layout) -> bool {
    matches!(layout.strategy, Strategy::TimeBucket { .. })
}

/// A layout in force over hours the sealer must seal, whose keys it cannot list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the table's layout {layout}, in force {since}, cannot be sealed: its partition keys \
     begin with the device id, so reading every device's hour would take a scan of the \
     readings table; no hour from {first} on is sealed. The derived items need a \
     time-bucket layout (docs/operations.md, SealerLayoutAlarm)",
    since = since(*.effective_from),
    first = hour(*.first_hour_ms)
)]
pub struct UnsealableLayout {
    /// The layout.
    pub layout: Layout,
    /// Its epoch's start; `None` for the table's first layout (in force from the start).
    pub effective_from: Option<Timestamp>,
    /// The first hour (epoch ms) the sealer was asked to seal.
    pub first_hour_ms: i64,
}

/// An hour's start as RFC 3339 (its epoch ms where out of range).
fn hour(ms: i64) -> String {
    Timestamp::from_millis(ms).map_or_else(|_| hour_label(ms), |t| t.to_rfc3339())
}

fn since(from: Option<Timestamp>) -> String {
    match from {
        Some(t) => format!("from {t}"),
        None => "since the table's start".to_owned(),
    }
}

/// The first epoch of `history` in force somewhere in `[from_ms, to_ms)` (scheduled
/// epochs included) that the sealer cannot seal.
#[must_use]
pub fn first_unsealable(
    history: &TableHistory,
    from_ms: i64,
    to_ms: i64,
) -> Option<UnsealableLayout> {
    let epochs = history.epochs();
    epochs.iter().enumerate().find_map(|(i, epoch)| {
        let start = epoch.effective_from.as_millis();
        let end = epochs
            .get(i + 1)
            .map_or(i64::MAX, |next| next.effective_from.as_millis());
        let overlaps = start < to_ms && end > from_ms;
        (overlaps && !sealable(&epoch.value)).then(|| UnsealableLayout {
            layout: epoch.value.clone(),
            effective_from: (i > 0).then_some(epoch.effective_from),
            first_hour_ms: from_ms,
        })
    })
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Fails with [`UnsealableLayout`] when the stored layout history has an epoch in
    /// force in `[from_ms, to_ms)` that the sealer cannot read; a table without a
    /// stored layout has nothing to seal yet.
    pub async fn check_layouts(
        &self,
        from_ms: i64,
        to_ms: i64,
        now: Timestamp,
    ) -> Result<(), SealError> {
        let Some(history) = self.directory.stored_layout(now).await? else {
            return Ok(());
        };
        match first_unsealable(&history, from_ms, to_ms) {
            Some(refused) => Err(refused.into()),
            None => Ok(()),
        }
    }
}

/// The EMF line of a run refused for its layout: [`METRIC`] = 1.
#[must_use]
pub fn metrics_line(now: Timestamp) -> String {
    use store::emf::{Metric, line};
    line(
        now.as_millis(),
        &[("Function", "sealer")],
        &[Metric::count(METRIC, 1)],
    )
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use sharding::epoch::Epoch;
    use sharding::time::Bucket;

    use super::*;

    const H: i64 = 3_600_000;

    fn history(epochs: &[(i64, Layout)]) -> TableHistory {
        let epochs = epochs
            .iter()
            .enumerate()
            .map(|(i, (at, value))| Epoch {
                effective_from: match i {
                    0 => Timestamp::MIN,
                    _ => Timestamp::from_millis(*at).unwrap_or(Timestamp::MAX),
                },
                value: value.clone(),
            })
            .collect();
        TableHistory::from_epochs(epochs).unwrap_or_else(|e| panic!("{e}"))
    }

    fn n(k: u32) -> NonZeroU32 {
        NonZeroU32::new(k).unwrap_or(NonZeroU32::MIN)
    }

    #[test]
    fn only_time_buckets_are_sealable() {
        assert!(sealable(&Layout::time_bucket(Bucket::Hour, n(4))));
        assert!(sealable(&Layout::time_bucket_dedicated(Bucket::Day, n(4))));
        assert!(!sealable(&Layout::unsharded()));
        assert!(!sealable(&Layout::random(n(4))));
        assert!(!sealable(&Layout::calculated("device_id", n(4))));
    }

    #[test]
    fn an_epoch_counts_where_it_overlaps_the_hours_asked() {
        let tb = Layout::time_bucket(Bucket::Hour, n(4));
        let h = history(&[
            (0, Layout::unsharded()),
            (10 * H + 5, tb.clone()),
            (20 * H, Layout::random(n(4))),
        ]);
        // The legacy epoch is only in the past of hour 11, and the random one after 19.
        assert_eq!(first_unsealable(&h, 11 * H, 19 * H), None);
        // The hour the switch falls in holds readings of both layouts.
        let legacy = first_unsealable(&h, 10 * H, 11 * H).map(|u| u.effective_from);
        assert_eq!(legacy, Some(None));
        // Scheduled epochs count for a run (to the end of time).
        let random = first_unsealable(&h, 11 * H, i64::MAX);
        assert_eq!(
            random.map(|u| (u.layout, u.effective_from)),
            Some((Layout::random(n(4)), Timestamp::from_millis(20 * H).ok()))
        );
    }

    #[test]
    fn the_error_names_the_layout_its_start_and_the_first_hour() {
        let h = history(&[(0, Layout::unsharded())]);
        let e = first_unsealable(&h, 2 * H, i64::MAX).map(|u| u.to_string());
        let e = e.unwrap_or_default();
        assert!(
            e.contains("layout unsharded, in force since the table's start"),
            "{e}"
        );
        assert!(e.contains("from 1970-01-01T02:00:00"), "{e}");
        assert!(e.contains("SealerLayoutAlarm"), "{e}");
    }
}
