//! `audit`: a single-key log table flagged and a day-bucketed one passing at the same
//! rate, per-second peaks, the input forms, and table scans through `store`'s scan port
//! (its in-memory fake).

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sharding::key::ItemKey;
use sharding::time::Timestamp;
use shardline::audit::{
    AuditConfig, DuplicateReport, TimeBucket, Write, audit, audit_sampled, key_pattern, parse_line,
    scan_table,
};
use store::item::{Reading, ReadingItem};
use store::memory::MemoryScan;
use store::scan::ScanAttributes;

const T0: &str = "2026-06-22T10:00:00Z";

fn t0() -> i64 {
    Timestamp::parse(T0).expect("valid").as_millis()
}

/// `rate` writes per second of 500-byte items for `secs` seconds to `key(i)`.
fn writes(rate: u32, secs: u32, key: impl Fn(u32) -> String) -> Vec<Write> {
    (0..rate * secs)
        .map(|i| Write {
            pk: key(i),
            ts_ms: Some(t0() + i64::from(i) * 1000 / i64::from(rate)),
            bytes: 500,
        })
        .collect()
}

/// `expected`: the flagged keys, each with a fragment of its reason.
fn check(sample: Vec<Write>, expected: &[(&str, &str)]) {
    let report = audit(sample, &AuditConfig::default());
    let flagged: Vec<(String, String)> = report
        .flagged
        .iter()
        .map(|k| (k.pk.clone(), k.flags.join("; ")))
        .collect();
    assert_eq!(flagged.len(), expected.len(), "{flagged:?}");
    for ((pk, why), (want_pk, want_why)) in flagged.iter().zip(expected) {
        assert_eq!(pk, want_pk);
        assert!(why.contains(want_why), "{pk}: {why}");
    }
    let text = report.text();
    if expected.is_empty() {
        assert!(text.contains("PASS"), "{text}");
        assert!(!text.contains("FLAG"), "{text}");
    } else {
        for (pk, _) in expected {
            assert!(text.contains(&format!("FLAG {pk}:")), "{text}");
        }
    }
}

#[test]
fn single_key_log_table_is_flagged_day_bucketed_passes_at_the_same_rate() {
    // An hour of an ops log at 10 writes/s of 500 bytes, well under 1,000 WCU/s.
    // OPS_LOG keeps every write of the 30-day retention: ~12 GB in one key.
    check(
        writes(10, 3600, |_| "OPS_LOG".into()),
        &[("OPS_LOG", "over its 30.0-day life > 10.0 GB")],
    );
    // OPS_LOG#2026-06-22 receives one day of them: ~0.4 GB.
    let day = writes(10, 3600, |_| "OPS_LOG#2026-06-22".into());
    let report = audit(day.clone(), &AuditConfig::default());
    assert_eq!(report.top[0].bucket, Some(TimeBucket::Day));
    assert!(report.top[0].projected_bytes < 0.5e9, "{:?}", report.top[0]);
    assert_eq!(report.top[0].peak_wcu_per_sec, Some(10.0));
    check(day, &[]);
}

#[test]
fn a_key_over_the_partition_limit_is_flagged_by_its_peak() {
    check(
        writes(1500, 3, |_| "OPS_LOG".into()),
        &[("OPS_LOG", "peak 1500 WCU/s")],
    );
    // The same load over four random-suffix keys: 375 WCU/s each, under the limit;
    // only their growth (no time bucket: 375 writes/s for 30 days) is flagged.
    let spread = audit(
        writes(1500, 3, |i| format!("OPS_LOG#{}", i % 4)),
        &AuditConfig::default(),
    );
    assert_eq!(spread.flagged.len(), 4);
    for key in &spread.flagged {
        assert_eq!(key.peak_wcu_per_sec, Some(375.0));
        assert_eq!(key.flags.len(), 1, "{:?}", key.flags);
        assert!(key.flags[0].starts_with("projected"), "{:?}", key.flags);
    }
    // With the size check off, they pass.
    let no_size = AuditConfig {
        partition_bytes: 0.0,
        ..AuditConfig::default()
    };
    assert!(
        audit(writes(1500, 3, |i| format!("OPS_LOG#{}", i % 4)), &no_size)
            .flagged
            .is_empty()
    );
    // A day bucket does not lower the per-second peak.
    check(
        writes(1500, 3, |_| "OPS_LOG#2026-06-22".into()),
        &[("OPS_LOG#2026-06-22", "peak 1500 WCU/s")],
    );
}

