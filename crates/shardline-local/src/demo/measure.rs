//! What a run is measured by once its traffic is over: the range reads and the fan-out
//! epochs through the query API, the readings table's items, and the heat CSV drawn as
//! a heatmap with the throttles before and after the hot fan-out first grew.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Scenario, Variant};
use crate::heatmap;
use crate::publish::ReadingId;
use crate::query_api::{FanoutEpoch, QueryApi, RangeRead};

/// The fleet's busiest device (Zipf rank 1), whose range the demo reads besides the hot
/// device's.
pub const FLEET_DEVICE: &str = "dev-00001";
/// Most items one query page asks for (the API's maximum).
const PAGE_LIMIT: u32 = 1000;

/// One read of a time range through the API, all pages.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    /// What was read.
    pub what: String,
    /// Readings returned over all pages.
    pub items: u64,
    /// Pages (HTTP requests).
    pub pages: u64,
    /// Wall time of all pages.
    pub elapsed: Duration,
    /// The API's refusal, if it refused (status and body).
    pub refused: Option<String>,
}

impl QueryResult {
    /// The report's cell: the read's size and time, or the refusal.
    pub(super) fn cell(&self) -> String {
        match &self.refused {
            Some(why) => format!("refused: {why}"),
            None => format!(
                "{} items, {} pages, {} ms",
                self.items,
                self.pages,
                self.elapsed.as_millis()
            ),
        }
    }
}

/// What the API answered after a run.
#[derive(Debug)]
pub(super) struct ReadBack {
    /// The hot device's range.
    pub(super) hot_query: QueryResult,
    /// [`FLEET_DEVICE`]'s range.
    pub(super) fleet_query: QueryResult,
    /// The hot device's fan-out epochs.
    pub(super) fanout: Vec<FanoutEpoch>,
}

/// The range reads through the API at `query_addr`: the hot device and the fleet's
/// busiest over the scenario's query window, and the hot device's fan-out epochs.
pub(super) async fn read_back(
    scenario: &Scenario,
    query_addr: SocketAddr,
    start: sharding::time::Timestamp,
) -> anyhow::Result<ReadBack> {
    let api = QueryApi::new(query_addr, Duration::from_secs(60))
        .context("cannot build the HTTP client")?;
    let quarter = scenario.duration / 4;
    let from = start.as_millis() + i64::try_from(quarter.as_millis()).unwrap_or(0);
    let to = from + i64::try_from(scenario.query_window.as_millis()).unwrap_or(0);
    let range = |device| RangeRead {
        device,
        from,
        to,
        limit: PAGE_LIMIT,
    };
    let hot = &scenario.hot_device;
    let hot_query = read_range(&api, &range(hot), format!("{hot} readings")).await?;
    // The fleet's busiest device over the same range, for contrast with the hot one.
    let fleet_query = read_range(
        &api,
        &range(FLEET_DEVICE),
        format!("{FLEET_DEVICE} readings"),
    )
    .await?;
    let fanout = api.fanout(hot).await?;
    Ok(ReadBack {
        hot_query,
        fleet_query,
        fanout,
    })
}

