//! A metric's number as the device sent it: its decimal value, kept exactly, never
//! rounded to a double.
//!
//! DynamoDB stores a number as a decimal of up to 38 significant digits, from 1E-130 to
//! below 1E+126 in magnitude, and a JSON number is decimal text. So the ingest keeps the
//! text a device sent (`body.rs` reads it raw), checks it against what DynamoDB stores
//! ([`Decimal::parse`]), and writes it in one canonical form; every read parses what
//! the table answers the same way and answers that form. `21.50`, `2.15e1` and `21.5`
//! are one value and one [`Decimal`]: `21.5`.
//!
//! The canonical form is plain decimal notation with no exponent, no leading `+`, no
//! leading or trailing zero that is not needed and no `-` on zero: for every number
//! that is the shortest text of a double, the text `f64`'s `Display` writes, so an item
//! of such readings is byte for byte the item written before numbers were kept.
//! [`Decimal::to_f64`] is the value as a double, for arithmetic (the query's stats).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use serde::de::{self, Deserialize, Deserializer};
use serde::{Serialize, Serializer};

/// Most significant digits DynamoDB stores in a number.
pub const MAX_DIGITS: usize = 38;
/// The largest power of ten below every number DynamoDB stores: magnitudes are below
/// 1E+126.
pub const MAX_EXPONENT: i64 = 125;
/// The smallest power of ten of a non-zero number DynamoDB stores: 1E-130.
pub const MIN_EXPONENT: i64 = -130;

/// A number DynamoDB stores, exactly, in canonical decimal text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Decimal(String);

/// Why a text is not a number DynamoDB stores.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error("must be a finite number")]
    NotANumber,
    #[error("must have at most {MAX_DIGITS} significant digits (what DynamoDB stores), not {0}")]
    TooPrecise(usize),
    #[error("must be 0 or of a magnitude from 1e-130 to below 1e126 (what DynamoDB stores)")]
    OutOfRange,
}

/// The longest canonical text [`Decimal::json_text`] writes as it is.
const PLAIN_JSON_MAX: usize = 21;

/// A number's parts as written: `-`? `int`.`frac` × 10^`exponent`.
struct Parts<'a> {
    negative: bool,
    int: &'a [u8],
    frac: &'a [u8],
    exponent: i64,
}

/// Exponents are read up to this magnitude: any larger one puts a number of a body's
/// length (an SQS body is at most 256 KiB) out of range, or makes a zero.
const EXPONENT_CAP: i64 = 1_000_000_000;

impl Decimal {
    /// Parses decimal text, as JSON writes a number (`-12.50e3`) or DynamoDB answers
    /// one (a leading `+`, or a point with no digit on one side, is taken as well),
    /// into the canonical form; refuses what DynamoDB would not store.
    pub fn parse(text: &str) -> Result<Self, DecimalError> {
        let parts = split(text.as_bytes()).ok_or(DecimalError::NotANumber)?;
        let Some((significant, point)) = parts.significant() else {
            return Ok(Self("0".to_owned()));
        };
        if significant.len() > MAX_DIGITS {
            return Err(DecimalError::TooPrecise(significant.len()));
        }
        if !(MIN_EXPONENT + 1..=MAX_EXPONENT + 1).contains(&point) {
            return Err(DecimalError::OutOfRange);
        }
        if is_canonical(text, &parts) {
            // What most devices send (`21.5`): kept as it is, with no digit copied.
            return Ok(Self(text.to_owned()));
        }
        Ok(Self(render(
            parts.negative,
            &parts.digits(significant),
            point,
        )))
    }

    /// The number closest to `x` as its shortest text, the decimal a device sends for
    /// it; `None` for a double DynamoDB does not store (infinite, NaN, out of range).
    #[must_use]
    pub fn from_f64(x: f64) -> Option<Self> {
        if !x.is_finite() {
            return None;
        }
        Self::parse(&format!("{x:e}")).ok()
    }

    /// The canonical text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical text, moved out.
    #[must_use]
    pub fn into_string(self) -> String {
        self.0
    }

