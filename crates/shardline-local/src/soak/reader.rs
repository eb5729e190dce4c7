//! The soak's reader of the query API: random ranges of a few devices paged while
//! run-local is killed and restarted, each page checked (sorted, in range, of its
//! device, no reading twice), and the final complete reads.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tokio::task::JoinHandle;

use super::{Report, truncate};
use crate::query_api::{QueryApi, RangeRead};

/// What the reader saw while the soak ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReaderStats {
    /// Ranges paged through to the end.
    pub ranges: u64,
    /// Pages read (200s).
    pub pages: u64,
    /// Readings returned.
    pub items: u64,
    /// Requests that got no answer (run-local killed or restarting); retried.
    pub connection_errors: u64,
    /// 5xx answers (injected DynamoDB faults surfacing); retried.
    pub server_errors: u64,
    /// 4xx answers to requests the reader built valid (violations).
    pub client_errors: u64,
    /// Milliseconds the pages answered (200s) took, in all and at most.
    pub page_ms_total: u64,
    pub slowest_page_ms: u64,
}

impl ReaderStats {
    /// The mean time of a page answered, milliseconds.
    pub fn mean_page_ms(&self) -> Option<u64> {
        self.page_ms_total.checked_div(self.pages)
    }
}

/// Every (device, event id) the reader was shown.
type Seen = BTreeSet<(String, String)>;

/// The reader's task, paging the API until stopped.
pub(super) struct Reader {
    stop: Arc<AtomicBool>,
    task: JoinHandle<(ReaderStats, Seen, Vec<String>)>,
}

impl Reader {
    /// Starts paging the API at `query`: ranges of `devices` from `start_ms` (minus
    /// 2 s) to now.
    pub(super) fn spawn(query: SocketAddr, start_ms: i64, seed: u64, devices: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(reader_loop(query, start_ms, seed, devices, stop.clone()));
        Self { stop, task }
    }

    /// Stops the reader and records its counters and violations in `report`; returns
    /// every (device, event id) it was shown.
    pub(super) async fn finish(self, report: &mut Report) -> anyhow::Result<Seen> {
        self.stop.store(true, Ordering::SeqCst);
        let (stats, seen, violations) = self.task.await.context("the reader task")?;
        report.reader = stats;
        report.violations.extend(violations);
        Ok(seen)
    }
}

