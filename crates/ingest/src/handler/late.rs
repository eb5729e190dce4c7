//! Late marks: a reading written after the sealer may have sealed its hour leaves a
//! mark in the rollups table (`store::rollup::late_mark`, `late#{part}` /
//! `{hour}#{device}`), and the sealer seals its device-hour again (the sealer's module
//! doc, "Late marks").
//!
//! The sealer seals hour H once, when its clock reaches H + 1 h + the lateness horizon
//! it publishes in its watermark (`store::rollup::horizon`: the ingest reads it there,
//! [`HorizonCache`], and marks with it, never with a larger one). So each reading this invocation **wrote** (its write
//! acknowledged) whose hour ends at least that horizon, less [`LATE_MARK_MARGIN`],
//! before the invocation's clock gets one mark per (device, hour) of the batch, each
//! with a fresh nonce from the invocation's RNG, and only after the readings' writes
//! were acknowledged: the sealer reads a mark, then the readings, so a mark must never
//! be seen before its reading is stored. A mark whose write fails leaves each message
//! holding its readings with those readings [`Unmarked`]: their fate stays what the
//! writes made it (stored), and the leave stage sends the readings back as a copy that
//! holds stored readings (their rewrite is idempotent), which comes back until the mark
//! is written and is never dead-lettered (`crate::fate::leave`). Readings that are not
//! late cost no write to the rollups table.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;

use futures::StreamExt as _;
use rand::Rng;
use sharding::time::Timestamp;
use store::Reading;
use store::StoreError;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::queue::Queue;
use store::rollup::horizon::{Horizon, INGEST_REFRESH, INGEST_VALID};
use store::rollup::{HOUR_MS, RollupTable, hour_of, keys, late_mark};

use super::stages::{KeyedWrite, Message, Shared, written_shared};
use super::{BatchContext, Ingest};
use crate::fate::Unmarked;

/// How much earlier than the sealer's own moment (its hour's end plus the horizon) a
/// written reading counts as late: the time between the decision, made on the
/// invocation's clock read once at its start, and its write landing, plus the skew
/// between the ingest's clock and the sealer's.
///
/// A reading left unmarked was decided at `now < end + horizon - margin`, and its write
/// lands before the invocation ends, at most the function's timeout after `now`: the
/// template's `IngestTimeout` defaults to 30 s (and every invocation here keeps its
/// writes within the Lambda deadline). With Lambda hosts' clocks NTP-synchronised to
/// well under a second, the write lands before `end + horizon` on the sealer's clock,
/// that is, before the seal reads the hour, as long as the timeout plus the skew stays
/// below these 5 minutes. The template allows `IngestTimeout` up to 900 s, so the margin
/// used is never less than the invocation's own span plus [`CLOCK_SKEW`]
/// ([`margin_for`]): a longer timeout widens it rather than breaking it.
pub const LATE_MARK_MARGIN: Duration = Duration::from_secs(300);

/// The skew allowed between the ingest's and the sealer's clocks when an invocation's
/// span, not [`LATE_MARK_MARGIN`], sets the margin.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The margin of an invocation that has `span` from its start to its deadline.
fn margin_for(span: Duration) -> Duration {
    LATE_MARK_MARGIN.max(span.saturating_add(CLOCK_SKEW))
}

/// Whether a reading stamped `ts`, written by an invocation started at `now`, may land
/// after its hour was sealed: `now >= hour_end(ts) + horizon - margin`.
pub(crate) fn may_be_sealed(
    ts: Timestamp,
    now: Timestamp,
    horizon: Duration,
    margin: Duration,
) -> bool {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let from = hour_of(ts.as_millis())
        .saturating_add(HOUR_MS)
        .saturating_add(ms(horizon))
        .saturating_sub(ms(margin));
    now.as_millis() >= from
}

/// The horizon last read from the sealer's watermark, per container: read again once
/// [`INGEST_REFRESH`] old; when that read fails, used while [`INGEST_VALID`] old, then
/// none (the safe minimum, 0: every reading whose hour may have ended is marked).
#[derive(Debug, Default)]
pub(crate) struct HorizonCache(Mutex<Option<ReadHorizon>>);

/// One read of the watermark: when (the invocation's clock, ms), and its horizon (none:
/// no watermark yet, or one an older sealer wrote).
#[derive(Debug, Clone, Copy)]
struct ReadHorizon {
    at_ms: i64,
    horizon: Option<Horizon>,
}

/// What the ingest reads of the watermark's body.
#[derive(Deserialize)]
struct Published {
    #[serde(default)]
    horizon: Option<Horizon>,
}

/// The sealer's published horizon, from its watermark (eventually consistent: a read
/// at most a second behind is covered by the switch's skew).
async fn read_horizon<L: RollupTable>(rollups: &L) -> Result<Option<Horizon>, StoreError> {
    let key = keys::watermark();
    let Some(item) = rollups.get(&key.pk, &key.sk, false).await? else {
        return Ok(None);
    };
    Ok(item.body::<Published>()?.horizon)
}

/// Each (device, hour start in ms) of a written late reading, with the messages (by
/// index in the batch) holding its readings, and theirs.
pub(crate) type LateHours = BTreeMap<(String, i64), BTreeMap<usize, Vec<Reading>>>;

