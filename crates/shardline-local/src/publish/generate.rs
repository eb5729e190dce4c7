//! Pure message generation: a seeded, paced stream of device messages.
//!
//! Given the same [`Plan`], start time and seed, the stream is identical: device
//! choice (Zipf over the fleet, plus the hot device on its own schedule), event ids,
//! timestamps, metrics and malformations. No clock and no I/O: the sender paces it.
//! A reading's metrics are its device's [`Waveform`] at its timestamp: a slow cycle
//! with noise, a step on some devices, a spike on others, both on the hot device.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use sharding::time::Timestamp;

use super::waveform::Waveform;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Devices in the fleet (`dev-00000` ...), chosen Zipf-distributed per reading.
    pub devices: u32,
    /// Readings per second of the whole fleet.
    pub rate: f64,
    /// How long the fleet and the hot device send.
    pub duration: Duration,
    /// A hot device sending on its own schedule, on top of the fleet.
    pub hot_device: Option<String>,
    /// Readings per second of the hot device.
    pub hot_rate: f64,
    /// Each reading's ts lies up to this much before its send slot (measurement to
    /// send delay).
    pub jitter: Duration,
    /// Readings per message: 1 = a single-reading body, more = `{"readings":[...]}`.
    pub batch: usize,
    /// Fraction of messages that are malformed (they replace a valid message's slot).
    pub bad_rate: f64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Stop after this many messages.
    pub max_messages: Option<u64>,
    /// Zipf exponent of the fleet's device popularity.
    pub zipf_exponent: f64,
}

impl Plan {
    /// Checks the numbers make sense; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.devices == 0 {
            return Err("--devices must be at least 1".into());
        }
        if !(self.rate.is_finite() && self.rate >= 0.0) {
            return Err("--rate must be a non-negative number".into());
        }
        if !(self.hot_rate.is_finite() && self.hot_rate >= 0.0) {
            return Err("--hot-rate must be a non-negative number".into());
        }
        if self.hot_rate > 0.0 && self.hot_device.is_none() {
            return Err("--hot-rate needs --hot-device".into());
        }
        if let Some(id) = &self.hot_device {
            sharding::key::validate_id("--hot-device", id).map_err(|e| e.to_string())?;
        }
        if self.batch == 0 || self.batch > 500 {
            return Err("--batch must be 1 to 500 readings per message".into());
        }
        if !(0.0..=1.0).contains(&self.bad_rate) {
            return Err("--bad-rate must be within 0..=1".into());
        }
        if !(self.zipf_exponent.is_finite() && self.zipf_exponent >= 0.0) {
            return Err("the Zipf exponent must be a non-negative number".into());
        }
        Ok(())
    }

    /// Fleet readings to schedule.
    pub fn fleet_readings(&self) -> u64 {
        readings_at(self.rate, self.duration)
    }

    /// Hot-device readings to schedule.
    pub fn hot_readings(&self) -> u64 {
        if self.hot_device.is_some() {
            readings_at(self.hot_rate, self.duration)
        } else {
            0
        }
    }

    /// Messages the stream will hold.
    pub fn messages(&self) -> u64 {
        let batch = self.batch.max(1) as u64;
        let n = self.fleet_readings().div_ceil(batch) + self.hot_readings().div_ceil(batch);
        self.max_messages.map_or(n, |cap| n.min(cap))
    }
}

fn readings_at(rate: f64, duration: Duration) -> u64 {
    // Rounded so 0.5 s at 400/s is exactly 200.
    let n = (rate * duration.as_secs_f64()).round();
    if n.is_finite() && n > 0.0 {
        n as u64
    } else {
        0
    }
}

