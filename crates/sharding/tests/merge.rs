//! Property 4: a bounded merge, driven page by page over streams of every arrival kind,
//! by a reader that bounds a time-indexed page by the ask's span or reads on past it,
//! returns exactly the brute-force answer, and resuming after each answer's last key
//! pages through everything with no gap and no duplicate. Also when some items are
//! stored in two streams (one reading under two fan-outs' keys): every key comes out
//! once, in order, in the answers, across pages and resumes, and from a windowed merge.
//! And whatever density an earlier read hands the merge: a hint plans rounds, never
//! changes an answer.

use proptest::prelude::*;
use sharding::merge::{Arrival, BoundedMerge, Order, PageAsk, Step, StreamShape, TimedKey};

/// Timestamp, then a unique id.
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

const BUCKET_MS: i64 = 100;

#[derive(Debug, Clone)]
struct StreamCase {
    bucket: i64,
    arrival: Arrival,
    /// Offsets inside the bucket; ids are made unique when the case is built.
    offsets: Vec<i64>,
}

/// The stream's items in the order its pages deliver them.
fn arrival_order(keys: &[Key], arrival: Arrival, order: Order) -> Vec<Key> {
    let mut keys = keys.to_vec();
    match arrival {
        Arrival::InOrder => keys.sort_by(|a, b| order.cmp(a, b)),
        // Time order, ties at one millisecond in reverse id order; as blocks, each item
        // a block of one reading (tests/merge_blocks.rs has larger blocks).
        Arrival::TimeIndexed | Arrival::Blocks { .. } => {
            keys.sort_by(|a, b| order.cmp(&a.0, &b.0).then(b.1.cmp(&a.1)));
        }
        // Any order: by id.
        Arrival::Unordered => keys.sort_by_key(|k| k.1),
    }
    keys
}

/// How the test's reader answers a page.
#[derive(Debug, Clone, Copy)]
struct Reader {
    /// Most items a page returns, whatever its limit (a page of 1 MB).
    page_cap: usize,
    /// Whether a time-indexed page is bounded by the ask's span, as the index's key
    /// condition bounds it; otherwise the reader reads on past it.
    honour_span: bool,
}

impl Reader {
    /// The page `ask` reads of `stream` from `position`, and whether nothing follows
    /// it (inside the ask's span, when it is honoured).
    fn page(
        self,
        (shape, keys): &(StreamShape, Vec<Key>),
        position: &mut usize,
        ask: PageAsk,
        order: Order,
    ) -> (Vec<(Key, Key)>, bool) {
        let start = *position;
        let (lo, hi) = ask.span;
        let inside = |k: &Key| match order {
            Order::Ascending => k.0 < hi,
            Order::Descending => k.0 >= lo,
        };
        let stop = if self.honour_span && shape.arrival == Arrival::TimeIndexed {
            start + keys[start..].iter().take_while(|k| inside(k)).count()
        } else {
            keys.len()
        };
        let take = ask
            .limit
            .map_or(self.page_cap, |l| (l as usize).min(self.page_cap))
            .max(1);
        let end = (start + take).min(stop);
        *position = end;
        let page = keys[start..end]
            .iter()
            .map(|k| (k.clone(), k.clone()))
            .collect();
        (page, end == stop)
    }
}

fn read(
    streams: &[(StreamShape, Vec<Key>)],
    order: Order,
    limit: usize,
    after: Option<Key>,
    reader: Reader,
    concurrency: usize,
    hint: Option<f64>,
) -> (Vec<Key>, bool) {
    let shapes = streams.iter().map(|(s, _)| *s).collect();
    let mut merge: BoundedMerge<Key, Key> =
        BoundedMerge::new(shapes, order, limit, after).with_density_hint(hint);
    let mut positions = vec![0usize; streams.len()];
    for _ in 0..100_000 {
        match merge.step(concurrency) {
            Step::Done { items, more } => return (items, more),
            Step::Read(asks) => {
                assert!(!asks.is_empty());
                for ask in asks {
                    let (stream, position) = (&streams[ask.stream], &mut positions[ask.stream]);
                    let (page, last_page) = reader.page(stream, position, ask, order);
                    let last_ts = page.last().map(|(k, _)| k.0);
                    merge.deliver(ask.stream, page, last_ts, last_page);
                }
            }
        }
    }
    panic!("the merge did not finish");
}

