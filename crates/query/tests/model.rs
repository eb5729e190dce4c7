//! Correctness against a brute-force model: random datasets written through
//! `sharding::key::write_key` under random layout and fan-out histories (fan-out > 1,
//! epoch changes inside the range), random ranges, limits and orders; the pages
//! followed by cursor, concatenated, equal the model's answer. Reads over every device
//! run with and without the time index (whose ties at one millisecond the fake lists
//! out of merge order).

use std::sync::Arc;

use proptest::prelude::*;
use sharding::layout::Layout;
use sharding::time::Bucket;

use crate::common::{
    BASE_MS, R, fanout_history, get, load, nz, service_with, shard_table, table_history,
};
use store::memory::MemoryReadings;

/// Three hours of data.
const SPAN: i64 = 3 * 3_600_000;
const DEVICES: [&str; 3] = ["dev-a", "dev-b", "hot-1"];

fn layout(all_devices: bool) -> impl Strategy<Value = Layout> {
    let bucketed = (
        prop_oneof![Just(Bucket::Minute), Just(Bucket::Hour)],
        1u32..4,
    )
        .prop_map(|(b, n)| Layout::time_bucket(b, nz(n)));
    if all_devices {
        bucketed.boxed()
    } else {
        prop_oneof![
            bucketed,
            (1u32..5).prop_map(|n| Layout::random(nz(n))),
            Just(Layout::unsharded()),
            (1u32..4).prop_map(|n| Layout::calculated("event_id", nz(n))),
        ]
        .boxed()
    }
}

#[derive(Debug, Clone)]
struct Case {
    table: Vec<(i64, Layout)>,
    fanouts: Vec<(String, Vec<(i64, u32)>)>,
    readings: Vec<R>,
    device: Option<String>,
    from: i64,
    to: i64,
    limit: u32,
    desc: bool,
    page_cap: Option<u32>,
    time_index: bool,
}

fn sorted_times(max: usize) -> impl Strategy<Value = Vec<i64>> {
    proptest::collection::btree_set(0..SPAN, 0..max).prop_map(|s| s.into_iter().collect())
}

fn case(all_devices: bool) -> impl Strategy<Value = Case> {
    let table = (
        layout(all_devices),
        proptest::collection::vec(layout(all_devices), 0..3),
        sorted_times(3),
    )
        .prop_map(|(first, rest, times)| {
            let mut v = vec![(0, first)];
            for (l, t) in rest.into_iter().zip(times) {
                v.push((BASE_MS + t + 1, l));
            }
            v
        });
    let fanouts = proptest::collection::vec(
        (sorted_times(3), proptest::collection::vec(1u32..6, 3)),
        DEVICES.len(),
    )
    .prop_map(|per_device| {
        DEVICES
            .iter()
            .zip(per_device)
            .map(|(d, (times, ks))| {
                let epochs = times
                    .into_iter()
                    .zip(ks)
                    .map(|(t, k)| (BASE_MS + t, k))
                    .collect();
                ((*d).to_string(), epochs)
            })
            .collect::<Vec<_>>()
    });
    let readings = proptest::collection::vec(
        (
            0..DEVICES.len(),
            // Coarse times make ties at the same millisecond common.
            prop_oneof![0..SPAN, (0..SPAN / 600_000).prop_map(|m| m * 600_000)],
            -50.0f64..50.0,
        ),
        0..120,
    )
    .prop_map(|rs| {
        rs.into_iter()
            .enumerate()
            .map(|(i, (d, t, v))| R {
                device: DEVICES[d].to_string(),
                event: format!("e{:04}", (i * 7919) % 10_000),
                ts_ms: BASE_MS + t,
                value: crate::common::n(v),
            })
            .collect::<Vec<_>>()
    });
    let device = if all_devices {
        Just(None).boxed()
    } else {
        (0..DEVICES.len())
            .prop_map(|d| Some(DEVICES[d].to_string()))
            .boxed()
    };
    (
        table,
        fanouts,
        readings,
        device,
        (0..SPAN, 1..SPAN),
        1u32..15,
        any::<bool>(),
        prop_oneof![Just(None), (1u32..4).prop_map(Some)],
        any::<bool>(),
    )
        .prop_map(
            |(table, fanouts, readings, device, (a, len), limit, desc, page_cap, time_index)| {
                Case {
                    table,
                    fanouts,
                    readings,
                    device,
                    from: BASE_MS + a - SPAN / 10,
                    to: BASE_MS + (a + len).min(SPAN + SPAN / 10) - SPAN / 10 + 1,
                    limit,
                    desc,
                    page_cap,
                    time_index,
                }
            },
        )
}

fn model(case: &Case) -> Vec<(String, String, i64)> {
    let mut out: Vec<(i64, String, String)> = case
        .readings
        .iter()
        .filter(|r| case.device.as_ref().is_none_or(|d| &r.device == d))
        .filter(|r| case.from <= r.ts_ms && r.ts_ms < case.to)
        .map(|r| (r.ts_ms, r.device.clone(), r.event.clone()))
        .collect();
    out.sort();
    if case.desc {
        out.reverse();
    }
    out.into_iter().map(|(t, d, e)| (d, e, t)).collect()
}

async fn paged(case: &Case) -> Result<Vec<(String, String, i64)>, TestCaseError> {
    let table = MemoryReadings::new(case.page_cap);
    let shards = shard_table(
        table_history(case.table.clone()),
        case.fanouts
            .iter()
            .map(|(d, e)| (d.clone(), fanout_history(e.clone()))),
    );
    load(&table, &shards, &case.readings);
    let svc = service_with(
        &table,
        Arc::new(shards),
        case.time_index.then_some("by-time"),
    );
    let base = match &case.device {
        Some(d) => format!("/devices/{d}/readings"),
        None => "/readings".to_string(),
    };
    let params = format!(
        "from={}&to={}&limit={}&order={}",
        case.from,
        case.to,
        case.limit,
        if case.desc { "desc" } else { "asc" }
    );
    let mut got = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..200 {
        let url = match &cursor {
            Some(c) => format!("{base}?{params}&cursor={c}"),
            None => format!("{base}?{params}"),
        };
        let (status, body) = get(&svc, &url).await;
        prop_assert_eq!(status, 200, "{}: {}", url, body);
        let items = body["items"].as_array().expect("items");
        prop_assert!(items.len() <= case.limit as usize);
        for i in items {
            let ts = chrono::DateTime::parse_from_rfc3339(i["ts"].as_str().unwrap())
                .unwrap()
                .timestamp_millis();
            got.push((
                i["device_id"].as_str().unwrap().to_string(),
                i["event_id"].as_str().unwrap().to_string(),
                ts,
            ));
        }
        match body["next_cursor"].as_str() {
            Some(c) => {
                // A full page hands out a cursor only when another item may exist; a
                // page a budget ended (here the Query budget: a sparse range read
                // through the time index in many small rounds) may be short, even
                // empty, but its cursor always moves the read forward.
                prop_assert!(
                    items.len() == case.limit as usize || cursor.as_deref() != Some(c),
                    "a short page's cursor did not move: {}",
                    body
                );
                cursor = Some(c.to_string());
            }
            None => return Ok(got),
        }
    }
    Err(TestCaseError::fail("more than 200 pages"))
}

fn check(case: Case) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let got = rt.block_on(paged(&case))?;
    prop_assert_eq!(got, model(&case));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn one_device_pages_equal_the_model(case in case(false)) {
        check(case)?;
    }

    #[test]
    fn all_devices_pages_equal_the_model(case in case(true)) {
        check(case)?;
    }
}
