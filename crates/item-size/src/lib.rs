//! DynamoDB's item-size rule, written once. The 400 KB item limit and the 1 KB write
//! unit are both measured on this size, so the batch writer (`store::size`, over the
//! SDK's `AttributeValue`) and the hot-partition emulator (`capacity-proxy`, over
//! DynamoDB JSON) must agree on it: both size their values with these functions, and
//! only map their own representation onto them.
//!
//! The rule (DynamoDB Developer Guide, "Item sizes and formats"):
//! - an item is the sum, over its attributes, of the name's UTF-8 length plus the
//!   value's size;
//! - a string is its UTF-8 length, a binary its raw (decoded) length;
//! - a number is 1 byte per 2 significant digits, plus 1 byte; leading and trailing
//!   zeros are not significant, nor are the sign, the decimal point or the exponent;
//! - a Boolean or a null is 1 byte;
//! - a set is the sum of its elements;
//! - a list or a map is 3 bytes, plus per element 1 byte and the element's size (and,
//!   in a map, the element's name).
//!
//! No dependencies: the emulator stays free of the SDK, and the writer of serde_json.

/// Size of a string attribute value: its UTF-8 length.
#[must_use]
pub fn string_size(text: &str) -> usize {
    text.len()
}

/// Size of a number attribute value, given as DynamoDB's decimal text (`"-12.50e3"`):
/// 1 byte per 2 significant digits, plus 1. Zero counts as one digit.
#[must_use]
pub fn number_size(text: &str) -> usize {
    // One pass over the mantissa, counting digits in place (every item of every batch
    // is sized): the significant ones run from the first non-zero digit to the last.
    let (mut first, mut last, mut digit) = (None, 0, 0usize);
    for b in text.bytes() {
        match b {
            b'e' | b'E' => break,
            b'0' => digit += 1,
            b'1'..=b'9' => {
                first.get_or_insert(digit);
                last = digit;
                digit += 1;
            }
            _ => {}
        }
    }
    let significant = first.map_or(1, |first| last - first + 1);
    significant.div_ceil(2) + 1
}

/// Size of a binary attribute value of `len` raw bytes.
#[must_use]
pub fn binary_size(len: usize) -> usize {
    len
}

/// Size of a Boolean or a null attribute value.
pub const SCALAR_SIZE: usize = 1;

/// Size of a set, from its elements' sizes.
pub fn set_size(elements: impl IntoIterator<Item = usize>) -> usize {
    elements.into_iter().sum()
}

/// Size of a list, from its elements' sizes.
pub fn list_size(elements: impl IntoIterator<Item = usize>) -> usize {
    3 + elements.into_iter().map(|size| 1 + size).sum::<usize>()
}

/// Size of a map, from its elements' names and sizes.
pub fn map_size<'a>(elements: impl IntoIterator<Item = (&'a str, usize)>) -> usize {
    MAP_OVERHEAD
        + elements
            .into_iter()
            .map(|(name, size)| map_element_size(name, size))
            .sum::<usize>()
}

/// What a map costs before its elements.
pub const MAP_OVERHEAD: usize = 3;

/// What one element of a map adds to it: [`map_size`] is [`MAP_OVERHEAD`] plus these.
#[must_use]
pub fn map_element_size(name: &str, size: usize) -> usize {
    1 + name.len() + size
}

/// Size of an item, from its attributes' names and value sizes.
pub fn item_size<'a>(attributes: impl IntoIterator<Item = (&'a str, usize)>) -> usize {
    attributes
        .into_iter()
        .map(|(name, size)| attribute_size(name, size))
        .sum()
}

/// What one attribute adds to an item: [`item_size`] is the sum of these.
#[must_use]
pub fn attribute_size(name: &str, size: usize) -> usize {
    name.len() + size
}

/// The raw length of a standard base64 text (DynamoDB JSON's binaries), padded or not.
#[must_use]
pub fn base64_decoded_len(text: &str) -> usize {
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count();
    (text.len() / 4 * 3 + (text.len() % 4).saturating_sub(1)).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_count_significant_digits_only() {
        for (n, digits) in [
            ("0", 1),
            ("-0.0", 1),
            ("7", 1),
            ("100", 1),
            ("1001", 4),
            ("12345", 5),
            ("0.00100", 1),
            ("0.0102300", 4),
            ("-1.5e10", 2),
            ("-12.5e-3", 3),
            ("123456789012345678901234567890123456789", 39),
        ] {
            assert_eq!(number_size(n), usize::div_ceil(digits, 2) + 1, "{n}");
        }
    }

    proptest::proptest! {
        /// The one-pass count agrees with the rule read literally: the mantissa's
        /// digits, stripped of leading and trailing zeros.
        #[test]
        fn number_size_is_the_rule(
            text in "-?[0-9]{1,40}(\\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?"
        ) {
            let mantissa = text.split(['e', 'E']).next().unwrap_or(&text);
            let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
            let significant = digits.trim_matches('0').len().max(1);
            proptest::prop_assert_eq!(number_size(&text), significant.div_ceil(2) + 1);
        }
    }

    #[test]
    fn strings_count_bytes_not_chars() {
        assert_eq!(string_size("abc"), 3);
        assert_eq!(string_size("€"), 3);
    }

    #[test]
    fn containers_add_three_bytes_and_one_per_element() {
        assert_eq!(list_size([1, 2]), 3 + (1 + 1) + (1 + 2));
        assert_eq!(map_size([("k", 1)]), 3 + 1 + 1 + 1);
        assert_eq!(list_size([]), 3);
        assert_eq!(set_size([2, 3]), 5);
        assert_eq!(item_size([("PK", 3), ("n", 2)]), 2 + 3 + 1 + 2);
    }

    #[test]
    fn base64_decodes_to_its_raw_length() {
        assert_eq!(base64_decoded_len("AAEC"), 3);
        assert_eq!(base64_decoded_len("AAE="), 2);
        assert_eq!(base64_decoded_len("AA=="), 1);
        assert_eq!(base64_decoded_len("AAE"), 2);
        assert_eq!(base64_decoded_len(""), 0);
    }
}