#[test]
fn item_size_sets_the_wcu_and_scale_projects_growth() {
    // 600 writes/s of 1.5 KB items cost 2 WCU each: 1,200 WCU/s.
    let big: Vec<Write> = writes(600, 2, |_| "k".into())
        .into_iter()
        .map(|w| Write { bytes: 1536, ..w })
        .collect();
    check(big, &[("k", "peak 1200 WCU/s")]);
    // 200 writes/s on each of two hourly keys pass today, and fail at 6x.
    let sample = writes(400, 2, |i| format!("dev-{}#2026-06-22T10", i % 2));
    assert!(
        audit(sample.clone(), &AuditConfig::default())
            .flagged
            .is_empty()
    );
    let at = |scale: f64| {
        audit(
            sample.clone(),
            &AuditConfig {
                scale,
                ..AuditConfig::default()
            },
        )
    };
    assert!(at(3.0).flagged.is_empty(), "200 x 3 = 600 per key");
    let grown = at(6.0);
    assert_eq!(grown.flagged.len(), 2);
    assert!(grown.flagged[0].flags[0].starts_with("peak 1200 WCU/s"));
}

#[test]
fn cardinality_shares_and_patterns() {
    let mut sample = writes(30, 10, |i| format!("s{:02}#2026-06-22T10", i % 3));
    sample.extend(writes(10, 10, |_| "OPS_LOG".into()));
    let report = audit(sample, &AuditConfig::default());
    assert_eq!(report.writes, 400);
    assert_eq!(report.cardinality, 4);
    assert_eq!(report.top[0].writes, 100);
    assert!((report.top[0].share - 0.25).abs() < 1e-9);
    assert_eq!(report.patterns[0].pattern, "sN#{hour}");
    assert_eq!(report.patterns[0].cardinality, 3);
    assert_eq!(report.patterns[1].pattern, "OPS_LOG");
    assert_eq!(report.patterns[1].cardinality, 1);
    assert_eq!(report.table_peak_wcu_per_sec, Some(40.0));
}

#[test]
fn key_patterns_and_buckets() {
    let check = |pk: &str, pattern: &str, bucket: Option<TimeBucket>| {
        assert_eq!(key_pattern(pk), pattern, "{pk}");
        assert_eq!(TimeBucket::of_key(pk), bucket, "{pk}");
    };
    check("OPS_LOG", "OPS_LOG", None);
    check("OPS_LOG#2026-06-22", "OPS_LOG#{day}", Some(TimeBucket::Day));
    check(
        "THREAT#brand-abc-123#2026-06",
        "THREAT#brand-abc-N#{month}",
        Some(TimeBucket::Month),
    );
    check("s07#2026-06-22T13", "sN#{hour}", Some(TimeBucket::Hour));
    check(
        "dev-1#2026-06-22T13:05",
        "dev-N#{minute}",
        Some(TimeBucket::Minute),
    );
    check("sensor-alpha-001", "sensor-alpha-N", None);
}

