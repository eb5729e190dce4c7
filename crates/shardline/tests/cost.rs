//! `shardline cost` end to end: the built binary's bill for three fleets against bills
//! computed here by hand from the price list (us-east-1, on demand, as recorded on
//! 2026-11-29) and the model's stated rules, written out line by line. The items' and
//! blocks' bytes are the store's encoders' (the tool reports them); everything else is
//! arithmetic done here.

use std::process::Command;

use serde_json::Value;

fn shardline(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardline"))
        .args(args)
        .output()
        .expect("the shardline binary runs")
}

/// The JSON bill of `args`.
fn cost(args: &[&str]) -> Value {
    let mut all = vec!["cost", "--json"];
    all.extend_from_slice(args);
    let out = shardline(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn service(bill: &Value, name: &str) -> f64 {
    bill["bill"]["by_service"]
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["service"] == name)
        .and_then(|s| s["usd"].as_f64())
        .unwrap_or(0.0)
}

fn figure(bill: &Value, path: &[&str]) -> f64 {
    let mut v = &bill["figures"];
    for p in path {
        v = &v[*p];
    }
    v.as_f64().unwrap_or_else(|| panic!("figure {path:?}"))
}

/// Each service's total against the hand-computed one, to a millionth.
fn check(bill: &Value, expected: &[(&str, f64)]) {
    for (name, usd) in expected {
        let got = service(bill, name);
        assert!(
            (got - usd).abs() <= 1e-6 * usd.abs().max(1.0),
            "{name}: the tool says ${got}, by hand ${usd}"
        );
    }
    let total: f64 = expected.iter().map(|e| e.1).sum();
    let got = bill["bill"]["total_usd"].as_f64().expect("a total");
    assert!(
        (got - total).abs() <= 1e-6 * total,
        "total {got} against {total}"
    );
}

// The prices (crates/shardline/prices/us-east-1.json), dollars a unit.
const WRU: f64 = 0.625 / 1e6;
const RRU: f64 = 0.125 / 1e6;
const GB_MONTH: f64 = 0.25;
const SQS: f64 = 0.40 / 1e6;
const INVOCATION: f64 = 0.20 / 1e6;
const GB_SECOND_ARM: f64 = 0.000_013_333_4;
const IOT_MESSAGE: f64 = 1.00 / 1e6;
const IOT_RULE: f64 = 0.15 / 1e6;
const IOT_ACTION: f64 = 0.15 / 1e6;
const CONNECTION_MINUTE: f64 = 0.08 / 1e6;
const HTTP_REQUEST: f64 = 1.00 / 1e6;
const LOG_GB: f64 = 0.50;
/// A GB of 2^30 bytes (a month is 30 days: 2,592,000 s, 43,200 minutes, 720 hours).
const GB: f64 = 1_073_741_824.0;
/// The sealer at rate(1 minute): 60 runs an hour, 720 hours, 43,200 runs; each idle
/// run 100 ms; its fixed read units an hour: 16 parts + 2 (watermark) + 4 (layout) + 8
/// (late marks) + 59 idle runs x 12 = 738 (bench item 9).
const SEALER_RUNS: f64 = 43_200.0;
const SEALER_FIXED_RCU_AN_HOUR: f64 = 738.0;

/// The sealer's Lambda and DynamoDB dollars for `devices` at `per_hour` readings a
/// device-hour of `bytes` each, `cells` write units of minute cells a device-hour (and
/// `part_wcu` a fleet part), all at 16 fleet parts, bodies stored compressed.
fn sealer(devices: f64, per_hour: f64, bytes: f64, cells: f64, part_wcu: f64) -> (f64, f64) {
    // A run's billed ms: the sealing run's (4.2 ms + 0.037 ms a reading, a device) and
    // 59 idle runs of 100 ms, an hour, over 60 runs, rounded up.
    let ms = ((devices * (4.2 + 0.037 * per_hour) + 59.0 * 100.0) / 60.0).ceil();
    let lambda = SEALER_RUNS * INVOCATION + SEALER_RUNS * ms / 1000.0 * GB_SECOND_ARM;
    let device_hours = devices * 720.0;
    // A device-hour: its readings read at 4 KB a unit, the directory's GetItem, the
    // fleet parts' read of the cells at 4 KB a unit; writes: the cells (a mean), a
    // summary of one unit (cells / 20 rounded up), the directory's PutItem.
    let rcu = device_hours * (per_hour * bytes / 4096.0 + 1.0 + cells / 4.0)
        + 720.0 * SEALER_FIXED_RCU_AN_HOUR;
    let wcu =
        device_hours * (cells + (cells / 20.0).ceil() + 1.0) + 720.0 * (16.0 * part_wcu + 1.0);
    (lambda, rcu * RRU + wcu * WRU)
}

/// 1,000 devices, a reading a minute, one a message, through IoT Core's broker topic,
/// an item a reading, no reads.
#[test]
fn a_thousand_devices_a_reading_a_minute_through_iot_core() {
    let bill = cost(&[
        "--devices",
        "1000",
        "--interval-secs",
        "60",
        "--door",
        "iot",
        "--layout",
        "items",
    ]);
    // The reading as sent: serde_json writes the keys in order.
    let sent = r#"{"device_id":"device-000001","event_id":"00000000-0000-4000-8000-000000000001","metrics":{"humidity":22.37,"temperature":21.37},"ts":"2026-06-22T01:00:00.000Z"}"#;
    assert_eq!(
        figure(&bill, &["message", "message_bytes"]),
        sent.len() as f64
    );
    // An item of a reading is under 1 KB: one write unit.
    let item = figure(&bill, &["message", "item_bytes"]);
    assert!((200.0..1024.0).contains(&item), "{item}");
    assert_eq!(figure(&bill, &["message", "write_units"]), 1.0);

    // 1,000 x 2,592,000 s / 60 s = 43,200,000 readings, as many messages.
    let m = 43_200_000.0;
    // IoT: 160 bytes is one 5-KB increment; the rule's output (216 base64 characters
    // and three names) too. Connectivity: 1,000 devices x 43,200 minutes.
    let iot =
        m * IOT_MESSAGE + m * IOT_RULE + m * IOT_ACTION + 1000.0 * 43_200.0 * CONNECTION_MINUTE;
    // 43.2 M / 2,592,000 s = 16.7 messages a second, evenly: a 1-s window opened by a
    // message gathers it and the 16 after it, 17, so 2,541,176 invocations, each
    // receiving and deleting in 2 calls of up to 10.
    let invocations = m / 17.0;
    let sqs = (m + 2.0 * invocations + 2.0 * invocations) * SQS;
    // An invocation: 17 items, one round: 2 + 10 + 0.17 ms, billed 13 ms at 512 MB.
    let ingest = invocations * INVOCATION + invocations * 0.013 * 0.5 * GB_SECOND_ARM;
    // A device-hour: 60 readings; cells at once a minute, compressed: 0.41 + 0.295 x 2
    // = 1 unit; a fleet part 1.
    let (sealer_lambda, sealer_ddb) = sealer(1000.0, 60.0, item, 1.0, 1.0);
    // One warm ingest instance (2,541,176 x 13 ms over a month is under one): 30 read
    // units an hour. Storage: 30 days of readings at the item's bytes + 100; 30 days of
    // device-hours at 1 KB.
    // Shard metadata: a device heard from every 60 s, the cache's TTL, is read again by
    // each message (one read unit, strongly consistent): 43.2 M.
    let dynamodb = m * WRU
        + m * RRU
        + 720.0 * 30.0 * RRU
        + sealer_ddb
        + m * (item + 100.0) / GB * GB_MONTH
        + 1000.0 * 24.0 * 30.0 * 1.0 * 1024.0 / GB * GB_MONTH;
    let logs = (invocations * 1700.0 + SEALER_RUNS * 1000.0) / GB * LOG_GB;
    check(
        &bill,
        &[
            ("IoT Core", iot),
            ("SQS", sqs),
            ("Lambda", ingest + sealer_lambda),
            ("DynamoDB", dynamodb),
            ("API Gateway", 0.0),
            ("CloudWatch Logs", logs),
            ("EventBridge", 0.0),
        ],
    );
    // The broker's messaging alone: $43.20 of it.
    assert!((iot - 59.616).abs() < 1e-9);
}

/// 10,000 devices, a reading every 10 s sent 10 to a message straight to SQS, an item a
/// reading, with reads on three routes.
#[test]
fn ten_thousand_devices_every_ten_seconds_in_messages_of_ten_through_sqs() {
    let bill = cost(&[
        "--devices",
        "10000",
        "--interval-secs",
        "10",
        "--readings-a-message",
        "10",
        "--door",
        "sqs",
        "--layout",
        "items",
        "--device-readings-a-day",
        "1000",
        "--point-reads-a-day",
        "500",
        "--device-stats-a-day",
        "100",
    ]);
    let items = figure(&bill, &["message", "item_bytes"]);
    assert_eq!(figure(&bill, &["message", "items"]), 10.0);
    assert_eq!(
        figure(&bill, &["message", "write_units"]),
        10.0,
        "each under 1 KB"
    );
    let body = figure(&bill, &["message", "message_bytes"]);
    assert!(
        body * 10.0 < 65_536.0,
        "ten bodies are one 64-KB chunk: {body}"
    );

    // 10,000 x 2,592,000 / 10 = 2,592,000,000 readings in 259,200,000 messages: 100 a
    // second, a full batch of 100 each second: 2,592,000 invocations, each receiving and
    // deleting in 10 calls.
    let (r, m) = (2_592_000_000.0, 259_200_000.0);
    let invocations = 2_592_000.0;
    let sqs = (m + 10.0 * invocations + 10.0 * invocations) * SQS;
    // An invocation: 1,000 items, 3 rounds of 400: 2 + 30 + 10 ms = 42 ms at 512 MB.
    let ingest = invocations * INVOCATION + invocations * 0.042 * 0.5 * GB_SECOND_ARM;
    // Reads: 1,600 a day x 30 = 48,000 requests at (1,000 x 19 + 500 x 13 + 100 x 30) /
    // 1,600 = 17.8 ms, billed 18, at 1,024 MB; read units (1,000 x 3.5 + 500 x 0.5 + 100
    // x 26.5) x 30 = 192,000.
    let query = 48_000.0 * INVOCATION + 48_000.0 * 0.018 * GB_SECOND_ARM;
    // A device-hour: 360 readings; cells more often than a minute, compressed: 0.15 +
    // 0.675 x 2 = 1.5 units; a fleet part 1.
    let per_reading = items / 10.0;
    let (sealer_lambda, sealer_ddb) = sealer(10_000.0, 360.0, per_reading, 1.5, 1.0);
    // Shard metadata: a device's message every 100 s, longer than the cache's 60-s TTL:
    // a read unit a message.
    let dynamodb = r * WRU
        + m * RRU
        + 720.0 * 30.0 * RRU
        + sealer_ddb
        + 192_000.0 * RRU
        + r * (per_reading + 100.0) / GB * GB_MONTH
        + 10_000.0 * 24.0 * 30.0 * 1.5 * 1024.0 / GB * GB_MONTH;
    let logs = (invocations * 1700.0 + SEALER_RUNS * 1000.0 + 48_000.0 * 1000.0) / GB * LOG_GB;
    check(
        &bill,
        &[
            ("SQS", sqs),
            ("Lambda", ingest + sealer_lambda + query),
            ("DynamoDB", dynamodb),
            ("API Gateway", 48_000.0 * HTTP_REQUEST),
            ("CloudWatch Logs", logs),
            ("EventBridge", 0.0),
        ],
    );
    assert_eq!(
        service(&bill, "IoT Core"),
        0.0,
        "no IoT line for SQS publishers"
    );
    // The write units dominate: 2,592 M x $0.625 a million.
    assert!((r * WRU - 1620.0).abs() < 1e-6);
}

/// 200 gateways, a reading a second each, sent 60 to a message through IoT Core's Basic
/// Ingest, packed into blocks.
#[test]
fn a_gateway_fleet_in_blocks_through_basic_ingest() {
    let bill = cost(&[
        "--devices",
        "200",
        "--interval-secs",
        "1",
        "--readings-a-message",
        "60",
        "--door",
        "iot-basic-ingest",
        "--layout",
        "blocks",
    ]);
    // 60 readings a second apart span 59 s, inside the 60-s block window, and 60 small
    // members fit the 16-KB cap: one block, its write units its started KBs.
    let block = figure(&bill, &["message", "item_bytes"]);
    assert_eq!(figure(&bill, &["message", "items"]), 1.0);
    assert!((2048.0..4096.0).contains(&block), "{block}");
    let units = (block / 1024.0).ceil();
    assert_eq!(figure(&bill, &["message", "write_units"]), units);
    let body = figure(&bill, &["message", "message_bytes"]);
    let rule_output = figure(&bill, &["message", "rule_output_bytes"]);
    assert!(
        (5120.0..10_240.0).contains(&body),
        "two 5-KB increments: {body}"
    );
    assert!(
        (10_240.0..15_360.0).contains(&rule_output),
        "three: {rule_output}"
    );

    // 200 x 2,592,000 = 518,400,000 readings in 8,640,000 messages: 3.3 a second, so a
    // 1-s window opened by a message holds 4, 2,160,000 invocations of one receive and
    // one delete each.
    let (r, m, invocations) = (518_400_000.0, 8_640_000.0, 2_160_000.0);
    // Basic Ingest: no messaging; rules at 2 increments, actions at 3.
    let iot = m * 2.0 * IOT_RULE + m * 3.0 * IOT_ACTION + 200.0 * 43_200.0 * CONNECTION_MINUTE;
    let sqs = (m + invocations + invocations) * SQS;
    // An invocation: 4 items (one round) and 240 readings: 2 + 10 + 2.4 = 14.4, billed 15.
    let ingest = invocations * INVOCATION + invocations * 0.015 * 0.5 * GB_SECOND_ARM;
    // A device-hour: 3,600 readings of block / 60 bytes each; cells 1.5 units.
    let per_reading = block / 60.0;
    let (sealer_lambda, sealer_ddb) = sealer(200.0, 3600.0, per_reading, 1.5, 1.0);
    // Shard metadata: a gateway's message every 60 s, the cache's TTL: a read unit a
    // message.
    let dynamodb = m * units * WRU
        + m * RRU
        + 720.0 * 30.0 * RRU
        + sealer_ddb
        + r * (block + 100.0) / 60.0 / GB * GB_MONTH
        + 200.0 * 24.0 * 30.0 * 1.5 * 1024.0 / GB * GB_MONTH;
    let logs = (invocations * 1700.0 + SEALER_RUNS * 1000.0) / GB * LOG_GB;
    check(
        &bill,
        &[
            ("IoT Core", iot),
            ("SQS", sqs),
            ("Lambda", ingest + sealer_lambda),
            ("DynamoDB", dynamodb),
            ("API Gateway", 0.0),
            ("CloudWatch Logs", logs),
            ("EventBridge", 0.0),
        ],
    );
    // Against an item a reading, blocks write 60 / units times fewer units.
    let items = cost(&[
        "--devices",
        "200",
        "--interval-secs",
        "1",
        "--readings-a-message",
        "60",
        "--door",
        "iot-basic-ingest",
        "--layout",
        "items",
    ]);
    assert!(service(&items, "DynamoDB") > 10.0 * (m * units * WRU));
}

/// A line's quantity a month.
fn quantity(bill: &Value, item: &str) -> f64 {
    bill["bill"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|l| l["item"] == item)
        .and_then(|l| l["quantity"].as_f64())
        .unwrap_or_else(|| panic!("no line {item:?}"))
}

/// The DynamoDB write units a month of every line.
fn write_units(bill: &Value) -> f64 {
    bill["bill"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter(|l| l["price"] == "dynamodb_write_request_units")
        .map(|l| l["quantity"].as_f64().expect("a quantity"))
        .sum()
}

fn near(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: the tool says {got}, by hand {want}"
    );
}

/// 1,000 devices, one reading a message, every 10 s and every 60 s, in slabs (8 groups,
/// 1-minute windows, 1-KB items, the template's 1-s window of at most 100 messages):
/// the slab and run tiers against the arithmetic of the encoders' sizes, and fewer
/// DynamoDB write units than blocks.
#[test]
fn a_thousand_one_reading_devices_write_fewer_units_in_slabs_than_in_blocks() {
    // (interval, messages a batch): 100 a second fill a batch of 100; 16.7 a second
    // make batches of 17.
    for (interval, batch) in [(10.0_f64, 100.0_f64), (60.0, 17.0)] {
        let every = interval.to_string();
        let args = ["--devices", "1000", "--interval-secs", every.as_str()];
        // Today's layout's event source for both (slabs default to their own, 5 s and
        // 1,000: a_longer_batching_window_fills_the_slabs).
        let today = ["--batching-window-secs", "1", "--batch-size", "100"];
        let slabs = cost(&[&args[..], &["--layout", "slabs"], &today].concat());
        let blocks = cost(&[&args[..], &["--layout", "blocks"]].concat());
        let t = &slabs["figures"]["slabs"];
        let f = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k}"));
        let tier = |k: &str, v: &str| t[k][v].as_f64().unwrap_or_else(|| panic!("{k}.{v}"));
        assert_eq!(t["priced_as"], "slabs");
        // A device's share of a batch is its one reading: its block is under 1 KB.
        assert_eq!(f("device_readings_a_batch"), 1.0);
        assert!(f("device_share_bytes") <= 1024.0);

        // A batch's readings over 8 groups: 8 (1 - (7/8)^n) of them hold any, each
        // holding n over that many: 12.5 readings at 10 s, 2.37 at 60 s.
        let groups = 8.0 * (1.0 - (7.0_f64 / 8.0).powf(batch));
        near(f("groups_a_batch"), groups, "groups a batch");
        // Each group's slab, 13 or 3 readings of distinct devices, fills under half an
        // item: the batch writes one shared slab of all its readings instead
        // (`sharding::slab::thin_groups`), in items of at most 1 KB, a write unit each.
        assert_eq!(t["shared"], true);
        near(f("partitions_a_batch"), 1.0, "partitions a batch");
        near(f("readings_a_slab"), batch, "readings a slab");
        let slab_bytes = tier("slab", "bytes");
        let slab_items = tier("slab", "items");
        assert!(slab_items >= 1.0 && slab_bytes <= slab_items * 1024.0);
        assert_eq!(tier("slab", "write_units"), slab_items);
        let invocations = 1000.0 * 2_592_000.0 / interval / batch;
        let slab_wcu = invocations * tier("slab", "write_units");
        near(
            quantity(&slabs, "ingest: write units (slabs)"),
            slab_wcu,
            "slab units",
        );

        // A group's window: 1,000 devices x 60 s / interval readings over 8 groups
        // (750, 125), cut at 1 KB as each item is encoded (store::slab::cut): items of
        // at most 1,024 bytes, a write unit each. 8 groups x 43,200 windows a month.
        let run_readings = (1000.0 * 60.0 / interval / 8.0_f64).ceil();
        assert_eq!(f("run_readings"), run_readings);
        let (run_items, run_bytes, run_wcu) = (
            tier("run", "items"),
            tier("run", "bytes"),
            tier("run", "write_units"),
        );
        assert!(run_items >= 1.0 && run_bytes <= run_items * 1_024.0);
        assert_eq!(run_wcu, run_items);
        let group_windows = 8.0 * 43_200.0;
        near(f("group_windows_a_month"), group_windows, "group-windows");
        // The window's first run is its marker: no item of its own.
        let compaction_wcu = group_windows * run_wcu;
        near(
            quantity(&slabs, "sealer: write units (runs and markers)"),
            compaction_wcu,
            "run units",
        );
        // The fleet's fresh items: each window's fresh minute (1 unit) and its map of
        // the 1,000 devices seen in the hour (every one, at either interval: each
        // reports within a window), about 30 bytes a device of text in chunks of 8 KB,
        // each stored compressed (`store::rollup::stored`), its started KBs: a few
        // units, never more than the text's.
        let map_units = tier("fresh", "map_write_units");
        assert!(
            (1.0..=1000.0 * 40.0 / 1024.0 + 5.0).contains(&map_units),
            "{map_units}"
        );
        near(
            quantity(
                &slabs,
                "sealer: write units (fresh minutes and last-seen maps)",
            ),
            43_200.0 * (1.0 + map_units),
            "fresh units",
        );
        // The compaction reads a window's slabs once: a group's share of the invocations
        // of a minute's shared slabs, at 4 KB a read unit.
        let a_window = invocations / 43_200.0 * slab_bytes / 8.0;
        near(
            quantity(&slabs, "sealer: read units (compaction's reads of slabs)"),
            group_windows * (a_window / 4096.0).ceil().max(1.0),
            "compaction reads",
        );
        // Storage: a month of runs (each + 100 bytes; no marker of its own) over 30 days' retention;
        // slabs for 48 h and half a minute.
        let runs_gb = group_windows * (run_bytes + 100.0 * run_items) / GB;
        near(
            quantity(&slabs, "storage: runs and markers (retention's worth)"),
            runs_gb,
            "run storage",
        );
        let slabs_gb =
            invocations / 2_592_000.0 * (48.0 * 3600.0 + 30.0) * (slab_bytes + 100.0) / GB;
        near(
            quantity(&slabs, "storage: slabs (SLAB_EXPIRY_HOURS' worth)"),
            slabs_gb,
            "slab storage",
        );

        // Blocks: a message of one reading is one item of one write unit, 2.592 G or
        // 432 M units; slabs write a tenth to a half of that.
        let readings = 1000.0 * 2_592_000.0 / interval;
        near(
            quantity(&blocks, "ingest: write units (readings table)"),
            readings,
            "blocks' units",
        );
        let (in_slabs, in_blocks) = (write_units(&slabs), write_units(&blocks));
        assert!(
            slab_wcu + compaction_wcu < 0.6 * readings && in_slabs < in_blocks,
            "every {interval} s: slabs {in_slabs} write units, blocks {in_blocks}"
        );
    }
}