fn arrival() -> impl Strategy<Value = Arrival> {
    prop_oneof![
        Just(Arrival::InOrder),
        Just(Arrival::TimeIndexed),
        Just(Arrival::Blocks { window_ms: 1 }),
        Just(Arrival::Unordered)
    ]
}

fn stream_case() -> impl Strategy<Value = StreamCase> {
    (
        0i64..4,
        arrival(),
        prop::collection::vec(0..BUCKET_MS / 10, 0..25),
    )
        .prop_map(|(bucket, arrival, offsets)| StreamCase {
            bucket,
            arrival,
            // Few distinct milliseconds, so ties are common.
            offsets: offsets.into_iter().map(|o| o * 10).collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pages_concatenated_equal_the_brute_force_answer(
        cases in prop::collection::vec(stream_case(), 1..7),
        descending in any::<bool>(),
        limit in 1usize..30,
        page_cap in 1usize..12,
        honour_span in any::<bool>(),
        concurrency in 1usize..6,
        // A density from an earlier read, right or wrong by orders of magnitude.
        hint in prop::option::of(1e-4f64..10.0),
    ) {
        let reader = Reader { page_cap, honour_span };
        let order = if descending { Order::Descending } else { Order::Ascending };
        let mut id = 0u32;
        let mut all: Vec<Key> = Vec::new();
        let streams: Vec<(StreamShape, Vec<Key>)> = cases
            .iter()
            .map(|case| {
                let lo = case.bucket * BUCKET_MS;
                let keys: Vec<Key> = case
                    .offsets
                    .iter()
                    .map(|o| {
                        id += 1;
                        Key(lo + o, id)
                    })
                    .collect();
                all.extend(keys.iter().cloned());
                let shape = StreamShape { span: (lo, lo + BUCKET_MS), arrival: case.arrival };
                (shape, arrival_order(&keys, case.arrival, order))
            })
            .collect();
        all.sort_by(|a, b| order.cmp(a, b));

        // One answer at a time, each resumed after the last key of the one before.
        let mut paged: Vec<Key> = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let (items, more) =
                read(&streams, order, limit, after.clone(), reader, concurrency, hint);
            let expected: Vec<Key> = all
                .iter()
                .filter(|k| after.as_ref().is_none_or(|a| order.before(a, k)))
                .take(limit + 1)
                .cloned()
                .collect();
            prop_assert_eq!(more, expected.len() > limit);
            prop_assert_eq!(&items[..], &expected[..expected.len().min(limit)]);
            paged.extend(items.iter().cloned());
            if !more {
                break;
            }
            after = items.last().cloned();
        }
        prop_assert_eq!(paged, all);
    }

    #[test]
    fn a_key_stored_in_two_streams_is_emitted_once_across_pages(
        cases in prop::collection::vec(stream_case(), 1..7),
        copies in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..40),
        descending in any::<bool>(),
        limit in 1usize..30,
        page_cap in 1usize..12,
        honour_span in any::<bool>(),
        concurrency in 1usize..6,
    ) {
        let reader = Reader { page_cap, honour_span };
        let order = if descending { Order::Descending } else { Order::Ascending };
        let (streams, all) = with_copies(&cases, &copies, order);
        let mut paged: Vec<Key> = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let (items, more) =
                read(&streams, order, limit, after.clone(), reader, concurrency, None);
            let expected: Vec<Key> = all
                .iter()
                .filter(|k| after.as_ref().is_none_or(|a| order.before(a, k)))
                .take(limit + 1)
                .cloned()
                .collect();
            prop_assert_eq!(more, expected.len() > limit);
            prop_assert_eq!(&items[..], &expected[..expected.len().min(limit)]);
            paged.extend(items.iter().cloned());
            if !more {
                break;
            }
            after = items.last().cloned();
        }
        prop_assert_eq!(paged, all);
    }

    #[test]
    fn a_windowed_merge_emits_every_key_once(
        cases in prop::collection::vec(stream_case(), 1..7),
        copies in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..40),
        descending in any::<bool>(),
        window in 1usize..30,
        page_cap in 1usize..12,
        honour_span in any::<bool>(),
        concurrency in 1usize..6,
    ) {
        let reader = Reader { page_cap, honour_span };
        let order = if descending { Order::Descending } else { Order::Ascending };
        let (streams, all) = with_copies(&cases, &copies, order);
        let items = read_windowed(&streams, order, window, reader, concurrency);
        prop_assert_eq!(items, all);
    }
}

