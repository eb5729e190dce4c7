//! Run 2's dashboard: what a dashboard's first questions answer once the run's readings
//! are written, read from the sealer's real items, the run's real query API and the
//! query's own merge, never recomputed here.
//!
//! 1. **Seal.** The run's readings are stamped now, in an hour that has not ended, so
//!    the scheduled sealer (which seals an hour the lateness horizon after it ends) has
//!    not sealed it. The demo seals the run's hours with [`sealer::Sealer::reseal`], the
//!    documented rebuild path: device-hours, summaries, directory entries and fleet
//!    parts, the watermark left where it is. The sealer reads and writes dynalite
//!    directly, not through the run's capacity-proxy, so the run's heat, throttles and
//!    write units stay the ingest's.
//! 2. **The API** (the run's, on loopback, through its capacity-proxy), once the
//!    reseal is done: `GET /devices` paged to the end (the device count and `as_of`),
//!    then `GET /devices/{id}/latest` of the hot device, [`FLEET_DEVICE`] and the last
//!    other device it lists. (Asked beside the reseal, the hot device's latest reading
//!    ran out of the request's time budget on this 2-core machine.)
//! 3. **Fleet minutes.** The `fleet#{hour}` parts of each hour, their minute cells
//!    merged ([`Cells::merge`]). `GET /stats` would answer only hours before the
//!    watermark, which a reseal does not move.
//! 4. **Series.** The hot device's device-hour items (minute cells: avg, min, max of
//!    its main metric) drawn over its raw readings ([`super::series`]). The raw
//!    readings are read in process, while the reseal runs, by the readings route's
//!    merge (`query::exec::merge_each` over the device's read plan) from dynalite:
//!    through the API and capacity-proxy the default demo's 24,000 took about 30 s of
//!    the debug build, this way under 2 s.
//!
//! Most of the dashboard's time is the reseal's writes on dynalite: four calls a
//! device (its device-hour and summary, its directory entry read and written).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use query::exec::{ReadBudget, ReadOptions, merge_each};
use sealer::DynamoSealer;
use serde::Deserialize;
use sharding::read_plan::plan_entity;
use sharding::time::{TimeRange, Timestamp};
use shardline::env::EnvLookup;
use store::directory::{CachedDirectory, DeviceLayout};
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{
    Cells, DeviceHour, FleetPart, HOUR_MS, MINUTE_MS, RollupQuery, RollupTable as _, exact,
    hour_of, keys, query_all, to_f64,
};

use super::Scenario;
use super::measure::FLEET_DEVICE;
use super::series::{self, MinuteBand};
use crate::query_api::QueryApi;

/// The metric the series draws, when the hot device sends it (else its first metric).
pub const SERIES_METRIC: &str = "temp_c";
/// The series' file name, in the output directory.
pub const SERIES_FILE: &str = "series.png";
/// Most raw readings the series reads and draws (the default demo's hot device sends
/// 24,000); beyond, the report says how many it drew.
pub(super) const MAX_POINTS: u64 = 200_000;
/// Readings the series' merge holds at a time.
const MERGE_WINDOW: usize = 10_000;
/// Requests of one device's latest reading at most.
const LATEST_ATTEMPTS: u32 = 2;
/// Most pages of `GET /devices` read (a thousand devices a page at most).
const MAX_DEVICE_PAGES: u64 = 1_000;
/// Devices a page of `GET /devices` asks for (the API's most).
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
    /// How long the requests took, and how many were made.
    pub elapsed: Duration,
    pub attempts: u32,
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
    /// Raw readings read (each once), and those drawn (with the metric).
    pub read: u64,
    pub points: u64,
    /// Query calls of the raw read.
    pub queries: u64,
    /// True when [`MAX_POINTS`] stopped the read.
    pub capped: bool,
}

