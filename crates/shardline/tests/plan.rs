//! `shardline plan` end to end: the built binary with the reference input.

use std::process::Command;

use serde_json::Value;

fn shardline(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardline"))
        .args(args)
        .output()
        .expect("the shardline binary runs")
}

/// `shardline plan` for the reference scenario (50,000 w/s, a 2,000 w/s device,
/// 500-byte items), with `extra` flags.
fn reference(extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "plan",
        "--global-wps",
        "50000",
        "--peak-entity-wps",
        "2000",
        "--item-bytes",
        "500",
    ];
    args.extend_from_slice(extra);
    shardline(&args)
}

#[test]
fn reference_scenario_as_json() {
    let out = reference(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    // Base placement by default: the ingest raises the hot entity to 2,000 / 100 = 20 keys,
    // base shards that carry 48,000 / N of the table too; 48,000 / 120 + 100 = 500.
    assert_eq!(plan["sub_shards"], "base");
    assert_eq!(plan["table_shards"], 120);
    assert_eq!(plan["hot_entity_fanout"], 20);
    assert_eq!(plan["mean_pk_wcu"].as_f64(), Some(400.0));
    assert_eq!(plan["hot_share_wcu"].as_f64(), Some(100.0));
    let max = plan["max_pk_wcu"].as_f64().expect("a number");
    assert!(max <= 1000.0 / 2.0, "max_pk_wcu {max}");
    assert!(plan["warnings"].is_array());
}

#[test]
fn reference_scenario_with_dedicated_sub_shards_as_json() {
    let out = reference(&["--sub-shards", "dedicated", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(plan["sub_shards"], "dedicated");
    assert_eq!(plan["table_shards"], 100);
    assert_eq!(plan["hot_entity_fanout"], 4);
    assert_eq!(plan["max_pk_wcu"].as_f64(), Some(500.0));
}

#[test]
fn the_summary_says_the_placement_and_the_hot_keys_load() {
    let out = reference(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "table shards N (planned):    120",
        "sub-shard placement:         base (raised at 100 WCU/s a key, onto base shards)",
        "k:        20 (each of its keys at ~400 of the table + ~100 of its own WCU/s)",
        "busiest PK (expected peak):  500 WCU/s",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }

    // A smaller raise-ahead share: k = 40 keys of 50, so 48,000 / N + 50 <= 500 at N = 107.
    let out = reference(&["--raise-ahead-wcu", "50"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("table shards N (planned):    107"), "{text}");
    assert!(
        text.contains("40 (each of its keys at ~449 of the table + ~50"),
        "{text}"
    );

    let out = reference(&["--raise-ahead-wcu", "500"]);
    assert!(!out.status.success(), "a share at the budget is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("raise_ahead_wcu"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn given_table_shards_are_evaluated_with_a_warning() {
    let out = reference(&["--table-shards", "16"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "N = 16 at 50,000 w/s puts ~3,000 WCU/s on each PK (the hottest entity aside)"
        ),
        "{text}"
    );
}

#[test]
fn invalid_input_fails_with_a_message() {
    let out = shardline(&[
        "plan",
        "--global-wps=-5",
        "--peak-entity-wps",
        "0",
        "--item-bytes",
        "500",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("global_wps"));
}

#[test]
fn packed_readings_are_planned_and_billed_in_write_units_with_the_read_back() {
    let out = reference(&["--write-units-per-reading", "0.024", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(plan["wcu_per_reading"].as_f64(), Some(0.024));
    // The hottest entity's 2,000 readings/s are 48 WCU/s: one key.
    assert_eq!(plan["hot_entity_fanout"], 1);
    let cost = &plan["write_costs"][0];
    assert_eq!(cost["option"], "TimeIndex=disabled");
    assert!((cost["monthly_usd"].as_f64().unwrap() - 1_944.0).abs() < 1e-6);
    // A minute of 50,000 readings/s, packed: at most 72,000 items read back.
    assert_eq!(plan["read_back"]["items"].as_f64(), Some(72_000.0));
    assert_eq!(plan["read_back"]["window_secs"], 60);
    assert_eq!(plan["read_back"]["query_max_evaluated"], 250_000);

    let text = reference(&["--write-units-per-reading", "0.024"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("0.024 (packed into blocks)"), "{text}");
    assert!(
        text.contains("evaluates up to 72,000 more items a request"),
        "{text}"
    );
    let out = reference(&["--write-units-per-reading", "0"]);
    assert!(!out.status.success(), "no write is free");
    assert!(String::from_utf8_lossy(&out.stderr).contains("write_units_per_reading"));
}

#[test]
fn the_write_cost_of_each_time_index_choice_is_printed() {
    let out = reference(&["--mean-wps", "10000", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let costs = plan["write_costs"].as_array().expect("write_costs");
    let by_option = |option: &str| {
        costs
            .iter()
            .find(|c| c["option"] == option)
            .unwrap_or_else(|| panic!("no {option} in {costs:?}"))
            .clone()
    };
    let default = by_option("TimeIndex=disabled");
    assert_eq!(default["wcu_per_reading"].as_f64(), Some(1.0));
    // 10,000/s for 30 days at $0.625 per million write units.
    assert_eq!(default["monthly_usd"].as_f64(), Some(16_200.0));
    assert_eq!(
        by_option("TimeIndex=enabled")["wcu_per_reading"].as_f64(),
        Some(2.0)
    );

    let out = reference(&["--price-per-million-writes=-1"]);
    assert!(!out.status.success(), "a negative price is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("price_per_million"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
