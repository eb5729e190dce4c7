//! `shardline blocks` end to end: the built binary against a private moto switches an
//! existing table's blocks on by a table-layout epoch after the margin, once, and off
//! again after it; a bad switch is named.

use std::process::{Command, Output};

use anyhow::Result;
use sharding::epoch::TableHistory;
use sharding::layout::Layout;
use stand_in::TestStack;
use store::ShardReader as _;
use store::Written;

fn shardline(args: &[&str], env_file: &std::path::Path) -> Result<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_shardline"))
        .arg("blocks")
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
async fn switches_blocks_by_an_epoch_after_the_margin_once() -> Result<()> {
    let stack = TestStack::start().await?;
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("stack.env");
    // A table made before blocks: its stored layout packs none.
    stack
        .stack
        .write_env_with(&env_file, &[("BLOCKS".into(), "off".into())])?;
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let shards = store::dynamo::DynamoShards::new(&client, &stack.stack.shard_table_name);
    let plain = Layout::time_bucket(
        sharding::time::Bucket::Hour,
        std::num::NonZeroU32::new(8).expect("8 > 0"),
    );
    {
        use store::ShardStore as _;
        assert_eq!(
            shards
                .create_layout(&TableHistory::new(plain.clone()))
                .await?,
            Written::Applied
        );
    }

    let out = shardline(&["on"], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("blocks on from "), "{said}");
    let history = stored(&shards).await?;
    let epochs = history.epochs();
    assert_eq!(epochs.len(), 2, "{history:?}");
    assert_eq!(epochs[0].value, plain);
    assert_eq!(
        epochs[1].value.blocks.map(|b| b.window_ms),
        Some(60_000),
        "{history:?}"
    );
    // In force after the margin (SHARD_CACHE_TTL_SECS + MAX_FUTURE_SECS + slack: 365 s).
    let now = store::clock::wall_clock()?;
    assert!(epochs[1].effective_from > now.saturating_add(std::time::Duration::from_secs(300)));

    // Again: nothing more.
    let out = shardline(&["on"], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("nothing scheduled"));
    assert_eq!(stored(&shards).await?.epochs().len(), 2);

    // Off again: a third epoch, after the second.
    let out = shardline(&["off"], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let history = stored(&shards).await?;
    assert_eq!(history.epochs().len(), 3);
    assert_eq!(history.latest(), &plain);
    assert!(history.epochs()[2].effective_from > history.epochs()[1].effective_from);

    // A bad switch or window is named.
    let out = shardline(&["maybe"], &env_file)?;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("maybe"), "{}", text(&out.stderr));
    let out = shardline(&["on", "--window-secs", "7200"], &env_file)?;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("window"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}
