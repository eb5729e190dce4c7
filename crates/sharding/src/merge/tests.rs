//! Tests of the merge: which pages it asks for, and what it emits.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(i64, u32);

impl TimedKey for Key {
    fn ts_ms(&self) -> i64 {
        self.0
    }
}

/// An item's number is its write order: of two copies, the greater is kept.
impl crate::written::Written for i64 {
    fn written_cmp(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

impl crate::written::Written for u32 {
    fn written_cmp(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

fn shape(span: (i64, i64), arrival: Arrival) -> StreamShape {
    StreamShape { span, arrival }
}

#[test]
fn consecutive_buckets_are_opened_one_after_another() {
    let shapes = vec![
        shape((0, 100), Arrival::InOrder),
        shape((100, 200), Arrival::InOrder),
    ];
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, Order::Ascending, 3, None);
    let Step::Read(asks) = merge.step(8) else {
        panic!("reads first")
    };
    assert_eq!(
        asks,
        [PageAsk {
            stream: 0,
            limit: Some(4),
            span: (0, 100),
        }]
    );
    merge.deliver(0, (0..4).map(|t| (Key(t, 0), t)), Some(3), false);
    assert_eq!(
        merge.step(8),
        Step::Done {
            items: vec![0, 1, 2],
            more: true
        }
    );
}

#[test]
fn overlapping_streams_share_the_need_plus_a_quarter() {
    let shapes = vec![shape((0, 100), Arrival::InOrder); 8];
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, Order::Ascending, 99, None);
    let Step::Read(asks) = merge.step(32) else {
        panic!("reads first")
    };
    assert_eq!(asks.len(), 8);
    // need 100, competing 8: ceil(125 / 8) = 16 each.
    assert!(asks.iter().all(|a| a.limit == Some(16)), "{asks:?}");
}

/// Reads `streams` (each in time order) through a merge of `limit`; returns the
/// items, the rounds and the items read.
fn drive(
    streams: &[Vec<Key>],
    span: (i64, i64),
    arrival: Arrival,
    limit: usize,
) -> (Vec<i64>, usize, usize) {
    let (items, rounds, read, _) = drive_hinted(streams, span, arrival, limit, None);
    (items, rounds, read)
}

/// [`drive`] with a density hint; also returns the density the read saw.
fn drive_hinted(
    streams: &[Vec<Key>],
    span: (i64, i64),
    arrival: Arrival,
    limit: usize,
    hint: Option<f64>,
) -> (Vec<i64>, usize, usize, Option<f64>) {
    let shapes = vec![shape(span, arrival); streams.len()];
    let mut merge: BoundedMerge<Key, i64> =
        BoundedMerge::new(shapes, Order::Ascending, limit, None).with_density_hint(hint);
    let mut positions = vec![0usize; streams.len()];
    let (mut rounds, mut read) = (0, 0);
    loop {
        match merge.step(64) {
            Step::Done { items, .. } => {
                return (items, rounds, read, merge.observed_density());
            }
            Step::Read(asks) => {
                rounds += 1;
                for ask in asks {
                    let (page, n) = page_of(&streams[ask.stream], &mut positions[ask.stream], ask);
                    read += n;
                    let last_ts = page.last().map(|(k, _)| k.0);
                    let last = ask.limit.is_none_or(|l| n < l as usize);
                    merge.deliver(ask.stream, page, last_ts, last);
                }
            }
        }
    }
}

/// The page `ask` reads of `keys` (ascending) from `position`, the way DynamoDB
/// answers a Query whose key condition is the ask's span: at most `limit` items,
/// with a next page whenever it stopped at the limit. Returns the page and its size.
fn page_of(keys: &[Key], position: &mut usize, ask: PageAsk) -> (Vec<(Key, i64)>, usize) {
    let start = *position;
    let stop = keys
        .iter()
        .position(|k| k.0 >= ask.span.1)
        .unwrap_or(keys.len())
        .max(start);
    let end = ask.limit.map_or(stop, |l| (start + l as usize).min(stop));
    *position = end;
    let page = keys[start..end].iter().map(|k| (k.clone(), k.0)).collect();
    (page, end - start)
}

/// Every device over one hour: 32 time-indexed shards of about one item a minute
/// each; `at(shard, i)` is the `i`-th item's gap after the one before, in ms.
fn hour_of_shards(mut gap: impl FnMut(u32, i64) -> i64) -> Vec<Vec<Key>> {
    (0..32u32)
        .map(|s| {
            let (mut ts, mut i, mut keys) = (gap(s, 0), 0, Vec::new());
            while ts < 3_600_000 {
                keys.push(Key(ts, s));
                i += 1;
                ts += gap(s, i).max(1);
            }
            keys
        })
        .collect()
}

#[test]
fn refills_reach_the_horizon_in_few_rounds() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let cases = [
        // A minute apart, each shard at its own second (devices on a fixed
        // schedule) ...
        (
            "regular",
            hour_of_shards(|s, i| if i == 0 { i64::from(s) * 1_873 } else { 60_000 }),
            6,
        ),
        // ... and exponential gaps of a minute on average (a Poisson stream).
        (
            "poisson",
            hour_of_shards(|_, _| (-(1.0 - uniform()).ln() * 60_000.0) as i64),
            16,
        ),
    ];
    for (name, streams, before) in cases {
        let (items, rounds, read) = drive(&streams, (0, 3_600_000), Arrival::TimeIndexed, 100);
        let mut all: Vec<i64> = streams.iter().flatten().map(|k| k.0).collect();
        all.sort_unstable();
        assert_eq!(items, all[..100], "{name}");
        // Shares alone (ceil(1.25 x need / 32) items a page) took `before` rounds
        // and read 133 and 154 items.
        assert!(
            rounds <= 4,
            "{name}: {rounds} rounds (shares alone: {before})"
        );
        assert!(read <= 160, "{name}: {read} items read for 100");
    }
}

/// 64 devices hashed over 32 time-indexed shards (1 to 5 devices a shard, 2 with
/// none), each writing every 2 minutes for an hour at `phase(device)` into the
/// period.
fn fleet_hour(phase: impl Fn(u32) -> i64) -> Vec<Vec<Key>> {
    let n = std::num::NonZeroU32::new(32).expect("32 is not zero");
    let mut streams: Vec<Vec<Key>> = vec![Vec::new(); 32];
    for d in 0..64u32 {
        let shard = crate::hash::shard_index(&format!("dev-{d:05}"), n) as usize;
        for i in 0..30 {
            streams[shard].push(Key(i * 120_000 + phase(d), d));
        }
    }
    for keys in &mut streams {
        keys.sort();
    }
    streams
}

#[test]
fn a_fleet_read_takes_two_rounds() {
    let cases = [
        // Every device in the same 64 ms of each period (a fleet on one clock):
        // bursts, which a density averaged over time does not foresee ...
        ("in step", fleet_hour(i64::from)),
        // ... and each device at its own phase.
        (
            "own phases",
            fleet_hour(|d| (crate::hash::stable_hash(&format!("phase-{d}")) % 120_000) as i64),
        ),
    ];
    for (name, streams) in cases {
        let (items, rounds, read) = drive(&streams, (0, 3_600_000), Arrival::TimeIndexed, 100);
        let mut all: Vec<i64> = streams.iter().flatten().map(|k| k.0).collect();
        all.sort_unstable();
        assert_eq!(items, all[..100], "{name}");
        // One round to learn the densities, one to read every shard up to where
        // the answer is expected to end; before pages ended there, "in step" took
        // 5 rounds and read 157 items.
        assert_eq!(rounds, 2, "{name}");
        assert!(read <= 160, "{name}: {read} items read for 100");
    }
}

#[test]
fn a_fleet_read_planned_by_an_earlier_reads_density_takes_one_round() {
    let cases = [
        ("in step", fleet_hour(i64::from)),
        (
            "own phases",
            fleet_hour(|d| (crate::hash::stable_hash(&format!("phase-{d}")) % 120_000) as i64),
        ),
    ];
    for (name, streams) in cases {
        let mut all: Vec<i64> = streams.iter().flatten().map(|k| k.0).collect();
        all.sort_unstable();
        let span = (0, 3_600_000);
        let (_, _, _, seen) = drive_hinted(&streams, span, Arrival::TimeIndexed, 100, None);
        assert!(seen.is_some(), "{name}: the first read shows a density");
        let (items, rounds, read, _) =
            drive_hinted(&streams, span, Arrival::TimeIndexed, 100, seen);
        assert_eq!(items, all[..100], "{name}");
        assert_eq!(rounds, 1, "{name}");
        assert!(read <= 130, "{name}: {read} items read for 100");
        // A hint a hundred times off either way still gives the answer. Too high,
        // it costs rounds: pages end early, and a burst read over a few
        // milliseconds shows a density far above the average.
        for factor in [0.01, 100.0] {
            let hint = seen.map(|d| d * factor);
            let (items, _, _, _) = drive_hinted(&streams, span, Arrival::TimeIndexed, 100, hint);
            assert_eq!(items, all[..100], "{name} x {factor}");
        }
    }
}

#[test]
fn an_unordered_stream_is_read_whole_then_sorted() {
    let shapes = vec![shape((0, 100), Arrival::Unordered)];
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, Order::Descending, 10, None);
    let Step::Read(asks) = merge.step(4) else {
        panic!("reads first")
    };
    assert_eq!(asks[0].limit, None);
    merge.deliver(0, [(Key(5, 0), 5), (Key(50, 0), 50)], None, false);
    let Step::Read(again) = merge.step(4) else {
        panic!("the rest of the stream first")
    };
    assert_eq!(again[0].stream, 0);
    merge.deliver(0, [(Key(7, 0), 7), (Key(500, 0), 500)], None, true);
    assert_eq!(
        merge.step(4),
        Step::Done {
            items: vec![50, 7, 5],
            more: false
        }
    );
}

