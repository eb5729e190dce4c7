//! Item 1 (ingest throughput) and the calls-per-1,000-readings half of item 5.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use capacity_proxy::{Proxy, ProxyConfig, ProxyHandle};
use futures::StreamExt;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::epoch::TableHistory;

use crate::common::{self, Gen};
use crate::report::{Results, at_least};

const LATENCY_MS: u64 = 10;
const SHARDS: u32 = 64;

/// Settings of one run of item 1.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub readings: usize,
    /// Time budget of writer (a), which then extrapolates.
    pub put_item_seconds: f64,
}

async fn sink() -> Result<ProxyHandle> {
    let mut config = ProxyConfig::sink();
    config.seed = Some(8);
    config.faults.latency_ms = LATENCY_MS;
    Ok(Proxy::start(config).await?)
}

fn calls(proxy: &ProxyHandle) -> u64 {
    let s = proxy.stats();
    ["PutItem", "BatchWriteItem"]
        .iter()
        .filter_map(|op| s.requests_by_op.get(*op))
        .sum()
}

/// Median round trip of one 25-item BatchWriteItem through a fresh sink, ms.
async fn rtt_ms() -> Result<f64> {
    let proxy = sink().await?;
    let client = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&proxy.url()).await);
    let mut samples = Vec::new();
    for call in 0..40 {
        let reqs: Vec<WriteRequest> = (0..25)
            .map(|i| {
                let item = HashMap::from([
                    ("PK".to_owned(), AttributeValue::S(format!("rtt#{i}"))),
                    ("SK".to_owned(), AttributeValue::S(format!("{call:04}"))),
                    ("payload".to_owned(), AttributeValue::S("x".repeat(150))),
                ]);
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|p| WriteRequest::builder().put_request(p).build())
            })
            .collect::<Result<_, _>>()?;
        let t = Instant::now();
        client
            .batch_write_item()
            .request_items("rtt", reqs)
            .send()
            .await?;
        if call >= 5 {
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    proxy.shutdown().await?;
    Ok(common::median(&mut samples))
}

#[derive(Debug, Default, serde::Deserialize)]
struct PyOut {
    written: u64,
    seconds: f64,
}

fn python(root: &Path, script: &str, args: &[&str]) -> Result<PyOut> {
    let venv = stand_in::ensure_venv(root)?;
    let out = Command::new(venv.bin("python"))
        .arg(root.join("bench/python").join(script))
        .args(args)
        .output()
        .with_context(|| format!("running {script}"))?;
    if !out.status.success() {
        bail!(
            "{script} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).with_context(|| format!("{script} printed {text:?}"))
}

/// One measured writer.
struct Writer {
    readings: u64,
    seconds: f64,
    calls: u64,
    /// Where one invocation's time goes, for a run of one invocation at a time.
    breakdown: Option<Breakdown>,
    /// The proxy's own time on the run's calls.
    proxy: capacity_proxy::stats::ServiceTime,
}

/// When each BatchWriteItem attempt of a run left and its answer came back, as the
/// handler's own SDK client sees it.
#[derive(Debug, Clone, Default)]
struct CallClock {
    /// (when, true for a send, false for an answer).
    events: Arc<Mutex<Vec<(Instant, bool)>>>,
}

impl CallClock {
    fn push(&self, send: bool) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), send));
    }

    fn clear(&self) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn events(&self) -> Vec<(Instant, bool)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Intercept for CallClock {
    fn name(&self) -> &'static str {
        "CallClock"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.push(true);
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.push(false);
        Ok(())
    }
}

/// Mean milliseconds per invocation: before its first call leaves (parse, key, marshal,
/// request building), with calls out, after its last answer (settling), and between
/// invocations; and the calls' own round trips.
#[derive(Debug, Clone, Copy)]
struct Breakdown {
    invocation_ms: f64,
    head_ms: f64,
    io_ms: f64,
    tail_ms: f64,
    gap_ms: f64,
    calls_per_invocation: f64,
    rtt_ms: f64,
    /// `MAX_INFLIGHT`: calls one invocation may have out at once.
    slots: usize,
    /// Call time over `slots` x time with calls out.
    slots_used: f64,
}

