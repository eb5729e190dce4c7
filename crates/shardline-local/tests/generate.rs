//! `publish`'s generation, without AWS: determinism, pacing, counts, and that the
//! ingest parser accepts every valid body and refuses every malformed one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ingest::{Limits, parse_body};
use sharding::time::Timestamp;
use shardline_local::publish::{Content, Generator, Malformation, Message, Plan, Tally};

fn start() -> Timestamp {
    Timestamp::parse("2026-06-22T12:00:00Z").expect("valid")
}

fn plan() -> Plan {
    Plan {
        devices: 50,
        rate: 400.0,
        duration: Duration::from_millis(500),
        hot_device: None,
        hot_rate: 0.0,
        jitter: Duration::ZERO,
        batch: 1,
        bad_rate: 0.0,
        seed: 7,
        max_messages: None,
        zipf_exponent: 1.0,
    }
}

fn generate(plan: Plan) -> Vec<Message> {
    Generator::new(plan, start()).expect("valid plan").collect()
}

/// The ingest's limits at the end of the stream, as a handler would see them.
fn limits() -> Limits {
    Limits {
        now: start().saturating_add(Duration::from_secs(60)),
        max_future: Duration::from_secs(300),
        retention: Duration::from_secs(30 * 86_400),
        max_readings: 500,
    }
}

#[test]
fn same_seed_same_stream_other_seed_other_stream() {
    let a = generate(Plan {
        bad_rate: 0.1,
        jitter: Duration::from_millis(50),
        ..plan()
    });
    let b = generate(Plan {
        bad_rate: 0.1,
        jitter: Duration::from_millis(50),
        ..plan()
    });
    assert_eq!(a, b);
    let c = generate(Plan {
        seed: 8,
        bad_rate: 0.1,
        jitter: Duration::from_millis(50),
        ..plan()
    });
    assert_ne!(a, c);
}

#[test]
fn counts_pacing_and_valid_bodies() {
    let plan = Plan {
        hot_device: Some("sensor-alpha-001".into()),
        hot_rate: 100.0,
        ..plan()
    };
    assert_eq!(plan.fleet_readings(), 200);
    assert_eq!(plan.hot_readings(), 50);
    assert_eq!(plan.messages(), 250);
    let messages = generate(plan);
    assert_eq!(messages.len(), 250);
    let mut previous = Duration::ZERO;
    let mut ids = BTreeSet::new();
    let mut hot = 0;
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.seq, i as u64);
        assert!(m.offset >= previous, "offsets go forward");
        assert!(m.offset < Duration::from_millis(500));
        previous = m.offset;
        let Content::Valid(expected) = &m.content else {
            panic!("no malformed message at bad_rate 0");
        };
        let readings = parse_body(&m.body, &limits()).expect("the ingest accepts it");
        assert_eq!(readings.len(), 1);
        assert_eq!(readings[0].device_id, expected[0].device_id);
        assert_eq!(readings[0].event_id, expected[0].event_id);
        assert_eq!(readings[0].ts.as_millis(), expected[0].ts_ms);
        assert!(
            ids.insert(readings[0].event_id.clone()),
            "event ids are unique"
        );
        if readings[0].device_id == "sensor-alpha-001" {
            hot += 1;
            assert_eq!(readings[0].tags["site"], "site-hot");
        }
        // Without jitter the ts is the send slot.
        assert!(expected[0].ts_ms <= start().as_millis() + m.offset.as_millis() as i64);
    }
    assert_eq!(hot, 50);
}

#[test]
fn jitter_moves_ts_back_by_at_most_the_jitter() {
    let messages = generate(Plan {
        jitter: Duration::from_millis(80),
        ..plan()
    });
    let mut moved = 0;
    for m in &messages {
        let Content::Valid(r) = &m.content else {
            panic!("valid")
        };
        let slot = start().as_millis() + m.offset.as_millis() as i64;
        assert!(r[0].ts_ms <= slot && r[0].ts_ms >= slot - 80, "{r:?}");
        moved += usize::from(r[0].ts_ms < slot);
    }
    assert!(moved > messages.len() / 2, "jitter applies: {moved}");
}

#[test]
fn batches_of_readings() {
    let messages = generate(Plan { batch: 7, ..plan() });
    // 200 readings in messages of 7: 28 full and one of 4.
    assert_eq!(messages.len(), 29);
    let sizes: Vec<usize> = messages
        .iter()
        .map(|m| {
            assert!(m.body.starts_with("{\"readings\":["), "{}", m.body);
            let parsed = parse_body(&m.body, &limits()).expect("accepted");
            assert_eq!(parsed.len(), m.readings());
            parsed.len()
        })
        .collect();
    assert!(sizes[..28].iter().all(|&n| n == 7));
    assert_eq!(sizes[28], 4);
}

#[test]
fn every_malformation_is_refused_and_counted() {
    let messages = generate(Plan {
        bad_rate: 1.0,
        ..plan()
    });
    let mut tally = Tally::default();
    let mut kinds = BTreeSet::new();
    for m in &messages {
        tally.add(m);
        let Content::Malformed(kind) = m.content else {
            panic!("all malformed at bad_rate 1")
        };
        kinds.insert(kind);
        let refusal = parse_body(&m.body, &limits()).expect_err(kind.name());
        assert!(!refusal.rule.is_empty());
    }
    assert_eq!(kinds.len(), Malformation::ALL.len(), "every kind occurs");
    assert_eq!(tally.malformed_total(), 200);
    assert_eq!(tally.readings, 0);
    assert_eq!(tally.malformed.len(), Malformation::ALL.len());
}

