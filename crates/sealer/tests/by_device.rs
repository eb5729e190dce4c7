//! The sealer's read of an hour hands over a re-sent identity as its copy written last,
//! as the raw reads answer it: `x` stored twice with different values, under two keys
//! across a raise or in two blocks, in either order of the items that hold them.

use std::collections::BTreeMap;
use std::time::Duration;

use sealer::by_device::{ByDevice, Next};
use sharding::block::BlockLayout;
use sharding::epoch::FanoutHistory;
use sharding::key::{ReadingRef, key_for_layout, write_key};
use sharding::read_plan::plan_all;
use sharding::time::TimeRange;
use store::WriteOrder;
use store::block::BlockItem;
use store::item::{Reading, ReadingItem};
use store::memory::MemoryReadings;

use crate::common::{BASE_MS, fanout_history, hourly, table_history, ts};

const HOUR_MS: i64 = 3_600_000;
const X_MS: i64 = BASE_MS + 45 * 60_000;
const SENT: i64 = X_MS + 1_000;
const RESENT: i64 = X_MS + 9_000;
const RETENTION: Duration = Duration::from_secs(86_400 * 3650);

fn reading(event: &str, ts_ms: i64, written: i64) -> Reading {
    let value = if written == RESENT { 2.0 } else { 1.0 };
    Reading {
        device_id: "dev-1".into(),
        event_id: event.into(),
        ts: ts(ts_ms),
        metrics: BTreeMap::from([(
            "temperature".to_owned(),
            store::Decimal::from_f64(value).expect("a number"),
        )]),
        tags: BTreeMap::new(),
        written: WriteOrder(written),
    }
}

/// `x`'s temperature as the read of the hour hands `dev-1` over.
async fn sealed_x(table: &MemoryReadings, layout: &sharding::TableHistory, hot: &FanoutHistory) {
    let range = TimeRange::new(ts(BASE_MS), ts(BASE_MS + HOUR_MS)).unwrap();
    let plan = plan_all(range, layout, &[("dev-1", hot)]).unwrap();
    let mut read = ByDevice::new(table, &plan, (BASE_MS, BASE_MS + HOUR_MS), None, 4, 1_000);
    let Some(Next::Readings { device, readings }) = read.next().await.unwrap() else {
        panic!("dev-1's readings");
    };
    assert_eq!(device, "dev-1");
    let xs: Vec<&ReadingItem> = readings.iter().filter(|r| r.event_id == "x").collect();
    assert_eq!(xs.len(), 1, "x once");
    assert_eq!(
        xs[0].metrics["temperature"].as_str(),
        "2",
        "the copy written last"
    );
    assert_eq!(xs[0].written, WriteOrder(RESENT));
}

#[tokio::test]
async fn a_resend_across_a_raise_is_sealed_as_written_last() {
    let layout = table_history(vec![(0, hourly(2))]);
    let hot = fanout_history(vec![(BASE_MS - 2 * HOUR_MS, 4)]);
    for new_k in [1, 4] {
        let table = MemoryReadings::new(None);
        let old_k = if new_k == 1 { 4 } else { 1 };
        for (w, k) in [(SENT, old_k), (RESENT, new_k)] {
            let r = reading("x", X_MS, w);
            let at = ReadingRef::new(&r.device_id, &r.event_id, r.ts);
            let key = key_for_layout(&at, layout.at(r.ts), Some(k)).unwrap();
            table.put(ReadingItem::new(&r, key, RETENTION));
        }
        sealed_x(&table, &layout, &hot).await;
    }
}

#[tokio::test]
async fn a_resend_in_another_block_is_sealed_as_written_last_in_either_order() {
    let layout = table_history(vec![(
        0,
        hourly(2).with_blocks(BlockLayout {
            window_ms: 60_000,
            max_bytes: 4_096,
            max_readings: 6,
        }),
    )]);
    let cold = FanoutHistory::default();
    for (a_w, b_w) in [(SENT, RESENT), (RESENT, SENT)] {
        let table = MemoryReadings::new(None);
        for members in [
            [reading("a", X_MS - 2_000, a_w), reading("x", X_MS, a_w)],
            [reading("b", X_MS - 1_000, b_w), reading("x", X_MS, b_w)],
        ] {
            let first = &members[0];
            let at = ReadingRef::new(&first.device_id, &first.event_id, first.ts);
            let first_key = write_key(&at, &layout, &cold, first.ts).unwrap().key;
            table.put_block(BlockItem::new(&members, &first_key, RETENTION).unwrap());
        }
        sealed_x(&table, &layout, &cold).await;
    }
}
