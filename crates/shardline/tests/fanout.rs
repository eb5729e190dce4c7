//! `shardline fanout` end to end: the built binary against a private moto, scheduling a
//! known-hot device's fan-out through the shard table the ingest reads.

use std::process::{Command, Output};

use anyhow::{Context as _, Result};
use sharding::epoch::FanoutHistory;
use stand_in::TestStack;

fn shardline(args: &[&str], env_file: Option<&std::path::Path>) -> Result<Output> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardline"));
    command.arg("fanout").args(args);
    if let Some(path) = env_file {
        command.arg("--env-file").arg(path);
    }
    Ok(command.output()?)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The device's `shard_history` in the shard table, through the store's reader.
async fn history(stack: &TestStack, device: &str) -> Result<FanoutHistory> {
    use store::ShardReader as _;
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let shards = store::dynamo::DynamoShards::new(&client, &stack.stack.shard_table_name);
    let meta = shards
        .get_entity(device)
        .await?
        .context("no metadata item")?;
    Ok(meta.shard_history)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_once_refuses_over_the_maximum_and_names_bad_input() -> Result<()> {
    let stack = TestStack::start().await?;
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("stack.env");
    stack
        .stack
        .write_env_with(&env_file, &[("FANOUT_MAX".into(), "16".into())])?;

    let out = shardline(
        &["--device", "sensor-alpha-001", "--k", "4"],
        Some(&env_file),
    )?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("sensor-alpha-001: fan-out 1 -> 4 from "),
        "{said}"
    );
    let epochs = history(&stack, "sensor-alpha-001").await?;
    let ks: Vec<u32> = epochs.epochs().iter().map(|e| e.value).collect();
    assert_eq!(ks, [4]);

    // Again, and for less: nothing changes.
    for k in ["4", "2"] {
        let out = shardline(&["--device", "sensor-alpha-001", "--k", k], Some(&env_file))?;
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout).trim(),
            "sensor-alpha-001: fan-out already 4, nothing scheduled"
        );
    }
    assert_eq!(history(&stack, "sensor-alpha-001").await?, epochs);

    // Over FANOUT_MAX, a bad id, k = 0: refused with the reason, nothing written.
    for (device, k, reason) in [
        (
            "sensor-alpha-001",
            "32",
            "over the largest allowed, 16 (FANOUT_MAX)",
        ),
        ("bad#id", "4", "bad --device \"bad#id\""),
        ("sensor-beta", "0", "--k must be at least 1"),
    ] {
        let out = shardline(&["--device", device, "--k", k], Some(&env_file))?;
        assert!(!out.status.success(), "{device} --k {k} was accepted");
        assert!(
            text(&out.stderr).contains(reason),
            "{device} --k {k}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(history(&stack, "sensor-alpha-001").await?, epochs);
    Ok(())
}
