//! DynamoDB item size, computed the way DynamoDB bills and limits it.
//!
//! The 400 KB item limit and the 1 KB write-unit boundary are both measured on this
//! size, so the batch writer can refuse an oversize item before any call and count
//! the items that cost more than one WCU.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// DynamoDB's maximum item size, 400 KB.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// One write capacity unit covers an item of up to 1 KB.
pub const WCU_BYTES: usize = 1024;

/// The size of an item: attribute names plus values, per DynamoDB's rules.
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// Write capacity units one write of an item of `size` bytes consumes.
pub fn write_units(size: usize) -> usize {
    size.div_ceil(WCU_BYTES).max(1)
}

/// An upper estimate of an item's size in a `BatchWriteItem` request's JSON, where
/// every value carries a type descriptor: `{"N":"21.5"}` is larger than the 2 bytes
/// the item size counts. Chunks are cut on this, against the 16 MB request limit.
pub fn wire_size(item: &HashMap<String, AttributeValue>) -> usize {
    // {"PutRequest":{"Item":{...}}},
    32 + item
        .iter()
        .map(|(name, value)| quoted(name) + 1 + value_wire_size(value) + 1)
        .sum::<usize>()
}

/// A JSON string, worst case: every byte escaped as `\uXXXX`.
fn quoted(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| {
            if b < 0x20 || b == b'"' || b == b'\\' {
                6
            } else {
                1
            }
        })
        .sum::<usize>()
}

fn value_wire_size(value: &AttributeValue) -> usize {
    // {"S":...}: 6 bytes of descriptor around the payload.
    6 + match value {
        AttributeValue::S(s) | AttributeValue::N(s) => quoted(s),
        AttributeValue::B(b) => 2 + b.as_ref().len().div_ceil(3) * 4,
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 5,
        AttributeValue::Ss(set) | AttributeValue::Ns(set) => {
            2 + set.iter().map(|s| quoted(s) + 1).sum::<usize>()
        }
        AttributeValue::Bs(set) => {
            2 + set
                .iter()
                .map(|b| 3 + b.as_ref().len().div_ceil(3) * 4)
                .sum::<usize>()
        }
        AttributeValue::L(list) => 2 + list.iter().map(|v| value_wire_size(v) + 1).sum::<usize>(),
        AttributeValue::M(map) => {
            2 + map
                .iter()
                .map(|(k, v)| quoted(k) + 1 + value_wire_size(v) + 1)
                .sum::<usize>()
        }
        _ => 1024,
    }
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(set) => set.iter().map(String::len).sum(),
        AttributeValue::Ns(set) => set.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(set) => set.iter().map(|b| b.as_ref().len()).sum(),
        // Lists and maps: 3 bytes, plus 1 byte of overhead per element.
        AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(map) => {
            3 + map
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        // Unknown future variants: count generously rather than under-count.
        _ => 64,
    }
}

/// Numbers cost one byte per two significant digits plus one byte.
fn number_size(n: &str) -> usize {
    let mantissa = n.split(['e', 'E']).next().unwrap_or(n);
    // Significant digits: from the first non-zero digit to the last, counted in place
    // (every item of every batch is sized; no copy of the digits).
    let mut digits = mantissa.bytes().filter(u8::is_ascii_digit);
    let significant: usize = match digits.position(|d| d != b'0') {
        None => 0,
        Some(_) => {
            let mut count = 1;
            let mut run = 1;
            for d in digits {
                run += 1;
                if d != b'0' {
                    count = run;
                }
            }
            count
        }
    }
    .max(1);
    significant.div_ceil(2) + 1
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
    fn significant_digits_ignore_leading_and_trailing_zeros() {
        for (n, digits) in [
            ("0", 1),
            ("-0.0", 1),
            ("7", 1),
            ("100", 1),
            ("1001", 4),
            ("0.0102300", 4),
            ("-12.5e-3", 3),
            ("123456789012345678901234567890123456789", 39),
        ] {
            assert_eq!(number_size(n), usize::div_ceil(digits, 2) + 1, "{n}");
        }
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
}
