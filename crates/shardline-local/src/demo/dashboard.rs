//! Run 2's dashboard: what a dashboard's first questions answer once the run's readings
//! are written, read from the sealer's real items and the run's real query API, never
//! recomputed here.
//!
//! 1. **Seal.** The run's readings are stamped now, in an hour that has not ended, so
//!    the scheduled sealer (which seals an hour the lateness horizon after it ends) has
//!    not sealed it. The demo seals the run's hours with [`Sealer::reseal`], the
//!    documented rebuild path: device-hours, summaries, directory entries and fleet
//!    parts, the watermark left where it is. The sealer reads and writes dynalite
//!    directly, not through the run's capacity-proxy, so the run's heat, throttles and
//!    write units stay the ingest's.
//! 2. **The API** (the run's, on loopback, through its capacity-proxy):
//!    `GET /devices` paged to the end (the device count and `as_of`), then
//!    `GET /devices/{id}/latest` of the hot device, [`FLEET_DEVICE`] and the last other
//!    device the directory lists.
//! 3. **Fleet minutes.** The `fleet#{hour}` parts of each hour, their minute cells
//!    merged ([`Cells::merge`]). `GET /stats` would answer only hours before the
//!    watermark, which a reseal does not move.
//! 4. **Series.** The hot device's device-hour items (minute cells: avg, min, max of
//!    its main metric) drawn over its raw readings, read through
//!    `GET /devices/{id}/readings` ([`super::series`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sealer::Sealer;
use serde::Deserialize;
use sharding::time::Timestamp;
use shardline::env::EnvLookup;
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{
    Cells, DeviceHour, FleetPart, HOUR_MS, MINUTE_MS, RollupQuery, RollupTable as _, hour_of, keys,
    query_all, to_f64,
};

use super::Scenario;
use super::measure::FLEET_DEVICE;
use super::series::{self, MinuteBand};
use crate::query_api::{QueryApi, RangeRead};

/// The metric the series draws, when the hot device sends it (else its first metric).
pub const SERIES_METRIC: &str = "temp_c";
/// The series' file name, in the output directory.
pub const SERIES_FILE: &str = "series.png";
/// Most raw readings the series reads and draws (the default demo's hot device sends
/// 24,000); beyond, the report says how many it drew.
pub(super) const MAX_POINTS: u64 = 200_000;
/// Most pages of `GET /devices` read (a thousand devices a page at most).
const MAX_DEVICE_PAGES: u64 = 1_000;
/// Items a page of the API holds at most.
const PAGE_LIMIT: u32 = 1000;

/// Where the dashboard reads: the run's query API, its dynalite, its stack's variables.
pub(super) struct Sources<'a> {
    pub(super) query_addr: SocketAddr,
    pub(super) dynalite_url: &'a str,
    pub(super) env: &'a EnvLookup,
}

/// What the dashboard shows.
#[derive(Debug, Clone)]
pub struct Dashboard {
    /// The hours resealed (their starts, epoch ms).
    pub hours: Vec<i64>,
    /// What the reseal did (`watermark_ms`: the watermark it left as it was).
    pub reseal: sealer::RunReport,
    /// The sealer's lateness horizon: how long after its end the schedule seals an hour.
    pub horizon: Duration,
    /// `GET /devices` paged to the end.
    pub devices: DeviceCount,
    /// `GET /devices/{id}/latest` of each device asked.
    pub latest: Vec<Latest>,
    /// The fleet's minutes, from the fleet parts' minute cells of the resealed hours.
    pub fleet: Vec<FleetCells>,
    /// The fleet's hours, from the same parts' hour cells.
    pub fleet_hours: Vec<FleetCells>,
    /// Fleet parts read.
    pub fleet_parts: usize,
    /// The hot device's series.
    pub series: Series,
    /// How long each step took.
    pub timings: Timings,
}

/// The device list, read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCount {
    /// Devices listed.
    pub devices: u64,
    /// Pages read.
    pub pages: u64,
    /// The first page's `as_of` (the watermark, `None` before any hour is sealed).
    pub as_of: Option<String>,
    /// The last device listed besides the hot device and [`FLEET_DEVICE`].
    pub last_other: Option<String>,
}

