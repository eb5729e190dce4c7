//! One rule for a re-sent identity: a reading sent again with the same
//! `(device_id, ts, event_id)` and new values replaces the old one in every raw read.
//! Two copies of `x` with different values sit in two items: under two keys across a
//! fan-out raise (one item a reading), or in two blocks of different members. Whichever
//! copy was written last (its write order, `w`) is the one a range read, the
//! every-device read, a point read and latest answer, whichever item the read meets
//! first.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sharding::block::BlockLayout;
use sharding::key::{ReadingRef, key_for_layout};
use sharding::layout::Layout;
use store::WriteOrder;
use store::block::BlockItem;
use store::item::{Reading, ReadingItem};
use store::memory::MemoryReadings;

use crate::common::{
    BASE_MS, R, Service, fanout_history, hourly, key_of, service, shard_table, table_history, ts,
};

const DEVICE: &str = "dev-1";
/// The re-sent reading's time: the device's newest.
const X_MS: i64 = BASE_MS + 45 * 60_000;
/// When the requests are made: within latest's look-back of `x`.
const NOW_MS: i64 = X_MS + 60_000;
/// When the first copy's message reached the queue, and the re-send's.
const SENT: i64 = X_MS + 1_000;
const RESENT: i64 = X_MS + 9_000;
const RETENTION: Duration = Duration::from_secs(86_400 * 3650);

/// A reading of [`DEVICE`] with `temperature` `value`, written at `written`.
fn reading(event: &str, ts_ms: i64, value: f64, written: i64) -> Reading {
    Reading {
        device_id: DEVICE.into(),
        event_id: event.into(),
        ts: ts(ts_ms),
        metrics: BTreeMap::from([(
            "temperature".to_owned(),
            store::Decimal::from_f64(value).expect("a number"),
        )]),
        tags: BTreeMap::from([("site".to_owned(), format!("v{value}"))]),
        written: WriteOrder(written),
    }
}

/// `GET path?query` at [`NOW_MS`]: status and JSON body.
async fn ask(svc: &Service<'_>, path_and_query: &str) -> (u16, serde_json::Value) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let resp = svc.handle_parts("GET", path, query, ts(NOW_MS)).await;
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_str(resp.body()).expect("JSON body"),
    )
}

/// `x`'s temperature and tag in every raw read, which must all answer it once (the
/// every-device read where the layout has one).
async fn answered_x(svc: &Service<'_>, every_device: bool) -> Vec<(String, String)> {
    let value = |item: &serde_json::Value| {
        (
            item["metrics"]["temperature"].to_string(),
            item["tags"]["site"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let mut out = Vec::new();
    let (from, to) = (BASE_MS, BASE_MS + 3_600_000);
    for order in ["asc", "desc"] {
        let mut paths = vec![format!(
            "/devices/{DEVICE}/readings?from={from}&to={to}&order={order}"
        )];
        if every_device {
            paths.push(format!("/readings?from={from}&to={to}&order={order}"));
        }
        for path in paths {
            let (status, body) = ask(svc, &path).await;
            assert_eq!(status, 200, "{path}: {body}");
            let xs: Vec<&serde_json::Value> = body["items"]
                .as_array()
                .expect("items")
                .iter()
                .filter(|i| i["event_id"] == "x")
                .collect();
            assert_eq!(xs.len(), 1, "{path}: x once");
            out.push(value(xs[0]));
        }
    }
    let (status, body) = ask(svc, &format!("/devices/{DEVICE}/readings/x?ts={X_MS}")).await;
    assert_eq!(status, 200, "point read: {body}");
    out.push(value(&body));
    let (status, body) = ask(svc, &format!("/devices/{DEVICE}/latest")).await;
    assert_eq!(status, 200, "latest: {body}");
    assert_eq!(body["event_id"], "x", "latest");
    out.push(value(&body));
    out
}

fn expect_new(answers: &[(String, String)], case: &str) {
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(
            answer,
            &("2".to_owned(), "v2".to_owned()),
            "{case}: answer {i} is not the copy written last"
        );
    }
}

/// Item mode: `x` written with 1 under the device's cold key, then re-sent with 2 after
/// a raise and keyed under a sub-shard; and the other way round (the re-send under the
/// cold key, by a writer with an older view), with other readings around it.
#[tokio::test]
async fn a_resend_across_a_raise_is_answered_as_written_last() {
    for (layout, every_device) in [
        (hourly(2), true),
        (Layout::random(crate::common::nz(1)), false),
    ] {
        for new_under_raised in [true, false] {
            let table = MemoryReadings::new(None);
            let shards = shard_table(
                table_history(vec![(0, layout.clone())]),
                [(
                    DEVICE.to_owned(),
                    fanout_history(vec![(BASE_MS - 7_200_000, 4)]),
                )],
            );
            let (old_k, new_k) = if new_under_raised { (1, 4) } else { (4, 1) };
            let put = |r: &Reading, k: u32| {
                let at = ReadingRef::new(&r.device_id, &r.event_id, r.ts);
                let key = key_for_layout(&at, &layout, Some(k)).unwrap();
                table.put(ReadingItem::new(r, key, RETENTION));
            };
            put(&reading("x", X_MS, 1.0, SENT), old_k);
            put(&reading("x", X_MS, 2.0, RESENT), new_k);
            for i in 0..5 {
                put(
                    &reading(&format!("a{i}"), X_MS - 60_000 * (i + 1), 0.5, SENT),
                    1,
                );
            }
            let svc = service(&table, Arc::new(shards));
            let case = format!("{layout:?}, new under k = {new_k}");
            expect_new(&answered_x(&svc, every_device).await, &case);
        }
    }
}

/// Block mode: `x` in a block with `a` (one message) and, re-sent with a new value, in
/// a block with `b` (another), under two sort keys; in either arrival order (the block
/// the merge meets first holds the old copy, or the new one).
#[tokio::test]
async fn a_resend_in_another_block_is_answered_as_written_last() {
    for first_is_new in [false, true] {
        let table = MemoryReadings::new(None);
        let layout = hourly(2).with_blocks(BlockLayout {
            window_ms: 60_000,
            max_bytes: 4_096,
            max_readings: 6,
        });
        let shards = shard_table(table_history(vec![(0, layout)]), []);
        // The block starting at `a` sorts before the one starting at `b`.
        let (a_w, b_w) = if first_is_new {
            (RESENT, SENT)
        } else {
            (SENT, RESENT)
        };
        let value = |w: i64| if w == RESENT { 2.0 } else { 1.0 };
        let first = [
            reading("a", X_MS - 2_000, 0.5, a_w),
            reading("x", X_MS, value(a_w), a_w),
        ];
        let second = [
            reading("b", X_MS - 1_000, 0.5, b_w),
            reading("x", X_MS, value(b_w), b_w),
        ];
        for members in [&first, &second] {
            let r = &members[0];
            let first_key = key_of(
                &shards,
                &R {
                    device: DEVICE.into(),
                    event: r.event_id.clone(),
                    ts_ms: r.ts.as_millis(),
                    value: crate::common::n(0.5),
                },
            );
            table.put_block(BlockItem::new(members, &first_key, RETENTION).unwrap());
        }
        let svc = service(&table, Arc::new(shards));
        let case = format!(
            "the first block holds the {}",
            if first_is_new { "new" } else { "old" }
        );
        expect_new(&answered_x(&svc, true).await, &case);
    }
}
