//! A JSONL sample of writes, one per line: `{"pk": ..., "ts": ...}`, with an optional
//! sort key and size, or a full item (plain or DynamoDB JSON), whose size is estimated.

use std::io::BufRead;

use anyhow::{Context as _, anyhow};
use serde_json::Value;
use sharding::time::Timestamp;
use store::scan::Tier;

use super::analysis::{Sampled, Write};

/// Parses one JSONL line: `pk`/`PK`, `ts`/`ts_ms`/`timestamp` (RFC 3339 or epoch ms),
/// and `bytes`/`size` or, for a full item, its estimated size; a line with only keys
/// and a timestamp counts `default_bytes`.
pub fn parse_line(line: &str, default_bytes: usize) -> Result<Write, String> {
    parse_sampled(line, default_bytes).map(|s| s.write)
}

/// [`parse_line`], with the item's sort key (`sk`/`SK`) when the line has one.
pub fn parse_sampled(line: &str, default_bytes: usize) -> Result<Sampled, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(o) = value else {
        return Err("not a JSON object".into());
    };
    let pk = match field(&o, &["pk", "PK"]) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err("no \"pk\" string".into()),
    };
    let ts_ms = field(&o, &["ts_ms", "ts", "timestamp"]).and_then(json_ts);
    let sk = match field(&o, &["sk", "SK"]) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let explicit = field(&o, &["bytes", "size"]).and_then(|v| match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    });
    let key_only = o.keys().all(|k| {
        matches!(
            k.as_str(),
            "pk" | "PK" | "sk" | "SK" | "ts" | "ts_ms" | "timestamp"
        )
    });
    let bytes = match explicit {
        Some(b) => usize::try_from(b).unwrap_or(usize::MAX),
        None if key_only => default_bytes,
        None => o.iter().map(|(k, v)| k.len() + json_size(v)).sum(),
    };
    Ok(Sampled {
        write: Write { pk, ts_ms, bytes },
        sk,
        members: Vec::new(),
        tier: Tier::Own,
    })
}

/// Reads a JSONL sample; blank lines are skipped, a bad line is an error naming it.
pub fn read_sample(reader: impl BufRead, default_bytes: usize) -> anyhow::Result<Vec<Sampled>> {
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.context("cannot read the sample")?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_sampled(&line, default_bytes).map_err(|e| anyhow!("line {}: {e}", n + 1))?);
    }
    Ok(out)
}

fn field<'a>(o: &'a serde_json::Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| o.get(*n)).map(|v| match v {
        // DynamoDB JSON: {"S": "..."} / {"N": "..."}.
        Value::Object(typed) if typed.len() == 1 => {
            typed.get("S").or_else(|| typed.get("N")).unwrap_or(v)
        }
        _ => v,
    })
}

fn json_ts(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => Timestamp::parse(s).ok().map(Timestamp::as_millis),
        _ => None,
    }
}

/// DynamoDB's size of a JSON value (approximately, for samples of full items).
fn json_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 1,
        Value::Number(n) => n.to_string().len().div_ceil(2) + 1,
        Value::String(s) => s.len(),
        Value::Array(a) => 3 + a.iter().map(|x| 1 + json_size(x)).sum::<usize>(),
        Value::Object(o) => {
            3 + o
                .iter()
                .map(|(k, x)| 1 + k.len() + json_size(x))
                .sum::<usize>()
        }
    }
}
