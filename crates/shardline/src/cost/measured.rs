//! A bill from what a run counted: the same line items as the model's
//! (`cost::model`), at the same prices, each quantity the run's count scaled from its
//! length to a month. What a run cannot count (IoT Core's charges, the logs) is left to
//! the model's lines, which keep saying they are modelled.

use serde::Serialize;
use sharding::capacity::MONTH_SECS;

use super::bill::{Basis, Service, Use};
use super::model::Arch;
use super::prices::Key;

/// One function's invocations in a run, and their billed milliseconds in all.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionCount {
    /// `ingest`, `query` or `sealer`.
    pub name: String,
    /// The template's MemorySize of the function, MB.
    pub memory_mb: u32,
    pub invocations: u64,
    /// The sum of each invocation's duration rounded up to a whole millisecond.
    pub billed_ms: u64,
}

/// What a run counted, where it was counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counts {
    /// Seconds the counts cover.
    pub run_secs: f64,
    /// Where the SQS requests were counted (the stand-in's own record).
    pub sqs_source: String,
    /// SQS requests, each already counted per 64-KB chunk: sends, receives, deletes.
    pub sqs_sends: u64,
    pub sqs_receives: u64,
    pub sqs_deletes: u64,
    pub functions: Vec<FunctionCount>,
    /// Write and read units the capacity-proxy charged, every table together.
    pub write_units: f64,
    pub read_units: f64,
    /// Bytes stored in the readings table at the end, by DynamoDB's rule plus 100 bytes
    /// an item, and the retention they are kept for.
    pub stored_bytes: f64,
    pub retention_days: f64,
    /// Days of readings the stored bytes hold.
    pub stored_days: f64,
}

/// `counts` as a month's uses: each count times a month over the run's length; the
/// stored bytes times the retention over the days they hold.
#[must_use]
pub fn uses(counts: &Counts, arch: Arch) -> Vec<Use> {
    let scale = MONTH_SECS / counts.run_secs.max(1e-9);
    let measured = |from: &str| Basis::Measured(from.to_owned());
    let sqs = |item: &str, n: u64| {
        Use::new(
            Service::Sqs,
            item,
            n as f64 * scale,
            Key::SqsStandardRequests,
            measured(&counts.sqs_source),
        )
    };
    let mut out = vec![
        sqs("SendMessage", counts.sqs_sends),
        sqs("ReceiveMessage", counts.sqs_receives),
        sqs("DeleteMessage(Batch)", counts.sqs_deletes),
    ];
    let price = match arch {
        Arch::Arm64 => Key::LambdaGbSecondArm64,
        Arch::X86_64 => Key::LambdaGbSecondX86_64,
    };
    for f in &counts.functions {
        out.push(Use::new(
            Service::Lambda,
            &format!("{}: invocations", f.name),
            f.invocations as f64 * scale,
            Key::LambdaRequests,
            measured("the runner's invocations"),
        ));
        out.push(Use::new(
            Service::Lambda,
            &format!("{}: GB-seconds ({} MB)", f.name, f.memory_mb),
            f.billed_ms as f64 / 1000.0 * f64::from(f.memory_mb) / 1024.0 * scale,
            price,
            measured("each invocation's duration, rounded up to a millisecond"),
        ));
    }
    out.push(Use::new(
        Service::DynamoDb,
        "write units",
        counts.write_units * scale,
        Key::DynamodbWriteRequestUnits,
        measured("the capacity-proxy's charge"),
    ));
    out.push(Use::new(
        Service::DynamoDb,
        "read units",
        counts.read_units * scale,
        Key::DynamodbReadRequestUnits,
        measured("the capacity-proxy's charge"),
    ));
    let gb = counts.stored_bytes / 1_073_741_824.0 * counts.retention_days
        / counts.stored_days.max(1e-9);
    out.push(Use::new(
        Service::DynamoDb,
        "storage (retention's worth)",
        gb,
        Key::DynamodbStorageGbMonth,
        measured("the table's items at the end, by DynamoDB's rule + 100 bytes an item"),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{PriceTable, bill};

    #[test]
    fn a_run_of_an_hour_is_priced_as_720_of_it() {
        let counts = Counts {
            run_secs: 3600.0,
            sqs_source: "test".to_owned(),
            sqs_sends: 1000,
            sqs_receives: 100,
            sqs_deletes: 100,
            functions: vec![FunctionCount {
                name: "ingest".to_owned(),
                memory_mb: 512,
                invocations: 100,
                billed_ms: 2_000,
            }],
            write_units: 1000.0,
            read_units: 0.0,
            stored_bytes: 1_073_741_824.0,
            retention_days: 30.0,
            stored_days: 1.0,
        };
        let b = bill(
            &uses(&counts, Arch::Arm64),
            &PriceTable::built_in().expect("built in"),
        );
        // 1,200 requests x 720 = 864,000 at $0.40 a million.
        assert!((b.service(Service::Sqs) - 0.3456).abs() < 1e-9);
        // 100 x 720 invocations at $0.20 a million; 2 s x 0.5 GB x 720 = 720 GB-s.
        let lambda = 72_000.0 * 0.2 / 1e6 + 720.0 * 0.000_013_333_4;
        assert!((b.service(Service::Lambda) - lambda).abs() < 1e-9);
        // 720,000 write units; a GB a day kept 30 days: 30 GB-months.
        let ddb = 720_000.0 * 0.625 / 1e6 + 30.0 * 0.25;
        assert!((b.service(Service::DynamoDb) - ddb).abs() < 1e-9);
    }
}
