//! `shardline slabs` end to end: the built binary against a private moto switches an
//! existing table's slabs on by a table-layout epoch after the margin, with the groups
//! asked for, once, and off again; bad settings are named.

use std::process::{Command, Output};

use anyhow::Result;
use sharding::epoch::TableHistory;
use store::ShardReader as _;

fn shardline(args: &[&str], env_file: &std::path::Path) -> Result<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_shardline"))
        .arg("slabs")
        .args(args)
        .arg("--env-file")
        .arg(env_file)
        .output()?)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn stored(shards: &store::dynamo::DynamoShards) -> Result<TableHistory> {
    Ok(shards.get_layout().await?.expect("a stored layout"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switches_slabs_by_an_epoch_after_the_margin_once() -> Result<()> {
    let stack = stand_in::TestStack::start().await?;
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("stack.env");
    stack.stack.write_env_with(&env_file, &[])?;
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let shards = store::dynamo::DynamoShards::new(&client, &stack.stack.shard_table_name);

    let out = shardline(&["on", "--groups", "16"], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("slabs on from "),
        "{}",
        text(&out.stdout)
    );
    let history = stored(&shards).await?;
    let epochs = history.epochs();
    assert_eq!(epochs.len(), 2, "{history:?}");
    assert_eq!(epochs[0].value.slabs, None);
    let slabs = epochs[1].value.slabs.expect("slabs in the new epoch");
    assert_eq!(slabs.groups.get(), 16);
    assert_eq!(slabs.window_minutes, sharding::slab::DEFAULT_WINDOW_MINUTES);
    assert_eq!(slabs.run_minutes, sharding::slab::DEFAULT_RUN_MINUTES);
    // The switch changes nothing else of the layout.
    assert_eq!(epochs[1].value.blocks, epochs[0].value.blocks);
    let now = store::clock::wall_clock()?;
    assert!(epochs[1].effective_from > now.saturating_add(std::time::Duration::from_secs(300)));

    let out = shardline(&["on", "--groups", "16"], &env_file)?;
    assert!(
        text(&out.stdout).contains("nothing scheduled"),
        "{}",
        text(&out.stdout)
    );
    let out = shardline(&["off"], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(stored(&shards).await?.latest().slabs, None);

    for bad in [
        &["on", "--window-minutes", "7"][..],
        &["on", "--groups", "0"],
        &["on", "--run-minutes", "7"],
    ] {
        let out = shardline(bad, &env_file)?;
        assert!(!out.status.success(), "{bad:?} was taken");
        let said = text(&out.stderr);
        assert!(
            said.contains("window_minutes")
                || said.contains("--groups")
                || said.contains("run_minutes"),
            "{said}"
        );
    }
    Ok(())
}