impl Breakdown {
    fn of(
        invocations: &[(Instant, Instant)],
        events: &[(Instant, bool)],
        max_inflight: usize,
    ) -> Option<Self> {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (mut head, mut io, mut tail, mut gap, mut busy) = (0.0, 0.0, 0.0, 0.0, 0.0);
        let mut calls = 0usize;
        for (i, &(start, end)) in invocations.iter().enumerate() {
            let inside: Vec<&(Instant, bool)> = events
                .iter()
                .filter(|(t, _)| *t >= start && *t <= end)
                .collect();
            let first_send = inside.iter().filter(|(_, s)| *s).map(|(t, _)| *t).min()?;
            let last_answer = inside.iter().filter(|(_, s)| !*s).map(|(t, _)| *t).max()?;
            head += ms(first_send - start);
            io += ms(last_answer.saturating_duration_since(first_send));
            tail += ms(end.saturating_duration_since(last_answer));
            // Every call adds its answer time and takes its send time: the sum is the
            // calls' total round trip, however they pair up.
            for (t, send) in &inside {
                let at = ms(t.saturating_duration_since(start));
                busy += if *send { -at } else { at };
            }
            calls += inside.iter().filter(|(_, s)| *s).count();
            if let Some(&(next, _)) = invocations.get(i + 1) {
                gap += ms(next.saturating_duration_since(end));
            }
        }
        let n = invocations.len() as f64;
        Some(Self {
            invocation_ms: invocations.iter().map(|(s, e)| ms(*e - *s)).sum::<f64>() / n,
            head_ms: head / n,
            io_ms: io / n,
            tail_ms: tail / n,
            gap_ms: gap / (n - 1.0).max(1.0),
            calls_per_invocation: calls as f64 / n,
            rtt_ms: busy / calls.max(1) as f64,
            slots: max_inflight,
            slots_used: busy / (max_inflight as f64 * io).max(f64::MIN_POSITIVE),
        })
    }
}

impl Writer {
    fn rate(&self) -> f64 {
        self.readings as f64 / self.seconds
    }
    fn calls_per_1000(&self) -> f64 {
        self.calls as f64 * 1000.0 / self.readings.max(1) as f64
    }
}

/// A writer of item 1 run twice over the same readings, in one process on one proxy:
/// the first pass meets a cold process (the first invocation's allocations, the SDK's
/// connections to a fresh proxy), the second runs as a Lambda instance under sustained
/// load does, warm.
struct Passes {
    cold: Writer,
    warm: Writer,
}