/// The reader: random ranges of `devices`, until stopped. Returns its counters, every
/// (device, event) it was shown, and violations.
async fn reader_loop(
    query: SocketAddr,
    start_ms: i64,
    seed: u64,
    devices: Vec<String>,
    stop: Arc<AtomicBool>,
) -> (ReaderStats, Seen, Vec<String>) {
    let api =
        QueryApi::new(query, Duration::from_secs(30)).unwrap_or_else(|_| QueryApi::untimed(query));
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0ead_e500);
    let mut stats = ReaderStats::default();
    let mut seen = BTreeSet::new();
    let mut violations = Vec::new();
    while !stop.load(Ordering::SeqCst) && violations.len() < 50 && !devices.is_empty() {
        let device = devices[rng.random_range(0..devices.len())].as_str();
        let now = store::clock::wall_clock().map_or(start_ms, |t| t.as_millis());
        let span = (now - start_ms).max(1_000) + 2_000;
        let from = start_ms - 2_000 + rng.random_range(0..span);
        let to = from + rng.random_range(500..20_000);
        let limit = rng.random_range(1..=200);
        let read = RangeRead {
            device,
            from,
            to,
            limit,
        };
        if let Some(got) = page_range(&api, &read, Some(&stop), (&mut stats, &mut violations)).await
        {
            seen.extend(got.into_iter().map(|(_, e)| (device.to_owned(), e)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (stats, seen, violations)
}

/// Every reading of `device` in `[from, to)` through the API at `query`, pages of
/// `limit`.
pub(super) async fn read_all(
    query: SocketAddr,
    device: &str,
    from: i64,
    to: i64,
    limit: u32,
) -> anyhow::Result<Vec<(i64, String)>> {
    let api = QueryApi::untimed(query);
    let mut stats = ReaderStats::default();
    let mut violations = Vec::new();
    let read = RangeRead {
        device,
        from,
        to,
        limit,
    };
    let got = page_range(&api, &read, None, (&mut stats, &mut violations)).await;
    if !violations.is_empty() {
        bail!("{}", violations.join("; "));
    }
    Ok(got.context("no complete read")?.into_iter().collect())
}

/// One page answer of the device readings API.
enum Answer {
    Page(Vec<(i64, String, String)>, Option<String>),
    Retry(RetryKind),
    Refused(u16, String),
}

enum RetryKind {
    Connection,
    Server,
}

/// One page of `read` from `cursor` on, as (ts, event id, device id) per reading.
async fn get_page(api: &QueryApi, read: &RangeRead<'_>, cursor: Option<&str>) -> Answer {
    let Ok(reply) = api.readings_page(read, cursor).await else {
        return Answer::Retry(RetryKind::Connection);
    };
    let (status, body) = (reply.status.as_u16(), reply.body);
    if status >= 500 {
        return Answer::Retry(RetryKind::Server);
    }
    if status != 200 {
        return Answer::Refused(status, truncate(&body, 300));
    }
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&body) else {
        return Answer::Refused(status, format!("not JSON: {}", truncate(&body, 200)));
    };
    let items = value["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    let ts = i["ts"]
                        .as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map_or(i64::MIN, |t| t.timestamp_millis());
                    (
                        ts,
                        i["event_id"].as_str().unwrap_or_default().to_owned(),
                        i["device_id"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let next = value["next_cursor"].as_str().map(str::to_owned);
    Answer::Page(items, next)
}

/// Pages through `read` and checks every page: ascending by (ts, event id), inside
/// the range, of that device, no reading twice across pages. Retries a page the
/// server could not answer (restart, injected fault), boundedly. Once `stop` is set,
/// the read is left between two pages (`None`): a small limit over a raised device's
/// range is hundreds of pages, which would hold the soak long after its queue drained.
async fn page_range(
    api: &QueryApi,
    read: &RangeRead<'_>,
    stop: Option<&AtomicBool>,
    (stats, violations): (&mut ReaderStats, &mut Vec<String>),
) -> Option<BTreeSet<(i64, String)>> {
    let mut cursor: Option<String> = None;
    let mut seen: BTreeSet<(i64, String)> = BTreeSet::new();
    let mut last: Option<(i64, String)> = None;
    let mut retries = 0;
    loop {
        if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            return None;
        }
        let asked = std::time::Instant::now();
        match get_page(api, read, cursor.as_deref()).await {
            Answer::Retry(kind) => {
                match kind {
                    RetryKind::Connection => stats.connection_errors += 1,
                    RetryKind::Server => stats.server_errors += 1,
                }
                retries += 1;
                if retries > 300 {
                    violations.push(format!("{read}: no answer after 300 tries"));
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Answer::Refused(status, body) => {
                stats.client_errors += 1;
                violations.push(format!(
                    "{read} limit {}: {status} to a valid request: {body}",
                    read.limit
                ));
                return None;
            }
            Answer::Page(items, next) => {
                stats.pages += 1;
                let ms = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX);
                stats.page_ms_total = stats.page_ms_total.saturating_add(ms);
                stats.slowest_page_ms = stats.slowest_page_ms.max(ms);
                stats.items += items.len() as u64;
                check_page(read, items, (&mut last, &mut seen), violations);
                match next {
                    Some(c) => cursor = Some(c),
                    None => {
                        stats.ranges += 1;
                        return Some(seen);
                    }
                }
            }
        }
    }
}

/// A reading's position in a paged read: (ts in ms, event id).
type Position = (i64, String);

/// Checks one page of a paged read: at most `limit` items, all of the device and
/// inside the range, strictly after the previous reading (of this page or the pages
/// before) by (ts, event id), none seen before. Appends what is wrong to `violations`.
fn check_page(
    read: &RangeRead<'_>,
    items: Vec<(i64, String, String)>,
    (last, seen): (&mut Option<Position>, &mut BTreeSet<Position>),
    violations: &mut Vec<String>,
) {
    let RangeRead {
        device,
        from,
        to,
        limit,
    } = *read;
    if items.len() > limit as usize {
        violations.push(format!("a page of {} items for limit {limit}", items.len()));
    }
    for (ts, event, dev) in items {
        if dev != device {
            violations.push(format!("a page of {device} holds a reading of {dev}"));
        }
        if ts < from || ts >= to {
            violations.push(format!(
                "{device}: reading {event} at {ts} outside [{from},{to})"
            ));
        }
        let key = (ts, event);
        if last.as_ref().is_some_and(|l| *l >= key) {
            violations.push(format!("{device}: {key:?} does not come after {last:?}"));
        }
        if !seen.insert(key.clone()) {
            violations.push(format!("{device}: {key:?} returned twice"));
        }
        *last = Some(key);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use query::{CursorKey, QueryService, ServiceConfig};
    use sharding::epoch::{FanoutHistory, TableHistory};
    use sharding::key::{ReadingRef, write_key};
    use sharding::layout::Layout;
    use sharding::time::Timestamp;
    use store::Written;
    use store::directory::ShardStore as _;
    use store::item::{Reading, ReadingItem};
    use store::memory::{MemoryReadings, MemoryShards};

    /// (ts, event id, device id) as the API returns them.
    type Row<'a> = (i64, &'a str, &'a str);

    fn page(items: &[Row<'_>]) -> Vec<(i64, String, String)> {
        items
            .iter()
            .map(|(ts, e, d)| (*ts, (*e).to_owned(), (*d).to_owned()))
            .collect()
    }

    /// Checks two pages of a read of dev-1 in [100, 200) with limit 2.
    fn check_two(first: &[Row<'_>], second: &[Row<'_>]) -> Vec<String> {
        let read = super::RangeRead {
            device: "dev-1",
            from: 100,
            to: 200,
            limit: 2,
        };
        let (mut last, mut seen) = (None, std::collections::BTreeSet::new());
        let mut violations = Vec::new();
        for p in [first, second] {
            super::check_page(&read, page(p), (&mut last, &mut seen), &mut violations);
        }
        violations
    }

    /// A stopped reader asks nothing more: the soak does not wait for the rest of a
    /// range of hundreds of pages after its queue drained.
    #[tokio::test]
    async fn a_stopped_reader_leaves_its_range_without_asking() {
        // Nothing listens there: a request would count a connection error and retry.
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let api = super::QueryApi::untimed(addr);
        let read = super::RangeRead {
            device: "dev-1",
            from: 100,
            to: 200,
            limit: 1,
        };
        let stop = std::sync::atomic::AtomicBool::new(true);
        let (mut stats, mut violations) = (super::ReaderStats::default(), Vec::new());
        let got = super::page_range(&api, &read, Some(&stop), (&mut stats, &mut violations)).await;
        assert!(got.is_none());
        assert_eq!((stats.pages, stats.connection_errors), (0, 0));
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn the_page_checker_passes_a_correct_read_and_names_each_wrong_page() {
        let good = [(100, "a", "dev-1"), (100, "b", "dev-1")];
        assert!(check_two(&good, &[(150, "a", "dev-1"), (199, "z", "dev-1")]).is_empty());

        let cases: [(&[Row<'_>], &str); 5] = [
            (&[(150, "c", "dev-2")], "holds a reading of dev-2"),
            (&[(200, "c", "dev-1")], "outside [100,200)"),
            (&[(100, "b", "dev-1")], "returned twice"),
            (&[(100, "a0", "dev-1")], "does not come after"),
            (
                &[
                    (150, "c", "dev-1"),
                    (151, "d", "dev-1"),
                    (152, "e", "dev-1"),
                ],
                "a page of 3 items for limit 2",
            ),
        ];
        for (second, expected) in cases {
            let violations = check_two(&good, second);
            assert!(
                violations.iter().any(|v| v.contains(expected)),
                "{second:?}: expected {expected:?}, got {violations:?}"
            );
        }
    }

    /// The soak's reader found the API blind while the table filled: a request made
    /// before the first write caches "no layout" for the directory TTL (60 s), and the
    /// layout the first writer then stores holds from the beginning of time, so every
    /// reading written within that minute is invisible to the API (200, empty pages).
    #[tokio::test]
    async fn a_read_before_the_first_write_does_not_hide_the_first_writes() {
        let source = MemoryReadings::new(None);
        let shards = MemoryShards::new();
        let key = CursorKey::new(b"soak-test-cursor-key-0123456789ab".to_vec()).expect("key");
        let service = QueryService::new(&source, shards.clone(), ServiceConfig::new(key));
        let path = "/devices/dev-1/readings";
        let range = "from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z";

        // Before anything is written: an empty page is right.
        let now = || store::clock::wall_clock().expect("the clock reads");
        let before = service.handle_parts("GET", path, Some(range), now()).await;
        assert_eq!(before.status().as_u16(), 200, "{}", before.body());

        // The first writer stores the layout (in force from the beginning of time) and
        // writes one reading inside the range.
        let layout = TableHistory::new(Layout::unsharded());
        assert_eq!(
            shards.create_layout(&layout).await.expect("layout"),
            Written::Applied
        );
        let ts = Timestamp::from_millis(1_782_086_400_000 + 60_000).expect("ts");
        let item_key = write_key(
            &ReadingRef::new("dev-1", "evt-1", ts),
            &layout,
            &FanoutHistory::new(),
            ts,
        )
        .expect("key")
        .key;
        let reading = Reading {
            device_id: "dev-1".to_owned(),
            event_id: "evt-1".to_owned(),
            ts,
            metrics: BTreeMap::from([(
                "t".to_owned(),
                store::Decimal::from_f64(1.0).expect("a number"),
            )]),
            tags: BTreeMap::new(),
            written: store::WriteOrder::OLDEST,
        };
        source.put(ReadingItem::new(
            &reading,
            item_key,
            Duration::from_secs(86_400 * 365 * 100),
        ));

        // A read right after the write must see it (the directory TTL may only delay
        // epochs that take effect later, never the layout itself).
        let after = service.handle_parts("GET", path, Some(range), now()).await;
        assert_eq!(after.status().as_u16(), 200, "{}", after.body());
        let body: serde_json::Value = serde_json::from_str(after.body()).expect("JSON");
        assert_eq!(
            body["items"].as_array().map(Vec::len),
            Some(1),
            "the reading written after the first request is missing ({} calls reached the table): {body}",
            source.calls()
        );
    }
}