/// Reads `read` page by page, timing the whole read.
async fn read_range(
    api: &QueryApi,
    read: &RangeRead<'_>,
    what: String,
) -> anyhow::Result<QueryResult> {
    let url = api.readings_url(read.device);
    let started = Instant::now();
    let (mut items, mut pages) = (0u64, 0u64);
    let mut cursor: Option<String> = None;
    loop {
        let reply = api
            .readings_page(read, cursor.as_deref())
            .await
            .with_context(|| format!("GET {url}"))?;
        pages += 1;
        if !reply.status.is_success() {
            return Ok(QueryResult {
                what,
                items,
                pages,
                elapsed: started.elapsed(),
                refused: Some(format!("{} {}", reply.status.as_u16(), reply.error_line())),
            });
        }
        let page = reply
            .page()
            .with_context(|| format!("GET {url}: not a page"))?;
        items += page.items.len() as u64;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(QueryResult {
        what,
        items,
        pages,
        elapsed: started.elapsed(),
        refused: None,
    })
}

/// What a table holds: readings (a block's members each, so a reading held by two items
/// counts twice), the distinct readings among them (by device, event id and time), and
/// its bytes as DynamoDB bills storage (each item's size plus 100 bytes).
pub(super) struct Stored {
    pub(super) held: u64,
    pub(super) readings: BTreeSet<ReadingId>,
    pub(super) bytes: f64,
}

/// DynamoDB's storage overhead of an item, bytes.
const STORAGE_BYTES_AN_ITEM: usize = 100;

/// What `table` holds (see [`Stored`]).
pub(super) async fn stored(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
) -> anyhow::Result<Stored> {
    let items = store::scan::scan_items(dynamo.scan().table_name(table))
        .await
        .with_context(|| format!("cannot scan {table}"))?;
    let mut held = 0;
    let mut readings = BTreeSet::new();
    let mut bytes = 0;
    for item in items {
        bytes += store::size::item_size(&item) + STORAGE_BYTES_AN_ITEM;
        for r in store::block::expand(item).with_context(|| format!("an item of {table}"))? {
            held += 1;
            readings.insert(ReadingId {
                device_id: r.device_id,
                event_id: r.event_id,
                ts_ms: r.ts_ms,
            });
        }
    }
    Ok(Stored {
        held,
        readings,
        bytes: bytes as f64,
    })
}

/// A run's heat, drawn: the heatmap's path, and the throttles on `table` around the
/// hot fan-out's first growth (see [`throttles_around_first_raise`]).
#[derive(Debug)]
pub(super) struct Heat {
    /// The heatmap PNG.
    pub(super) heatmap: PathBuf,
    /// Throttled items before the hot fan-out first grew.
    pub(super) throttles_before_raise: Option<u64>,
    /// Throttled items from then on.
    pub(super) throttles_after_raise: Option<u64>,
}

/// Draws the proxy's heat CSV as `heat-<variant>.png` in the output directory and
/// counts the throttles on `table` before and after the hot fan-out (its epochs
/// `fanout`) first grew; the CSV's seconds count from `proxy_origin_ms`.
pub(super) fn draw_heat(
    scenario: &Scenario,
    variant: Variant,
    heat_csv: &Path,
    fanout: &[FanoutEpoch],
    table: &str,
    proxy_origin_ms: i64,
) -> anyhow::Result<Heat> {
    let text = std::fs::read_to_string(heat_csv)
        .with_context(|| format!("cannot read {}", heat_csv.display()))?;
    let rows = heatmap::HeatRow::parse_csv(&text)?;
    let heatmap_path = scenario
        .out_dir
        .join(format!("heat-{}.png", variant.name()));
    let grid = heatmap::grid(&rows, 40)?;
    heatmap::render_png(&grid, scenario.key_wcu, &heatmap_path)?;
    let (throttles_before_raise, throttles_after_raise) =
        throttles_around_first_raise(fanout, &rows, table, proxy_origin_ms);
    Ok(Heat {
        heatmap: heatmap_path,
        throttles_before_raise,
        throttles_after_raise,
    })
}

/// Items throttled on `table` before and after the hot device's fan-out first grew
/// (`None` when it never did); heat rows count seconds from `proxy_origin_ms`.
fn throttles_around_first_raise(
    fanout: &[FanoutEpoch],
    rows: &[heatmap::HeatRow],
    table: &str,
    proxy_origin_ms: i64,
) -> (Option<u64>, Option<u64>) {
    let Some(first_raise) = fanout
        .iter()
        .filter(|e| e.k > 1)
        .filter_map(|e| sharding::time::Timestamp::parse(&e.effective_from).ok())
        .map(|ts| ts.as_millis())
        .min()
    else {
        return (None, None);
    };
    let second = u64::try_from((first_raise - proxy_origin_ms).max(0) / 1000).unwrap_or(0);
    let (mut before, mut after) = (0, 0);
    for r in rows.iter().filter(|r| r.table == table) {
        if r.second < second {
            before += r.throttled_items;
        } else {
            after += r.throttled_items;
        }
    }
    (Some(before), Some(after))
}
