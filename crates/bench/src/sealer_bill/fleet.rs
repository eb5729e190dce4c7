//! The fleets of item 9: what each reading holds, when each device sends, and the
//! events the event source mapping makes of their messages.

use std::ops::Range;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::SqsMessage;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::time::Timestamp;

use store::rollup::HOUR_MS;

use super::{BATCH_WINDOW_MS, HOUR};
use crate::common;

/// What a reading holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Items 2 and 8's reading of the demo's shape: `temperature` and `humidity`.
    TwoMetrics,
    /// About 500 bytes as an item of its own (the reference scenario's size): the demo
    /// publisher's three metrics and `site` tag, more metrics of their kind, and the
    /// firmware and model as tags.
    Wide,
}

/// The wide reading's metrics and the base of each one's values.
const WIDE: [(&str, f64); 19] = [
    ("temp_c", -10.0),
    ("humidity", 10.0),
    ("battery_v", 3.0),
    ("pressure_hpa", 980.0),
    ("co2_ppm", 400.0),
    ("voc_ppb", 50.0),
    ("no2_ppb", 5.0),
    ("o3_ppb", 10.0),
    ("co_ppm", 0.0),
    ("pm1_0", 0.0),
    ("pm2_5", 0.0),
    ("pm10", 0.0),
    ("noise_db", 30.0),
    ("lux", 100.0),
    ("uv_index", 0.0),
    ("dew_point_c", -5.0),
    ("rssi_dbm", -95.0),
    ("snr_db", -5.0),
    ("uptime_h", 100.0),
];

/// A reading's metrics and tags.
type Values = (Vec<(&'static str, f64)>, Vec<(&'static str, String)>);

impl Kind {
    pub(crate) fn words(self) -> &'static str {
        match self {
            Self::TwoMetrics => "two-metric readings (items 2 and 8's)",
            Self::Wide => "~500-byte readings (19 metrics, 3 tags)",
        }
    }

    /// The `seq`th reading's metrics, two decimals at most, and tags.
    fn values(self, seq: u64, device: usize) -> Values {
        match self {
            Self::TwoMetrics => (
                vec![
                    ("temperature", 15.0 + (seq % 200) as f64 / 10.0),
                    ("humidity", 41.5),
                ],
                Vec::new(),
            ),
            Self::Wide => {
                let metrics = WIDE
                    .iter()
                    .enumerate()
                    .map(|(k, (name, base))| {
                        let k = k as u64;
                        let step = (seq.wrapping_mul(7 + 3 * k) + 13 * k) % 5_000;
                        (*name, base + step as f64 / 100.0)
                    })
                    .collect();
                let tags = vec![
                    ("site", format!("site-{:02}", device % 16)),
                    ("fw", "4.2.17".to_owned()),
                    ("model", "envsense-pro-x2".to_owned()),
                ];
                (metrics, tags)
            }
        }
    }
}

/// One fleet shape: how many devices, how often each sends, how many readings a message.
#[derive(Debug, Clone)]
pub struct Fleet {
    pub label: String,
    pub devices: usize,
    pub per_message: usize,
    /// Between two readings of one device.
    pub every_ms: i64,
    pub kind: Kind,
}

/// One message: `n` readings of `device` from its `first`, sent with its last.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg {
    sent_ms: i64,
    device: usize,
    first: usize,
    n: usize,
}

impl Fleet {
    pub(crate) fn per_device(&self) -> usize {
        (HOUR_MS / self.every_ms) as usize
    }

    pub(crate) fn readings(&self) -> usize {
        self.devices * self.per_device()
    }

    pub(crate) fn device(&self, d: usize) -> String {
        if self.devices == 1 {
            "sensor-alpha-001".to_owned()
        } else {
            format!("dev-{d:06}")
        }
    }

    /// Device `d`'s `j`th reading's time: the devices' phases spread over one period.
    fn ts(&self, d: usize, j: usize) -> i64 {
        HOUR + d as i64 * self.every_ms / self.devices as i64 + j as i64 * self.every_ms
    }

