//! `shardline blocks` on a stack with a sealer refuses to schedule a layout the sealer
//! cannot read (`sealer::layout`), unless told `--without-sealing`; a time-bucket
//! table switches as before. On the shard table's memory fake.

use std::num::NonZeroU32;

use sealer::layout::UnsealableLayout;
use sharding::block::BlockLayout;
use sharding::epoch::TableHistory;
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::config::{Vars, WriterSettings};
use store::directory::ShardDirectory;
use store::directory::layout::ScheduledLayout;
use store::memory::MemoryShards;

fn directory(layout: Layout) -> (ShardDirectory<MemoryShards>, MemoryShards) {
    let shards = MemoryShards::new();
    shards.put_layout(TableHistory::new(layout));
    let settings = WriterSettings::parse(&Vars(|name: &str| {
        (name == "SHARD_TABLE_NAME").then(|| "shards".to_owned())
    }))
    .expect("the defaults");
    (
        ShardDirectory::new(shards.clone(), settings.directory),
        shards,
    )
}

fn now() -> Timestamp {
    Timestamp::from_millis(1_782_086_400_000).expect("in range")
}

fn n(k: u32) -> NonZeroU32 {
    NonZeroU32::new(k).expect("k > 0")
}

/// Each layout the sealer cannot read is refused with the layout named, nothing
/// written; forced, it is scheduled.
#[tokio::test]
async fn blocks_on_a_layout_the_sealer_cannot_read_is_refused_unless_forced() {
    for layout in [
        Layout::unsharded(),
        Layout::random(n(4)),
        Layout::calculated("device_id", n(4)),
    ] {
        let (dir, shards) = directory(layout.clone());
        let blocks = Some(BlockLayout::default());
        let err = shardline::blocks::schedule(&dir, blocks, true, now())
            .await
            .expect_err("refused");
        let refused = err
            .downcast_ref::<UnsealableLayout>()
            .unwrap_or_else(|| panic!("not refused for its layout: {err:#}"));
        assert_eq!(
            refused.layout,
            layout.clone().with_blocks(BlockLayout::default())
        );
        assert!(format!("{err:#}").contains("--without-sealing"), "{err:#}");
        assert_eq!(
            shards.layout().expect("stored").epochs().len(),
            1,
            "{layout}"
        );

        let forced = shardline::blocks::schedule(&dir, blocks, false, now())
            .await
            .expect("scheduled");
        assert!(
            matches!(forced, ScheduledLayout::Scheduled(_)),
            "{forced:?}"
        );
        assert_eq!(
            shards.layout().expect("stored").epochs().len(),
            2,
            "{layout}"
        );
    }
}

/// A time-bucket table switches blocks on with a sealer, as before.
#[tokio::test]
async fn blocks_on_a_time_bucket_table_is_scheduled_with_a_sealer() {
    let (dir, shards) = directory(Layout::time_bucket(Bucket::Hour, n(8)));
    let scheduled = shardline::blocks::schedule(&dir, Some(BlockLayout::default()), true, now())
        .await
        .expect("scheduled");
    assert!(
        matches!(scheduled, ScheduledLayout::Scheduled(_)),
        "{scheduled:?}"
    );
    assert_eq!(shards.layout().expect("stored").epochs().len(), 2);
}
