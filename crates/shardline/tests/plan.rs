//! `shardline plan` end to end: the built binary with the reference input.

use std::process::Command;

use serde_json::Value;

fn shardline(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardline"))
        .args(args)
        .output()
        .expect("the shardline binary runs")
}

#[test]
fn reference_scenario_as_json() {
    let out = shardline(&[
        "plan",
        "--global-wps",
        "50000",
        "--peak-entity-wps",
        "2000",
        "--item-bytes",
        "500",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(plan["table_shards"], 100);
    assert_eq!(plan["hot_entity_fanout"], 4);
    let max = plan["max_pk_wcu"].as_f64().expect("a number");
    assert!(max <= 1000.0 / 2.0, "max_pk_wcu {max}");
    assert!(plan["warnings"].is_array());
}

#[test]
fn given_table_shards_are_evaluated_with_a_warning() {
    let out = shardline(&[
        "plan",
        "--global-wps",
        "50000",
        "--peak-entity-wps",
        "2000",
        "--item-bytes",
        "500",
        "--table-shards",
        "16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("N = 16 at 50,000 w/s puts ~3,125 WCU/s on each PK"),
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
fn the_write_cost_of_each_time_index_choice_is_printed() {
    let out = shardline(&[
        "plan",
        "--global-wps",
        "50000",
        "--peak-entity-wps",
        "2000",
        "--item-bytes",
        "500",
        "--mean-wps",
        "10000",
        "--json",
    ]);
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
    assert_eq!(default["wcu_per_reading"], 1);
    // 10,000/s for 30 days at $0.625 per million write units.
    assert_eq!(default["monthly_usd"].as_f64(), Some(16_200.0));
    assert_eq!(by_option("TimeIndex=enabled")["wcu_per_reading"], 2);

    let out = shardline(&[
        "plan",
        "--global-wps",
        "50000",
        "--peak-entity-wps",
        "2000",
        "--item-bytes",
        "500",
        "--price-per-million-writes=-1",
    ]);
    assert!(!out.status.success(), "a negative price is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("price_per_million"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