#[test]
fn ties_at_a_time_indexed_pages_end_wait_for_the_next_page() {
    let shapes = vec![
        shape((0, 100), Arrival::TimeIndexed),
        shape((0, 100), Arrival::InOrder),
    ];
    let mut merge: BoundedMerge<Key, u32> = BoundedMerge::new(shapes, Order::Ascending, 10, None);
    let Step::Read(_) = merge.step(4) else {
        panic!("reads first")
    };
    // The index page ends at ts 5 with (5, 9); its tie (5, 1) is on the next page.
    merge.deliver(0, [(Key(1, 0), 10), (Key(5, 9), 59)], Some(5), false);
    merge.deliver(1, [(Key(9, 0), 90)], Some(9), true);
    let Step::Read(asks) = merge.step(4) else {
        panic!("the tie at 5 may still come")
    };
    assert_eq!(asks.iter().map(|a| a.stream).collect::<Vec<_>>(), [0]);
    merge.deliver(0, [(Key(5, 1), 51)], Some(5), true);
    assert_eq!(
        merge.step(4),
        Step::Done {
            items: vec![10, 51, 59, 90],
            more: false
        }
    );
}

/// Delivers each stream whole on its first ask; returns every item emitted.
fn drive_whole(merge: &mut BoundedMerge<Key, i64>, streams: &[Vec<Key>]) -> (Vec<i64>, bool) {
    let mut out = Vec::new();
    loop {
        match merge.step(8) {
            Step::Done { items, more } => {
                out.extend(items);
                return (out, more);
            }
            Step::Read(asks) => {
                out.extend(merge.take_emitted());
                for ask in asks {
                    let page = streams[ask.stream].iter().map(|k| (k.clone(), k.0));
                    merge.deliver(ask.stream, page, None, true);
                }
            }
        }
    }
}

