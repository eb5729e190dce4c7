//! DynamoDB item size, computed the way DynamoDB bills and limits it.
//!
//! The 400 KB item limit and the 1 KB write-unit boundary are both measured on this
//! size, so the batch writer can refuse an oversize item before any call and count
//! the items that cost more than one WCU.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use item_size as rule;

/// DynamoDB's maximum item size, 400 KB.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// One write capacity unit covers an item of up to 1 KB.
pub const WCU_BYTES: usize = 1024;

/// The size of an item: attribute names plus values, per DynamoDB's rules.
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    // The bound beside it reads no string's bytes: only the size is walked for.
    sizes::<false>(item).0
}

/// Write capacity units one write of an item of `size` bytes consumes.
pub fn write_units(size: usize) -> usize {
    size.div_ceil(WCU_BYTES).max(1)
}

/// An upper estimate of an item's size in a `BatchWriteItem` request's JSON, where
/// every value carries a type descriptor: `{"N":"21.5"}` is larger than the 2 bytes
/// the item size counts. Chunks are cut on this, against the 16 MB request limit.
pub fn wire_size(item: &HashMap<String, AttributeValue>) -> usize {
    sizes::<true>(item).1
}

/// An upper bound of [`wire_size`] that reads no string's bytes: each is counted as if
/// every byte were escaped. The batch writer bounds every item of every batch, and a
/// batch's strings are mostly out of cache by then; it walks the exact estimate only
/// where this bound could cut a chunk (items of tens of KB).
pub fn wire_bound(item: &HashMap<String, AttributeValue>) -> usize {
    sizes::<false>(item).1
}

/// An item's size and its wire estimate, exact or bounded ([`quoted`]).
fn sizes<const EXACT: bool>(item: &HashMap<String, AttributeValue>) -> (usize, usize) {
    // {"PutRequest":{"Item":{...}}},
    let mut wire = 32;
    let size = rule::item_size(item.iter().map(|(name, value)| {
        let (size, value_wire) = value_sizes::<EXACT>(value);
        wire += quoted::<EXACT>(name) + 1 + value_wire + 1;
        (name.as_str(), size)
    }));
    (size, wire)
}

