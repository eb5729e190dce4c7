//! Property 6 and check tests of the capacity planner.

use std::collections::HashMap;
use std::num::NonZeroU32;

use proptest::prelude::*;
use sharding::layout::SubShards;
use sharding::{PlanInput, PlannerError, plan_capacity};

fn dedicated(input: PlanInput) -> PlanInput {
    PlanInput {
        sub_shards: SubShards::Dedicated,
        ..input
    }
}

#[test]
fn packed_readings_are_planned_in_write_units() {
    // The reference rates at 0.024 write units a reading (50 readings a message, bench
    // item 8): the hottest entity's 2,000 readings/s are 48 WCU/s, under the raise-ahead
    // share, so it stays on one key; the table's 1,200 WCU/s need N = 3.
    let input = PlanInput {
        write_units_per_reading: Some(0.024),
        ..PlanInput::new(50_000.0, 2_000.0, 500)
    };
    let plan = plan_capacity(&input).expect("valid input");
    assert_eq!(plan.hot_entity_fanout, 1);
    assert_eq!(plan.table_shards, 3);
    assert!((plan.wcu_per_reading - 0.024).abs() < 1e-12);
    assert!(plan.max_pk_wcu <= plan.budget_per_pk);
    for bad in [0.0, -1.0, f64::NAN, 401.0] {
        let input = PlanInput {
            write_units_per_reading: Some(bad),
            ..PlanInput::new(50_000.0, 2_000.0, 500)
        };
        let err = plan_capacity(&input).expect_err("refused").to_string();
        assert!(err.contains("write_units_per_reading"), "{err}");
    }
}