#[test]
fn a_key_in_two_streams_is_emitted_once() {
    for order in [Order::Ascending, Order::Descending] {
        let keys = |ts: &[i64]| {
            let mut v: Vec<Key> = ts.iter().map(|&t| Key(t, 0)).collect();
            v.sort_by(|a, b| order.cmp(a, b));
            v
        };
        let streams = [keys(&[1, 3, 5]), keys(&[3, 4, 5]), keys(&[5])];
        let shapes = vec![shape((0, 10), Arrival::InOrder); 3];
        let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, order, 10, None);
        let (items, more) = drive_whole(&mut merge, &streams);
        let mut expected = vec![1, 3, 4, 5];
        if order == Order::Descending {
            expected.reverse();
        }
        assert_eq!((items, more), (expected, false), "{order:?}");
        assert_eq!(merge.duplicates(), 3);
    }
}

#[test]
fn a_copy_of_the_last_item_is_not_a_next_page() {
    let streams = [vec![Key(1, 0), Key(2, 0)], vec![Key(2, 0)]];
    let shapes = vec![shape((0, 10), Arrival::InOrder); 2];
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, Order::Ascending, 2, None);
    assert_eq!(drive_whole(&mut merge, &streams), (vec![1, 2], false));
}

#[test]
fn a_windowed_merge_emits_everything_in_pages_of_about_the_window() {
    // Eight overlapping streams of 50 items each, every tenth also in the next one.
    let mut streams: Vec<Vec<Key>> = (0..8u32)
        .map(|s| (0..50).map(|i| Key(i * 8 + i64::from(s), 0)).collect())
        .collect();
    let copies: Vec<Vec<Key>> = streams
        .iter()
        .map(|keys| keys.iter().step_by(10).cloned().collect())
        .collect();
    for (s, copies) in copies.into_iter().enumerate() {
        let next = &mut streams[(s + 1) % 8];
        next.extend(copies);
        next.sort();
    }
    let shapes = vec![shape((0, 400), Arrival::InOrder); 8];
    let mut merge: BoundedMerge<Key, i64> =
        BoundedMerge::windowed(shapes, Order::Ascending, 16, None);
    let mut positions = [0usize; 8];
    let mut out = Vec::new();
    loop {
        match merge.step(8) {
            Step::Done { items, more } => {
                assert!(!more);
                out.extend(items);
                break;
            }
            Step::Read(asks) => {
                out.extend(merge.take_emitted());
                for ask in asks {
                    let limit = ask.limit.expect("ordered streams get a Limit");
                    assert!(limit <= 16, "{ask:?}");
                    let keys = &streams[ask.stream];
                    let start = positions[ask.stream];
                    let end = (start + limit as usize).min(keys.len());
                    positions[ask.stream] = end;
                    let page = keys[start..end].iter().map(|k| (k.clone(), k.0));
                    merge.deliver(ask.stream, page, None, end == keys.len());
                }
                assert!(merge.buffered() <= 8 * 16, "{}", merge.buffered());
            }
        }
    }
    assert_eq!(out, (0..400).collect::<Vec<i64>>());
    assert_eq!(merge.duplicates(), 40);
}