/// One device's newest reading as the API answered it, or its refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    pub device: String,
    pub answer: Result<LatestReading, String>,
}

/// The fields of a `GET /devices/{id}/latest` answer the report shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestReading {
    pub ts: String,
    pub event_id: String,
    /// One metric: its name and its value as answered.
    pub metric: Option<(String, String)>,
}

/// One minute (or hour) of the fleet: readings, and devices reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetCells {
    /// The minute's (the hour's) start, epoch ms.
    pub start_ms: i64,
    pub readings: u64,
    pub devices: u64,
}

/// The hot device's series, drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub path: PathBuf,
    pub device: String,
    pub metric: String,
    /// Minute cells drawn (avg line, min-max band).
    pub minutes: usize,
    /// Readings its device-hour items count.
    pub sealed_readings: u64,
    /// Raw readings read and drawn, and the pages read.
    pub points: u64,
    pub pages: u64,
    /// True when [`MAX_POINTS`] stopped the read.
    pub capped: bool,
}

/// How long the dashboard's steps took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    pub reseal: Duration,
    /// `GET /devices` and the latest readings.
    pub api: Duration,
    pub fleet: Duration,
    /// The device-hours, the raw readings, the PNG.
    pub series: Duration,
    pub total: Duration,
}

/// Builds the dashboard of the readings of `scenario` published from `start`.
pub(super) async fn build(
    scenario: &Scenario,
    sources: Sources<'_>,
    start: Timestamp,
) -> anyhow::Result<Dashboard> {
    let started = Instant::now();
    let mut timings = Timings::default();
    let from_ms = start.as_millis();
    let duration_ms = i64::try_from(scenario.duration.as_millis()).unwrap_or(i64::MAX);
    let to_ms = from_ms.saturating_add(duration_ms.max(1));
    let hours: Vec<i64> = std::iter::successors(Some(hour_of(from_ms)), |h| Some(h + HOUR_MS))
        .take_while(|h| *h < to_ms)
        .collect();

    let (sealer, horizon) = sealer(&sources).await?;
    let now = store::clock::wall_clock()?;
    let reseal = sealer
        .reseal(from_ms, to_ms, now, None)
        .await
        .context("the reseal of the run's hours")?;
    timings.reseal = started.elapsed();

    let step = Instant::now();
    let api = QueryApi::new(sources.query_addr, Duration::from_secs(60))
        .context("cannot build the HTTP client")?;
    let base = format!("http://{}", sources.query_addr);
    let devices = count_devices(&api, &base, &scenario.hot_device).await?;
    let mut asked = vec![scenario.hot_device.clone(), FLEET_DEVICE.to_owned()];
    asked.extend(devices.last_other.clone());
    let mut latest = Vec::new();
    for device in asked {
        let answer = latest_reading(&api, &base, &device).await?;
        latest.push(Latest { device, answer });
    }
    timings.api = step.elapsed();

    let step = Instant::now();
    let rollups = sealer.rollups();
    let (fleet, fleet_hours, fleet_parts) = fleet_cells(rollups, &hours).await?;
    timings.fleet = step.elapsed();

    let step = Instant::now();
    let series = draw_series(scenario, &api, rollups, &hours).await?;
    timings.series = step.elapsed();
    timings.total = started.elapsed();
    Ok(Dashboard {
        hours,
        reseal,
        horizon,
        devices,
        latest,
        fleet,
        fleet_hours,
        fleet_parts,
        series,
        timings,
    })
}

type DemoSealer = Sealer<DynamoReadingSource, DynamoShards, DynamoRollups>;

/// The sealer of the stack's tables on dynalite itself, configured as the Lambda is,
/// and its lateness horizon.
async fn sealer(sources: &Sources<'_>) -> anyhow::Result<(DemoSealer, Duration)> {
    let config = sealer::Config::from_lookup(|name| sources.env.get(name))
        .context("sealer configuration")?;
    let dynamo = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(sources.dynalite_url).await);
    let sealer = Sealer::new(
        DynamoReadingSource::new(dynamo.clone(), &config.table_name),
        DynamoShards::new(&dynamo, &config.shard_table_name),
        DynamoRollups::new(dynamo, &config.rollup_table),
        config.settings,
    );
    Ok((sealer, config.settings.horizon))
}

