//! Who a throttle is about: the pure core of the write stage's hot-entity attribution.
//!
//! A key-range throttle names a partition key, not an entity. A round knows which
//! entities it wrote to each key, with how many items and under which fan-out, so a
//! throttle is attributed to the entities holding a real share of that key's items
//! ([`Owners::of`]), and an item is stale once its entity's fan-out was raised past the
//! one its key was made with ([`Owners::is_stale`]).

use std::collections::HashMap;

/// The share of a throttled key's items an entity must hold to be raised for it: one
/// in `OWNER_SHARE`.
pub const OWNER_SHARE: usize = 10;

/// One entity's items on one partition key of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    entity: String,
    /// The fan-out its keys there were made with.
    fanout: u32,
    items: usize,
}

/// Per partition key of one round: the entities writing to it, most items first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    by_key: HashMap<String, Vec<Owner>>,
}

impl Owners {
    /// The owners of a round's items, each given as (partition key, entity, the fan-out
    /// its key was made with).
    pub fn new<'a>(items: impl IntoIterator<Item = (&'a str, &'a str, u32)>) -> Self {
        let mut counts: HashMap<&str, HashMap<(&str, u32), usize>> = HashMap::new();
        for (pk, entity, fanout) in items {
            *counts
                .entry(pk)
                .or_default()
                .entry((entity, fanout))
                .or_default() += 1;
        }
        let by_key = counts
            .into_iter()
            .map(|(pk, by_owner)| {
                let mut owners: Vec<Owner> = by_owner
                    .into_iter()
                    .map(|((entity, fanout), items)| Owner {
                        entity: entity.to_owned(),
                        fanout,
                        items,
                    })
                    .collect();
                owners.sort_by(|a, b| b.items.cmp(&a.items).then_with(|| a.entity.cmp(&b.entity)));
                (pk.to_owned(), owners)
            })
            .collect();
        Self { by_key }
    }

    /// The entities a throttle of `pk` is about: those holding at least one in
    /// [`OWNER_SHARE`] of its items, most first, with the fan-out of their keys there.
    pub fn of(&self, pk: &str) -> Vec<(String, u32)> {
        let Some(owners) = self.by_key.get(pk) else {
            return Vec::new();
        };
        let total: usize = owners.iter().map(|o| o.items).sum();
        owners
            .iter()
            .filter(|o| o.items * OWNER_SHARE >= total)
            .map(|o| (o.entity.clone(), o.fanout))
            .collect()
    }

    /// Whether an item on `pk` is stale: an entity writing there was raised (`raised`:
    /// the fan-out now in force per raised entity) past the fan-out of its key there.
    pub fn is_stale(&self, pk: &str, raised: &HashMap<String, u32>) -> bool {
        !raised.is_empty()
            && self.by_key.get(pk).is_some_and(|owners| {
                owners
                    .iter()
                    .any(|o| raised.get(&o.entity).is_some_and(|now| *now > o.fanout))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round() -> Owners {
        // Key "a": hot 18 items at k=1, warm 2, cold 1. Key "b": cold 3 at k=1.
        let mut items = vec![("a", "hot", 1); 18];
        items.extend([("a", "warm", 1), ("a", "warm", 1), ("a", "cold", 1)]);
        items.extend([("b", "cold", 1); 3]);
        Owners::new(items)
    }

    #[test]
    fn a_throttle_is_about_the_entities_holding_a_tenth_of_its_key_most_first() {
        let owners = round();
        // 21 items on "a": hot holds 18; warm's 2 are under a tenth (2 × 10 < 21).
        assert_eq!(owners.of("a"), vec![("hot".to_owned(), 1)]);
        assert_eq!(owners.of("b"), vec![("cold".to_owned(), 1)]);
        assert!(owners.of("c").is_empty(), "a key the round did not write");
        let even = Owners::new([("k", "x", 2), ("k", "y", 1)]);
        assert_eq!(even.of("k"), vec![("x".to_owned(), 2), ("y".to_owned(), 1)]);
    }

    #[test]
    fn an_item_is_stale_once_an_entity_on_its_key_was_raised_past_its_fanout() {
        let owners = round();
        let none = HashMap::new();
        assert!(!owners.is_stale("a", &none));
        let hot_to_4 = HashMap::from([("hot".to_owned(), 4)]);
        assert!(owners.is_stale("a", &hot_to_4));
        assert!(
            !owners.is_stale("b", &hot_to_4),
            "the hot entity never wrote to b"
        );
        let hot_at_1 = HashMap::from([("hot".to_owned(), 1)]);
        assert!(
            !owners.is_stale("a", &hot_at_1),
            "not raised past its key's fan-out"
        );
    }
}
