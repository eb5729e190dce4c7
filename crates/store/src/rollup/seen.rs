//! The fleet's fresh last-seen (`seen#{hour}`/`{minute}#{first device}`): for each slab
//! window compaction passes, every device's newest slab-held reading in the window's
//! hour so far, so `GET /devices` moves a device's `last_seen` within minutes of now
//! rather than at the hour's seal (docs/design-slabs.md, "The fleet's minutes fresh").
//!
//! The map of a window is the map of the window before it in the hour (none at the
//! hour's start, nor where that window was never compacted) with the window's own
//! devices' newest times merged in: a pure function of the hour's compacted slabs so
//! far, like the runs. It is written in chunks ([`chunks`]): devices in id order, each
//! chunk's body under [`CHUNK_BYTES`], keyed by the window's minute and the chunk's first
//! device, so a reader of a page of the directory reads only the chunks holding the
//! page's ids. Written unconditionally, after the window's runs and before the
//! progress passes it: a compaction killed and run again, or two at once, write the
//! same chunks. A chunk expires with the window's slabs: once the hour is sealed the
//! directory holds what it says.
//!
//! What it holds is what a fresh minute counts: the readings slabs hold, not those in
//! their devices' own items, nor a device first seen since the last sealed hour's
//! directory (the list names the devices the directory names).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{MINUTE_MS, RollupItem, RollupKey, hour_label, hour_of};
use crate::error::StoreError;

/// Most bytes of one chunk's body: a page of the directory (100 devices) reads one or
/// two.
pub const CHUNK_BYTES: usize = 8 * 1024;

/// One chunk of a window's map: devices in id order, each with its newest slab-held
/// reading's time in the hour so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenChunk {
    /// The window's start (epoch ms, a whole minute).
    #[serde(rename = "t")]
    pub window_ms: i64,
    /// Devices in id order, each with its newest reading's time less the hour's start.
    #[serde(rename = "d")]
    devices: Vec<(String, i64)>,
}

/// The partition of one hour's maps.
pub fn partition(hour_ms: i64) -> String {
    format!("seen#{}", hour_label(hour_ms))
}

/// The sort-key prefix of the map of the window starting at `window_ms`.
pub fn window_prefix(window_ms: i64) -> String {
    format!("{:02}#", (window_ms - hour_of(window_ms)) / MINUTE_MS)
}

/// The sort key of the chunk of `window_ms`'s map whose first device is `device`; a
/// reader's bound for a page starting or ending at `device`.
pub fn sort_key(window_ms: i64, device: &str) -> String {
    format!("{}{device}", window_prefix(window_ms))
}

/// What one entry adds to a chunk's body, at most: its id, 13 digits and the JSON
/// around them.
fn entry_bytes(device: &str) -> usize {
    device.len() + 20
}

/// The chunks of the map `last_seen` (device to its newest reading's time, epoch ms, in
/// the window's hour) of the window starting at `window_ms`, in id order. An empty map
/// makes no chunk.
pub fn chunks(window_ms: i64, last_seen: &BTreeMap<String, i64>) -> Vec<SeenChunk> {
    let hour = hour_of(window_ms);
    let mut out: Vec<SeenChunk> = Vec::new();
    let mut bytes = 0;
    for (device, &ts_ms) in last_seen {
        let size = entry_bytes(device);
        if out.is_empty() || bytes + size > CHUNK_BYTES {
            out.push(SeenChunk {
                window_ms,
                devices: Vec::new(),
            });
            bytes = 32;
        }
        bytes += size;
        if let Some(chunk) = out.last_mut() {
            chunk.devices.push((device.clone(), ts_ms - hour));
        }
    }
    out
}

impl SeenChunk {
    /// Its devices, each with its newest reading's time (epoch ms).
    pub fn last_seen(&self) -> impl Iterator<Item = (&str, i64)> {
        let hour = hour_of(self.window_ms);
        self.devices
            .iter()
            .map(move |(d, at)| (d.as_str(), hour + at))
    }

    /// Its key: the window's hour and minute, and its first device.
    pub fn key(&self) -> RollupKey {
        let first = self.devices.first().map_or("", |(d, _)| d.as_str());
        RollupKey {
            pk: partition(hour_of(self.window_ms)),
            sk: sort_key(self.window_ms, first),
        }
    }

    /// Its item, expiring at `ttl` (epoch s). Version 0: a pure function of the hour's
    /// compacted windows so far, written unconditionally.
    pub fn item(&self, ttl: Option<i64>) -> Result<RollupItem, StoreError> {
        if self.window_ms.rem_euclid(MINUTE_MS) != 0 {
            return Err(StoreError::Malformed(format!(
                "a seen map's window starts on a whole minute, not at {}",
                self.window_ms
            )));
        }
        RollupItem::with_body(self.key(), 0, self, ttl)
    }

    /// The chunk `item` holds, refused unless it lies where its key says and its
    /// devices are in id order, each within the hour.
    pub fn of(item: &RollupItem) -> Result<Self, StoreError> {
        let chunk: SeenChunk = item.body()?;
        let malformed =
            |why: &str| StoreError::Malformed(format!("seen map {}/{}: {why}", item.pk, item.sk));
        if chunk.key() != item.key() {
            return Err(malformed("its body is of another key"));
        }
        if chunk.devices.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(malformed("its devices are not in id order"));
        }
        if chunk
            .devices
            .iter()
            .any(|(_, at)| !(0..super::HOUR_MS).contains(at))
        {
            return Err(malformed("a time outside its hour"));
        }
        Ok(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 1_782_090_000_000;

    #[test]
    fn a_map_is_cut_into_chunks_in_id_order_that_read_back() {
        let window = HOUR + 7 * MINUTE_MS;
        let map: BTreeMap<String, i64> = (0..1_000)
            .map(|d| (format!("dev-{d:06}"), HOUR + d * 1_000))
            .collect();
        let chunks = chunks(window, &map);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        let mut read = BTreeMap::new();
        for chunk in &chunks {
            let item = chunk.item(Some(9)).unwrap();
            assert!(item.body.len() <= CHUNK_BYTES, "{}", item.body.len());
            assert_eq!(item.pk, format!("seen#{HOUR:013}"));
            assert!(item.sk.starts_with("07#dev-"), "{}", item.sk);
            let back = SeenChunk::of(&item).unwrap();
            assert_eq!(&back, chunk);
            read.extend(back.last_seen().map(|(d, at)| (d.to_owned(), at)));
        }
        assert_eq!(read, map);
        assert!(super::chunks(window, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_chunk_under_another_key_or_out_of_order_is_refused() {
        let window = HOUR + MINUTE_MS;
        let map = BTreeMap::from([("a".to_owned(), HOUR), ("b".to_owned(), HOUR + 5)]);
        let item = chunks(window, &map)[0].item(None).unwrap();
        let mut moved = item.clone();
        moved.sk = sort_key(window, "b");
        assert!(SeenChunk::of(&moved).is_err());
        let mut unordered = item.clone();
        unordered.body = unordered.body.replace("\"a\"", "\"c\"");
        unordered.sk = sort_key(window, "c");
        assert!(SeenChunk::of(&unordered).is_err());
        let mut outside = item;
        outside.body = outside.body.replace(",5]", ",3600000]");
        assert!(SeenChunk::of(&outside).is_err());
    }
}