    /// The event id and time of device `d`'s last reading at or before `ms`.
    pub(crate) fn reading_before(&self, d: usize, ms: i64) -> (String, i64) {
        let j = usize::try_from((ms - self.ts(d, 0)).div_euclid(self.every_ms)).unwrap_or(0);
        (Self::event_id(d, j), self.ts(d, j))
    }

    /// Event ids ordered by time (a UUID whose tail counts), one prefix per device.
    fn event_id(d: usize, j: usize) -> String {
        format!("0190a1b2-{d:04x}-7e5f-8a9b-{j:012x}")
    }

    fn reading_json(&self, d: usize, j: usize) -> serde_json::Value {
        let (metrics, tags) = self.kind.values(j as u64 + d as u64 * 7_919, d);
        let metrics: serde_json::Map<String, serde_json::Value> = metrics
            .into_iter()
            .map(|(name, v)| (name.to_owned(), serde_json::json!(round2(v))))
            .collect();
        let mut reading = serde_json::json!({
            "device_id": self.device(d),
            "event_id": Self::event_id(d, j),
            "ts": self.ts(d, j),
            "metrics": metrics,
        });
        if !tags.is_empty() {
            let tags: serde_json::Map<String, serde_json::Value> = tags
                .into_iter()
                .map(|(name, v)| (name.to_owned(), serde_json::json!(v)))
                .collect();
            reading["tags"] = serde_json::Value::Object(tags);
        }
        reading
    }

    /// The store's model of the same reading.
    fn reading(&self, d: usize, j: usize) -> Result<store::Reading> {
        let (metrics, tags) = self.kind.values(j as u64 + d as u64 * 7_919, d);
        Ok(store::Reading {
            device_id: self.device(d),
            event_id: Self::event_id(d, j),
            ts: Timestamp::from_millis(self.ts(d, j))?,
            metrics: metrics
                .into_iter()
                .map(|(name, v)| {
                    store::Decimal::from_f64(round2(v))
                        .map(|v| (name.to_owned(), v))
                        .context("a metric DynamoDB stores")
                })
                .collect::<Result<_>>()?,
            tags: tags
                .into_iter()
                .map(|(name, v)| (name.to_owned(), v))
                .collect(),
            // As the ingest stores it: its message's SentTimestamp, about its time.
            written: store::WriteOrder(self.ts(d, j)),
        })
    }

    /// Every message of the hour, in the order they reach the queue.
    pub(crate) fn messages(&self) -> Vec<Msg> {
        let per_device = self.per_device();
        let mut msgs: Vec<Msg> = (0..self.devices)
            .flat_map(|d| {
                (0..per_device).step_by(self.per_message).map(move |first| {
                    let n = self.per_message.min(per_device - first);
                    Msg {
                        sent_ms: self.ts(d, first + n - 1),
                        device: d,
                        first,
                        n,
                    }
                })
            })
            .collect();
        msgs.sort_by_key(|m| (m.sent_ms, m.device));
        msgs
    }

    /// The events the event source mapping makes of `msgs`: the messages that reached
    /// the queue within one batching window, at most the template's batch; each with
    /// the window's end, the handler's clock.
    pub(crate) fn events(msgs: &[Msg]) -> Vec<(i64, Range<usize>)> {
        Self::events_of(msgs, BATCH_WINDOW_MS, common::TEMPLATE_BATCH_SIZE)
    }

    /// The events of `msgs` for a batching window of `window_ms` and a batch of at most
    /// `batch` messages.
    pub(crate) fn events_of(
        msgs: &[Msg],
        window_ms: i64,
        batch: usize,
    ) -> Vec<(i64, Range<usize>)> {
        let mut events = Vec::new();
        let mut start = 0;
        while start < msgs.len() {
            let opened = msgs[start].sent_ms;
            let mut end = start + 1;
            while end < msgs.len() && end - start < batch && msgs[end].sent_ms < opened + window_ms
            {
                end += 1;
            }
            events.push((opened + window_ms, start..end));
            start = end;
        }
        events
    }