/// `GET /devices`, page after page: how many, `as_of`, and the last device listed
/// other than `hot` and [`FLEET_DEVICE`].
async fn count_devices(api: &QueryApi, base: &str, hot: &str) -> anyhow::Result<DeviceCount> {
    #[derive(Deserialize)]
    struct Listed {
        device_id: String,
    }
    #[derive(Deserialize)]
    struct DevicesPage {
        devices: Vec<Listed>,
        next_cursor: Option<String>,
        as_of: Option<String>,
    }
    let url = format!("{base}/devices");
    let mut count = DeviceCount {
        devices: 0,
        pages: 0,
        as_of: None,
        last_other: None,
    };
    let mut cursor: Option<String> = None;
    loop {
        if count.pages >= MAX_DEVICE_PAGES {
            bail!("GET {url}: still more after {MAX_DEVICE_PAGES} pages");
        }
        let mut query = vec![("limit", PAGE_LIMIT.to_string())];
        query.extend(cursor.take().map(|c| ("cursor", c)));
        let reply = api
            .get(&url, &query)
            .await
            .with_context(|| format!("GET {url}"))?;
        if !reply.status.is_success() {
            bail!("GET {url}: {} {}", reply.status, reply.error_line());
        }
        let page: DevicesPage = serde_json::from_str(&reply.body)
            .with_context(|| format!("GET {url}: not a page of devices"))?;
        if count.pages == 0 {
            count.as_of = page.as_of;
        }
        count.pages += 1;
        count.devices += page.devices.len() as u64;
        if let Some(last) = page
            .devices
            .into_iter()
            .map(|d| d.device_id)
            .rfind(|d| d != hot && d != FLEET_DEVICE)
        {
            count.last_other = Some(last);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(count),
        }
    }
}

/// `GET /devices/{device}/latest`: the reading, or the refusal's status and error.
async fn latest_reading(
    api: &QueryApi,
    base: &str,
    device: &str,
) -> anyhow::Result<Result<LatestReading, String>> {
    #[derive(Deserialize)]
    struct Answer {
        ts: String,
        event_id: String,
        #[serde(default)]
        metrics: BTreeMap<String, serde_json::Value>,
    }
    let url = format!("{base}/devices/{device}/latest");
    let reply = api
        .get(&url, &[])
        .await
        .with_context(|| format!("GET {url}"))?;
    if !reply.status.is_success() {
        return Ok(Err(format!(
            "{} {}",
            reply.status.as_u16(),
            reply.error_line()
        )));
    }
    let answer: Answer =
        serde_json::from_str(&reply.body).with_context(|| format!("GET {url}: not a reading"))?;
    let metric = answer
        .metrics
        .get_key_value(SERIES_METRIC)
        .or_else(|| answer.metrics.iter().next())
        .map(|(name, v)| (name.clone(), v.to_string()));
    Ok(Ok(LatestReading {
        ts: answer.ts,
        event_id: answer.event_id,
        metric,
    }))
}

/// The fleet's minutes and hours of `hours`: each hour's fleet parts
/// (`fleet#{hour}`), their minute cells and hour cells merged; and how many parts were
/// read.
async fn fleet_cells(
    rollups: &DynamoRollups,
    hours: &[i64],
) -> anyhow::Result<(Vec<FleetCells>, Vec<FleetCells>, usize)> {
    let mut minutes: BTreeMap<i64, Cells> = BTreeMap::new();
    let mut whole: BTreeMap<i64, Cells> = BTreeMap::new();
    let mut parts = 0;
    for &hour in hours {
        let q = RollupQuery::partition(keys::fleet_hour(hour), true);
        for item in query_all(rollups, q).await? {
            let part: FleetPart = item.body()?;
            parts += 1;
            whole.entry(hour).or_default().merge(&part.hour);
            for (minute, cells) in &part.minutes {
                minutes
                    .entry(hour + i64::from(*minute) * MINUTE_MS)
                    .or_default()
                    .merge(cells);
            }
        }
    }
    let rows = |cells: BTreeMap<i64, Cells>| {
        cells
            .into_iter()
            .map(|(start_ms, c)| FleetCells {
                start_ms,
                readings: c.readings,
                devices: c.devices,
            })
            .collect()
    };
    Ok((rows(minutes), rows(whole), parts))
}

