//! Property 4, streams of blocks: each stored item holds readings of `[s, s + W)`, `s`
//! its first member's; a stream's items come in order of `s` (ties in any order), and
//! each page's items are expanded into readings delivered in no useful order. Readings
//! are shared at random between the items of one stream (a block and a single copy,
//! overlapping blocks) and of others; items start before the span (the caller reads
//! back `W`) and end after it. A merge of such streams, bounded or windowed, ascending
//! or descending, resumed after a random key and then after each answer's last, emits
//! exactly the distinct readings inside the spans after the resume key, in order, each
//! once; and `settled_before` is never past a reading not yet emitted.

use proptest::prelude::*;
use proptest::sample::Index;
use sharding::merge::{Arrival, BoundedMerge, Order, PageAsk, Step, StreamShape, TimedKey};

/// Timestamp, then the reading's id: one reading, whichever items hold it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(i64, u32);

impl TimedKey for Key {
    fn ts_ms(&self) -> i64 {
        self.0
    }
}

/// Copies of one key are the same item here: any one is kept.
impl sharding::written::Written for Key {
    fn written_cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// One stored item: its first member's timestamp, a stand-in for the rest of its sort
/// key, and its members.
#[derive(Debug, Clone)]
struct Item {
    s: i64,
    tie: u32,
    members: Vec<Key>,
}

#[derive(Debug, Clone)]
struct StreamCase {
    span: (i64, i64),
    window_ms: i64,
    /// Per item: its first member and further ones (picked from the readings that fit),
    /// and its tie-break.
    items: Vec<(Index, Vec<Index>, u32)>,
}

/// A stream's shape and its items in the order its pages deliver them.
type BlockStream = (StreamShape, Vec<Item>);

fn stream_case() -> impl Strategy<Value = StreamCase> {
    (
        0i64..200,
        1i64..120,
        1i64..60,
        prop::collection::vec(
            (
                any::<Index>(),
                prop::collection::vec(any::<Index>(), 0..6),
                0u32..4,
            ),
            0..12,
        ),
    )
        .prop_map(|(lo, len, window_ms, items)| StreamCase {
            span: (lo, lo + len),
            window_ms,
            items,
        })
}

/// The readings every stream can hold: few distinct milliseconds, so ties are common.
fn pool() -> impl Strategy<Value = Vec<Key>> {
    prop::collection::vec(0i64..60, 1..40)
        .prop_map(|ts| (0u32..).zip(ts).map(|(id, t)| Key(t * 4, id)).collect())
}

/// The streams of `cases` over the readings of `pool`, in `order`'s arrival order;
/// and every distinct reading inside some stream's span, in `order`.
fn build(pool: &[Key], cases: &[StreamCase], order: Order) -> (Vec<BlockStream>, Vec<Key>) {
    let mut all = Vec::new();
    let streams = cases
        .iter()
        .map(|case| {
            let (lo, hi) = case.span;
            let w = case.window_ms;
            // Items that start from before the span's read-back to after its end.
            let firsts: Vec<&Key> = pool
                .iter()
                .filter(|k| k.0 >= lo - w - 8 && k.0 < hi + 8)
                .collect();
            let mut items: Vec<Item> = Vec::new();
            for (first, more, tie) in &case.items {
                if firsts.is_empty() {
                    break;
                }
                let first = firsts[first.index(firsts.len())];
                let s = first.0;
                let fits: Vec<&Key> = pool.iter().filter(|k| k.0 >= s && k.0 < s + w).collect();
                let mut members = vec![first.clone()];
                members.extend(more.iter().map(|i| fits[i.index(fits.len())].clone()));
                members.sort();
                members.dedup();
                all.extend(members.iter().filter(|k| k.0 >= lo && k.0 < hi).cloned());
                items.push(Item {
                    s,
                    tie: *tie,
                    members,
                });
            }
            items.sort_by(|a, b| order.cmp(&(a.s, a.tie), &(b.s, b.tie)));
            let shape = StreamShape {
                span: case.span,
                arrival: Arrival::Blocks { window_ms: w },
            };
            (shape, items)
        })
        .collect();
    all.sort_by(|a, b| order.cmp(a, b));
    all.dedup();
    (streams, all)
}

/// How the test's reader answers a page.
#[derive(Debug, Clone, Copy)]
struct Reader {
    /// Most items a page returns, whatever its limit (a page of 1 MB).
    page_cap: usize,
    /// Every `blind`-th page passes no last timestamp (0: none does).
    blind: usize,
}

impl Reader {
    /// The page `ask` reads of `items` from `position` (the `n`-th page read): its
    /// readings in no useful order, its last item's first-member timestamp, and
    /// whether nothing follows it.
    fn page(
        self,
        items: &[Item],
        position: &mut usize,
        ask: PageAsk,
        n: usize,
    ) -> (Vec<(Key, Key)>, Option<i64>, bool) {
        let start = *position;
        let take = ask
            .limit
            .map_or(self.page_cap, |l| (l as usize).min(self.page_cap))
            .max(1);
        let end = (start + take).min(items.len());
        *position = end;
        let mut page: Vec<(Key, Key)> = items[start..end]
            .iter()
            .flat_map(|item| item.members.iter().map(|k| (k.clone(), k.clone())))
            .collect();
        page.sort_by_key(|(k, _)| (k.1.wrapping_mul(2_654_435_761), k.0));
        let blind = self.blind > 0 && n.is_multiple_of(self.blind);
        let last_ts = items[start..end].last().map(|i| i.s).filter(|_| !blind);
        (page, last_ts, end == items.len())
    }
}

/// A bounded merge (`Some(limit)`) or a windowed one (`None`, a window of `size`).
#[derive(Debug, Clone, Copy)]
struct Run {
    order: Order,
    limit: Option<usize>,
    size: usize,
    concurrency: usize,
    hint: Option<f64>,
}

/// Reads `streams` through a merge resumed after `after`; returns what it emitted and
/// whether more follows. `expected` are the readings after `after` in order: what is
/// emitted must start them, and `settled_before` must never pass one not yet emitted.
fn read(
    streams: &[BlockStream],
    run: Run,
    after: Option<Key>,
    reader: Reader,
    expected: &[Key],
) -> Result<(Vec<Key>, bool), TestCaseError> {
    let shapes = streams.iter().map(|(s, _)| *s).collect();
    let order = run.order;
    let mut merge: BoundedMerge<Key, Key> = match run.limit {
        Some(limit) => BoundedMerge::new(shapes, order, limit, after),
        None => BoundedMerge::windowed(shapes, order, run.size, after),
    }
    .with_density_hint(run.hint);
    let mut positions = vec![0usize; streams.len()];
    let mut out: Vec<Key> = Vec::new();
    let mut pages = 0usize;
    for _ in 0..100_000 {
        let asks = match merge.step(run.concurrency) {
            Step::Done { items, more } => {
                out.extend(items);
                return Ok((out, more));
            }
            Step::Read(asks) => asks,
        };
        prop_assert!(!asks.is_empty());
        out.extend(merge.take_emitted());
        settled(&merge, &out, expected, order)?;
        for ask in asks {
            let (_, items) = &streams[ask.stream];
            pages += 1;
            let (page, last_ts, last_page) =
                reader.page(items, &mut positions[ask.stream], ask, pages);
            merge.deliver(ask.stream, page, last_ts, last_page);
        }
        settled(&merge, &out, expected, order)?;
    }
    panic!("the merge did not finish");
}

/// What was emitted starts `expected`, and everything of `expected` before
/// `settled_before` was emitted, nothing emitted after it.
fn settled(
    merge: &BoundedMerge<Key, Key>,
    out: &[Key],
    expected: &[Key],
    order: Order,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(out, &expected[..out.len().min(expected.len())]);
    if let Some(t) = merge.settled_before() {
        let before = expected.iter().filter(|k| order.before(&k.0, &t)).count();
        prop_assert!(before <= out.len(), "settled before {t}: {out:?}");
        prop_assert!(
            out.iter().all(|k| !order.before(&t, &k.0)),
            "settled before {t}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn block_streams_emit_each_reading_inside_the_span_once_in_order(
        pool in pool(),
        cases in prop::collection::vec(stream_case(), 1..5),
        descending in any::<bool>(),
        windowed in any::<bool>(),
        size in 1usize..20,
        page_cap in 1usize..6,
        blind in 0usize..4,
        concurrency in 1usize..6,
        hint in prop::option::of(1e-4f64..10.0),
        start in prop::option::of(any::<Index>()),
    ) {
        let order = if descending { Order::Descending } else { Order::Ascending };
        let (streams, all) = build(&pool, &cases, order);
        let reader = Reader { page_cap, blind };
        let run = Run {
            order,
            limit: (!windowed).then_some(size),
            size,
            concurrency,
            hint,
        };
        // One answer at a time, each resumed after the last reading of the one before;
        // the first after any reading at all.
        let mut after = start.map(|i| pool[i.index(pool.len())].clone());
        let first = after.clone();
        let mut paged: Vec<Key> = Vec::new();
        loop {
            let expected: Vec<Key> = all
                .iter()
                .filter(|k| after.as_ref().is_none_or(|a| order.before(a, k)))
                .cloned()
                .collect();
            let (items, more) = read(&streams, run, after.clone(), reader, &expected)?;
            let shown = expected.len().min(run.limit.unwrap_or(usize::MAX));
            prop_assert_eq!(&items[..], &expected[..shown]);
            prop_assert_eq!(more, expected.len() > shown);
            paged.extend(items.iter().cloned());
            if !more {
                break;
            }
            after = items.last().cloned();
        }
        let whole: Vec<Key> = all
            .into_iter()
            .filter(|k| first.as_ref().is_none_or(|a| order.before(a, k)))
            .collect();
        prop_assert_eq!(paged, whole);
    }
}