/// The kinds of malformed message, each refused by the ingest parser for a
/// different rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Malformation {
    /// The body is not JSON (cut off).
    InvalidJson,
    /// The body is JSON but not an object.
    NotAnObject,
    /// `device_id` is missing.
    MissingDeviceId,
    /// `device_id` holds `#`, the key separator.
    BadDeviceId,
    /// `ts` is not a timestamp.
    BadTimestamp,
    /// `ts` is a day ahead of the send time.
    FutureTimestamp,
    /// A metric is a string.
    NonNumericMetric,
    /// A field the schema does not know.
    UnknownField,
    /// `{"readings": []}`.
    EmptyReadings,
}

impl Malformation {
    /// Every kind, in a stable order.
    pub const ALL: [Malformation; 9] = [
        Malformation::InvalidJson,
        Malformation::NotAnObject,
        Malformation::MissingDeviceId,
        Malformation::BadDeviceId,
        Malformation::BadTimestamp,
        Malformation::FutureTimestamp,
        Malformation::NonNumericMetric,
        Malformation::UnknownField,
        Malformation::EmptyReadings,
    ];

    /// A stable snake_case name for summaries and the manifest.
    pub const fn name(self) -> &'static str {
        match self {
            Malformation::InvalidJson => "invalid_json",
            Malformation::NotAnObject => "not_an_object",
            Malformation::MissingDeviceId => "missing_device_id",
            Malformation::BadDeviceId => "bad_device_id",
            Malformation::BadTimestamp => "bad_timestamp",
            Malformation::FutureTimestamp => "future_timestamp",
            Malformation::NonNumericMetric => "non_numeric_metric",
            Malformation::UnknownField => "unknown_field",
            Malformation::EmptyReadings => "empty_readings",
        }
    }
}

/// The identity of one valid reading: what must end up in the table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadingId {
    /// The device.
    pub device_id: String,
    /// Its event id.
    pub event_id: String,
    /// Its timestamp, epoch milliseconds.
    pub ts_ms: i64,
}

/// What a message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Valid readings, in body order.
    Valid(Vec<ReadingId>),
    /// A malformed body of this kind.
    Malformed(Malformation),
}

/// One message of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Position in the stream, from 0.
    pub seq: u64,
    /// When to send it, after the start.
    pub offset: Duration,
    /// The SQS message body.
    pub body: String,
    /// What it carries.
    pub content: Content,
}

impl Message {
    /// Valid readings in it.
    pub fn readings(&self) -> usize {
        match &self.content {
            Content::Valid(r) => r.len(),
            Content::Malformed(_) => 0,
        }
    }
}

/// Cumulative Zipf weights over `n` ranks.
#[derive(Debug, Clone)]
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: u32, exponent: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|k| {
                total += 1.0 / f64::from(k).powf(exponent);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let u = rng.random::<f64>() * total;
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len().saturating_sub(1))
    }
}

/// The stream: an iterator of [`Message`]s in send order.
#[derive(Debug, Clone)]
pub struct Generator {
    plan: Plan,
    start: Timestamp,
    rng: ChaCha8Rng,
    zipf: Zipf,
    fleet_next: u64,
    fleet_total: u64,
    hot_next: u64,
    hot_total: u64,
    seq: u64,
}

#[derive(Clone, Copy)]
enum Stream {
    Fleet,
    Hot,
}