#[test]
fn bad_rate_is_roughly_the_fraction_of_malformed_messages() {
    let messages = generate(Plan {
        rate: 4000.0,
        duration: Duration::from_secs(1),
        bad_rate: 0.05,
        ..plan()
    });
    let mut tally = Tally::default();
    for m in &messages {
        tally.add(m);
    }
    let bad = tally.malformed_total();
    // 4,000 draws at p = 0.05: 200 expected, sd ~14.
    assert!((140..=260).contains(&bad), "{bad}");
    assert_eq!(tally.readings + bad, 4000);
}

#[test]
fn zipf_makes_the_first_devices_popular() {
    let messages = generate(Plan {
        rate: 5000.0,
        duration: Duration::from_secs(1),
        devices: 100,
        ..plan()
    });
    let mut per_device: BTreeMap<String, u64> = BTreeMap::new();
    for m in &messages {
        if let Content::Valid(r) = &m.content {
            *per_device.entry(r[0].device_id.clone()).or_default() += 1;
        }
    }
    let count = |d: &str| per_device.get(d).copied().unwrap_or(0);
    // Rank 1 of Zipf(1) over 100 devices holds 1/H(100) ~ 19% of the readings.
    assert!((800..=1150).contains(&count("dev-00000")), "{per_device:?}");
    assert!(count("dev-00000") > 5 * count("dev-00009"));
    assert!(per_device.keys().all(|d| d.as_str() < "dev-00100"));
}

#[test]
fn max_messages_caps_the_stream() {
    let plan = Plan {
        max_messages: Some(17),
        ..plan()
    };
    assert_eq!(plan.messages(), 17);
    assert_eq!(generate(plan).len(), 17);
}

#[test]
fn invalid_plans_name_the_flag() {
    let check = |plan: Plan, flag: &str| {
        let err = Generator::new(plan, start()).expect_err("invalid");
        assert!(err.contains(flag), "{err}");
    };
    check(
        Plan {
            devices: 0,
            ..plan()
        },
        "--devices",
    );
    check(
        Plan {
            bad_rate: 1.5,
            ..plan()
        },
        "--bad-rate",
    );
    check(
        Plan {
            hot_rate: 5.0,
            ..plan()
        },
        "--hot-device",
    );
    check(
        Plan {
            hot_device: Some("a#b".into()),
            ..plan()
        },
        "--hot-device",
    );
    check(Plan { batch: 0, ..plan() }, "--batch");
}

/// A reading's metrics are its device's waveform at its timestamp, the hot device's
/// with its step and spike: over a minute's run, every hot reading within the spike is
/// above every other of the run.
#[test]
fn readings_follow_their_devices_waveform() {
    use shardline_local::publish::waveform::Waveform;
    let plan = Plan {
        hot_device: Some("sensor-alpha-001".into()),
        hot_rate: 100.0,
        rate: 20.0,
        duration: Duration::from_secs(60),
        ..plan()
    };
    let (start, span) = (start().as_millis(), 60_000);
    let hot = Waveform::new(7, "sensor-alpha-001", start, span).with_step_and_spike();
    let mut series = Vec::new();
    for message in generate(plan) {
        let Content::Valid(ids) = &message.content else {
            panic!("no malformed message was asked for");
        };
        let body: serde_json::Value = serde_json::from_str(&message.body).expect("JSON");
        let [id] = ids.as_slice() else {
            panic!("one reading a message");
        };
        let wave = if id.device_id == "sensor-alpha-001" {
            hot.clone()
        } else {
            Waveform::new(7, &id.device_id, start, span)
        };
        let round = |x: f64| (x * 100.0).round() / 100.0;
        for (metric, want) in [
            ("temp_c", wave.temp_c(id.ts_ms)),
            ("humidity", wave.humidity(id.ts_ms)),
            ("battery_v", wave.battery_v(id.ts_ms)),
        ] {
            assert_eq!(
                body["metrics"][metric].as_f64(),
                Some(round(want)),
                "{id:?}"
            );
        }
        if id.device_id == "sensor-alpha-001" {
            series.push((id.ts_ms, wave.temp_c(id.ts_ms)));
        }
    }
    assert_eq!(series.len(), 6_000);
    let spike = hot.spike().expect("the hot device spikes");
    let in_spike = |t: i64| (spike.at_ms..spike.at_ms + spike.width_ms).contains(&t);
    let inside: Vec<f64> = series
        .iter()
        .filter(|p| in_spike(p.0))
        .map(|p| p.1)
        .collect();
    let lowest_inside = inside.iter().copied().fold(f64::MAX, f64::min);
    let highest_outside = series
        .iter()
        .filter(|p| !in_spike(p.0))
        .map(|p| p.1)
        .fold(f64::MIN, f64::max);
    assert_eq!(inside.len(), 100, "a second of readings at 100/s");
    assert!(
        lowest_inside > highest_outside,
        "{lowest_inside} {highest_outside}"
    );
}