/// Runs the ingest handler over `gens`: events of `per_event` messages of `per_message`
/// readings, `concurrency` invocations at a time (like that many Lambda instances),
/// twice ([`Passes`]).
async fn shardline(
    gens: &[Gen],
    per_message: usize,
    per_event: usize,
    concurrency: usize,
) -> Result<Passes> {
    let proxy = sink().await?;
    let config = common::ingest_config(&[("SHARDS", "64"), ("BUCKET", "hour")])?;
    let max_inflight = config.max_inflight;
    let clock = CallClock::default();
    let sdk = stand_in::sdk_config(&proxy.url()).await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(clock.clone())
            .build(),
    );
    let service = common::service_on(&client, config);
    let now = common::ts(86_400_000 + 60_000)?;
    let messages: Vec<(String, String)> = gens
        .chunks(per_message)
        .enumerate()
        .map(|(i, chunk)| {
            let body = if chunk.len() == 1 {
                chunk[0].json()
            } else {
                serde_json::json!({"readings": chunk.iter().map(Gen::json).collect::<Vec<_>>()})
            };
            (format!("msg-{i:08}"), body.to_string())
        })
        .collect();
    let events: Vec<_> = messages
        .chunks(per_event)
        .map(|c| common::event(c.iter().cloned()))
        .collect();
    let mut passes = Vec::with_capacity(2);
    for _ in 0..2 {
        let (calls_before, time_before) = (calls(&proxy), proxy.stats().service);
        clock.clear();
        let service = &service;
        let started = Instant::now();
        let done: Vec<(u64, (Instant, Instant))> = futures::stream::iter(events.iter().enumerate())
            .map(|(i, ev)| async move {
                let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
                let start = Instant::now();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                let report = service.process(ev, now, deadline, &mut rng).await;
                (report.writes.written, (start, Instant::now()))
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let seconds = started.elapsed().as_secs_f64();
        let readings: u64 = done.iter().map(|(w, _)| w).sum();
        let invocations: Vec<(Instant, Instant)> = done.iter().map(|(_, span)| *span).collect();
        let breakdown = (concurrency == 1)
            .then(|| Breakdown::of(&invocations, &clock.events(), max_inflight))
            .flatten();
        if readings != gens.len() as u64 {
            eprintln!(
                "item 1: shardline wrote {readings} of {} readings (max_inflight {max_inflight})",
                gens.len()
            );
        }
        let time = proxy.stats().service;
        passes.push(Writer {
            readings,
            seconds,
            calls: calls(&proxy) - calls_before,
            breakdown,
            proxy: capacity_proxy::stats::ServiceTime {
                calls: time.calls - time_before.calls,
                total_micros: time.total_micros - time_before.total_micros,
                asleep_micros: time.asleep_micros - time_before.asleep_micros,
            },
        });
    }
    proxy.shutdown().await?;
    let warm = passes.pop().context("the warm pass")?;
    let cold = passes.pop().context("the cold pass")?;
    Ok(Passes { cold, warm })
}

/// Item 1 and the calls of item 5.
pub async fn run(root: &Path, settings: Settings, results: &mut Results) -> Result<()> {
    let gens = common::day_of_readings(settings.readings);
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let items_path = dir.join("items.jsonl");
    write_items(&gens, &items_path)?;
    let items_arg = items_path.to_string_lossy().into_owned();

    let rtt = rtt_ms().await?;
    // (a) one PutItem per reading, for a fixed time, extrapolated.
    let budget = settings.put_item_seconds.to_string();
    let a = python_writer(root, "put_item.py", &items_arg, &["--seconds", &budget]).await?;
    // (b) boto3 batch_writer, all readings.
    let b = python_writer(root, "batch_writer.py", &items_arg, &[]).await?;
    // (c) the ingest handler: messages of 40 readings, events of the template's default
    // batch (100 messages, 4,000 readings: 10 rounds of MAX_INFLIGHT calls of 25 items),
    // one invocation at a time, as one Lambda instance takes them under load; a cold pass,
    // then the figure's warm one.
    let c = shardline(&gens, 40, common::TEMPLATE_BATCH_SIZE, 1).await?;
    // (c10) the same in events of 10 messages (400 readings, one round of calls): every
    // invocation's fixed part counts against one round trip.
    let c10 = shardline(&gens, 40, 10, 1).await?;
    // (c') one reading per message, 10 per event, 20 invocations at once (the
    // template's IngestMaxConcurrency default).
    let c1 = shardline(&gens, 1, 10, 20).await?;
    report(
        results,
        settings,
        gens.len(),
        rtt,
        (&a, &b),
        [&c, &c10, &c1],
    );
    Ok(())
}

/// The readings as the items Shardline stores, one JSON object a line, for the boto3
/// writers.
fn write_items(gens: &[Gen], path: &Path) -> Result<()> {
    let table = TableHistory::new(common::hourly(SHARDS));
    let retention = Duration::from_secs(30 * 86_400);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for g in gens {
        let item = common::keyed_item(g, &table, retention)?.to_item()?;
        writeln!(f, "{}", document(&item)?)?;
    }
    f.flush()?;
    Ok(())
}

/// An item as a plain JSON document (boto3's `Table` form): each attribute its value,
/// a number its text.
fn document(item: &store::Item) -> Result<String> {
    fn value(v: &AttributeValue) -> Result<serde_json::Value> {
        Ok(match v {
            AttributeValue::S(s) => serde_json::Value::from(s.as_str()),
            AttributeValue::N(n) => serde_json::from_str(n)?,
            AttributeValue::M(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| Ok((k.clone(), value(v)?)))
                    .collect::<Result<_>>()?,
            ),
            other => bail!("no such attribute in a reading's item: {other:?}"),
        })
    }
    let doc: serde_json::Map<String, serde_json::Value> = item
        .iter()
        .map(|(k, v)| Ok((k.clone(), value(v)?)))
        .collect::<Result<_>>()?;
    Ok(serde_json::Value::Object(doc).to_string())
}

/// Runs the boto3 writer `script` over the items file against a fresh sink.
async fn python_writer(root: &Path, script: &str, items: &str, extra: &[&str]) -> Result<Writer> {
    let proxy = sink().await?;
    let url = proxy.url();
    let mut args = vec!["--endpoint", &url, "--table", "readings", "--items", items];
    args.extend_from_slice(extra);
    let out = python(root, script, &args)?;
    let writer = Writer {
        readings: out.written,
        seconds: out.seconds,
        calls: calls(&proxy),
        breakdown: None,
        proxy: proxy.stats().service,
    };
    proxy.shutdown().await?;
    Ok(writer)
}

