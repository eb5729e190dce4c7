//! `openapi.yaml` against the router: every route and query parameter the router
//! accepts is documented, and nothing else is; every answer to the shared API Gateway
//! events validates against the schema the document gives for its route and status.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use query::error::codes;
use query::params::{Limits, parse_request};
use serde_json::{Value, json};

fn document() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../openapi.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_serde::from_str(&text).expect("openapi.yaml is YAML")
}

/// `#/components/parameters/x` resolved; anything else as it is.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local reference");
            doc.pointer(pointer)
                .unwrap_or_else(|| panic!("{reference} is not in the document"))
        }
        None => value,
    }
}

/// Each documented path template with its GET operation's query parameters.
fn documented(doc: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .map(|(template, item)| {
            let operations: Vec<&String> = item.as_object().expect("path item").keys().collect();
            assert_eq!(operations, ["get"], "{template}: every route is a GET");
            let query: BTreeSet<String> = item["get"]["parameters"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|p| resolve(doc, p))
                .filter(|p| p["in"] == "query")
                .map(|p| p["name"].as_str().expect("parameter name").to_owned())
                .collect();
            (template.clone(), query)
        })
        .collect()
}

/// A concrete path for a template: each `{name}` becomes a valid id.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { "id-1" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// The code of the router's answer to `GET path?query` (`None`: accepted).
fn code(path: &str, query: Option<&str>) -> Option<&'static str> {
    parse_request("GET", path, query, &Limits::default())
        .err()
        .map(|e| e.code)
}

#[test]
fn the_router_accepts_exactly_the_documented_paths() {
    let doc = document();
    let documented: BTreeSet<String> = documented(&doc).keys().map(|t| concrete(t)).collect();
    // Every path of up to five segments over the documented literals and an id: the
    // router must route exactly the documented ones.
    let mut words: BTreeSet<&str> = BTreeSet::from(["id-1"]);
    for template in doc["paths"].as_object().expect("paths").keys() {
        words.extend(
            template
                .split('/')
                .filter(|s| !s.is_empty() && !s.starts_with('{')),
        );
    }
    let words: Vec<&str> = words.into_iter().collect();
    let mut paths: Vec<String> = vec![String::new()];
    let mut routed = BTreeSet::new();
    for _ in 0..5 {
        paths = paths
            .iter()
            .flat_map(|p| words.iter().map(move |w| format!("{p}/{w}")))
            .collect();
        for path in &paths {
            if code(path, None) != Some(codes::NOT_FOUND) {
                routed.insert(path.clone());
            }
        }
    }
    let templates: Vec<Vec<&str>> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(|t| t.split('/').collect())
        .collect();
    let matches = |path: &str| {
        let segments: Vec<&str> = path.split('/').collect();
        templates.iter().any(|t| {
            t.len() == segments.len()
                && t.iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s)
        })
    };
    for path in &routed {
        assert!(
            matches(path),
            "the router routes {path}, which openapi.yaml does not document"
        );
    }
    for path in &documented {
        assert!(
            routed.contains(path),
            "openapi.yaml documents {path}, which the router refuses"
        );
    }
}

#[test]
fn the_router_accepts_exactly_the_documented_query_parameters() {
    let doc = document();
    let routes = documented(&doc);
    let every_name: BTreeSet<&String> = routes.values().flatten().collect();
    for (template, names) in &routes {
        let path = concrete(template);
        for name in every_name
            .iter()
            .copied()
            .chain([&"x-undocumented".to_owned()])
        {
            let query = format!("{name}=v");
            let refused = code(&path, Some(&query)) == Some(codes::UNKNOWN_PARAMETER);
            assert_eq!(
                refused,
                !names.contains(name),
                "{template}: parameter {name} is {} by the router but {} in openapi.yaml",
                if refused { "refused" } else { "accepted" },
                if names.contains(name) {
                    "documented"
                } else {
                    "not documented"
                },
            );
        }
    }
}

#[test]
fn every_error_code_of_the_api_is_documented() {
    let doc = document();
    let documented: BTreeSet<&str> = doc
        .pointer("/components/schemas/Error/properties/error/properties/code/enum")
        .and_then(Value::as_array)
        .expect("the error code enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let codes = BTreeSet::from([
        codes::BAD_RANGE,
        codes::RANGE_TOO_LARGE,
        codes::BAD_LIMIT,
        codes::BAD_ORDER,
        codes::BAD_ID,
        codes::BAD_PARAMETER,
        codes::MISSING_PARAMETER,
        codes::DUPLICATE_PARAMETER,
        codes::UNKNOWN_PARAMETER,
        codes::BAD_CURSOR,
        codes::BAD_INTERVAL,
        codes::NOT_SUPPORTED,
        codes::BUDGET_EXCEEDED,
        codes::FORBIDDEN,
        codes::NOT_FOUND,
        codes::METHOD_NOT_ALLOWED,
        codes::THROTTLED,
        codes::UNAVAILABLE,
        codes::INTERNAL,
    ]);
    assert_eq!(documented, codes);
}

/// The schema of `template`'s answer with `status`, as a JSON Schema over the document
/// (its references resolve within it).
fn answer_schema(doc: &Value, template: &str, status: u16) -> Value {
    let responses = &doc["paths"][template]["get"]["responses"];
    let response = resolve(doc, &responses[status.to_string()]);
    let schema = response
        .pointer("/content/application~1json/schema")
        .unwrap_or_else(|| panic!("{template} documents no {status} body"));
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [schema],
        "components": doc["components"],
    })
}

#[tokio::test]
async fn every_event_answer_validates_against_its_schema() {
    let doc = document();
    let events = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../events");
    let mut checked = 0;
    for entry in std::fs::read_dir(&events).expect("events/") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if !(name.starts_with("apigw-") && name.ends_with(".json")) {
            continue;
        }
        let event: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let route_key = event["routeKey"].as_str().expect("routeKey");
        let template = route_key.strip_prefix("GET ").expect("a GET route");
        let (status, body, _) = crate::events::call(&name).await;
        let schema = answer_schema(&doc, template, status.as_u16());
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name} ({status}): {errors:?}\n{body}");
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} API Gateway events");
}

/// Every route checks the caller's device scope (`query::scope`), so every route
/// documents the 403 it answers outside it.
#[test]
fn every_route_documents_the_scope_refusal() {
    let doc = document();
    for (template, item) in doc["paths"].as_object().expect("paths") {
        let forbidden = resolve(&doc, &item["get"]["responses"]["403"]);
        assert!(
            forbidden
                .pointer("/content/application~1json/schema")
                .is_some(),
            "{template} documents no 403 body"
        );
    }
    let claim = doc
        .pointer("/components/securitySchemes/jwt/description")
        .and_then(Value::as_str)
        .expect("the jwt scheme");
    assert!(claim.contains("shardline_devices"), "the claim is named");
}
