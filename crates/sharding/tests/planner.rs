//! Property 6 and check tests of the capacity planner.

use proptest::prelude::*;
use sharding::{PlanInput, PlannerError, plan_capacity};

#[test]
fn reference_scenario() {
    let plan = plan_capacity(&PlanInput::new(50_000.0, 2_000.0, 500)).expect("valid input");
    assert_eq!(plan.table_shards, 100);
    assert_eq!(plan.hot_entity_fanout, 4);
    assert_eq!(plan.wcu_per_item, 1);
    assert!(plan.max_pk_wcu <= 500.0, "{}", plan.max_pk_wcu);
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert!(plan.warnings[0].contains("k = 4"), "{:?}", plan.warnings);
}

#[test]
fn seed_001_sixteen_shards_are_too_few() {
    let input = PlanInput {
        table_shards: Some(16),
        ..PlanInput::new(50_000.0, 2_000.0, 500)
    };
    let plan = plan_capacity(&input).expect("valid input");
    assert_eq!(plan.table_shards, 16);
    assert_eq!(plan.max_pk_wcu, 3125.0);
    assert!(
        plan.warnings.iter().any(|w| w.contains(
            "N = 16 at 50,000 w/s puts ~3,125 WCU/s on each PK, over the 1,000 WCU/s partition limit"
        )),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn large_items_cost_more() {
    let plan = plan_capacity(&PlanInput::new(10_000.0, 100.0, 1500)).expect("valid input");
    assert_eq!(plan.wcu_per_item, 2);
    assert_eq!(plan.table_shards, 40);
    assert!(
        plan.warnings.iter().any(|w| w.contains("cost 2 WCU each")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn invalid_input_is_refused() {
    let base = PlanInput::new(1000.0, 10.0, 500);
    let bad = [
        PlanInput {
            global_wps: f64::NAN,
            ..base.clone()
        },
        PlanInput {
            global_wps: -1.0,
            ..base.clone()
        },
        PlanInput {
            global_wps: 0.0,
            ..base.clone()
        },
        PlanInput {
            peak_entity_wps: -1.0,
            ..base.clone()
        },
        PlanInput {
            peak_entity_wps: 2000.0,
            ..base.clone()
        },
        PlanInput {
            item_bytes: 0,
            ..base.clone()
        },
        PlanInput {
            item_bytes: 500 * 1024,
            ..base.clone()
        },
        PlanInput {
            safety: 0.5,
            ..base.clone()
        },
        PlanInput {
            safety: f64::INFINITY,
            ..base.clone()
        },
        PlanInput {
            partition_wcu: 0.0,
            ..base.clone()
        },
        PlanInput {
            table_shards: Some(0),
            ..base.clone()
        },
    ];
    for input in bad {
        assert!(
            matches!(
                plan_capacity(&input),
                Err(PlannerError::InvalidInput { .. })
            ),
            "{input:?} accepted"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Property 6: a plan chosen by the planner never puts more than the budget (and so
    /// never more than the partition limit) on its busiest PK.
    #[test]
    fn planner_never_exceeds_the_limit(
        global in 0.001f64..5_000_000.0,
        peak_share in 0.0f64..=1.0,
        item_bytes in 1u64..=400 * 1024,
        safety in 1.0f64..8.0,
        partition_wcu in 1.0f64..5_000.0,
    ) {
        let input = PlanInput {
            global_wps: global,
            peak_entity_wps: global * peak_share,
            item_bytes,
            safety,
            partition_wcu,
            table_shards: None,
        };
        match plan_capacity(&input) {
            Ok(plan) => {
                prop_assert!(plan.max_pk_wcu <= plan.budget_per_pk, "{:?}", plan);
                prop_assert!(plan.max_pk_wcu <= partition_wcu, "{:?}", plan);
                prop_assert!(plan.table_shards >= 1 && plan.hot_entity_fanout >= 1);
            }
            Err(PlannerError::TooManyShards) => {}
            Err(e) => prop_assert!(false, "refused valid input: {e}"),
        }
    }
}
