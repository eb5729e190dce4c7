//! The lateness horizon, one value for the sealer and the ingest.
//!
//! The sealer seals hour H once its clock reaches H + 1 h + the horizon; the ingest
//! marks a written reading late when its hour may be sealed by the time it lands
//! (`ingest::handler::LATE_MARK_MARGIN`). A reading slips past both a mark and the seal
//! when the ingest marks with a larger horizon than the sealer seals with. So the
//! sealer is the one source: it publishes the horizon in its watermark's body
//! ([`Horizon`], `seal`/`state`), and the ingest reads it from there (eventually
//! consistent, at most [`INGEST_REFRESH`] old).
//!
//! A change of `LATENESS_HORIZON_SECS` is published at once and takes effect over
//! [`SWITCH`]: until then the sealer seals with the larger of the old and the new, and
//! the ingest marks with the smaller, so at every instant an ingest's horizon is at
//! most any running sealer's. [`SWITCH`] outlasts an ingest's cached read, its longest
//! invocation and a sealer's longest run, each with the clock skew allowed, so once it
//! has passed no one uses the old value.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a change of the horizon takes to take effect in both functions.
pub const SWITCH: Duration = Duration::from_secs(30 * 60);
/// How often an ingest reads the published horizon again.
pub const INGEST_REFRESH: Duration = Duration::from_secs(60);
/// The longest invocation of either function (the template's `IngestTimeout` and
/// `SealerTimeout` allow at most 900 s).
pub const LONGEST_INVOCATION: Duration = Duration::from_secs(900);
/// The clock skew allowed between the functions' hosts (and a read's lag behind a
/// write).
pub const SKEW: Duration = Duration::from_secs(60);
/// How long an ingest may go on using a horizon it read when it cannot read it again:
/// a change published after that read takes effect in the sealer [`SWITCH`] later, and
/// an invocation started before this age ends, clocks skewed, before then.
pub const INGEST_VALID: Duration =
    Duration::from_secs(SWITCH.as_secs() - LONGEST_INVOCATION.as_secs() - SKEW.as_secs());

/// The horizon the sealer publishes in its watermark's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Horizon {
    /// The horizon configured (`LATENESS_HORIZON_SECS`), in force from `switch_ms`.
    pub secs: u64,
    /// Before `switch_ms`, the smallest horizon an ingest may still mark with, and
    /// the largest a sealer may still seal with, besides `secs`.
    pub low_secs: u64,
    pub high_secs: u64,
    /// When `secs` alone is in force (epoch ms, the sealer's clock).
    pub switch_ms: i64,
}

impl Horizon {
    /// A horizon in force alone.
    pub fn steady(secs: u64) -> Self {
        Self {
            secs,
            low_secs: secs,
            high_secs: secs,
            switch_ms: 0,
        }
    }

    fn switching(&self, now_ms: i64) -> bool {
        now_ms < self.switch_ms
    }

    /// The horizon a sealer run started at `now_ms` seals with.
    pub fn for_sealer(&self, now_ms: i64) -> Duration {
        Duration::from_secs(match self.switching(now_ms) {
            true => self.secs.max(self.high_secs),
            false => self.secs,
        })
    }

    /// The horizon an ingest invocation started at `now_ms` marks with.
    pub fn for_ingest(&self, now_ms: i64) -> Duration {
        Duration::from_secs(match self.switching(now_ms) {
            true => self.secs.min(self.low_secs),
            false => self.secs,
        })
    }

    /// What a sealer run at `now_ms` configured with `configured` publishes, `stored`
    /// being what the watermark holds: the same while the configuration is unchanged;
    /// else the new value, switching over [`SWITCH`] from every value in use now. With
    /// none stored (a new table, or one an older sealer wrote), the configured value
    /// alone: the ingest, until it reads one, marks with its own `LATENESS_HORIZON_SECS`,
    /// the same template parameter.
    pub fn next(stored: Option<Horizon>, configured: Duration, now_ms: i64) -> Horizon {
        let secs = configured.as_secs();
        let Some(h) = stored else {
            return Horizon::steady(secs);
        };
        if h.secs == secs {
            return h;
        }
        let (low_secs, high_secs) = match h.switching(now_ms) {
            true => (h.secs.min(h.low_secs), h.secs.max(h.high_secs)),
            false => (h.secs, h.secs),
        };
        let switch = i64::try_from(SWITCH.as_millis()).unwrap_or(i64::MAX);
        Horizon {
            secs,
            low_secs,
            high_secs,
            switch_ms: now_ms.saturating_add(switch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn the_waits_cover_a_cached_read_an_invocation_and_the_skew() {
        assert!(SWITCH > INGEST_REFRESH + LONGEST_INVOCATION + SKEW);
        assert!(INGEST_VALID >= INGEST_REFRESH);
        assert_eq!(INGEST_VALID + LONGEST_INVOCATION + SKEW, SWITCH);
    }

    /// Any sequence of changes, runs and reads: an ingest that read the published value
    /// at most `INGEST_VALID` ago marks with a horizon at most that of any sealer run
    /// started within the longest invocation before or after.
    #[test]
    fn an_ingest_never_marks_with_more_than_a_running_sealer_seals_with() {
        let configs = [600u64, 60, 3_600, 0, 900, 600, 601, 30];
        // The sealer runs every minute; each config holds for `hold` minutes.
        for hold in [1i64, 7, 29, 31, 45] {
            let mut published: Vec<(i64, Horizon)> = Vec::new();
            let mut stored = None;
            let mut t = 0;
            for &c in &configs {
                for _ in 0..hold {
                    let h = Horizon::next(stored, Duration::from_secs(c), t);
                    stored = Some(h);
                    published.push((t, h));
                    t += MIN;
                }
            }
            let valid = i64::try_from(INGEST_VALID.as_millis()).unwrap();
            let span = i64::try_from((LONGEST_INVOCATION + SKEW).as_millis()).unwrap();
            for &(read_at, read) in &published {
                // An ingest invocation started at `s`, from `read_at` up to the read's
                // validity, its writes landing up to `span` later.
                for s in (read_at..read_at + valid).step_by(MIN as usize) {
                    let ingest = read.for_ingest(s);
                    for &(run_at, run) in &published {
                        if run_at < s - span || run_at > s + span {
                            continue;
                        }
                        let sealer = run.for_sealer(run_at);
                        assert!(
                            ingest <= sealer,
                            "hold {hold}: ingest at {s} (read at {read_at}) {ingest:?} > sealer at {run_at} {sealer:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_lowered_horizon_is_sealed_with_only_after_the_switch_a_raised_one_at_once() {
        let old = Horizon::steady(600);
        let lowered = Horizon::next(Some(old), Duration::from_secs(60), 1_000);
        assert_eq!(lowered.for_ingest(1_000), Duration::from_secs(60));
        assert_eq!(lowered.for_sealer(1_000), Duration::from_secs(600));
        let after = 1_000 + i64::try_from(SWITCH.as_millis()).unwrap();
        assert_eq!(lowered.for_sealer(after), Duration::from_secs(60));
        assert_eq!(
            Horizon::next(Some(lowered), Duration::from_secs(60), after),
            lowered
        );
        let raised = Horizon::next(Some(old), Duration::from_secs(900), 1_000);
        assert_eq!(raised.for_sealer(1_000), Duration::from_secs(900));
        assert_eq!(raised.for_ingest(1_000), Duration::from_secs(600));
        assert_eq!(
            Horizon::next(None, Duration::from_secs(600), 5),
            Horizon::steady(600)
        );
    }
}