    pub(crate) fn record(&self, index: usize, m: &Msg) -> SqsMessage {
        let readings: Vec<serde_json::Value> = (m.first..m.first + m.n)
            .map(|j| self.reading_json(m.device, j))
            .collect();
        let body = serde_json::json!({ "readings": readings }).to_string();
        let mut record = common::record(format!("msg-{index:07}"), body);
        record
            .attributes
            .insert("SentTimestamp".to_owned(), m.sent_ms.to_string());
        record
            .attributes
            .insert("ApproximateReceiveCount".to_owned(), "1".to_owned());
        record
    }

    /// One reading as an item of its own, and as a device sends it, in bytes.
    pub(crate) fn reading_sizes(&self) -> Result<(usize, usize)> {
        let reading = self.reading(0, 1)?;
        let table = TableHistory::new(common::hourly(8));
        let key = write_key(
            &ReadingRef::new(&reading.device_id, &reading.event_id, reading.ts),
            &table,
            &FanoutHistory::new(),
            reading.ts,
        )?
        .key;
        let item = store::ReadingItem::new(&reading, key, Duration::from_secs(30 * 86_400));
        let item_bytes = store::size::item_size(&item.to_item()?);
        Ok((item_bytes, self.reading_json(0, 1).to_string().len()))
    }
}

/// `1000` as `1,000`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The fleets of item 9: the demo's shape (a), the fleet (b) and the same
/// devices at a reading a minute (c), scaled to `devices`, each with both kinds of
/// reading.
pub(crate) fn fleets(devices: usize) -> Vec<Fleet> {
    let mut out = Vec::new();
    for kind in [Kind::Wide, Kind::TwoMetrics] {
        out.push(Fleet {
            label: format!(
                "(a) one device, 50 readings a message, a reading every 100 ms, {}",
                kind.words()
            ),
            devices: 1,
            per_message: 50,
            every_ms: 100,
            kind,
        });
        out.push(Fleet {
            label: format!(
                "(b) {} devices, 1 reading a message, one every 10 s, {}",
                thousands(devices),
                kind.words()
            ),
            devices,
            per_message: 1,
            every_ms: 10_000,
            kind,
        });
        // The most common fleet: one reading a message, a message a minute.
        out.push(Fleet {
            label: format!(
                "(c) {} devices, 1 reading a message, one a minute, {}",
                thousands(devices),
                kind.words()
            ),
            devices,
            per_message: 1,
            every_ms: 60_000,
            kind,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Fleet, Kind};

    #[test]
    fn a_wide_reading_is_about_500_bytes_as_an_item() {
        for devices in [1, 1_000] {
            let fleet = Fleet {
                label: String::new(),
                devices,
                per_message: 1,
                every_ms: 10_000,
                kind: Kind::Wide,
            };
            let (item, _) = fleet.reading_sizes().expect("sizes");
            assert!((470..=530).contains(&item), "{item} bytes");
        }
    }

    #[test]
    fn events_hold_one_batching_window_of_at_most_a_batch() {
        let fleet = Fleet {
            label: String::new(),
            devices: 1_000,
            per_message: 1,
            every_ms: 10_000,
            kind: Kind::TwoMetrics,
        };
        let msgs = fleet.messages();
        assert_eq!(msgs.len(), 360_000);
        let events = Fleet::events(&msgs);
        assert!(events.iter().all(|(_, r)| r.len() <= 100));
        assert_eq!(events.iter().map(|(_, r)| r.len()).sum::<usize>(), 360_000);
        for (now, r) in &events {
            let devices: std::collections::BTreeSet<usize> =
                msgs[r.clone()].iter().map(|m| m.device).collect();
            assert_eq!(devices.len(), r.len(), "one message of a device an event");
            assert!(msgs[r.clone()].iter().all(|m| m.sent_ms < *now));
        }
    }
}