/// How long the dashboard's steps took. The first two ran side by side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    pub reseal: Duration,
    /// The hot device's raw readings.
    pub raw: Duration,
    /// `GET /devices` and the latest readings, after the reseal.
    pub api: Duration,
    pub fleet: Duration,
    /// The device-hours and the PNG.
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
    let from_ms = start.as_millis();
    let duration_ms = i64::try_from(scenario.duration.as_millis()).unwrap_or(i64::MAX);
    let to_ms = from_ms.saturating_add(duration_ms.max(1));
    let hours: Vec<i64> = std::iter::successors(Some(hour_of(from_ms)), |h| Some(h + HOUR_MS))
        .take_while(|h| *h < to_ms)
        .collect();
    let tables = Tables::new(&sources).await?;
    let api = QueryApi::new(sources.query_addr, Duration::from_secs(60))
        .context("cannot build the HTTP client")?;
    let base = format!("http://{}", sources.query_addr);
    let hot = scenario.hot_device.as_str();

    // The reseal, and beside it the raw readings (they read the readings table alone).
    let now = store::clock::wall_clock()?;
    let (reseal, raw) = tokio::join!(
        timed(tables.sealer.reseal(from_ms, to_ms, now, None)),
        timed(tables.raw_readings(hot, &hours)),
    );
    let mut timings = Timings {
        reseal: reseal.1,
        raw: raw.1,
        ..Timings::default()
    };
    let reseal = reseal.0.context("the reseal of the run's hours")?;
    let raw = raw.0.context("the hot device's raw readings")?;

    // The API after the reseal: the latest readings' budget is a request's, and on this
    // machine a reseal beside them took it all.
    let step = Instant::now();
    let devices = count_devices(&api, &base, hot).await?;
    let mut latest = Vec::new();
    let others = [FLEET_DEVICE]
        .into_iter()
        .chain(devices.last_other.as_deref());
    for device in std::iter::once(hot).chain(others) {
        latest.push(latest_reading(&api, &base, device).await?);
    }
    timings.api = step.elapsed();

    let step = Instant::now();
    let rollups = tables.sealer.rollups();
    let (fleet, fleet_hours, fleet_parts) = fleet_cells(rollups, &hours).await?;
    timings.fleet = step.elapsed();

    let step = Instant::now();
    let series = draw_series(scenario, rollups, &hours, raw).await?;
    timings.series = step.elapsed();
    timings.total = started.elapsed();
    Ok(Dashboard {
        hours,
        reseal,
        horizon: tables.horizon,
        devices,
        latest,
        fleet,
        fleet_hours,
        fleet_parts,
        series,
        timings,
    })
}

/// `work`'s output, and how long it took.
async fn timed<T>(work: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = work.await;
    (out, started.elapsed())
}

/// The stack's tables on dynalite itself: the sealer, configured as the Lambda is, and
/// what the series reads the readings with.
struct Tables {
    sealer: DynamoSealer,
    horizon: Duration,
    source: DynamoReadingSource,
    directory: CachedDirectory<DynamoShards>,
    concurrency: usize,
}

/// A device's raw readings: each metric's (time, value) points, the readings read,
/// the Query calls, and whether [`MAX_POINTS`] stopped the read.
struct RawReadings {
    points: BTreeMap<String, Vec<(i64, f64)>>,
    read: u64,
    queries: u64,
    capped: bool,
}

impl Tables {
    async fn new(sources: &Sources<'_>) -> anyhow::Result<Self> {
        let config = sealer::Config::from_lookup(|name| sources.env.get(name))
            .context("sealer configuration")?;
        let dynamo =
            aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(sources.dynalite_url).await);
        let shards = || DynamoShards::new(&dynamo, &config.shard_table_name);
        let source = || DynamoReadingSource::new(dynamo.clone(), &config.table_name);
        Ok(Self {
            sealer: DynamoSealer::on_dynamo(&dynamo, &config),
            horizon: config.settings.horizon,
            source: source(),
            // Fresh reads: the one read of the layout and the device's fan-out.
            directory: CachedDirectory::new(shards(), Duration::ZERO),
            concurrency: config.settings.concurrency,
        })
    }

    /// `device`'s readings of `hours`, each once, as the readings route merges them:
    /// its read plan over the hours, merged by `query::exec`.
    async fn raw_readings(&self, device: &str, hours: &[i64]) -> anyhow::Result<RawReadings> {
        let mut raw = RawReadings {
            points: BTreeMap::new(),
            read: 0,
            queries: 0,
            capped: false,
        };
        let (Some(&from), Some(&last)) = (hours.first(), hours.last()) else {
            return Ok(raw);
        };
        let to = last + HOUR_MS;
        let now = store::clock::wall_clock()?;
        let Some(DeviceLayout { table, fanout }) =
            self.directory.device_layout(device, now).await?
        else {
            return Ok(raw);
        };
        let range = TimeRange::of_millis(from, to)?;
        let plan = plan_entity(device, range, &table, &fanout)?;
        let opts = ReadOptions {
            descending: false,
            consistent: true,
            concurrency: self.concurrency,
            max_buffered: MERGE_WINDOW * 20,
            budget: ReadBudget {
                queries: u64::MAX,
                evaluated: u64::MAX,
                deadline: None,
            },
        };
        let specs = query::service::specs(&plan);
        let outcome = merge_each(&self.source, specs, opts, MERGE_WINDOW, |item| {
            if raw.read >= MAX_POINTS {
                raw.capped = true;
                return ControlFlow::Break(());
            }
            if item.device_id == device && (from..to).contains(&item.ts_ms) {
                raw.read += 1;
                for (name, v) in &item.metrics {
                    let point = (item.ts_ms, to_f64(&exact(v)));
                    raw.points.entry(name.clone()).or_default().push(point);
                }
            }
            ControlFlow::Continue(())
        })
        .await?;
        raw.queries = outcome.cost.pages;
        Ok(raw)
    }
}

