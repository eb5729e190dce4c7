//! The query API's router and parameter parser on arbitrary paths and query strings:
//! every input is routed or refused with a 4xx, never a panic or a 5xx.

#![no_main]

use libfuzzer_sys::fuzz_target;
use query::{Limits, parse_request};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // "PATH\nQUERY"; without a newline the whole input is the query of a device read.
    let (path, query) = match text.split_once('\n') {
        Some((path, query)) => (path, query),
        None => ("/devices/dev-1/readings", text),
    };
    let limits = Limits::default();
    for query in [Some(query), None] {
        if let Err(e) = parse_request("GET", path, query, &limits) {
            assert!(e.status.is_client_error(), "{} for {path:?} {query:?}", e.status);
        }
    }
});