/// A JSON string, worst case: every byte escaped as `\uXXXX`, read from its bytes when
/// `EXACT`, else assumed of every byte (no read).
fn quoted<const EXACT: bool>(s: &str) -> usize {
    if !EXACT {
        return 2 + 6 * s.len();
    }
    // A count the compiler vectorizes: item sizing runs once per item of every batch.
    let escaped = s
        .bytes()
        .filter(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .count();
    2 + s.len() + 5 * escaped
}

/// A value's size by DynamoDB's rule ([`item_size`](::item_size), the one copy of it the
/// emulator uses too; this only maps the SDK's variants onto it) and its upper estimate
/// in JSON, `{"S":...}` with 6 bytes of descriptor around the payload.
fn value_sizes<const EXACT: bool>(value: &AttributeValue) -> (usize, usize) {
    let (size, payload) = match value {
        AttributeValue::S(s) => (rule::string_size(s), quoted::<EXACT>(s)),
        AttributeValue::N(n) => (rule::number_size(n), quoted::<EXACT>(n)),
        AttributeValue::B(b) => (
            rule::binary_size(b.as_ref().len()),
            base64(b.as_ref().len()),
        ),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => (rule::SCALAR_SIZE, 5),
        AttributeValue::Ss(set) => (
            rule::set_size(set.iter().map(|s| rule::string_size(s))),
            2 + set.iter().map(|s| quoted::<EXACT>(s) + 1).sum::<usize>(),
        ),
        AttributeValue::Ns(set) => (
            rule::set_size(set.iter().map(|n| rule::number_size(n))),
            2 + set.iter().map(|n| quoted::<EXACT>(n) + 1).sum::<usize>(),
        ),
        AttributeValue::Bs(set) => (
            rule::set_size(set.iter().map(|b| rule::binary_size(b.as_ref().len()))),
            2 + set
                .iter()
                .map(|b| base64(b.as_ref().len()) + 1)
                .sum::<usize>(),
        ),
        AttributeValue::L(list) => {
            let mut wire = 2;
            let size = rule::list_size(list.iter().map(|v| {
                let (size, w) = value_sizes::<EXACT>(v);
                wire += w + 1;
                size
            }));
            (size, wire)
        }
        AttributeValue::M(map) => {
            let mut wire = 2;
            let size = rule::map_size(map.iter().map(|(k, v)| {
                let (size, w) = value_sizes::<EXACT>(v);
                wire += quoted::<EXACT>(k) + 1 + w + 1;
                (k.as_str(), size)
            }));
            (size, wire)
        }
        // Unknown future variants: count generously rather than under-count.
        _ => (64, 1024),
    };
    (size, 6 + payload)
}

/// A quoted base64 string of `len` bytes.
fn base64(len: usize) -> usize {
    2 + len.div_ceil(3) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(item: &[(&str, AttributeValue)], expected: usize) {
        let item: HashMap<String, AttributeValue> = item
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        assert_eq!(item_size(&item), expected);
    }

    #[test]
    fn strings_count_name_and_value_bytes() {
        check(&[("PK", AttributeValue::S("abc".into()))], 5);
        check(&[("é", AttributeValue::S("ü".into()))], 4);
    }

    #[test]
    fn numbers_count_significant_digits() {
        check(&[("n", AttributeValue::N("12345".into()))], 1 + 4);
        check(&[("n", AttributeValue::N("0.00100".into()))], 1 + 2);
        check(&[("n", AttributeValue::N("-1.5e10".into()))], 1 + 2);
    }

    #[test]
    fn maps_add_overhead_per_element() {
        let m = AttributeValue::M(HashMap::from([(
            "t".to_owned(),
            AttributeValue::N("21".into()),
        )]));
        check(&[("metrics", m)], 7 + 3 + 1 + 1 + 2);
    }

    #[test]
    fn write_units_round_up_per_kilobyte() {
        assert_eq!(write_units(0), 1);
        assert_eq!(write_units(1024), 1);
        assert_eq!(write_units(1025), 2);
    }

    #[test]
    fn a_quoted_string_is_counted_at_its_longest_escaped_form() {
        for s in ["", "plain", "a\"b\\c", "tab\tnew\nline\u{1}", "é ü"] {
            // JSON escapes a quote, a backslash and a control byte in at most 6 bytes.
            let worst: usize = s
                .bytes()
                .map(|b| {
                    if b < 0x20 || b == b'"' || b == b'\\' {
                        6
                    } else {
                        1
                    }
                })
                .sum();
            assert_eq!(quoted::<true>(s), 2 + worst, "{s:?}");
            let json = serde_json::to_string(s).expect("a string serializes");
            assert!(quoted::<true>(s) >= json.len(), "{s:?}");
            // The bound that reads no byte is never under the exact count.
            assert!(quoted::<false>(s) >= quoted::<true>(s), "{s:?}");
        }
    }

    #[test]
    fn the_bound_reads_the_same_size_and_never_under_the_wire_estimate() {
        let item = HashMap::from([
            ("PK".to_owned(), AttributeValue::S("a\"b".into())),
            ("n".to_owned(), AttributeValue::N("-12.50e3".into())),
            ("b".to_owned(), AttributeValue::B(vec![1, 2, 3, 4].into())),
            (
                "m".to_owned(),
                AttributeValue::M(HashMap::from([(
                    "l".to_owned(),
                    AttributeValue::L(vec![AttributeValue::Ss(vec!["x\n".into()])]),
                )])),
            ),
        ]);
        let (size, bound) = sizes::<false>(&item);
        assert_eq!(size, item_size(&item));
        assert_eq!(sizes::<true>(&item).0, size);
        assert_eq!(wire_bound(&item), bound);
        assert!(bound >= wire_size(&item));
    }
}