/// Where one invocation's time goes, for a writer run one invocation at a time.
fn breakdown(results: &mut Results, w: &Writer, shape: &str) {
    let Some(k) = w.breakdown else {
        return;
    };
    results.figure(
        "1c",
        &format!("where one invocation's time goes, {shape} (mean of the run, ms)"),
        format!(
            "{:.2} per invocation: {:.2} before its first call leaves (parse, key, marshal, \
             request building), {:.2} with calls out ({:.1} calls of {:.2} ms round trip \
             as the handler's client sees it, {:.0}% of the {} slots used), {:.2} after \
             the last answer; {:.2} between invocations",
            k.invocation_ms,
            k.head_ms,
            k.io_ms,
            k.calls_per_invocation,
            k.rtt_ms,
            k.slots_used * 100.0,
            k.slots,
            k.tail_ms,
            k.gap_ms
        ),
    );
    let per_call = |micros: u64| micros as f64 / 1000.0 / w.proxy.calls.max(1) as f64;
    let (inside, asleep) = (
        per_call(w.proxy.total_micros),
        per_call(w.proxy.asleep_micros),
    );
    results.figure(
        "1c",
        &format!("of each call's round trip, the proxy's part, {shape} (mean, real clock)"),
        format!(
            "{inside:.2} ms from request headers to response, {asleep:.2} ms of it asleep for \
             the {LATENCY_MS} ms injected, counted from the request's arrival, {:.2} ms \
             serving; the client's {:.2} ms round trip leaves {:.2} ms to the client, the \
             body transfer and the scheduler",
            inside - asleep,
            k.rtt_ms,
            k.rtt_ms - inside
        ),
    );
}

/// Item 1's rows, and item 5's call counts, from the writers (a), (b) and the handler's
/// passes (c), (c10), (c').
fn report(
    results: &mut Results,
    settings: Settings,
    n: usize,
    rtt: f64,
    (a, b): (&Writer, &Writer),
    passes: [&Passes; 3],
) {
    rate_rows(results, n, rtt, (a, b), passes);
    ratio_rows(results, rtt, (a, b), passes);
    let [c_passes, c10_passes, c1_passes] = passes;
    let (c, c10, c1) = (&c_passes.warm, &c10_passes.warm, &c1_passes.warm);
    for (name, w) in [
        ("(a) put_item", a),
        ("(b) batch_writer", b),
        ("(c) ingest handler", c),
        ("(c10) ingest handler, events of 10 messages", c10),
        ("(c') ingest handler, 1 reading/message", c1),
    ] {
        results.figure(
            "5",
            &format!("DynamoDB calls per 1,000 readings, {name}"),
            format!("{:.1}", w.calls_per_1000()),
        );
    }
    notes(results, settings, n);
}

/// Each writer's rate (the handler's warm passes, with the cold one as context), and
/// where the handler's invocations spend their time.
fn rate_rows(
    results: &mut Results,
    n: usize,
    rtt: f64,
    (a, b): (&Writer, &Writer),
    [c_passes, c10_passes, c1_passes]: [&Passes; 3],
) {
    let c1 = &c1_passes.warm;
    let cold = |p: &Passes| {
        format!(
            "; cold first pass: {:.0} readings/s ({:.2} s)",
            p.cold.rate(),
            p.cold.seconds
        )
    };
    results.figure(
        "1",
        "BatchWriteItem RTT through the sink (25 items, median)",
        format!("{rtt:.2} ms"),
    );
    results.figure(
        "1a",
        "boto3 put_item, one call per reading",
        format!(
            "{:.0} readings/s ({} readings in {:.1} s, extrapolated: {:.0} s for {n})",
            a.rate(),
            a.readings,
            a.seconds,
            n as f64 / a.rate()
        ),
    );
    results.figure(
        "1b",
        "boto3 Table.batch_writer",
        format!(
            "{:.0} readings/s ({} in {:.1} s)",
            b.rate(),
            b.readings,
            b.seconds
        ),
    );
    let batch = common::TEMPLATE_BATCH_SIZE;
    for (p, shape) in [
        (
            c_passes,
            format!("events of {batch} x 40 readings (the template's batch)"),
        ),
        (
            c10_passes,
            "events of 10 x 40 readings (one round of calls)".to_owned(),
        ),
    ] {
        let w = &p.warm;
        results.figure(
            "1c",
            &format!("Shardline ingest handler, {shape}, 1 invocation at a time"),
            format!(
                "{:.0} readings/s ({} in {:.2} s){}",
                w.rate(),
                w.readings,
                w.seconds,
                cold(p)
            ),
        );
        breakdown(results, w, &shape);
    }
    results.figure(
        "1c'",
        "Shardline ingest handler, events of 10 x 1 reading, 20 invocations at once",
        format!(
            "{:.0} readings/s ({} in {:.2} s){}",
            c1.rate(),
            c1.readings,
            c1.seconds,
            cold(c1_passes)
        ),
    );
}