/// The streams of `cases`, each item copied into another stream of its bucket per
/// `copies` entry (item, target) where there is one, in `order`'s arrival order; and
/// every distinct key in `order`.
fn with_copies(
    cases: &[StreamCase],
    copies: &[(prop::sample::Index, prop::sample::Index)],
    order: Order,
) -> (Vec<(StreamShape, Vec<Key>)>, Vec<Key>) {
    let mut id = 0u32;
    let mut keys: Vec<Vec<Key>> = cases
        .iter()
        .map(|case| {
            let lo = case.bucket * BUCKET_MS;
            case.offsets
                .iter()
                .map(|o| {
                    id += 1;
                    Key(lo + o, id)
                })
                .collect()
        })
        .collect();
    let owned: Vec<(usize, Key)> = keys
        .iter()
        .enumerate()
        .flat_map(|(s, ks)| ks.iter().map(move |k| (s, k.clone())))
        .collect();
    if !owned.is_empty() {
        for (item, target) in copies {
            let (source, key) = &owned[item.index(owned.len())];
            let others: Vec<usize> = (0..cases.len())
                .filter(|&t| t != *source && cases[t].bucket == cases[*source].bucket)
                .filter(|&t| !keys[t].contains(key))
                .collect();
            if !others.is_empty() {
                keys[others[target.index(others.len())]].push(key.clone());
            }
        }
    }
    let mut all: Vec<Key> = owned.into_iter().map(|(_, k)| k).collect();
    all.sort_by(|a, b| order.cmp(a, b));
    let streams = cases
        .iter()
        .zip(&keys)
        .map(|(case, ks)| {
            let lo = case.bucket * BUCKET_MS;
            let shape = StreamShape {
                span: (lo, lo + BUCKET_MS),
                arrival: case.arrival,
            };
            (shape, arrival_order(ks, case.arrival, order))
        })
        .collect();
    (streams, all)
}

/// Drives a windowed merge to the end, taking what it emits after every step.
fn read_windowed(
    streams: &[(StreamShape, Vec<Key>)],
    order: Order,
    window: usize,
    reader: Reader,
    concurrency: usize,
) -> Vec<Key> {
    let shapes = streams.iter().map(|(s, _)| *s).collect();
    let mut merge: BoundedMerge<Key, Key> = BoundedMerge::windowed(shapes, order, window, None);
    let mut positions = vec![0usize; streams.len()];
    let mut out = Vec::new();
    for _ in 0..100_000 {
        match merge.step(concurrency) {
            Step::Done { items, more } => {
                assert!(!more, "a windowed merge has no limit");
                out.extend(items);
                return out;
            }
            Step::Read(asks) => {
                out.extend(merge.take_emitted());
                for ask in asks {
                    let (stream, position) = (&streams[ask.stream], &mut positions[ask.stream]);
                    let (page, last_page) = reader.page(stream, position, ask, order);
                    let last_ts = page.last().map(|(k, _)| k.0);
                    merge.deliver(ask.stream, page, last_ts, last_page);
                }
            }
        }
    }
    panic!("the merge did not finish");
}
