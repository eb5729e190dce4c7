//! Scenario 19: the query-string parser and the cursor decoder never panic, whatever
//! they are given.

use proptest::prelude::*;
use query::cursor::{Binding, decode_cursor, encode_cursor};
use query::model::ReadingKey;
use query::params::{Limits, parse_request};

use crate::common::{keys, now};

fn binding() -> Binding {
    Binding {
        route: "all_readings",
        device: None,
        from_ms: 0,
        to_ms: i64::MAX,
        descending: true,
        limit: 1000,
        detail: String::new(),
        scope: None,
    }
}

fn query_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z]{0,8}=[ -~]{0,30}",
        Just("from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z".to_string()),
        "(from|to|limit|order|cursor|consistent|ts|interval|metric|interval_ms|agg)=[%0-9A-Za-z:+.\\-]{0,30}",
        "%[0-9A-Fa-f]{0,2}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_request_never_panics(
        path in prop_oneof![
            any::<String>(),
            "/devices/[ -~]{0,20}/(readings|stats|shards|latest|series)(/[ -~]{0,10})?",
            Just("/readings".to_string()),
            Just("/series".to_string()),
        ],
        pieces in proptest::collection::vec(query_piece(), 0..6),
        method in prop_oneof![Just("GET"), Just("POST"), Just("")],
    ) {
        let query = pieces.join("&");
        let _ = parse_request(method, &path, Some(&query), &Limits::default());
    }

    #[test]
    fn decode_cursor_never_panics(raw in prop_oneof![
        any::<String>(),
        "[A-Za-z0-9_\\-]{0,200}\\.[A-Za-z0-9_\\-]{0,60}",
    ]) {
        let _ = decode_cursor(&raw, &binding(), &keys(), now());
    }

    #[test]
    fn decode_cursor_refuses_every_mutation(
        ts in 0i64..1_000_000_000_000,
        event in "[a-z0-9]{1,20}",
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let pos = ReadingKey { ts_ms: ts, device_id: "d".into(), event_id: event };
        let c = encode_cursor(&pos, &binding(), &keys(), now());
        prop_assert_eq!(decode_cursor(&c, &binding(), &keys(), now()), Ok(pos));
        let mut bytes = c.into_bytes();
        let i = at.index(bytes.len());
        prop_assume!(bytes[i] != byte);
        bytes[i] = byte;
        if let Ok(s) = String::from_utf8(bytes) {
            // Padding-free base64 with non-canonical trailing bits is refused too, so
            // no change at all opens.
            prop_assert!(decode_cursor(&s, &binding(), &keys(), now()).is_err());
        }
    }
}
