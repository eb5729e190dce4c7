//! Property 4 and the incremental merger.

use proptest::prelude::*;
use sharding::merge::{Merger, Next};
use sharding::{Order, Position, merge};

/// Unique keys split over 1..6 streams, each stream sorted in `order`.
fn split(keys: &[u32], owners: &[usize], streams: usize, order: Order) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); streams];
    for (k, o) in keys.iter().zip(owners) {
        out[o % streams].push(*k);
    }
    for s in &mut out {
        s.sort_unstable();
        if order == Order::Descending {
            s.reverse();
        }
    }
    out
}

fn sorted(mut keys: Vec<u32>, order: Order) -> Vec<u32> {
    keys.sort_unstable();
    if order == Order::Descending {
        keys.reverse();
    }
    keys
}

fn order() -> impl Strategy<Value = Order> {
    prop_oneof![Just(Order::Ascending), Just(Order::Descending)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Property 4: merge equals sorting the union; paging by position equals one call
    /// without a limit; the incremental merger fed page by page agrees.
    #[test]
    fn merge_is_sorted_union_and_pages_resume_exactly(
        keys in prop::collection::btree_set(any::<u32>(), 0..200),
        owners in prop::collection::vec(0usize..6, 200),
        streams in 1usize..6,
        order in order(),
        limit in 1usize..20,
        page in 1usize..7,
    ) {
        let keys: Vec<u32> = keys.into_iter().collect();
        let parts = split(&keys, &owners, streams, order);
        let expected = sorted(keys.clone(), order);

        let whole = merge(parts.clone(), |k: &u32| *k, order, None, None).expect("sorted streams");
        prop_assert_eq!(&whole.items, &expected);
        prop_assert!(whole.next.is_none());

        let mut paged = Vec::new();
        let mut after: Option<Position<u32>> = None;
        loop {
            let m = merge(parts.clone(), |k: &u32| *k, order, Some(limit), after.clone()).expect("sorted");
            prop_assert!(m.items.len() <= limit);
            paged.extend(m.items);
            match m.next {
                Some(p) => {
                    // A position survives a round trip through JSON (it travels in cursors).
                    let json = serde_json::to_string(&p).expect("encode");
                    after = Some(serde_json::from_str(&json).expect("decode"));
                }
                None => break,
            }
        }
        prop_assert_eq!(&paged, &expected);

        // Incremental: feed each stream `page` items at a time, only when asked.
        let mut merger = Merger::new(streams, |k: &u32| *k, order, None);
        let mut cursors = vec![0usize; streams];
        let mut incremental = Vec::new();
        loop {
            match merger.pop() {
                Next::Item(k) => incremental.push(k),
                Next::Done => break,
                Next::NeedMore(wanted) => {
                    prop_assert!(!wanted.is_empty());
                    for i in wanted {
                        let start = cursors[i];
                        let end = (start + page).min(parts[i].len());
                        merger.push(i, parts[i][start..end].iter().copied()).expect("sorted page");
                        cursors[i] = end;
                        if end == parts[i].len() {
                            merger.mark_exhausted(i).expect("stream exists");
                        }
                    }
                }
            }
        }
        prop_assert_eq!(incremental, expected);
    }
}

#[test]
fn merger_waits_for_every_open_stream() {
    let mut m = Merger::new(2, |k: &u32| *k, Order::Ascending, None);
    assert_eq!(m.pop(), Next::NeedMore(vec![0, 1]));
    m.push(0, [1, 5]).expect("sorted");
    assert_eq!(m.pop(), Next::NeedMore(vec![1]));
    m.push(1, [3]).expect("sorted");
    assert_eq!(m.pop(), Next::Item(1));
    assert_eq!(m.pop(), Next::Item(3));
    // Stream 1 is drained but open: 5 may not be emitted before stream 1 answers.
    assert_eq!(m.pop(), Next::NeedMore(vec![1]));
    m.mark_exhausted(1).expect("exists");
    assert_eq!(m.pop(), Next::Item(5));
    assert_eq!(m.pop(), Next::NeedMore(vec![0]));
    m.mark_exhausted(0).expect("exists");
    assert_eq!(m.pop(), Next::Done);
    assert_eq!(m.position(), Some(Position { last: 5 }));
}

#[test]
fn merger_refuses_unsorted_pages_and_skips_the_resumed_prefix() {
    let mut m = Merger::new(
        1,
        |k: &u32| *k,
        Order::Descending,
        Some(Position { last: 7 }),
    );
    assert!(m.push(0, [3, 4]).is_err());
    let mut m = Merger::new(
        1,
        |k: &u32| *k,
        Order::Descending,
        Some(Position { last: 7 }),
    );
    m.push(0, [9, 7, 6]).expect("sorted");
    m.mark_exhausted(0).expect("exists");
    assert!(m.push(0, [1]).is_err());
    assert_eq!(m.pop(), Next::Item(6));
    assert_eq!(m.pop(), Next::Done);
    assert!(m.push(3, [1]).is_err());
}
