//! Cross-language vectors for `shardline-hash-v1`.
//!
//! Regenerate with `cargo test -p sharding --test tests -- --ignored regenerate_vectors`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::num::NonZeroU32;
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use sharding::{HASH_VERSION, shard_index, stable_hash};

use crate::common::{crate_path, nz};

const VECTORS: &str = "testdata/vectors.json";
const SHARD_COUNTS: [u32; 5] = [2, 10, 16, 200, 1000];
/// The page that documents the hash, from the repository's root, and its section.
const FORMATS: &str = "docs/formats.md";
const SECTION_HEADING: &str = "## The stable shard hash";

fn vector_inputs() -> Vec<String> {
    let mut inputs: Vec<String> = [
        "",
        "a",
        "abc",
        "sensor-alpha-001",
        "OPS_LOG",
        "THREAT#brand",
        "2026-06-22",
        "2026-06-22T01:00:00.000Z",
        "#",
        "~",
        " ",
        "  leading spaces",
        "trailing space ",
        "tab\there",
        "line\nbreak",
        "nul\u{0}byte",
        "quote\"d",
        "back\\slash",
        "日本語",
        "Ω",
        "café",
        "cafe\u{301}",
        "🚀 rocket",
        "Привет",
        "مرحبا",
        "\u{FEFF}bom",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    inputs.push("x".repeat(1000));
    for i in 0..60 {
        inputs.push(format!("sensor-{i:04}"));
    }
    for i in 0..40 {
        inputs.push(format!("dev:eu-west-1:{}", i * 7919));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x5348_4152_444c_494e);
    while inputs.len() < 256 {
        let b: [u8; 16] = rng.random();
        let mut id = String::from("evt-");
        for (i, byte) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                id.push('-');
            }
            let _ = write!(id, "{byte:02x}");
        }
        inputs.push(id);
    }
    inputs
}

fn render(inputs: &[String]) -> String {
    let mut out = String::from("[\n");
    for (i, input) in inputs.iter().enumerate() {
        let shards: Vec<String> = SHARD_COUNTS
            .iter()
            .map(|&n| format!("\"{n}\": {}", shard_index(input, nz(n))))
            .collect();
        let _ = write!(
            out,
            "  {{\"input\": {}, \"hash\": \"{}\", \"shards\": {{{}}}}}",
            serde_json::to_string(input).expect("a string encodes"),
            stable_hash(input),
            shards.join(", ")
        );
        out.push_str(if i + 1 < inputs.len() { ",\n" } else { "\n" });
    }
    out.push_str("]\n");
    out
}

#[test]
#[ignore = "writes testdata/vectors.json; run by hand after a deliberate change"]
fn regenerate_vectors() {
    std::fs::write(crate_path(VECTORS), render(&vector_inputs())).expect("write vectors");
}

fn load() -> Vec<Value> {
    let text = std::fs::read_to_string(crate_path(VECTORS)).expect("read vectors.json");
    serde_json::from_str(&text).expect("vectors.json is a JSON array")
}

#[test]
fn file_matches_its_generator() {
    let text = std::fs::read_to_string(crate_path(VECTORS)).expect("read vectors.json");
    assert_eq!(
        text,
        render(&vector_inputs()),
        "regenerate testdata/vectors.json"
    );
}

#[test]
fn every_vector_matches_the_rust_hash() {
    assert_eq!(HASH_VERSION, "shardline-hash-v1");
    let vectors = load();
    assert!(vectors.len() >= 200, "only {} vectors", vectors.len());
    assert!(vectors.iter().any(|v| v["input"] == ""));
    assert!(
        vectors
            .iter()
            .any(|v| v["input"].as_str().is_some_and(|s| !s.is_ascii()))
    );
    for v in &vectors {
        let input = v["input"].as_str().expect("input is a string");
        let hash: u64 = v["hash"]
            .as_str()
            .expect("hash is a decimal string")
            .parse()
            .expect("hash parses as u64");
        assert_eq!(stable_hash(input), hash, "hash of {input:?}");
        let shards = v["shards"].as_object().expect("shards is an object");
        assert_eq!(shards.len(), SHARD_COUNTS.len());
        for (n, expected) in shards {
            let n: NonZeroU32 = n.parse().expect("shard count");
            assert_eq!(
                u64::from(shard_index(input, n)),
                expected.as_u64().expect("shard is a number"),
                "shard of {input:?} for N = {n}"
            );
        }
    }
}

/// The section on the hash in docs/formats.md, up to the next heading.
fn hash_section() -> (String, String) {
    let formats = crate_path("../..").join(FORMATS);
    let text = std::fs::read_to_string(&formats).expect("docs/formats.md is readable");
    let start = text
        .find(SECTION_HEADING)
        .unwrap_or_else(|| panic!("{} lacks {SECTION_HEADING:?}", formats.display()));
    let rest = &text[start + SECTION_HEADING.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    (formats.display().to_string(), rest[..end].to_owned())
}

fn python_block(section: &str) -> String {
    let start = section.find("```python\n").expect("a ```python block") + "```python\n".len();
    let len = section[start..].find("```").expect("the block is closed");
    section[start..start + len].to_owned()
}

#[test]
fn documented_python_reproduces_every_vector() {
    let (source, section) = hash_section();
    assert_eq!(
        section.matches("```python").count(),
        1,
        "{source}: one python block"
    );
    let code = python_block(&section);
    let lines = code.lines().count();
    assert!(
        lines <= 15,
        "{source}: the python block has {lines} lines (max 15)"
    );

    let driver = r#"
import json, sys
out = []
for v in json.load(open(sys.argv[1], encoding="utf-8")):
    s = v["input"]
    out.append({"hash": str(shard_hash(s)), "shards": {n: shard_index(s, int(n)) for n in v["shards"]}})
print(json.dumps(out))
"#;
    let mut child = Command::new("python3")
        .arg("-")
        .arg(crate_path(VECTORS))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(format!("{code}\n{driver}").as_bytes())
        .expect("write the script");
    let output = child.wait_with_output().expect("python3 finishes");
    assert!(
        output.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got: Vec<Value> = serde_json::from_slice(&output.stdout).expect("python prints JSON");
    let vectors = load();
    assert_eq!(got.len(), vectors.len());
    for (g, v) in got.iter().zip(&vectors) {
        assert_eq!(g["hash"], v["hash"], "python hash of {}", v["input"]);
        assert_eq!(g["shards"], v["shards"], "python shards of {}", v["input"]);
    }
}