/// The hot device's series of `hours`: its device-hour items' minute cells over its
/// raw readings, drawn to [`SERIES_FILE`].
async fn draw_series(
    scenario: &Scenario,
    api: &QueryApi,
    rollups: &DynamoRollups,
    hours: &[i64],
) -> anyhow::Result<Series> {
    let device = scenario.hot_device.as_str();
    let mut device_hours = Vec::new();
    for &hour in hours {
        let (pk, sk) = keys::device_hour(device, hour);
        if let Some(item) = rollups.get(&pk, &sk, true).await? {
            device_hours.push(item.body::<DeviceHour>()?);
        }
    }
    let metric = device_hours
        .iter()
        .flat_map(|dh| dh.hour.metrics.keys())
        .find(|m| *m == SERIES_METRIC)
        .or_else(|| {
            device_hours
                .iter()
                .find_map(|dh| dh.hour.metrics.keys().next())
        })
        .cloned()
        .unwrap_or_else(|| SERIES_METRIC.to_owned());
    let bands: Vec<MinuteBand> = device_hours
        .iter()
        .flat_map(|dh| {
            dh.minutes.iter().filter_map(|(minute, cells)| {
                let cell = cells.metrics.get(&metric)?;
                Some(MinuteBand {
                    minute_ms: dh.hour_ms + i64::from(*minute) * MINUTE_MS,
                    avg: cell.avg(),
                    min: to_f64(&cell.min),
                    max: to_f64(&cell.max),
                })
            })
        })
        .collect();
    let (points, pages, capped) = raw_points(api, device, &metric, hours).await?;
    let path = scenario.out_dir.join(SERIES_FILE);
    series::render_png(&path, device, &metric, &bands, &points)?;
    Ok(Series {
        path,
        device: device.to_owned(),
        metric,
        minutes: bands.len(),
        sealed_readings: device_hours.iter().map(|dh| dh.hour.readings).sum(),
        points: points.len() as u64,
        pages,
        capped,
    })
}

/// `device`'s readings of `hours` through `GET /devices/{id}/readings`, as (time,
/// value of `metric`) (readings without it are read, not drawn); the pages read; and
/// whether [`MAX_POINTS`] stopped the read.
async fn raw_points(
    api: &QueryApi,
    device: &str,
    metric: &str,
    hours: &[i64],
) -> anyhow::Result<(Vec<(i64, f64)>, u64, bool)> {
    let (Some(&first), Some(&last)) = (hours.first(), hours.last()) else {
        return Ok((Vec::new(), 0, false));
    };
    let read = RangeRead {
        device,
        from: first,
        to: last + HOUR_MS,
        limit: PAGE_LIMIT,
    };
    let url = api.readings_url(device);
    let (mut points, mut read_count, mut pages) = (Vec::new(), 0u64, 0u64);
    let mut cursor: Option<String> = None;
    loop {
        let reply = api
            .readings_page(&read, cursor.as_deref())
            .await
            .with_context(|| format!("GET {url}"))?;
        pages += 1;
        if !reply.status.is_success() {
            bail!("GET {url}: {} {}", reply.status, reply.error_line());
        }
        let page = reply
            .page()
            .with_context(|| format!("GET {url}: not a page"))?;
        for item in &page.items {
            read_count += 1;
            let ts = item["ts"].as_str().and_then(|t| Timestamp::parse(t).ok());
            if let (Some(ts), Some(v)) = (ts, item["metrics"][metric].as_f64()) {
                points.push((ts.as_millis(), v));
            }
        }
        match page.next_cursor {
            Some(_) if read_count >= MAX_POINTS => return Ok((points, pages, true)),
            Some(c) => cursor = Some(c),
            None => return Ok((points, pages, false)),
        }
    }
}