/// What the mark stage did.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Marks {
    /// Marks written.
    pub(crate) written: u64,
    /// Marks whose write failed (their readings sent back, `crate::fate::leave`).
    pub(crate) failed: u64,
    /// Per message of the batch, its stored readings whose marks failed.
    pub(crate) unmarked: Vec<Option<Unmarked>>,
}

/// The late hours of the readings of `messages` and `slabs` whose writes were
/// acknowledged, each reading counted for the message it came from (a write shared by
/// one device's messages, or a slab, names each member's), as an invocation started at
/// `now` whose deadline is `span` away, marking with `horizon`, decides them. A slab's
/// readings are at most `SLAB_ACCEPT_SECS` old, so under a horizon longer than the
/// margin they are never late; they are decided as any other all the same.
pub(super) fn late_written(
    messages: &[Message<KeyedWrite>],
    slabs: &[Shared<KeyedWrite>],
    horizon: Duration,
    now: Timestamp,
    span: Duration,
) -> LateHours {
    let mut late = LateHours::new();
    let margin = margin_for(span);
    let written = messages
        .iter()
        .enumerate()
        .flat_map(|(own, message)| message.written_readings(own))
        .chain(written_shared(slabs));
    for (origin, reading) in written {
        if !may_be_sealed(reading.ts, now, horizon, margin) {
            continue;
        }
        late.entry((reading.device_id.clone(), hour_of(reading.ts.as_millis())))
            .or_default()
            .entry(origin)
            .or_default()
            .push(reading.clone());
    }
    late
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L: RollupTable> Ingest<T, S, Q, L> {
    /// Whether late readings are marked (a rollups table is configured).
    pub(super) fn marks_late(&self) -> bool {
        self.rollups.is_some()
    }

    /// The horizon this invocation marks with: the sealer's, as published in its
    /// watermark ([`HorizonCache`]); the ingest's own `LATENESS_HORIZON_SECS` (the same
    /// template parameter) until the sealer published one. Nothing is read without a
    /// rollups table.
    pub(super) async fn lateness_horizon(&self, cx: &BatchContext<'_>) -> Duration {
        let Some(rollups) = &self.rollups else {
            return self.config.lateness_horizon;
        };
        let now = cx.now.as_millis();
        let age = |read: &ReadHorizon| {
            Duration::from_millis(u64::try_from(now.saturating_sub(read.at_ms)).unwrap_or(0))
        };
        let cached = *self.horizon.0.lock();
        let in_force = |read: ReadHorizon| match read.horizon {
            Some(h) => h.for_ingest(now),
            None => self.config.lateness_horizon,
        };
        if let Some(read) = cached.filter(|r| age(r) < INGEST_REFRESH) {
            return in_force(read);
        }
        match tokio::time::timeout_at(cx.work_deadline, read_horizon(rollups)).await {
            Ok(Ok(horizon)) => {
                let read = ReadHorizon {
                    at_ms: now,
                    horizon,
                };
                *self.horizon.0.lock() = Some(read);
                in_force(read)
            }
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the deadline came first".to_owned(),
                };
                match cached.filter(|r| age(r) < INGEST_VALID) {
                    Some(read) => in_force(read),
                    None => {
                        tracing::warn!(%error, "the sealer's horizon could not be read: marking with none");
                        Duration::ZERO
                    }
                }
            }
        }
    }

    /// Writes one late mark per late hour, after the readings' writes. A failed mark
    /// changes no message's settled fate (its readings are stored): it names, for each
    /// of the `messages` of the batch, the readings whose mark failed.
    pub(super) async fn mark_stage<G: Rng + ?Sized>(
        &self,
        late: LateHours,
        messages: usize,
        cx: &BatchContext<'_>,
        rng: &mut G,
    ) -> Marks {
        let mut done = Marks {
            unmarked: vec![None; messages],
            ..Marks::default()
        };
        let Some(rollups) = &self.rollups else {
            return done;
        };
        let marks: Vec<_> = late
            .into_iter()
            .map(|((device, hour), holders)| (late_mark(&device, hour, rng.random()), holders))
            .collect();
        let deadline = cx.work_deadline;
        let results: Vec<Result<(), String>> = futures::stream::iter(marks.iter())
            .map(|(mark, _)| async move {
                match tokio::time::timeout_at(deadline, rollups.put(mark)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("the deadline came first".to_owned()),
                }
            })
            .buffered(self.config.max_inflight)
            .collect()
            .await;
        for ((mark, holders), result) in marks.into_iter().zip(results) {
            let Err(error) = result else {
                done.written += 1;
                continue;
            };
            done.failed += 1;
            tracing::warn!(mark = %mark, %error, "late mark not written; its readings go back to the queue");
            for (m, readings) in holders {
                let Some(slot) = done.unmarked.get_mut(m) else {
                    continue;
                };
                let entry = slot.get_or_insert_with(|| Unmarked {
                    readings: Vec::new(),
                    reason: format!("{mark}: {error}"),
                });
                entry.readings.extend(readings);
            }
        }
        done
    }
}
