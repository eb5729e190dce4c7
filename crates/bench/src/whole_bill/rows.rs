//! Item 10's rows: what the run counted, each counted service's month beside the
//! model's with the deviation, and the note.

use shardline::cost::bill::{dollars, grouped};
use shardline::cost::{Bill, Figures, Service};

use super::{COUNTED, Run, WITHIN};
use crate::report::Results;

/// `bill`'s lines of `service`: `item $usd` each.
fn lines(bill: &Bill, service: Service) -> String {
    bill.lines
        .iter()
        .filter(|l| l.used.service == service && l.usd != 0.0)
        .map(|l| {
            format!(
                "{} {} ({})",
                l.used.item,
                grouped(l.used.quantity, 0),
                dollars(l.usd)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The figures a service's bill follows from, counted and modelled.
fn drivers(service: Service, run: &Run, f: &Figures) -> String {
    let invocations = run.ingest.ms.len() as f64;
    let per_inv = run.messages as f64 / invocations;
    let readings = run.messages as f64;
    match service {
        Service::Sqs => format!(
            "{} receives and {} deletes an invocation counted, {} messages an invocation \
             (model: {} messages, so {} receives and deletes each)",
            fmt2(run.sqs.receives() as f64 / invocations),
            fmt2(run.sqs.deletes() as f64 / invocations),
            fmt2(per_inv),
            f.messages_an_invocation,
            (f.messages_an_invocation / 10.0).ceil(),
        ),
        Service::Lambda => format!(
            "{} messages an ingest invocation counted (model {}); the ingest's mean {} ms \
             in process (model {} ms billed); the sealer's idle runs {} ms, the sealing \
             run {} ms",
            fmt2(per_inv),
            f.messages_an_invocation,
            fmt2(run.ingest.mean()),
            f.ingest_ms_an_invocation,
            fmt2(idle_mean(run)),
            fmt2(run.sealer.ms.last().copied().unwrap_or(0.0)),
        ),
        _ => format!(
            "{} write units and {} read units a reading counted (model {} write units a \
             reading by the ingest), {} bytes stored a reading in the readings table \
             (model {}), {} in the rollups table",
            fmt2(run.charges.total().wcu / readings),
            fmt2(run.charges.total().rcu / readings),
            fmt2(f.write_units_a_reading),
            fmt2(run.readings_bytes / readings),
            fmt2(f.stored_bytes_a_reading),
            fmt2(run.rollups_bytes / readings),
        ),
    }
}

fn fmt2(x: f64) -> String {
    format!("{x:.2}")
}

fn idle_mean(run: &Run) -> f64 {
    let idle = &run.sealer.ms[..run.sealer.ms.len().saturating_sub(1)];
    idle.iter().sum::<f64>() / idle.len().max(1) as f64
}

pub(super) fn rows(
    results: &mut Results,
    devices: usize,
    run: &Run,
    f: &Figures,
    counted: &Bill,
    model: &Bill,
) {
    let item = "10";
    let units = |t: &str| run.charges.table(t);
    results.figure(
        item,
        &format!(
            "the run: {} devices, a reading a minute each, one a message, by SQS, blocks; an \
             hour of readings (simulated) in wall seconds",
            grouped(devices as f64, 0)
        ),
        format!(
            "{} messages of {} bytes on average (the model's sample: {}) in {:.0} s; {} \
             ingest invocations ({} messages each); {} sealer runs",
            grouped(run.messages as f64, 0),
            fmt2(run.body_bytes as f64 / run.messages as f64),
            f.message.message_bytes,
            run.wall_secs,
            run.ingest.ms.len(),
            fmt2(run.messages as f64 / run.ingest.ms.len() as f64),
            run.sealer.ms.len(),
        ),
    );
    let sqs: Vec<String> = run
        .sqs
        .actions
        .iter()
        .map(|(a, c)| format!("{a} {} calls, {} requests", c.calls, c.requests))
        .collect();
    results.figure(
        item,
        "counted: SQS at moto; units at the proxies (readings / shards / rollups table)",
        format!(
            "{}; RCU {:.0} / {:.0} / {:.0}, WCU {:.0} / {:.0} / {:.0}; stored {:.0} + {:.0} \
             bytes",
            sqs.join(", "),
            units(&run.tables.readings).rcu,
            units(&run.tables.shards).rcu,
            units(&run.tables.rollups).rcu,
            units(&run.tables.readings).wcu,
            units(&run.tables.shards).wcu,
            units(&run.tables.rollups).wcu,
            run.readings_bytes,
            run.rollups_bytes,
        ),
    );
    let mut why = Vec::new();
    for service in COUNTED {
        let (c, m) = (counted.service(service), model.service(service));
        let off = c / m - 1.0;
        let met = off.abs() <= WITHIN;
        results.goal(
            item,
            &format!("{} a month: counted / model", service.name()),
            format!("{} / {} ({:+.1}%)", dollars(c), dollars(m), off * 100.0),
            "within 10%",
            if met {
                "met".to_owned()
            } else {
                format!("missed ({:+.0}%)", off * 100.0)
            },
        );
        why.push(format!(
            "{}: counted: {}. Model: {}. What it follows from: {}.",
            service.name(),
            lines(counted, service),
            lines(model, service),
            drivers(service, run, f)
        ));
    }
    results.figure(
        item,
        "the whole month: counted (the logs and the schedule are the model's lines) / model",
        format!(
            "{} / {} ({:+.1}%)",
            dollars(counted.total_usd),
            dollars(model.total_usd),
            (counted.total_usd / model.total_usd - 1.0) * 100.0
        ),
    );
    results.note(item, format!("{} {}", super::NOTE, why.join(" ")));
}
