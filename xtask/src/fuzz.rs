//! `cargo xtask fuzz --seconds N`: installs cargo-fuzz if missing, seeds each target's
//! corpus from `events/` (SQS bodies, API query strings, cursors the API could hand
//! out), and runs every target for N seconds. The fuzz package is its own workspace.
//!
//! cargo-fuzz passes nightly-only flags (`-Zsanitizer=address`, ...) to rustc; on the
//! stable toolchain `RUSTC_BOOTSTRAP=1` lets it accept them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::steps::cargo;

/// The targets of `fuzz/`.
pub const TARGETS: [&str; 4] = [
    "message_parser",
    "cursor_decoder",
    "query_params",
    "block_decoder",
];

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Only this target.
    #[arg(long)]
    pub target: Option<String>,
}

pub fn run(root: &Path, args: &FuzzArgs) -> Result<()> {
    ensure_cargo_fuzz()?;
    let fuzz_dir = root.join("fuzz");
    seed_corpus(root, &fuzz_dir)?;
    let targets: Vec<&str> = match &args.target {
        Some(t) if TARGETS.contains(&t.as_str()) => vec![t.as_str()],
        Some(t) => bail!("no fuzz target {t}; targets: {}", TARGETS.join(", ")),
        None => TARGETS.to_vec(),
    };
    for target in targets {
        eprintln!("==> fuzz {target}: {} s", args.seconds);
        let status = Command::new(cargo())
            .current_dir(root)
            .env("RUSTC_BOOTSTRAP", "1")
            .args(["fuzz", "run", "--fuzz-dir"])
            .arg(&fuzz_dir)
            .arg(target)
            .arg(fuzz_dir.join("corpus").join(target))
            .arg("--")
            .arg(format!("-max_total_time={}", args.seconds))
            // A hang is a failure too: no single input may take a second.
            .arg("-timeout=1")
            .arg("-print_final_stats=1")
            .status()
            .context("running cargo fuzz")?;
        if !status.success() {
            bail!(
                "fuzz target {target} failed ({status}); the input is under {}",
                fuzz_dir.join("artifacts").join(target).display()
            );
        }
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> Result<()> {
    let found = Command::new(cargo())
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Ok(());
    }
    eprintln!("==> install cargo-fuzz");
    let status = Command::new(cargo())
        .args(["install", "cargo-fuzz", "--locked"])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz --locked failed ({status})");
    }
    Ok(())
}

/// Writes the seed inputs (overwriting earlier seeds, keeping what the fuzzer found).
fn seed_corpus(root: &Path, fuzz_dir: &Path) -> Result<()> {
    let corpus = fuzz_dir.join("corpus");
    let mut bodies = Vec::new();
    let mut queries = Vec::new();
    for entry in std::fs::read_dir(root.join("events")).context("reading events/")? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let event: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        if let Some(records) = event["Records"].as_array() {
            bodies.extend(
                records
                    .iter()
                    .filter_map(|r| r["body"].as_str().map(str::to_owned)),
            );
        }
        if let Some(path) = event["rawPath"].as_str().or(event["path"].as_str()) {
            let query = event["rawQueryString"].as_str().unwrap_or_default();
            queries.push(format!("{path}\n{query}"));
            queries.push(query.to_owned());
        }
    }
    if bodies.is_empty() || queries.is_empty() {
        bail!("events/ holds no SQS bodies or no API query strings");
    }
    write_seeds(&corpus.join("message_parser"), &bodies)?;
    write_seeds(&corpus.join("query_params"), &queries)?;
    // Cursor inputs: mode byte, then a raw cursor, a body to seal, or "ts\ndevice\nevent".
    let cursors = vec![
        "\u{0}eyJ2IjoxfQ.AAAA".to_owned(),
        // Bodies the target seals: one of today's version naming its key, one of version 2.
        "\u{1}{\"v\":3,\"k\":\"e9a736c1373e2292\",\"t\":1782050000000,\"pos\":{\"ts_ms\":1782000000001,\"device_id\":\"dev-1\",\"event_id\":\"e\"}}".to_owned(),
        "\u{1}{\"v\":2,\"k\":\"e9a736c1373e2292\",\"t\":1782050000000,\"fp\":\"x\",\"pos\":{\"ts_ms\":1782000000001,\"device_id\":\"dev-1\",\"event_id\":\"e\"}}".to_owned(),
        "\u{2}1782000000001\ndev-1\nevt-1".to_owned(),
        "\u{2}1782100000000\ndev-2\nevt-1".to_owned(),
    ];
    write_seeds(&corpus.join("cursor_decoder"), &cursors)?;
    // Block inputs: stored blocks, slabs and runs as JSON (the encoders' own shape).
    let blocks = vec![
        r#"{"PK":"3#2026-06-22T00","SK":"dev-1#b#2026-06-22T00:00:00.000Z#e1#0011223344556677","device_id":"dev-1","event_id":"e1","ts":"2026-06-22T00:00:00.000Z","ts_ms":1782086400000,"block":1,"n":2,"dt":[0,1000],"ids":["e1","e2"],"m":{"t":[21.5,null]},"tg":{"site":[null,"a"]},"ttl":1784678400}"#.to_owned(),
        r#"{"PK":"p","SK":"s","device_id":"d","event_id":"e","ts":"x","ts_ms":-1,"block":1,"n":1,"dt":[0],"ids":["e"],"m":{},"ttl":0}"#.to_owned(),
        r#"{"PK":"p","SK":"s","device_id":"d","event_id":"e-01","ts":"x","ts_ms":1,"block":1,"n":2,"dt":[0,5],"idp":"e-0","ids":["1","2"],"m":{"t":[1,2]},"ttl":0}"#.to_owned(),
        r#"{"PK":"p","SK":"s","device_id":"d","event_id":"e-01","ts":"x","ts_ms":1,"block":1,"n":2,"dt":[0,5],"idp":"e-0","ids":["1","2"],"m":{"t":["n:+021.50e-3",null]},"ttl":0}"#.to_owned(),
        // Slabs and runs: the documented vector, one with a sparse column, one of one member.
        r#"{"PK":"s#3#2026-06-22T01:00","SK":"39a43519f78fd1f3","slab":1,"n":3,"devs":["sensor-7","thermo-3"],"dn":[2,1],"t0":1782090000000,"dt":[0,1000,500],"idp":"e-000","ids":["1","2","1"],"m":{"humidity":[40,null,41],"temperature":[21.5,21.75,null]},"tg":{"site":["lab",null,null]},"ttl":1782262860,"w":1782090003000,"dw":[0,1250,0]}"#.to_owned(),
        r#"{"PK":"r#0#2026-06-22T01","SK":"a#2026-06-22T01:00#0000","slab":1,"n":4,"devs":["a","b","c","d"],"dn":[1,1,1,1],"t0":5,"dt":[0,1,2,3],"ids":["e","e","e","e"],"m":{"t":[1,2,3,4],"x":["n:1e-130"]},"mi":{"x":[2]},"ttl":0}"#.to_owned(),
        r#"{"PK":"p","SK":"s","slab":1,"n":1,"devs":["d"],"dn":[1],"t0":-1,"dt":[0],"ids":["e"],"m":{},"ttl":0}"#.to_owned(),
    ];
    write_seeds(&corpus.join("block_decoder"), &blocks)?;
    Ok(())
}

fn write_seeds(dir: &PathBuf, seeds: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:03}")), seed)?;
    }
    Ok(())
}