#[test]
fn sample_lines() {
    let check = |line: &str, expected: Result<(&str, Option<i64>, usize), &str>| match (
        parse_line(line, 500),
        expected,
    ) {
        (Ok(w), Ok((pk, ts, bytes))) => {
            assert_eq!((w.pk.as_str(), w.ts_ms, w.bytes), (pk, ts, bytes), "{line}")
        }
        (Err(e), Err(fragment)) => assert!(e.contains(fragment), "{line}: {e}"),
        (got, want) => panic!("{line}: got {got:?}, want {want:?}"),
    };
    check(
        r#"{"pk":"OPS_LOG","ts":"2026-06-22T10:00:00Z"}"#,
        Ok(("OPS_LOG", Some(t0()), 500)),
    );
    check(r#"{"PK":"a","ts_ms":1000}"#, Ok(("a", Some(1000), 500)));
    check(
        r#"{"pk":"a","ts":1000,"bytes":2048}"#,
        Ok(("a", Some(1000), 2048)),
    );
    check(
        r#"{"PK":{"S":"a"},"ts_ms":{"N":"1000"},"size":{"N":"700"}}"#,
        Ok(("a", Some(1000), 700)),
    );
    check(r#"{"pk":"a"}"#, Ok(("a", None, 500)));
    // A full item: names plus values, DynamoDB's way.
    check(
        r#"{"pk":"a","ts":"x","note":"hello"}"#,
        Ok(("a", None, 2 + 1 + 2 + 1 + 4 + 5)),
    );
    check(r#"{"ts":1}"#, Err("no \"pk\""));
    check("[1]", Err("not a JSON object"));
    check("{", Err("not JSON"));
}

#[test]
fn the_binary_prints_flag_lines_and_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sample.jsonl");
    let lines: Vec<String> = writes(1200, 2, |_| "OPS_LOG".into())
        .iter()
        .map(|w| {
            format!(
                r#"{{"pk":"{}","ts":{}}}"#,
                w.pk,
                w.ts_ms.expect("timestamped")
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).expect("write sample");
    let out = Command::new(env!("CARGO_BIN_EXE_shardline"))
        .args(["audit", "--sample"])
        .arg(&path)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("FLAG OPS_LOG: peak 1200 WCU/s")),
        "{text}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_shardline"))
        .args(["audit", "--json", "--sample"])
        .arg(&path)
        .output()
        .expect("runs");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["cardinality"], 1);
    assert_eq!(json["flagged"][0]["pk"], "OPS_LOG");
    assert_eq!(json["flagged"][0]["peak_wcu_per_sec"], 1200.0);
}

