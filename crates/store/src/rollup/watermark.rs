//! The watermark (`seal`/`state`): every hour in `[from_ms, end_ms)` is sealed. Its end
//! is its item's version, so moving it is a conditional write that only grows it; its
//! body holds the first sealed hour and the lateness horizon the sealer publishes
//! ([`super::horizon`]). The sealer writes it; the query reads the sealed hours from it.

use serde::{Deserialize, Serialize};

use super::horizon::Horizon;
use super::{HOUR_MS, RollupItem, RollupTable, hour_of, keys};
use crate::error::StoreError;

/// The latest instant a reader trusts (9999-12-31T23:59:59.999Z).
const MAX_END_MS: i64 = 253_402_300_799_999;

/// The watermark: every hour in `[from_ms, end_ms)` is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermark {
    /// The first hour the sealer sealed (earlier hours were never sealed, unless
    /// `shardline seal` rebuilt them).
    pub from_ms: i64,
    /// The end of the last sealed hour: the item's version, not in the body.
    #[serde(skip)]
    pub end_ms: i64,
    /// The lateness horizon the sealer seals with, published for the ingest
    /// ([`super::horizon`]); none from a sealer before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<Horizon>,
}

impl Watermark {
    /// Sealed hours `[from_ms, end_ms)` with no horizon published.
    pub fn span(from_ms: i64, end_ms: i64) -> Self {
        Self {
            from_ms,
            end_ms,
            horizon: None,
        }
    }

    /// Whether `hour` is one of the sealed hours.
    pub fn seals(&self, hour: i64) -> bool {
        (self.from_ms..self.end_ms).contains(&hour)
    }

    /// The watermark `item` holds: its body, and its version as the end.
    pub fn of(item: &RollupItem) -> Result<Self, StoreError> {
        let mut mark: Watermark = item.body()?;
        mark.end_ms = i64::try_from(item.version).unwrap_or(i64::MAX);
        Ok(mark)
    }

    /// The sealed hours as a reader trusts them: both ends within 1970 to 9999 and cut
    /// inward to hour boundaries (the sealer writes nothing else); `None` when no hour
    /// is left.
    pub fn trusted(self) -> Option<Self> {
        let from_ms = hour_of(self.from_ms.clamp(0, MAX_END_MS) + HOUR_MS - 1);
        let end_ms = hour_of(self.end_ms.min(MAX_END_MS));
        (from_ms < end_ms).then_some(Self {
            from_ms,
            end_ms,
            ..self
        })
    }

    /// Its end as its item's version (ends are epoch ms after 1970).
    pub fn version(&self) -> Result<u64, StoreError> {
        version_of(self.end_ms)
    }

    /// Its item at `seal`/`state`.
    pub fn item(&self) -> Result<RollupItem, StoreError> {
        RollupItem::with_body(keys::watermark(), self.version()?, self, None)
    }
}

/// A watermark's end as its item's version: refused before 1970.
pub fn version_of(end_ms: i64) -> Result<u64, StoreError> {
    u64::try_from(end_ms)
        .map_err(|_| StoreError::Malformed(format!("a watermark ending before 1970: {end_ms}")))
}

/// Reads the watermark (strongly consistent).
pub async fn read_watermark<R: RollupTable>(rollups: &R) -> Result<Option<Watermark>, StoreError> {
    let key = keys::watermark();
    match rollups.get(&key.pk, &key.sk, true).await? {
        Some(item) => Watermark::of(&item).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_is_its_body_and_its_version_and_a_reader_cuts_it_to_hours() {
        let mark = Watermark {
            from_ms: 2 * HOUR_MS,
            end_ms: 5 * HOUR_MS,
            horizon: Some(Horizon::steady(600)),
        };
        let item = mark.item().unwrap();
        assert_eq!((item.pk.as_str(), item.sk.as_str()), ("seal", "state"));
        assert_eq!(item.version, 5 * 3_600_000);
        assert!(!item.body.contains("end_ms"), "the end is the version");
        assert_eq!(Watermark::of(&item).unwrap(), mark);
        assert!(mark.seals(4 * HOUR_MS) && !mark.seals(5 * HOUR_MS));
        assert_eq!(mark.trusted(), Some(mark));
        let ragged = Watermark::span(2 * HOUR_MS - 1, 5 * HOUR_MS + 1).trusted();
        assert_eq!(ragged, Some(Watermark::span(2 * HOUR_MS, 5 * HOUR_MS)));
        assert_eq!(Watermark::span(HOUR_MS + 1, 2 * HOUR_MS).trusted(), None);
        assert_eq!(
            Watermark::span(-HOUR_MS, i64::MAX).trusted(),
            Some(Watermark::span(0, hour_of(MAX_END_MS)))
        );
        assert!(Watermark::span(0, -1).item().is_err());
    }
}
