//! The whole bill of a run, scaled to a month: what the run counted (`Counted`: the
//! SQS requests moto answered, the runner's invocations and billed milliseconds, the
//! proxy's units, the table's bytes) priced as `shardline cost` prices a fleet, beside
//! the model's bill for the demo's own shape (`shardline::cost::model`).
//!
//! The counts are taken when the queue has drained, before the demo reads anything
//! back, so they are the pipeline's own work; the run's length is its publishing time,
//! over which the load was sent. What a run of a minute cannot count is left to the
//! model's lines, which keep saying they are modelled: IoT Core, the logs, the
//! sealer's schedule, and the sealer's work (an hour is sealed ten minutes after it
//! ends).

use capacity_proxy::StatsSnapshot;
use shardline::cost::measured::{self, Counts, FunctionCount};
use shardline::cost::model::{
    BATCH_SIZE, BATCHING_WINDOW_SECS, INGEST_MEMORY_MB, QUERY_MEMORY_MB, SEALER_MEMORY_MB,
};
use shardline::cost::{
    Arch, Basis, Bill, Door, Packing, PriceTable, Reads, Service, Shape, Use, bill, model,
};
use stand_in::SqsRequests;

use super::{Scenario, Variant};
use crate::run_local::Stats;

/// The template's RetentionDays default: the storage line keeps a month of readings.
const RETENTION_DAYS: f64 = 30.0;

/// What a run counted once its queue drained.
#[derive(Debug, Clone)]
pub struct Counted {
    pub runner: Stats,
    pub proxy: StatsSnapshot,
    pub sqs: SqsRequests,
}

/// A run's bill as counted, and the model's for the same shape.
#[derive(Debug, Clone)]
pub struct RunBill {
    pub counts: Counts,
    pub measured: Bill,
    pub modelled: Bill,
}

/// The services a run counts; the rest of its bill is the model's.
pub const COUNTED: [Service; 3] = [Service::Sqs, Service::Lambda, Service::DynamoDb];

/// `counted` as the cost model's counts, `stored_bytes` the readings table's at the end.
pub fn counts(scenario: &Scenario, counted: &Counted, stored_bytes: f64) -> Counts {
    let memory = |name: &str| match name {
        "ingest" => INGEST_MEMORY_MB,
        "query" => QUERY_MEMORY_MB,
        _ => SEALER_MEMORY_MB,
    };
    let run_secs = scenario.duration.as_secs_f64();
    Counts {
        run_secs,
        sqs_source: "the requests moto answered (infra/local/moto_launch.py)".to_owned(),
        sqs_sends: counted.sqs.sends(),
        sqs_receives: counted.sqs.receives(),
        sqs_deletes: counted.sqs.deletes(),
        // The ingest alone: the sealer's idle runs of a minute stand for none of its
        // sealing work, which the model's lines carry.
        functions: counted
            .runner
            .functions
            .iter()
            .filter(|(name, _)| name.as_str() == "ingest")
            .map(|(name, b)| FunctionCount {
                name: format!("{name} (local durations stand in for Lambda's)"),
                memory_mb: memory(name),
                invocations: b.invocations,
                billed_ms: b.billed_ms,
            })
            .collect(),
        write_units: counted.proxy.wcu_by_table.values().sum(),
        read_units: counted.proxy.rcu_by_table.values().sum(),
        stored_bytes,
        retention_days: RETENTION_DAYS,
        stored_days: run_secs / 86_400.0,
    }
}

/// The demo's own shape for `shardline cost`: every device at the fleet's mean
/// interval (the load's readings a second over its devices), its messages of
/// `--batch` readings, three metrics, sent to SQS.
pub fn shape(scenario: &Scenario, variant: Variant) -> Shape {
    let devices = f64::from(scenario.devices) + 1.0;
    let rate = scenario.fleet_rate + scenario.hot_rate;
    let packing = match variant {
        Variant::Adaptive if scenario.ingest.blocks => Packing::Blocks,
        _ => Packing::Items,
    };
    Shape {
        devices,
        interval_secs: devices / rate,
        readings_a_message: u32::try_from(scenario.batch).unwrap_or(1),
        metrics: 3,
        // The model's own sample reading of three metrics: the demo's (ids, a tag, a
        // timestamp, about 175 bytes) is within a few bytes of it, and the model refuses
        // a reading smaller than its sample.
        reading_bytes: None,
        door: Door::Sqs,
        packing,
        slab_groups: sharding::slab::DEFAULT_GROUPS,
        batching_window_secs: BATCHING_WINDOW_SECS,
        batch_size: BATCH_SIZE,
        retention_days: RETENTION_DAYS,
        reads: Reads {
            device_readings: 0.0,
            point: 0.0,
            device_stats: 0.0,
        },
        arch: Arch::Arm64,
        sqs_free_tier: false,
    }
}