#[test]
fn delivery_drops_what_is_outside_the_span_or_not_after_the_resume_key() {
    let shapes = vec![shape((10, 20), Arrival::InOrder)];
    let mut merge: BoundedMerge<Key, i64> =
        BoundedMerge::new(shapes, Order::Ascending, 10, Some(Key(12, 0)));
    let _ = merge.step(1);
    merge.deliver(
        0,
        [5, 11, 12, 13, 19, 20].map(|t| (Key(t, 0), t)),
        Some(20),
        true,
    );
    assert_eq!(merge.buffered(), 2);
    assert_eq!(
        merge.step(1),
        Step::Done {
            items: vec![13, 19],
            more: false
        }
    );
}

/// Feeds one block stream of `span` and window `window_ms` its `pages`, each (its
/// readings' timestamps, the first-member timestamp of its last item, whether it is the
/// last page), and checks what the merge emits after each: `emitted[i]` after page `i`.
/// The merge must ask for each page, and be done after the last one given.
fn check_blocks(
    order: Order,
    span: (i64, i64),
    window_ms: i64,
    pages: &[(&[i64], i64, bool)],
    emitted: &[&[i64]],
) {
    let shapes = vec![shape(span, Arrival::Blocks { window_ms })];
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, order, 100, None);
    let mut seen = Vec::new();
    for (&(page, last_ts, last_page), i) in pages.iter().zip(0..) {
        let Step::Read(asks) = merge.step(4) else {
            panic!("page {i} is asked for")
        };
        assert_eq!(asks.iter().map(|a| a.stream).collect::<Vec<_>>(), [0]);
        merge.deliver(
            0,
            page.iter().map(|&t| (Key(t, 0), t)),
            Some(last_ts),
            last_page,
        );
        let items = match merge.step(4) {
            Step::Read(_) => merge.take_emitted(),
            Step::Done { items, more } => {
                assert!(!more);
                assert_eq!(i + 1, pages.len(), "done after page {i}");
                items
            }
        };
        seen.push(items);
    }
    assert_eq!(seen, emitted, "{order:?}");
}