/// A device sending 60 readings a second: its share of a batch is a block of several
/// KB, so a table of slabs keeps it in blocks, and the bill says so.
#[test]
fn a_device_whose_share_fills_a_write_unit_is_priced_as_blocks() {
    let args = [
        "--devices",
        "200",
        "--interval-secs",
        "1",
        "--readings-a-message",
        "60",
    ];
    // One event source for both, so the bills can be the same.
    let source = ["--batching-window-secs", "1", "--batch-size", "100"];
    let slabs = cost(&[&args[..], &["--layout", "slabs"], &source].concat());
    let blocks = cost(&[&args[..], &["--layout", "blocks"], &source].concat());
    assert_eq!(slabs["figures"]["slabs"]["priced_as"], "blocks");
    assert!(
        slabs["figures"]["slabs"]["device_share_bytes"]
            .as_f64()
            .unwrap()
            > 1024.0
    );
    assert_eq!(slabs["bill"]["total_usd"], blocks["bill"]["total_usd"]);
}

#[test]
fn the_batching_and_slab_flags_refuse_bad_values_by_name() {
    for (flag, value) in [
        ("--slab-groups", "0"),
        ("--batch-size", "0"),
        ("--batch-size", "10001"),
        ("--batching-window-secs", "0"),
        ("--batching-window-secs", "301"),
    ] {
        let out = shardline(&[
            "cost",
            "--devices",
            "1000",
            "--interval-secs",
            "10",
            "--layout",
            "slabs",
            flag,
            value,
        ]);
        assert!(!out.status.success(), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

/// A five-second window of up to 1,000 messages gathers more of a one-reading fleet in
/// a batch: fuller slabs, fewer write units.
#[test]
fn a_longer_batching_window_fills_the_slabs() {
    let args = [
        "--devices",
        "1000",
        "--interval-secs",
        "60",
        "--layout",
        "slabs",
    ];
    let one = cost(
        &[
            &args[..],
            &["--batching-window-secs", "1", "--batch-size", "100"],
        ]
        .concat(),
    );
    // The template's event source with slabs, the tool's default with --layout slabs.
    let five = cost(&args);
    // 16.7 a second over 5 s: 84 messages a batch.
    assert_eq!(five["figures"]["messages_an_invocation"], 84.0);
    assert!(
        quantity(&five, "ingest: write units (slabs)")
            < quantity(&one, "ingest: write units (slabs)") / 3.0
    );
}

#[test]
fn the_template_memory_sizes_and_batching_are_the_models() {
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
            .expect("the template");
    let default_of = |param: &str| {
        let at = template.find(&format!("\n  {param}:\n")).expect(param);
        let rest = &template[at..];
        let line = rest
            .lines()
            .find(|l| l.trim_start().starts_with("Default:"))
            .expect("a default");
        line.trim_start()
            .trim_start_matches("Default:")
            .trim()
            .trim_matches('"')
            .to_owned()
    };
    use shardline::cost::model::{
        BATCH_SIZE, BATCHING_WINDOW_SECS, INGEST_MEMORY_MB, QUERY_MEMORY_MB, SEALER_MEMORY_MB,
        SLAB_BATCH_SIZE, SLAB_BATCHING_WINDOW_SECS,
    };
    assert_eq!(default_of("IngestMemorySize"), INGEST_MEMORY_MB.to_string());
    assert_eq!(default_of("QueryMemorySize"), QUERY_MEMORY_MB.to_string());
    assert_eq!(default_of("SealerMemorySize"), SEALER_MEMORY_MB.to_string());
    assert_eq!(default_of("IngestBatchSize"), BATCH_SIZE.to_string());
    assert_eq!(
        default_of("BatchingWindow"),
        BATCHING_WINDOW_SECS.to_string()
    );
    assert_eq!(
        default_of("SlabIngestBatchSize"),
        SLAB_BATCH_SIZE.to_string()
    );
    assert_eq!(
        default_of("SlabBatchingWindow"),
        SLAB_BATCHING_WINDOW_SECS.to_string()
    );
    assert_eq!(default_of("SealerSchedule"), "rate(1 minute)");
    assert_eq!(default_of("Architecture"), "arm64");
}
