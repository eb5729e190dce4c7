//! A metric's number is kept exactly (`store::decimal`): any decimal text, as JSON
//! writes it or DynamoDB answers it, is parsed to the value it spells, checked against
//! an independent decimal implementation (`bigdecimal`), refused exactly where DynamoDB
//! refuses it, and comes back the same from its canonical text.

use std::str::FromStr;

use bigdecimal::{BigDecimal, Zero};
use proptest::prelude::*;
use store::decimal::{Decimal, DecimalError, MAX_DIGITS, MAX_EXPONENT, MIN_EXPONENT};

/// Decimal text of every spelling: a sign, digits with leading and trailing zeros, a
/// point anywhere (or none), an exponent in either case with or without a sign; from
/// a few significant digits to more than DynamoDB keeps, from far below its range to
/// far above it. Also the shortest texts of doubles, what most devices send.
pub fn decimal_text() -> impl Strategy<Value = String> {
    let spelled = (
        prop_oneof![Just(""), Just("-"), Just("+")],
        "0{0,3}",
        "[1-9][0-9]{0,44}",
        "0{0,4}",
        any::<prop::sample::Index>(),
        prop_oneof![
            2 => Just(String::new()),
            3 => ("[eE]", prop_oneof![Just(""), Just("+"), Just("-")], 0i32..=140)
                .prop_map(|(e, sign, n)| format!("{e}{sign}{n}")),
        ],
    )
        .prop_map(|(sign, lead, digits, trail, point, exponent)| {
            let body = format!("{lead}{digits}{trail}");
            let at = point.index(body.len() + 1);
            let (int, frac) = body.split_at(at);
            let mantissa = if at == body.len() {
                body.clone()
            } else {
                format!("{int}.{frac}")
            };
            format!("{sign}{mantissa}{exponent}")
        });
    prop_oneof![
        4 => spelled,
        1 => any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(|x| format!("{x:e}")),
        1 => any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(|x| x.to_string()),
        1 => Just("0".to_owned()),
        1 => Just("-0.000".to_owned()),
    ]
}

/// What DynamoDB makes of `value`: stored, or refused for its digits or its range.
fn dynamodb_rule(value: &BigDecimal) -> Result<(), DecimalError> {
    if value.is_zero() {
        return Ok(());
    }
    let normalized = value.normalized();
    let digits = usize::try_from(normalized.digits()).expect("digits fit");
    if digits > MAX_DIGITS {
        return Err(DecimalError::TooPrecise(digits));
    }
    let (_, scale) = normalized.as_bigint_and_exponent();
    // The power of ten of the leading digit.
    let leading = i64::try_from(digits).expect("digits fit") - 1 - scale;
    if !(MIN_EXPONENT..=MAX_EXPONENT).contains(&leading) {
        return Err(DecimalError::OutOfRange);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_decimal_is_the_value_its_text_spells_or_refused_as_dynamodb_refuses_it(
        text in decimal_text(),
    ) {
        let value = BigDecimal::from_str(text.trim_start_matches('+')).expect("the oracle reads it");
        match (Decimal::parse(&text), dynamodb_rule(&value)) {
            (Ok(d), Ok(())) => {
                let canonical = BigDecimal::from_str(d.as_str()).expect("canonical text is a decimal");
                prop_assert_eq!(&canonical, &value, "{} became {}", text, d);
                // One text per value: the oracle's plain form of it.
                prop_assert_eq!(d.as_str(), value.normalized().to_plain_string(), "{}", text);
                // The canonical text is JSON's number grammar, with no exponent.
                prop_assert!(serde_json::from_str::<serde_json::Value>(d.as_str()).is_ok(), "{}", d);
                prop_assert!(!d.as_str().contains(['e', 'E', '+']), "{}", d);
                // Parsing it again changes nothing; the size is DynamoDB's by the digits.
                prop_assert_eq!(Decimal::parse(d.as_str()), Ok(d.clone()));
                // Its JSON text (an exponent where shorter) is the same value, in 45 bytes.
                prop_assert_eq!(Decimal::parse(&d.json_text()), Ok(d.clone()));
                prop_assert!(d.json_text().len() <= 45, "{}", d.json_text());
                let digits = usize::try_from(value.normalized().digits()).expect("fits");
                prop_assert_eq!(d.stored_size(), digits.div_ceil(2) + 1);
            }
            (Err(got), Err(want)) => prop_assert_eq!(got, want, "{}", text),
            (got, want) => prop_assert!(false, "{}: parsed {:?}, DynamoDB's rule {:?}", text, got, want),
        }
    }

    /// A double's shortest text (what serde_json, JavaScript and Python print) is
    /// kept as the text `Display` writes, and reads back to the same bits.
    #[test]
    fn a_double_sent_is_the_double_read(x in any::<f64>()) {
        let Some(d) = Decimal::from_f64(x) else {
            let refused = !x.is_finite()
                || dynamodb_rule(&BigDecimal::from_str(&format!("{x:e}")).expect("a decimal")).is_err();
            prop_assert!(refused, "{:e} refused", x);
            return Ok(());
        };
        // Zero has no sign in DynamoDB.
        let (display, bits) = if x == 0.0 { ("0".to_owned(), 0) } else { (x.to_string(), x.to_bits()) };
        prop_assert_eq!(d.as_str(), display);
        prop_assert_eq!(d.to_f64().to_bits(), bits);
    }
}