/// `GET /devices/{device}/latest`: the reading, or the refusal's status and error;
/// how long it took. Asked again once after a 400 `budget_exceeded` (the request's
/// time budget, which a loaded machine can spend before the read finds the reading).
async fn latest_reading(api: &QueryApi, base: &str, device: &str) -> anyhow::Result<Latest> {
    #[derive(Deserialize)]
    struct Answer {
        ts: String,
        event_id: String,
        #[serde(default)]
        metrics: BTreeMap<String, serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct Refusal {
        code: String,
        message: String,
    }
    let started = Instant::now();
    let url = format!("{base}/devices/{device}/latest");
    let mut attempts = 0;
    let reply = loop {
        attempts += 1;
        let reply = api
            .get(&url, &[])
            .await
            .with_context(|| format!("GET {url}"))?;
        let refusal = serde_json::from_str::<Refusal>(&reply.body).ok();
        let over_budget = refusal.is_some_and(|r| r.code == "budget_exceeded");
        if !(over_budget && attempts < LATEST_ATTEMPTS) {
            break reply;
        }
    };
    let elapsed = started.elapsed();
    let answer = if reply.status.is_success() {
        let answer: Answer = serde_json::from_str(&reply.body)
            .with_context(|| format!("GET {url}: not a reading"))?;
        let metric = answer
            .metrics
            .get_key_value(SERIES_METRIC)
            .or_else(|| answer.metrics.iter().next())
            .map(|(name, v)| (name.clone(), v.to_string()));
        Ok(LatestReading {
            ts: answer.ts,
            event_id: answer.event_id,
            metric,
        })
    } else {
        Err(match serde_json::from_str::<Refusal>(&reply.body) {
            Ok(r) => format!("{} {}: {}", reply.status.as_u16(), r.code, r.message),
            Err(_) => format!("{} {}", reply.status.as_u16(), reply.error_line()),
        })
    };
    Ok(Latest {
        device: device.to_owned(),
        answer,
        elapsed,
        attempts,
    })
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
/// `raw` readings, drawn to [`SERIES_FILE`].
async fn draw_series(
    scenario: &Scenario,
    rollups: &DynamoRollups,
    hours: &[i64],
    mut raw: RawReadings,
) -> anyhow::Result<Series> {
    let device = scenario.hot_device.as_str();
    let mut device_hours = Vec::new();
    for &hour in hours {
        let key = keys::device_hour(device, hour);
        if let Some(item) = rollups.get(&key.pk, &key.sk, true).await? {
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
    let points = raw.points.remove(&metric).unwrap_or_default();
    let path = scenario.out_dir.join(SERIES_FILE);
    series::render_png(&path, device, &metric, &bands, &points)?;
    Ok(Series {
        path,
        device: device.to_owned(),
        metric,
        minutes: bands.len(),
        sealed_readings: device_hours.iter().map(|dh| dh.hour.readings).sum(),
        read: raw.read,
        points: points.len() as u64,
        queries: raw.queries,
        capped: raw.capped,
    })
}
