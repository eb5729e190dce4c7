//! The operator's binary is for a deployed table: it links none of the local harness.

use std::process::Command;

/// Crates of the local harness, and what pulls them in.
const LOCAL_ONLY: [&str; 7] = [
    "stand-in",
    "capacity-proxy",
    "shardline-local",
    "plotters",
    "reqwest",
    "ingest",
    "query",
];

#[test]
fn the_operator_binary_links_nothing_of_the_local_harness() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--package",
            "shardline",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let linked: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| LOCAL_ONLY.contains(name))
        .collect();
    assert!(
        linked.is_empty(),
        "shardline links {linked:?}; the local harness belongs in shardline-local"
    );
    assert!(
        tree.lines()
            .any(|line| line.starts_with("aws-sdk-dynamodb ")),
        "cargo tree listed no aws-sdk-dynamodb, so this test reads nothing:\n{tree}"
    );
}