/// A readings-table item of `dev-1`'s reading `event` at `T0`, stored under `pk`.
fn stored_reading(pk: &str, event: &str) -> ReadingItem {
    let ts = Timestamp::parse(T0).expect("valid");
    let reading = Reading {
        device_id: "dev-1".into(),
        event_id: event.into(),
        ts,
        metrics: BTreeMap::from([(
            "temperature".to_owned(),
            store::Decimal::from_f64(20.5).expect("a number"),
        )]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    };
    let key = ItemKey {
        pk: pk.into(),
        sk: format!("dev-1#{}#{event}", ts.to_rfc3339()),
    };
    ReadingItem::new(&reading, key, Duration::from_secs(86_400))
}

#[tokio::test]
async fn a_table_scan_reads_every_page_and_counts_readings_stored_twice() {
    let table = MemoryScan::new();
    table.set_page_items(2);
    // e1 under the cold key and a sub-shard, e2 once.
    for (pk, event) in [
        ("1#2026-06-22T10", "e1"),
        ("1.3#2026-06-22T10", "e1"),
        ("1#2026-06-22T10", "e2"),
    ] {
        table
            .put_reading(&stored_reading(pk, event))
            .expect("an item");
    }
    // Not a reading: its partition key is no string, so the scan leaves it out.
    table.put(HashMap::from([(
        "PK".to_owned(),
        AttributeValue::N("7".into()),
    )]));
    let sample = scan_table(&table, &ScanAttributes::readings(), None)
        .await
        .expect("scanned");
    // Two full pages, then the empty page after the last key.
    assert_eq!(table.calls(), 3);
    assert_eq!(sample.len(), 3);
    for item in &sample {
        assert_eq!(item.write.ts_ms, Some(t0()));
        assert!(item.write.bytes > 100, "{item:?}");
        assert!(
            item.sk
                .as_deref()
                .is_some_and(|sk| sk.starts_with("dev-1#"))
        );
    }
    let report = audit_sampled(&sample, &AuditConfig::default());
    assert_eq!(report.writes, 3);
    assert_eq!(report.cardinality, 2);
    assert_eq!(
        report.duplicates,
        Some(DuplicateReport {
            items: 3,
            readings: 2,
            duplicated: 1,
            extra_copies: 1,
        })
    );
}

#[tokio::test]
async fn a_scan_stops_reading_at_its_limit() {
    let table = MemoryScan::new();
    table.set_page_items(3);
    for i in 0..10 {
        table
            .put_reading(&stored_reading("1#2026-06-22T10", &format!("e{i}")))
            .expect("an item");
    }
    let sample = scan_table(&table, &ScanAttributes::readings(), Some(4))
        .await
        .expect("scanned");
    assert_eq!(sample.len(), 4);
    assert_eq!(table.calls(), 2, "the pages after the limit are not read");
}

#[tokio::test]
async fn a_scan_reads_the_attributes_it_is_told_to() {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let table = MemoryScan::with_items([
        HashMap::from([
            ("key".to_owned(), s("OPS_LOG")),
            ("sort".to_owned(), s("METADATA")),
            ("when".to_owned(), s(T0)),
        ]),
        HashMap::from([
            ("key".to_owned(), s("OPS_LOG")),
            ("when".to_owned(), AttributeValue::N("1000".into())),
        ]),
    ]);
    let attributes = ScanAttributes {
        pk: "key".into(),
        sk: "sort".into(),
        ts: "when".into(),
    };
    let sample = scan_table(&table, &attributes, None)
        .await
        .expect("scanned");
    let read: Vec<(&str, Option<&str>, Option<i64>)> = sample
        .iter()
        .map(|i| (i.write.pk.as_str(), i.sk.as_deref(), i.write.ts_ms))
        .collect();
    assert_eq!(
        read,
        [
            ("OPS_LOG", Some("METADATA"), Some(t0())),
            ("OPS_LOG", None, Some(1000))
        ]
    );
}

#[tokio::test]
async fn a_throttled_or_failing_scan_is_an_error_not_a_short_sample() {
    let table = MemoryScan::new();
    table
        .put_reading(&stored_reading("1#2026-06-22T10", "e1"))
        .expect("an item");
    table.set_throttled(true);
    let err = scan_table(&table, &ScanAttributes::readings(), None)
        .await
        .expect_err("throttled");
    assert!(err.is_key_range_throttle(), "{err:?}");
    table.set_throttled(false);
    table.fail_next([store::StoreError::Transient("connection reset".into())]);
    let err = scan_table(&table, &ScanAttributes::readings(), None)
        .await
        .expect_err("failed");
    assert!(err.is_retryable(), "{err:?}");
    let sample = scan_table(&table, &ScanAttributes::readings(), None)
        .await
        .expect("the fault has passed");
    assert_eq!(sample.len(), 1);
}

/// Scenario 28: a message rebuilt into other blocks (a raise moved its first member's
/// key, a partial write split it) holds a reading in two items; the scan reads each
/// block's members and counts every reading held twice, whatever holds it.
#[tokio::test]
async fn a_table_scan_counts_readings_a_block_holds_again() {
    let table = MemoryScan::new();
    table.set_page_items(2);
    let reading = |event: &str| stored_reading("1#2026-06-22T10", event);
    let members = |events: &[(&str, u64)]| -> Vec<Reading> {
        events
            .iter()
            .map(|(e, secs)| {
                let mut r = reading(e).into_reading().expect("a reading");
                r.ts = r.ts.saturating_add(Duration::from_secs(*secs));
                r
            })
            .collect()
    };
    let block = |pk: &str, events: &[(&str, u64)]| {
        let members = members(events);
        let first = ItemKey {
            pk: pk.into(),
            sk: format!(
                "dev-1#{}#{}",
                members[0].ts.to_rfc3339(),
                members[0].event_id
            ),
        };
        store::block::BlockItem::new(&members, &first, Duration::from_secs(86_400))
            .expect("a block")
            .to_item()
            .expect("an item")
    };
    // e1..e3 as one block; the same message rebuilt after a raise: e1..e3 under
    // another key; a split's copy: e3 alone; e4 in a block of its own with e5.
    table.put(block("1#2026-06-22T10", &[("e1", 0), ("e2", 1), ("e3", 2)]));
    table.put(block("2#2026-06-22T10", &[("e1", 0), ("e2", 1), ("e3", 2)]));
    let mut alone = reading("e3");
    alone.ts_ms += 2_000;
    alone.ts = Timestamp::from_millis(alone.ts_ms)
        .expect("in range")
        .to_rfc3339();
    alone.sk = format!("dev-1#{}#e3", alone.ts);
    table.put_reading(&alone).expect("an item");
    table.put(block("1#2026-06-22T10", &[("e4", 3), ("e5", 4)]));
    let sample = scan_table(&table, &ScanAttributes::readings(), None)
        .await
        .expect("scanned");
    assert_eq!(sample.len(), 4);
    let report = audit_sampled(&sample, &AuditConfig::default());
    assert_eq!(
        report.duplicates,
        Some(DuplicateReport {
            items: 3 + 3 + 1 + 2,
            readings: 5,
            duplicated: 3,
            extra_copies: 4,
        })
    );
}

/// Slabs and runs (docs/design-slabs.md): a reading in two slabs of a window (a batch
/// written twice) is held twice, a reading in a run and in the slabs it was compacted
/// from once, and a reading in a run and in its device's own item twice.
#[tokio::test]
async fn a_table_scan_counts_copies_in_slabs_but_not_a_runs_slabs() {
    use sharding::slab::{SlabLayout, run_sk, slab_pk};
    let layout = SlabLayout::default();
    let reading = |device: &str, event: &str, secs: u64| {
        let mut r = stored_reading("1#2026-06-22T10", event)
            .into_reading()
            .expect("a reading");
        r.device_id = device.into();
        r.ts = r.ts.saturating_add(Duration::from_secs(secs));
        r
    };
    let slab_item = |pk: &str, sk: &str, members: &[Reading]| {
        store::slab::marshal(members, pk, sk, 0)
            .expect("sorted members")
            .item
    };
    let open = layout.window(Timestamp::parse("2026-06-22T10:05:00Z").expect("valid"));
    let compacted = layout.window(Timestamp::parse(T0).expect("valid"));
    let table = MemoryScan::new();
    table.set_page_items(2);
    // The open window: dev-1's e1 in two slabs, dev-2's e1 in one.
    let (d1e1, d2e1) = (reading("dev-1", "e1", 300), reading("dev-2", "e1", 300));
    table.put(slab_item(&slab_pk(0, 0, open), "a", &[d1e1.clone(), d2e1]));
    table.put(slab_item(&slab_pk(0, 1, open), "b", &[d1e1]));
    // The compacted window: two slabs and their run; dev-2's e2 also in its own item.
    let (d1e2, d2e2) = (reading("dev-1", "e2", 0), reading("dev-2", "e2", 0));
    table.put(slab_item(
        &slab_pk(0, 0, compacted),
        "c",
        &[d1e2.clone(), d2e2.clone()],
    ));
    table.put(slab_item(
        &slab_pk(0, 1, compacted),
        "d",
        std::slice::from_ref(&d1e2),
    ));
    let run_key = (layout.run_pk(0, compacted), run_sk("dev-1", compacted, 0));
    table.put(slab_item(&run_key.0, &run_key.1, &[d1e2, d2e2.clone()]));
    let own = ItemKey {
        pk: "2#2026-06-22T10".into(),
        sk: format!("dev-2#{}#e2", d2e2.ts.to_rfc3339()),
    };
    table
        .put_reading(&ReadingItem::new(&d2e2, own, Duration::from_secs(86_400)))
        .expect("an item");
    let sample = scan_table(&table, &ScanAttributes::readings(), None)
        .await
        .expect("scanned");
    assert_eq!(sample.len(), 6);
    let report = audit_sampled(&sample, &AuditConfig::default());
    assert_eq!(
        report.duplicates,
        Some(DuplicateReport {
            // dev-1's e1 twice, dev-2's e1 once, dev-1's e2 once (its run), dev-2's e2
            // twice (its run and its own item).
            items: 2 + 1 + 1 + 2,
            readings: 4,
            duplicated: 2,
            extra_copies: 2,
        })
    );
}