#[test]
fn a_block_straddling_two_pages_waits_for_the_next_page() {
    // W = 10. The first page ends with a block starting at 5; one starting at 7, whose
    // readings come between the first block's, is on the next page.
    check_blocks(
        Order::Ascending,
        (0, 100),
        10,
        &[
            (&[1, 12, 5, 8], 5, false),
            (&[9, 7], 7, false),
            (&[20], 20, true),
        ],
        &[&[1], &[5], &[7, 8, 9, 12, 20]],
    );
    // Descending, the first page's last block starts at 30, so an unread block starts
    // at 30 at the latest and can hold readings up to 39; after the next, up to 38.
    check_blocks(
        Order::Descending,
        (0, 100),
        10,
        &[
            (&[52, 41, 38, 30], 30, false),
            (&[33, 39], 29, false),
            (&[3], 3, true),
        ],
        &[&[52, 41], &[39], &[38, 33, 30, 3]],
    );
}

#[test]
fn a_block_starting_before_the_span_gives_the_members_inside_it() {
    // Span [100, 200), W = 10: the caller reads back from 90. The block at 95 holds
    // 95, 98 (dropped) and 103, 104.
    check_blocks(
        Order::Ascending,
        (100, 200),
        10,
        &[
            (&[95, 98, 103, 104, 101], 101, false),
            (&[102, 110], 102, true),
        ],
        &[&[], &[101, 102, 103, 104, 110]],
    );
    // Descending, the caller reads down to 90. After the block at 150, one up to 159
    // may follow; after the one at 98 (its 98 dropped), up to 107; after 97, up to
    // 106; one at 89 cannot reach the span, so the stream is done there without a
    // last page.
    check_blocks(
        Order::Descending,
        (100, 200),
        10,
        &[
            (&[150, 155, 201], 150, false),
            (&[98, 101, 107], 98, false),
            (&[97], 97, false),
            (&[89, 95], 89, false),
        ],
        &[&[], &[155, 150], &[107], &[101]],
    );
}

#[test]
fn a_reading_in_two_items_of_one_block_stream_is_emitted_once() {
    // 8 is in the block at 5 and stored alone at 8 (rebuilt after a crash); 12 is in
    // two overlapping blocks, on two pages.
    check_blocks(
        Order::Ascending,
        (0, 100),
        10,
        &[(&[5, 8, 12], 5, false), (&[8, 8, 12, 14], 8, true)],
        &[&[], &[5, 8, 12, 14]],
    );
    let shapes = vec![shape((0, 100), Arrival::Blocks { window_ms: 10 })];
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, Order::Ascending, 2, None);
    let _ = merge.step(1);
    merge.deliver(0, [5, 8, 8, 12].map(|t| (Key(t, 0), t)), Some(8), false);
    let _ = merge.step(1);
    merge.deliver(0, [8, 12].map(|t| (Key(t, 0), t)), Some(8), true);
    // Copies count neither toward the limit nor as more.
    assert_eq!(
        merge.step(1),
        Step::Done {
            items: vec![5, 8],
            more: true
        }
    );
}

#[test]
fn a_stream_the_horizon_clipped_away_is_never_read_ahead() {
    // Descending, limit 1: the newest bucket's two lanes (its readings' own items, none
    // here, and its blocks, W = 10) and eight older buckets. The first page of blocks
    // holds back a block of 190..=199 (a block starting up to 199 could still be
    // unread), but its readings already set the horizon at 198: every older bucket is
    // clipped away, and the next round reads the blocks' next page alone, though the
    // density the first round showed is below the need.
    let mut shapes = vec![
        shape((100, 200), Arrival::InOrder),
        shape((100, 200), Arrival::Blocks { window_ms: 10 }),
    ];
    shapes.extend((0..8).map(|i| shape((i * 10, i * 10 + 10), Arrival::InOrder)));
    let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, Order::Descending, 1, None);
    let Step::Read(asks) = merge.step(32) else {
        panic!("reads first")
    };
    assert_eq!(asks.iter().map(|a| a.stream).collect::<Vec<_>>(), [0, 1]);
    merge.deliver(0, [], None, true);
    merge.deliver(1, (190..200).map(|t| (Key(t, 0), t)), Some(190), false);
    let Step::Read(asks) = merge.step(32) else {
        panic!("the held-back block waits for the next page")
    };
    assert_eq!(asks.iter().map(|a| a.stream).collect::<Vec<_>>(), [1]);
    merge.deliver(1, (150..160).map(|t| (Key(t, 0), t)), Some(150), false);
    assert_eq!(
        merge.step(32),
        Step::Done {
            items: vec![199],
            more: true
        }
    );
}
