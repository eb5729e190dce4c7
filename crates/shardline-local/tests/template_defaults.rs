//! run-local's defaults are the template's event source mapping and function settings.

use shardline_local::run_local::{
    DEFAULT_BATCH_SIZE, DEFAULT_BATCHING_WINDOW_SECS, DEFAULT_FUNCTION_TIMEOUT_SECS,
    DEFAULT_MAX_CONCURRENCY, DEFAULT_SLAB_BATCH_SIZE, DEFAULT_SLAB_BATCHING_WINDOW_SECS,
    QUERY_TIMEOUT,
};
use yaml_serde::Value;

fn parameter_default(template: &Value, name: &str) -> f64 {
    template["Parameters"][name]["Default"]
        .as_f64()
        .unwrap_or_else(|| panic!("template.yaml has no numeric default for {name}"))
}

#[test]
fn defaults_match_template_yaml() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml is readable");
    let template: Value = yaml_serde::from_str(&text).expect("template.yaml is YAML");
    for (parameter, default) in [
        ("IngestBatchSize", DEFAULT_BATCH_SIZE as f64),
        ("BatchingWindow", DEFAULT_BATCHING_WINDOW_SECS),
        ("SlabIngestBatchSize", DEFAULT_SLAB_BATCH_SIZE as f64),
        ("SlabBatchingWindow", DEFAULT_SLAB_BATCHING_WINDOW_SECS),
        ("IngestMaxConcurrency", DEFAULT_MAX_CONCURRENCY as f64),
        ("IngestTimeout", DEFAULT_FUNCTION_TIMEOUT_SECS),
        ("QueryTimeout", QUERY_TIMEOUT.as_secs_f64()),
    ] {
        assert_eq!(
            parameter_default(&template, parameter),
            default,
            "{parameter}"
        );
    }
}