impl Generator {
    /// A stream starting at `start` (the ts of the first slot).
    pub fn new(plan: Plan, start: Timestamp) -> Result<Self, String> {
        plan.validate()?;
        Ok(Self {
            rng: ChaCha8Rng::seed_from_u64(plan.seed),
            zipf: Zipf::new(plan.devices, plan.zipf_exponent),
            fleet_total: plan.fleet_readings(),
            hot_total: plan.hot_readings(),
            fleet_next: 0,
            hot_next: 0,
            seq: 0,
            plan,
            start,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn slot(rate: f64, index: u64) -> Duration {
        Duration::from_secs_f64(index as f64 / rate)
    }

    /// Send time of the next message of a stream: the slot of its last reading.
    fn next_offset(&self, stream: Stream) -> Option<Duration> {
        let (next, total, rate) = match stream {
            Stream::Fleet => (self.fleet_next, self.fleet_total, self.plan.rate),
            Stream::Hot => (self.hot_next, self.hot_total, self.plan.hot_rate),
        };
        (next < total).then(|| {
            let last = (next + self.plan.batch as u64).min(total) - 1;
            Self::slot(rate, last)
        })
    }

    fn device(&mut self, stream: Stream) -> (String, String) {
        match (stream, &self.plan.hot_device) {
            (Stream::Hot, Some(id)) => (id.clone(), "site-hot".to_owned()),
            _ => {
                let rank = self.zipf.sample(&mut self.rng);
                (format!("dev-{rank:05}"), format!("site-{:02}", rank % 16))
            }
        }
    }

    fn ts_value(&mut self, ms: i64) -> Value {
        // A quarter of the devices speak epoch milliseconds, the rest RFC 3339.
        if self.rng.random_bool(0.25) {
            json!(ms)
        } else {
            match Timestamp::from_millis(ms) {
                Ok(ts) => json!(ts.to_rfc3339()),
                Err(_) => json!(ms),
            }
        }
    }

    /// The metrics of `device` at `ts_ms`: its waveform over the run, the hot device's
    /// with both a step and a spike.
    fn metrics(&mut self, device: &str, ts_ms: i64) -> Value {
        // The three draws that once were the metrics stay drawn, so every other choice
        // of the stream (devices, ts formats, malformations) is the one the recorded
        // figures were measured with.
        let _ = (
            self.rng.random_range(-10.0..40.0),
            self.rng.random_range(10.0..95.0),
            self.rng.random_range(3.0..4.2),
        );
        let span_ms = i64::try_from(self.plan.duration.as_millis()).unwrap_or(i64::MAX);
        let mut wave = Waveform::new(self.plan.seed, device, self.start.as_millis(), span_ms);
        if self.plan.hot_device.as_deref() == Some(device) {
            wave = wave.with_step_and_spike();
        }
        let round = |x: f64| (x * 100.0).round() / 100.0;
        json!({
            "temp_c": round(wave.temp_c(ts_ms)),
            "humidity": round(wave.humidity(ts_ms)),
            "battery_v": round(wave.battery_v(ts_ms)),
        })
    }

    fn reading(&mut self, stream: Stream, index: u64) -> (Value, ReadingId) {
        let (rate, tag) = match stream {
            Stream::Fleet => (self.plan.rate, 'f'),
            Stream::Hot => (self.plan.hot_rate, 'h'),
        };
        let (device_id, site) = self.device(stream);
        let jitter_ms = u64::try_from(self.plan.jitter.as_millis()).unwrap_or(u64::MAX);
        let back = if jitter_ms == 0 {
            0
        } else {
            self.rng.random_range(0..=jitter_ms)
        };
        let slot_ms = i64::try_from(Self::slot(rate, index).as_millis()).unwrap_or(i64::MAX);
        let ts_ms = self
            .start
            .as_millis()
            .saturating_add(slot_ms)
            .saturating_sub(i64::try_from(back).unwrap_or(i64::MAX));
        let event_id = format!("{:x}-{tag}{index:08}", self.plan.seed);
        let ts = self.ts_value(ts_ms);
        let metrics = self.metrics(&device_id, ts_ms);
        let value = json!({
            "device_id": device_id,
            "event_id": event_id,
            "ts": ts,
            "metrics": metrics,
            "tags": {"site": site},
        });
        (
            value,
            ReadingId {
                device_id,
                event_id,
                ts_ms,
            },
        )
    }

    fn malformed(&mut self, kind: Malformation, offset: Duration) -> String {
        let event_id = format!("{:x}-bad{:08}", self.plan.seed, self.seq);
        let ts_ms = self
            .start
            .as_millis()
            .saturating_add(i64::try_from(offset.as_millis()).unwrap_or(i64::MAX));
        let ts = Timestamp::from_millis(ts_ms).unwrap_or(self.start);
        let mut reading = json!({
            "device_id": "dev-bad",
            "event_id": event_id,
            "ts": ts.to_rfc3339(),
            "metrics": {"temp_c": 21.5},
        });
        let day = Duration::from_secs(86_400);
        match kind {
            Malformation::InvalidJson => {
                let text = reading.to_string();
                return text[..text.len() / 2].to_owned();
            }
            Malformation::NotAnObject => return json!([event_id]).to_string(),
            Malformation::EmptyReadings => return json!({"readings": []}).to_string(),
            Malformation::MissingDeviceId => {
                if let Some(o) = reading.as_object_mut() {
                    o.remove("device_id");
                }
            }
            Malformation::BadDeviceId => reading["device_id"] = json!("dev#bad"),
            Malformation::BadTimestamp => reading["ts"] = json!("not-a-time"),
            Malformation::FutureTimestamp => {
                reading["ts"] = json!(ts.saturating_add(day).to_rfc3339());
            }
            Malformation::NonNumericMetric => reading["metrics"] = json!({"temp_c": "hot"}),
            Malformation::UnknownField => reading["firmware"] = json!("1.2.3"),
        }
        reading.to_string()
    }
}

impl Iterator for Generator {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        if self.plan.max_messages.is_some_and(|cap| self.seq >= cap) {
            return None;
        }
        let (stream, offset) = match (
            self.next_offset(Stream::Fleet),
            self.next_offset(Stream::Hot),
        ) {
            (Some(f), Some(h)) if h < f => (Stream::Hot, h),
            (Some(f), _) => (Stream::Fleet, f),
            (None, Some(h)) => (Stream::Hot, h),
            (None, None) => return None,
        };
        let (first, total) = match stream {
            Stream::Fleet => (self.fleet_next, self.fleet_total),
            Stream::Hot => (self.hot_next, self.hot_total),
        };
        let end = (first + self.plan.batch as u64).min(total);
        match stream {
            Stream::Fleet => self.fleet_next = end,
            Stream::Hot => self.hot_next = end,
        }
        let bad = self.plan.bad_rate > 0.0 && self.rng.random_bool(self.plan.bad_rate);
        let (body, content) = if bad {
            let kind = Malformation::ALL[self.rng.random_range(0..Malformation::ALL.len())];
            (self.malformed(kind, offset), Content::Malformed(kind))
        } else {
            let (values, ids): (Vec<Value>, Vec<ReadingId>) =
                (first..end).map(|i| self.reading(stream, i)).unzip();
            let body = if self.plan.batch == 1 {
                values.into_iter().next().unwrap_or(Value::Null).to_string()
            } else {
                json!({ "readings": values }).to_string()
            };
            (body, Content::Valid(ids))
        };
        let message = Message {
            seq: self.seq,
            offset,
            body,
            content,
        };
        self.seq += 1;
        Some(message)
    }
}

/// Counts of a stream or of what was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Messages.
    pub messages: u64,
    /// Messages with valid readings.
    pub valid_messages: u64,
    /// Valid readings.
    pub readings: u64,
    /// Malformed messages by kind.
    pub malformed: BTreeMap<&'static str, u64>,
    /// Valid readings per device.
    #[serde(skip)]
    pub per_device: BTreeMap<String, u64>,
}

impl Tally {
    /// Counts one message.
    pub fn add(&mut self, message: &Message) {
        self.messages += 1;
        match &message.content {
            Content::Valid(readings) => {
                self.valid_messages += 1;
                self.readings += readings.len() as u64;
                for r in readings {
                    *self.per_device.entry(r.device_id.clone()).or_default() += 1;
                }
            }
            Content::Malformed(kind) => *self.malformed.entry(kind.name()).or_default() += 1,
        }
    }

    /// Malformed messages in all.
    pub fn malformed_total(&self) -> u64 {
        self.malformed.values().sum()
    }
}