    /// The value as JSON text: the canonical text up to 21 bytes; a longer one is
    /// written with an exponent when that is shorter (`1.5e-120` rather than 121 zeros
    /// and `15`), so that no number takes more than 45 bytes of an answer or a body.
    #[must_use]
    pub fn json_text(&self) -> Cow<'_, str> {
        if self.0.len() <= PLAIN_JSON_MAX {
            return Cow::Borrowed(&self.0);
        }
        let Some(parts) = split(self.0.as_bytes()) else {
            return Cow::Borrowed(&self.0);
        };
        let Some((significant, point)) = parts.significant() else {
            return Cow::Borrowed(&self.0);
        };
        let digits = parts.digits(significant);
        let sign = if self.0.starts_with('-') { "-" } else { "" };
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let (first, rest) = (char::from(first[0]), String::from_utf8_lossy(rest));
        let scientific = format!("{sign}{first}{dot}{rest}e{}", point - 1);
        if scientific.len() < self.0.len() {
            Cow::Owned(scientific)
        } else {
            Cow::Borrowed(&self.0)
        }
    }

    /// The nearest double.
    #[must_use]
    pub fn to_f64(&self) -> f64 {
        // Canonical text always parses.
        self.0.parse().unwrap_or(f64::NAN)
    }

    /// Its size as a DynamoDB number attribute.
    #[must_use]
    pub fn stored_size(&self) -> usize {
        item_size::number_size(&self.0)
    }
}

impl Parts<'_> {
    /// Where the significant digits are (from the first non-zero digit to the last,
    /// as positions in `int` then `frac`) and the value's `point`: it is
    /// 0.`digits` × 10^`point`. `None` for zero.
    fn significant(&self) -> Option<(Range<usize>, i64)> {
        let lead = self.all().position(|d| d != b'0')?;
        let trail = self.all().rev().position(|d| d != b'0').unwrap_or(0);
        let end = self.int.len() + self.frac.len() - trail;
        let int_len = i64::try_from(self.int.len()).unwrap_or(i64::MAX);
        let point = self.exponent + int_len - i64::try_from(lead).unwrap_or(i64::MAX);
        Some((lead..end, point))
    }

    /// The digits at `range` of `int` then `frac`.
    fn digits(&self, range: Range<usize>) -> Vec<u8> {
        self.all().skip(range.start).take(range.len()).collect()
    }

    fn all(&self) -> impl DoubleEndedIterator<Item = u8> + '_ {
        self.int.iter().chain(self.frac).copied()
    }
}

/// Splits number text into its parts; `None` unless it is `[+-]? digits? (. digits?)?
/// ([eE] [+-]? digits)?` with at least one digit before the exponent.
fn split(text: &[u8]) -> Option<Parts<'_>> {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let (negative, rest) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let int_len = digits(rest);
    let (int, mut rest) = rest.split_at(int_len);
    let mut frac: &[u8] = &[];
    if let Some((b'.', after)) = rest.split_first() {
        let n = digits(after);
        frac = &after[..n];
        rest = &after[n..];
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut exponent = 0i64;
    if let Some((b'e' | b'E', after)) = rest.split_first() {
        let (sign, after) = match after.first() {
            Some(b'-') => (-1, &after[1..]),
            Some(b'+') => (1, &after[1..]),
            _ => (1, after),
        };
        let n = digits(after);
        if n == 0 || n != after.len() {
            return None;
        }
        for d in after {
            exponent = (exponent * 10 + i64::from(d - b'0')).min(EXPONENT_CAP);
        }
        exponent *= sign;
        rest = &[];
    }
    if !rest.is_empty() {
        return None;
    }
    Some(Parts {
        negative,
        int,
        frac,
        exponent,
    })
}

/// Whether `text`, of a non-zero value, is already canonical: no exponent or `+`, no
/// leading zero but the one before a point, and a point only before digits that do not
/// end in zero.
fn is_canonical(text: &str, parts: &Parts<'_>) -> bool {
    let plain = !text.bytes().any(|b| matches!(b, b'e' | b'E' | b'+'));
    let int = parts.int.len() == 1 || parts.int.first().is_some_and(|&d| d != b'0');
    let no_point = text.len() == parts.int.len() + usize::from(parts.negative);
    let frac = no_point || parts.frac.last().is_some_and(|&d| d != b'0');
    plain && int && frac
}

