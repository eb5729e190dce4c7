//! One chunk's attempts, item by item: what is still pending, what each answer settled,
//! and the counters.

use std::collections::HashMap;

use sharding::key::ItemKey;
use tokio::time::Instant;

use super::put::answered_key;
use super::{Item, Outcome, Remake, WriteObserver, WriteStats};
use crate::error::ThrottleKind;

/// What every attempt of one write shares.
pub(super) struct Attempts<'a> {
    pub(super) deadline: Instant,
    pub(super) observer: &'a dyn WriteObserver,
    pub(super) remake: &'a dyn Remake,
}

/// One put of a chunk without an outcome yet: its input index, its key, and its item
/// unless a call consumed it.
pub(super) struct Pending<'k> {
    pub(super) index: usize,
    pub(super) key: &'k ItemKey,
    pub(super) item: Option<Item>,
}

/// One chunk's outcomes by input index, and its counters.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) done: Vec<(usize, Outcome)>,
    pub(super) stats: WriteStats,
}

impl Tally {
    /// The items of `pending` for the next call, moved out: each one held, or made
    /// again by `remake` when a failed call consumed it. An item that cannot be made
    /// again leaves `pending` as failed, retryable.
    pub(super) fn lend(
        &mut self,
        pending: &mut Vec<Pending<'_>>,
        remake: &dyn Remake,
    ) -> Vec<Item> {
        let mut items = Vec::with_capacity(pending.len());
        pending.retain_mut(|p| {
            match p.item.take().or_else(|| remake.remake(p.index, p.key)) {
                Some(item) => items.push(item),
                None => {
                    self.stats.failed_retryable += 1;
                    self.done.push((
                        p.index,
                        Outcome::FailedRetryable {
                            reason: "the item could not be made again for another attempt"
                                .to_owned(),
                            throttle: None,
                        },
                    ));
                    return false;
                }
            }
            true
        });
        items
    }

    /// A call's answer: the items it left unprocessed go back into `pending`, as they
    /// came back, for the next attempt; every other item of the call is written. An
    /// answer naming a key none of `pending` has (a put whose item disagrees with its
    /// key) proves nothing about which were written: then every item of the call stays
    /// pending, to be sent again (made again where the answer did not give it back).
    pub(super) fn take_answer(&mut self, pending: &mut Vec<Pending<'_>>, unprocessed: Vec<Item>) {
        let mut unmatched = false;
        // The usual answer leaves nothing: nothing to look up then.
        if !unprocessed.is_empty() {
            let by_key: HashMap<(&str, &str), usize> = pending
                .iter()
                .enumerate()
                .map(|(i, p)| ((p.key.pk.as_str(), p.key.sk.as_str()), i))
                .collect();
            let found: Vec<(Option<usize>, Item)> = unprocessed
                .into_iter()
                .map(|item| {
                    let at = answered_key(&item).and_then(|key| by_key.get(&key).copied());
                    (at, item)
                })
                .collect();
            for (at, item) in found {
                match at.and_then(|i| pending.get_mut(i)) {
                    Some(p) => p.item = Some(item),
                    None => unmatched = true,
                }
            }
        }
        if unmatched {
            self.stats.unprocessed += pending.len() as u64;
            return;
        }
        let before = pending.len();
        pending.retain(|p| {
            let stays = p.item.is_some();
            if !stays {
                self.done.push((p.index, Outcome::Written));
            }
            stays
        });
        self.stats.written += (before - pending.len()) as u64;
        self.stats.unprocessed += pending.len() as u64;
    }

    /// A throttled call: counted by its reason, and a key-range throttle told to
    /// `observer` and counted per partition key of `pending`.
    pub(super) fn throttled(
        &mut self,
        kind: ThrottleKind,
        reason: &str,
        pending: &[Pending<'_>],
        observer: &dyn WriteObserver,
    ) {
        *self.stats.throttles.entry(reason.to_owned()).or_default() += 1;
        if kind == ThrottleKind::KeyRange {
            for p in pending {
                observer.throttled(&p.key.pk);
                *self
                    .stats
                    .key_range_throttled
                    .entry(p.key.pk.clone())
                    .or_default() += 1;
            }
        }
    }

    /// Moves the items whose key `observer` declares stale from `pending` to the done.
    pub(super) fn give_back_stale(
        &mut self,
        pending: &mut Vec<Pending<'_>>,
        observer: &dyn WriteObserver,
    ) {
        pending.retain(|p| {
            let stale = observer.stale(&p.key.pk);
            if stale {
                self.stats.stale += 1;
                self.done.push((p.index, Outcome::Stale));
            }
            !stale
        });
    }

    pub(super) fn fail_all(
        &mut self,
        pending: &mut Vec<Pending<'_>>,
        reason: &str,
        throttle: Option<ThrottleKind>,
    ) {
        for p in pending.drain(..) {
            self.stats.failed_retryable += 1;
            self.done.push((
                p.index,
                Outcome::FailedRetryable {
                    reason: reason.to_owned(),
                    throttle,
                },
            ));
        }
    }

    pub(super) fn fail_permanent(&mut self, pending: &mut Vec<Pending<'_>>, reason: &str) {
        for p in pending.drain(..) {
            self.stats.failed_permanent += 1;
            self.done.push((
                p.index,
                Outcome::FailedPermanent {
                    reason: reason.to_owned(),
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;
    use crate::item::{PK, SK};

    fn key(sk: &str) -> ItemKey {
        ItemKey {
            pk: "p".to_owned(),
            sk: sk.to_owned(),
        }
    }

    fn item(sk: &str) -> Item {
        HashMap::from([
            (PK.to_owned(), AttributeValue::S("p".to_owned())),
            (SK.to_owned(), AttributeValue::S(sk.to_owned())),
        ])
    }

    /// A call's items, all consumed by the call.
    fn sent(keys: &[ItemKey]) -> Vec<Pending<'_>> {
        keys.iter()
            .enumerate()
            .map(|(index, key)| Pending {
                index,
                key,
                item: None,
            })
            .collect()
    }

    #[test]
    fn an_answer_naming_no_pending_key_keeps_every_item_of_the_call_pending() {
        let keys = [key("a"), key("b")];
        let mut pending = sent(&keys);
        let mut tally = Tally::default();
        // "b" came back as sent; "z" is no key of the call.
        tally.take_answer(&mut pending, vec![item("b"), item("z")]);
        assert!(tally.done.is_empty(), "nothing is known written");
        assert_eq!(pending.len(), 2);
        assert!(pending[0].item.is_none(), "to be made again");
        assert_eq!(pending[1].item, Some(item("b")), "sent again as given back");
    }

    #[test]
    fn an_answer_naming_pending_keys_writes_the_rest() {
        let keys = [key("a"), key("b")];
        let mut pending = sent(&keys);
        let mut tally = Tally::default();
        tally.take_answer(&mut pending, vec![item("b")]);
        assert_eq!(tally.done, vec![(0, Outcome::Written)]);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].key, &keys[1]);
    }
}
