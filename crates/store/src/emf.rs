//! CloudWatch Embedded Metric Format: metrics as one JSON log line each.
//!
//! Pure formatting, shared by the functions (the ingest's report, the sealer's run); each
//! prints its lines to stdout, where the Lambda log
//! pipeline turns them into metrics without any API call on the hot path.

use serde_json::{Map, Value, json};

/// Namespace of every Shardline metric.
pub const NAMESPACE: &str = "Shardline";

/// One metric value.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Metric name.
    pub name: String,
    /// Value.
    pub value: f64,
    /// CloudWatch unit (`Count`, `Milliseconds`, ...).
    pub unit: &'static str,
}

impl Metric {
    /// A `Count` metric.
    pub fn count(name: impl Into<String>, value: u64) -> Self {
        Self {
            name: name.into(),
            // Counts of one invocation stay far below 2^53.
            value: value as f64,
            unit: "Count",
        }
    }
}

/// One EMF line: `dimensions` (name, value) form a single dimension set.
pub fn line(timestamp_ms: i64, dimensions: &[(&str, &str)], metrics: &[Metric]) -> String {
    let mut root = Map::new();
    root.insert(
        "_aws".to_owned(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>()],
                "Metrics": metrics
                    .iter()
                    .map(|m| json!({"Name": m.name, "Unit": m.unit}))
                    .collect::<Vec<_>>(),
            }],
        }),
    );
    for (k, v) in dimensions {
        root.insert((*k).to_owned(), Value::String((*v).to_owned()));
    }
    for m in metrics {
        root.insert(m.name.clone(), json!(m.value));
    }
    Value::Object(root).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_declares_and_carries_every_metric() {
        let text = line(
            1_700_000_000_000,
            &[("Function", "ingest")],
            &[
                Metric::count("ReadingsWritten", 10),
                Metric::count("Retries", 2),
            ],
        );
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000i64);
        let directive = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Shardline");
        assert_eq!(directive["Dimensions"], json!([["Function"]]));
        assert_eq!(
            directive["Metrics"][1],
            json!({"Name": "Retries", "Unit": "Count"})
        );
        assert_eq!(v["Function"], "ingest");
        assert_eq!(v["ReadingsWritten"], 10.0);
        assert!(!text.contains('\n'));
    }
}