/// The plain text of `-`? 0.`digits` × 10^`point` (`digits` non-empty, no leading or
/// trailing zero).
fn render(negative: bool, digits: &[u8], point: i64) -> String {
    let n = digits.len();
    let point_at = usize::try_from(point).ok();
    let zeros_before = usize::try_from(-point).unwrap_or(0);
    let mut out = String::with_capacity(n + zeros_before + 3 + point_at.unwrap_or(0));
    if negative {
        out.push('-');
    }
    let push = |out: &mut String, ds: &[u8]| out.extend(ds.iter().map(|&d| char::from(d)));
    match point_at {
        Some(p) if p >= n => {
            push(&mut out, digits);
            out.extend(std::iter::repeat_n('0', p - n));
        }
        Some(p) if p > 0 => {
            push(&mut out, &digits[..p]);
            out.push('.');
            push(&mut out, &digits[p..]);
        }
        _ => {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', zeros_before));
            push(&mut out, digits);
        }
    }
    out
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Decimal {
    type Err = DecimalError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// A JSON number with its text ([`Decimal::json_text`]): through `serde_json`'s
/// writer, that text itself (a double could not hold it). Into a `serde_json::Value`
/// it becomes a double: write answers with `serde_json::to_string`.
impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.json_text();
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&text).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// From a JSON number, read as its text (not through a double): for clients of the
/// API and the tests that read its answers. Only `serde_json` reads a number raw.
impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        let text = raw.get();
        if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            return Err(de::Error::custom(format!("{text} is not a number")));
        }
        Self::parse(text).map_err(|e| de::Error::custom(format!("{text}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Decimal::parse(text).map_or_else(|e| format!("error: {e}"), Decimal::into_string)
    }

    #[test]
    fn every_spelling_of_a_value_is_one_canonical_text() {
        for (text, want) in [
            ("21.5", "21.5"),
            ("21.50", "21.5"),
            ("2.15e1", "21.5"),
            ("0.0215E+3", "21.5"),
            ("+021.5", "21.5"),
            (".5", "0.5"),
            ("5.", "5"),
            ("-0", "0"),
            ("-0.000e7", "0"),
            ("0e999999999999999999999", "0"),
            ("1e2", "100"),
            ("-1.25e-3", "-0.00125"),
            ("100", "100"),
            ("1e125", &format!("1{}", "0".repeat(125))),
            ("1e-130", &format!("0.{}1", "0".repeat(129))),
        ] {
            assert_eq!(canonical(text), want, "{text}");
        }
    }

    #[test]
    fn what_dynamodb_does_not_store_is_refused_with_its_rule() {
        let digits38 = "1".repeat(38);
        assert_eq!(canonical(&digits38), digits38);
        assert_eq!(
            canonical(&format!("{digits38}000")),
            format!("{digits38}000")
        );
        assert_eq!(
            Decimal::parse(&format!("{digits38}1")),
            Err(DecimalError::TooPrecise(39))
        );
        for text in ["1e126", "-1e126", "1e-131", "9.99e125000"] {
            assert_eq!(
                Decimal::parse(text),
                Err(DecimalError::OutOfRange),
                "{text}"
            );
        }
        let nines = format!("9.{}e125", "9".repeat(37));
        assert!(Decimal::parse(&nines).is_ok());
        for text in [
            "", "-", ".", "e5", "1e", "1e+", "1.2.3", "0x10", "1 ", "NaN", "inf",
        ] {
            assert_eq!(
                Decimal::parse(text),
                Err(DecimalError::NotANumber),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_doubles_shortest_text_is_what_display_writes() {
        for x in [
            21.5,
            0.1,
            0.3 + 0.6,
            -1e-7,
            1e21,
            123_456_789.0,
            f64::MAX / 1e200,
            5e-324 * 1e200,
        ] {
            let d = Decimal::from_f64(x).expect("stored");
            assert_eq!(d.as_str(), x.to_string());
            assert_eq!(d.to_f64().to_bits(), x.to_bits());
        }
        assert_eq!(Decimal::from_f64(f64::NAN), None);
        assert_eq!(Decimal::from_f64(1e300), None);
    }

    #[test]
    fn json_text_takes_an_exponent_where_it_is_shorter() {
        for (text, want) in [
            ("21.5", "21.5"),
            ("0", "0"),
            ("-0.00125", "-0.00125"),
            ("1e6", "1000000"),
            ("1e20", "100000000000000000000"),
            ("1e21", "1e21"),
            ("-1.5e-7", "-0.00000015"),
            ("-1.5e-20", "-1.5e-20"),
            ("123456789e20", "1.23456789e28"),
            ("1e-130", "1e-130"),
        ] {
            let d = Decimal::parse(text).expect("a number");
            assert_eq!(d.json_text(), want, "{text}");
            assert_eq!(Decimal::parse(&d.json_text()), Ok(d));
        }
        let longest = format!("-9.{}e-120", "9".repeat(37));
        let d = Decimal::parse(&longest).expect("a number");
        assert_eq!(d.json_text(), longest);
        assert_eq!(longest.len(), 45);
    }

    #[test]
    fn json_carries_the_text_both_ways() {
        let d = Decimal::parse("0.1000000000000000055511151231257827").expect("a number");
        let json = serde_json::to_string(&d).expect("serializes");
        assert_eq!(json, "0.1000000000000000055511151231257827");
        let back: Decimal = serde_json::from_str(" 1.000e-1 ").expect("reads");
        assert_eq!(back.as_str(), "0.1");
        assert!(serde_json::from_str::<Decimal>("\"1\"").is_err());
    }
}