#[test]
fn reference_scenario() {
    let plan = plan_capacity(&PlanInput::new(50_000.0, 2_000.0, 500)).expect("valid input");
    // Base placement, 1 WCU an item: the ingest raises the 2,000 WCU/s entity to
    // k = ceil(2,000 / 100) = 20 keys of 100 each, and those keys are base shards that
    // carry the other 48,000 WCU/s too: the smallest N with 48,000 / N + 100 <= 500 is
    // 120 (119 would put ~403 + 100 on them).
    assert_eq!(plan.sub_shards, SubShards::Base);
    assert_eq!(plan.table_shards, 120);
    assert_eq!(plan.hot_entity_fanout, 20);
    assert_eq!(plan.wcu_per_item, 1);
    assert_eq!(plan.mean_pk_wcu, 400.0);
    assert_eq!(plan.hot_share_wcu, 100.0);
    assert_eq!(plan.hot_pk_wcu, 500.0);
    assert_eq!(plan.max_pk_wcu, 500.0);
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert!(
        plan.warnings[0].contains("the ingest raises it to k = 20 at ~100 WCU/s a sub-shard")
            && plan.warnings[0].contains("~400 WCU/s of the table each: ~500 WCU/s"),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn reference_scenario_with_dedicated_sub_shards_keeps_its_figures() {
    let plan =
        plan_capacity(&dedicated(PlanInput::new(50_000.0, 2_000.0, 500))).expect("valid input");
    // N = ceil(50,000 / 500), k = ceil(2,000 / 500): sub-shards are keys of their own.
    assert_eq!(plan.sub_shards, SubShards::Dedicated);
    assert_eq!(plan.table_shards, 100);
    assert_eq!(plan.hot_entity_fanout, 4);
    assert_eq!(plan.mean_pk_wcu, 500.0);
    assert_eq!(plan.hot_pk_wcu, 500.0);
    assert_eq!(plan.max_pk_wcu, 500.0);
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert!(plan.warnings[0].contains("k = 4"), "{:?}", plan.warnings);
}

#[test]
fn with_base_placement_the_busiest_key_is_the_mean_plus_the_hot_share() {
    for (global, peak) in [(50_000.0, 2_000.0), (10_000.0, 50.0), (3_000.0, 2_900.0)] {
        let plan = plan_capacity(&PlanInput::new(global, peak, 500)).expect("valid input");
        let n = f64::from(plan.table_shards);
        let k = f64::from(plan.hot_entity_fanout);
        let mean = (global - peak) / n;
        let hot_key = mean + peak / k;
        assert!((plan.hot_pk_wcu - hot_key).abs() < 1e-9, "{plan:?}");
        assert!((plan.max_pk_wcu - hot_key).abs() < 1e-9, "{plan:?}");
        assert!(plan.max_pk_wcu <= plan.budget_per_pk, "{plan:?}");
        // The ingest's raise: the fewest keys of at most 100 WCU/s each.
        assert!(
            peak / k <= 100.0 && (k == 1.0 || peak / (k - 1.0) > 100.0),
            "{plan:?}"
        );
        // And N is the smallest that fits the sum.
        if plan.table_shards > 1 {
            assert!((global - peak) / (n - 1.0) + peak / k > 500.0, "{plan:?}");
        }
    }
}

#[test]
fn a_given_n_too_small_for_the_hot_keys_says_what_would_fit() {
    // Today's N for the reference scenario, under base placement: the raised keys carry
    // 48,000 / 100 = 480 of the table plus 100 of the hot entity's.
    let input = PlanInput {
        table_shards: Some(100),
        ..PlanInput::new(50_000.0, 2_000.0, 500)
    };
    let plan = plan_capacity(&input).expect("valid input");
    assert_eq!((plan.table_shards, plan.hot_entity_fanout), (100, 20));
    assert_eq!(plan.max_pk_wcu, 580.0);
    assert!(
        plan.warnings.iter().any(|w| w.contains(
            "N = 100 puts ~480 WCU/s of the table on each PK, and the hottest entity's k = 20 \
             sub-shards add ~100 WCU/s each to the base shards they land on: ~580 WCU/s, over \
             the safety budget of 500 WCU/s (limit 1,000 / safety 2): use N >= 120, or \
             k >= 100 (a raise-ahead share of at most 20 WCU/s)"
        )),
        "{:?}",
        plan.warnings
    );

    // Over the partition limit, at a safety of 1: 48,000 / 60 = 800 of the table plus
    // 400 of a raise ahead at 400.
    let input = PlanInput {
        table_shards: Some(60),
        safety: 1.0,
        raise_ahead_wcu: 400.0,
        ..PlanInput::new(50_000.0, 2_000.0, 500)
    };
    let plan = plan_capacity(&input).expect("valid input");
    assert_eq!(plan.hot_entity_fanout, 5);
    assert_eq!(plan.max_pk_wcu, 1200.0);
    assert!(
        plan.warnings.iter().any(|w| w.contains(
            "~1,200 WCU/s, over the 1,000 WCU/s partition limit: use N >= 80, or k >= 10 \
             (a raise-ahead share of at most 200 WCU/s)"
        )),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn seed_001_sixteen_shards_are_too_few() {
    let input = PlanInput {
        table_shards: Some(16),
        ..PlanInput::new(50_000.0, 2_000.0, 500)
    };
    let plan = plan_capacity(&input).expect("valid input");
    assert_eq!(plan.table_shards, 16);
    assert_eq!(plan.mean_pk_wcu, 3000.0);
    assert_eq!(plan.max_pk_wcu, 3100.0);
    assert!(
        plan.warnings.iter().any(|w| w.contains(
            "N = 16 at 50,000 w/s puts ~3,000 WCU/s on each PK (the hottest entity aside), \
             over the 1,000 WCU/s partition limit: use N >= 120"
        )),
        "{:?}",
        plan.warnings
    );

    let plan = plan_capacity(&dedicated(input)).expect("valid input");
    assert_eq!(plan.max_pk_wcu, 3125.0);
    assert!(
        plan.warnings.iter().any(|w| w.contains(
            "N = 16 at 50,000 w/s puts ~3,125 WCU/s on each PK, over the 1,000 WCU/s \
             partition limit: use N >= 100"
        )),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn large_items_cost_more() {
    let plan = plan_capacity(&PlanInput::new(10_000.0, 100.0, 1500)).expect("valid input");
    assert_eq!(plan.wcu_per_item, 2);
    // 20,000 WCU/s, 200 of them the hot entity's at k = 2 (100 each): 19,800 / N + 100
    // <= 500 at N = 50.
    assert_eq!(plan.table_shards, 50);
    assert_eq!(plan.hot_entity_fanout, 2);
    let plan =
        plan_capacity(&dedicated(PlanInput::new(10_000.0, 100.0, 1500))).expect("valid input");
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
        PlanInput {
            raise_ahead_wcu: f64::NAN,
            ..base.clone()
        },
        PlanInput {
            raise_ahead_wcu: 0.0,
            ..base.clone()
        },
        PlanInput {
            raise_ahead_wcu: -100.0,
            ..base.clone()
        },
        PlanInput {
            raise_ahead_wcu: 500.0,
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
    let Err(e) = plan_capacity(&PlanInput {
        raise_ahead_wcu: 600.0,
        ..base.clone()
    }) else {
        panic!("a raise-ahead share above the budget is accepted");
    };
    assert!(
        e.to_string()
            .contains("600 must be below the budget of 500 WCU/s per PK"),
        "{e}"
    );
    // Dedicated sub-shards carry their share alone: the raise-ahead share is not planned.
    assert!(
        plan_capacity(&PlanInput {
            raise_ahead_wcu: 600.0,
            ..dedicated(base)
        })
        .is_ok()
    );
}

/// Each key's load when the hot entity's sub-shards live where `SubShards::home` puts
/// them: N base keys at the mean of the rest, plus the hot entity's share on each of
/// its keys (its cold key when k = 1).
fn busiest_key(plan: &sharding::CapacityPlan, s: u32) -> f64 {
    let n = NonZeroU32::new(plan.table_shards).expect("N >= 1");
    let mut load: HashMap<(u32, Option<u32>), f64> = (0..n.get())
        .map(|shard| ((shard, None), plan.mean_pk_wcu))
        .collect();
    let k = plan.hot_entity_fanout;
    let homes: Vec<_> = if k == 1 {
        vec![(s % n.get(), None)]
    } else {
        (1..=k).map(|j| plan.sub_shards.home(s, j, n)).collect()
    };
    for home in homes {
        *load.entry(home).or_default() += plan.hot_share_wcu;
    }
    load.into_values().fold(0.0, f64::max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Property 6: a plan chosen by the planner never puts more than the budget (and so
    /// never more than the partition limit) on its busiest PK, with either placement.
    #[test]
    fn planner_never_exceeds_the_limit(
        global in 0.001f64..5_000_000.0,
        peak_share in 0.0f64..=1.0,
        item_bytes in 1u64..=400 * 1024,
        safety in 1.0f64..8.0,
        partition_wcu in 1.0f64..5_000.0,
        raise_share in 0.01f64..0.99,
        base in any::<bool>(),
        s in any::<u32>(),
        packed in proptest::option::of(0.001f64..4.0),
    ) {
        let input = PlanInput {
            global_wps: global,
            peak_entity_wps: global * peak_share,
            item_bytes,
            safety,
            partition_wcu,
            table_shards: None,
            sub_shards: if base { SubShards::Base } else { SubShards::Dedicated },
            raise_ahead_wcu: partition_wcu / safety * raise_share,
            write_units_per_reading: packed,
        };
        match plan_capacity(&input) {
            Ok(plan) => {
                prop_assert!(plan.max_pk_wcu <= plan.budget_per_pk, "{:?}", plan);
                prop_assert!(plan.max_pk_wcu <= partition_wcu, "{:?}", plan);
                prop_assert!(plan.table_shards >= 1 && plan.hot_entity_fanout >= 1);
                prop_assert_eq!(plan.max_pk_wcu, plan.mean_pk_wcu.max(plan.hot_pk_wcu));
                if base {
                    // The model is the layout's: the busiest of the keys the entity's
                    // sub-shards land on is what the plan says, or less (N = 1).
                    if plan.table_shards <= 10_000 && plan.hot_entity_fanout <= 10_000 {
                        let busiest = busiest_key(&plan, s);
                        prop_assert!(busiest <= plan.max_pk_wcu * (1.0 + 1e-9), "{busiest} {plan:?}");
                        if plan.table_shards > 1 {
                            prop_assert!(
                                (busiest - plan.max_pk_wcu).abs() <= plan.max_pk_wcu * 1e-9,
                                "{busiest} {plan:?}"
                            );
                        }
                    }
                    // k is the ingest's raise: each key takes at most the raise-ahead share.
                    if plan.hot_entity_fanout < u32::MAX {
                        prop_assert!(plan.hot_share_wcu <= input.raise_ahead_wcu * (1.0 + 1e-9));
                    }
                }
            }
            Err(PlannerError::TooManyShards) => {}
            Err(e) => prop_assert!(false, "refused valid input: {e}"),
        }
    }
}