/// The writers' rates against each other, and the handler's against the limit of
/// MAX_INFLIGHT calls of 25 items a round trip.
fn ratio_rows(
    results: &mut Results,
    rtt: f64,
    (a, b): (&Writer, &Writer),
    [c_passes, c10_passes, _]: [&Passes; 3],
) {
    let (c, c10) = (&c_passes.warm, &c10_passes.warm);
    let max_inflight = 16.0;
    let limit_nominal = max_inflight * 25.0 / (LATENCY_MS as f64 / 1000.0);
    let limit_measured = max_inflight * 25.0 / (rtt / 1000.0);
    results.figure("1", "ratio (b)/(a)", format!("{:.1}x", b.rate() / a.rate()));
    results.figure("1", "ratio (c)/(a)", format!("{:.1}x", c.rate() / a.rate()));
    results.goal(
        "1",
        "ratio (c)/(b)",
        format!("{:.1}x", c.rate() / b.rate()),
        ">= 10x",
        at_least(c.rate() / b.rate(), 10.0),
    );
    results.goal(
        "1",
        "(c) / (MAX_INFLIGHT x 25 / RTT), RTT = 10 ms nominal",
        format!(
            "{:.0}% of {limit_nominal:.0} readings/s",
            c.rate() / limit_nominal * 100.0
        ),
        ">= 80%",
        at_least(c.rate() / limit_nominal, 0.8),
    );
    results.figure(
        "1",
        "(c) / (MAX_INFLIGHT x 25 / RTT), RTT = 10 ms nominal: the cold first pass",
        format!(
            "{:.0}% of {limit_nominal:.0} readings/s",
            c_passes.cold.rate() / limit_nominal * 100.0
        ),
    );
    results.figure(
        "1",
        "(c) / (MAX_INFLIGHT x 25 / RTT), RTT measured",
        format!(
            "{:.0}% of {limit_measured:.0} readings/s",
            c.rate() / limit_measured * 100.0
        ),
    );
    results.figure(
        "1",
        "(c10) / (MAX_INFLIGHT x 25 / RTT), RTT = 10 ms nominal: events of 10 messages",
        format!(
            "{:.0}% of {limit_nominal:.0} readings/s",
            c10.rate() / limit_nominal * 100.0
        ),
    );
}

/// The notes on how items 1 and 5 were measured.
fn notes(results: &mut Results, settings: Settings, n: usize) {
    results.note(
        "1",
        format!(
            "{n} readings of 5,000 devices spread over one day, keyed by the time-bucket layout \
             (hour buckets, N = {SHARDS}); the capacity-proxy in sink mode (1,000 WCU/s per key, \
             no burst) with {LATENCY_MS} ms injected latency per call, a fresh proxy per writer. \
             (a) and (b) are bench/python/put_item.py and batch_writer.py (boto3 from the \
             stand-in venv) writing the very items Shardline stores (same keys and attributes); \
             (a) ran for {:.0} s on the first readings and its rate is extrapolated to {n}. \
             (c) is ingest::Ingest::process in process (the real parse, validate, key, batch \
             writer and DynamoDB adapter over the AWS SDK), fed SqsEvents of the template's \
             IngestBatchSize default (100 messages; (c10): 10 messages); shard \
             metadata and the DLQ are the in-memory ports (the sink serves writes only). \
             MAX_INFLIGHT = 16 (default). Each of (c), (c10) and (c') runs its events twice in \
             one process, on one proxy and one SDK client: a cold first pass (the process's \
             first invocations of the handler after the boto3 writers, and new connections to \
             a fresh proxy), given as context, then the warm pass that the figures, the \
             breakdown and the goal are of, as a Lambda instance under sustained load runs \
             (item 4 likewise measures after warm-up rounds). The limit uses RTT = 10 ms (the \
             injected latency) and, for context, the measured median RTT.",
            settings.put_item_seconds
        ),
    );
    results.note(
        "5",
        "calls counted by the proxy (PutItem + BatchWriteItem requests, retries included) during each writer of item 1 (for (c), (c10) and (c'), during the warm pass).",
    );
}