/// The run's bill from `counts` (the model's lines for what it cannot count), and the
/// model's for the demo's shape.
pub fn run_bill(scenario: &Scenario, variant: Variant, counts: Counts) -> anyhow::Result<RunBill> {
    let prices = PriceTable::built_in()?;
    let (_, modelled) = model(&shape(scenario, variant))?;
    let mut uses = measured::uses(&counts, Arch::Arm64);
    uses.extend(modelled.iter().filter(|u| left_to_model(u)).cloned());
    Ok(RunBill {
        measured: bill(&uses, &prices),
        modelled: bill(&modelled, &prices),
        counts,
    })
}

/// A model's line the run does not count.
fn left_to_model(u: &Use) -> bool {
    let sealer = u.item.starts_with("sealer") || u.item.contains("rollups");
    let free_tier = u.item.starts_with("free tier");
    (!COUNTED.contains(&u.service) || sealer || free_tier) && matches!(u.basis, Basis::Modelled(_))
}

/// Each service's measured figure against the model's: the ratio's distance from 1.
pub fn deviation(b: &RunBill, service: Service) -> Option<f64> {
    let model = b.modelled.service(service);
    (model > 0.0).then(|| b.measured.service(service) / model - 1.0)
}

/// The report's section: each run's month by service, counted and modelled.
pub fn text(scenario: &Scenario, runs: [(&str, &Result<RunBill, String>); 2]) -> String {
    let money = bill::dollars;
    let rate = scenario.fleet_rate + scenario.hot_rate;
    let mut s = format!(
        "The whole bill, a month at this run's rate ({rate} readings/s, {} a message, to SQS), \
         us-east-1 on demand:\n",
        scenario.batch
    );
    s.push_str(&format!(
        "  {:<18} {:>12} {:>12} {:>7}   {:>12} {:>12} {:>7}\n",
        "service", "naive: run", "model", "", "adaptive", "model", ""
    ));
    let mut services: Vec<Service> = Service::ALL.to_vec();
    services.retain(|s| {
        runs.iter()
            .any(|(_, r)| r.as_ref().is_ok_and(|b| b.modelled.service(*s) > 0.0))
    });
    let cell = |r: &Result<RunBill, String>, service: Option<Service>| match r {
        Err(_) => format!("{:>12} {:>12} {:>7}", "-", "-", ""),
        Ok(b) => {
            let (m, e) = match service {
                Some(s) => (b.measured.service(s), b.modelled.service(s)),
                None => (b.measured.total_usd, b.modelled.total_usd),
            };
            let off = if service.is_none_or(|s| COUNTED.contains(&s)) && e > 0.0 {
                format!("{:+.0}%", (m / e - 1.0) * 100.0)
            } else {
                "model".to_owned()
            };
            format!("{:>12} {:>12} {off:>7}", money(m), money(e))
        }
    };
    for service in services.iter().copied().map(Some).chain([None]) {
        let name = service.map_or("total", Service::name);
        s.push_str(&format!(
            "  {name:<18} {}   {}\n",
            cell(runs[0].1, service),
            cell(runs[1].1, service)
        ));
    }
    for (name, r) in runs {
        match r {
            Ok(b) => s.push_str(&format!(
                "  {name}: counted {} SQS sends, {} receives, {} deletes; {} ingest invocations \
                 of {} billed ms in all; {:.0} write and {:.0} read units; {:.0} bytes stored\n",
                b.counts.sqs_sends,
                b.counts.sqs_receives,
                b.counts.sqs_deletes,
                b.counts
                    .functions
                    .iter()
                    .map(|f| f.invocations)
                    .sum::<u64>(),
                b.counts.functions.iter().map(|f| f.billed_ms).sum::<u64>(),
                b.counts.write_units,
                b.counts.read_units,
                b.counts.stored_bytes,
            )),
            Err(why) => s.push_str(&format!("  {name}: no bill: {why}\n")),
        }
    }
    s.push_str(
        "  Counted in the run (SQS at moto, the ingest's invocations timed in process: local \
         durations stand in for Lambda's, DynamoDB's units at the capacity-proxy, the table's \
         bytes), scaled from its publishing time to 30 days; IoT Core, the logs and the \
         sealer are the model's lines (`shardline cost`, docs/cost.md).\n",
    );
    s
}
