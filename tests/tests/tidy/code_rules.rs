//! Three rules of the shipped code (the crates the functions and `shardline` are built
//! from) that ARCHITECTURE.md states and a check can hold:
//! - **one item model**: no source outside [`ATTRIBUTE_MAPS`] builds or reads
//!   DynamoDB attribute values by hand; items go through `serde_dynamo` or one of the
//!   named encoders there, each with why;
//! - **the mains only build**: each function's `main` is at most [`MAIN_MAX_LINES`]
//!   lines (configuration, tracing, clients, the handler's wiring; what it runs lives in
//!   the library, where tests reach it);
//! - **an outcome is named**: no shipped function returns `Result<bool, _>`, whose
//!   `false` a caller must remember the meaning of (written? the deadline came?);
//!   an enum names each outcome. One exception, by name: a parser of a boolean, a
//!   function whose name starts with `parse_` and whose signature (from its `fn` to
//!   its body's `{`) holds the `Result<bool, _>`: its `bool` is the value parsed, not
//!   an outcome.
//!
//! Each is a pure function over a [`Repo`], run on made-up sources by the tests below.

use super::{Repo, counted_lines, report, workspace};

/// The crates whose code is deployed or installed: the three functions, `shardline`,
/// and the libraries they are built from.
const SHIPPED: &[&str] = &[
    "sharding",
    "store",
    "ingest",
    "query",
    "sealer",
    "shardline",
];

/// The sources that may build or read `AttributeValue`s by hand, and why.
const ATTRIBUTE_MAPS: &[(&str, &str)] = &[
    (
        "crates/store/src/item.rs",
        "a reading's item on the ingest's hot path (`ReadingItem::marshal`), held equal to \
         serde_dynamo's output by a property test",
    ),
    (
        "crates/store/src/block.rs",
        "a block's item, the typed encoder of the block format (docs/formats.md), held to \
         its test vectors",
    ),
    (
        "crates/store/src/slab.rs",
        "a slab's or run's item, the encoder and decoder of the slab format (docs/formats.md), \
         held to its test vector and to its size bounds by property tests",
    ),
    (
        "crates/store/src/pack.rs",
        "a packed write's key written into its encoded item",
    ),
    (
        "crates/store/src/rollup/stored.rs",
        "a derived item's row: its key, version, expiry and JSON body (or chunk), one \
         function each way for the adapter and the fake, held to dynalite",
    ),
    (
        "crates/store/src/rollup/dynamo.rs",
        "the rollups adapter's keys and condition values",
    ),
    (
        "crates/store/src/dynamo.rs",
        "the adapters' keys, condition and update values (no item is built here)",
    ),
    ("crates/store/src/read.rs", "a Query's key condition values"),
    (
        "crates/store/src/scan.rs",
        "the audit's scan: the key, timestamp and members read from each item it meets",
    ),
    (
        "crates/store/src/size.rs",
        "DynamoDB's size rule, over every kind of value",
    ),
    (
        "crates/store/src/batch/put.rs",
        "the writer reads a key back from an item DynamoDB returned unprocessed",
    ),
    (
        "crates/store/src/batch/chunk.rs",
        "the writer reads the write order back from an item it sends",
    ),
    (
        "crates/store/src/memory.rs",
        "the in-memory fake of the tables answers as DynamoDB does",
    ),
];

/// The most lines a function's `main` source may have, tests aside.
const MAIN_MAX_LINES: usize = 60;

/// The constructors and patterns of DynamoDB's attribute values.
const ATTRIBUTE_VALUES: &[&str] = &[
    "AttributeValue::S(",
    "AttributeValue::N(",
    "AttributeValue::B(",
    "AttributeValue::M(",
    "AttributeValue::L(",
    "AttributeValue::Bool(",
    "AttributeValue::Null(",
    "AttributeValue::Ss(",
    "AttributeValue::Ns(",
    "AttributeValue::Bs(",
];

/// A shipped crate's source, not a test of it.
fn shipped_source(path: &str) -> bool {
    SHIPPED.iter().any(|krate| {
        path.strip_prefix("crates/")
            .and_then(|p| p.strip_prefix(krate))
            .and_then(|p| p.strip_prefix("/src/"))
            .is_some()
    }) && path.ends_with(".rs")
}

/// The lines of `text` outside its test modules, with their numbers.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    counted_lines(text)
        .into_iter()
        .filter_map(move |n| Some((n, *lines.get(n - 1)?)))
}

/// Shipped sources that build or read attribute values by hand outside
/// [`ATTRIBUTE_MAPS`], and exceptions that no longer need to be.
pub(crate) fn check_attribute_maps(repo: &Repo) -> Vec<String> {
    let mut failures = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for (path, text) in repo.texts().filter(|(path, _)| shipped_source(path)) {
        let Some((line, _)) = code_lines(text).find(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            ATTRIBUTE_VALUES.iter().any(|v| code.contains(v))
        }) else {
            continue;
        };
        if ATTRIBUTE_MAPS.iter().any(|(p, _)| *p == path) {
            used.insert(path.to_owned());
        } else {
            failures.push(format!(
                "{path}:{line}: builds or reads a DynamoDB attribute value by hand: go through \
                 serde_dynamo (`serde_dynamo::to_item`/`from_item`) or a port of `store`, or \
                 name this file in ATTRIBUTE_MAPS ({}) with why",
                file!()
            ));
        }
    }
    for (path, _) in ATTRIBUTE_MAPS {
        if repo.texts().any(|(p, _)| p == *path) && !used.contains(*path) {
            failures.push(format!(
                "{path}: named in ATTRIBUTE_MAPS but builds no attribute value by hand: \
                 take it off the list"
            ));
        }
    }
    failures
}

/// Whether a path is a function's or a binary's `main` source.
fn is_main(path: &str) -> bool {
    shipped_source(path) && (path.ends_with("/src/main.rs") || path.contains("/src/bin/"))
}

/// Mains of the shipped crates longer than [`MAIN_MAX_LINES`].
pub(crate) fn check_mains_only_build(repo: &Repo) -> Vec<String> {
    repo.texts()
        .filter(|(path, _)| is_main(path))
        .filter_map(|(path, text)| {
            let lines = counted_lines(text).len();
            (lines > MAIN_MAX_LINES).then(|| {
                format!(
                    "{path}: {lines} lines, over the {MAIN_MAX_LINES} a main may have: a main \
                     builds configuration, tracing, clients and the handler, and what it runs \
                     belongs in the library"
                )
            })
        })
        .collect()
}

/// The name of the function whose signature `code` continues, if any: `signature`
/// holds the name of a function whose `fn` was met and whose body's `{` was not yet.
/// Returns the part of `code` that is signature, with that name.
fn signature_part<'a>(signature: &mut Option<String>, code: &'a str) -> Option<(String, &'a str)> {
    let (name, rest) = match code.find("fn ") {
        Some(at)
            if code[..at]
                .chars()
                .last()
                .is_none_or(|c| !c.is_alphanumeric() && c != '_') =>
        {
            let rest = &code[at + 3..];
            let end = rest
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .unwrap_or(rest.len());
            (rest[..end].to_owned(), &rest[end..])
        }
        _ => (signature.clone()?, code),
    };
    match rest.find(['{', ';']) {
        Some(end) => {
            *signature = None;
            Some((name, &rest[..end]))
        }
        None => {
            *signature = Some(name.clone());
            Some((name, rest))
        }
    }
}

/// Whether `code` names `Result<bool, _>` (whitespace aside).
fn names_result_bool(code: &str) -> bool {
    let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    squeezed.contains("Result<bool>") || squeezed.contains("Result<bool,")
}

/// Shipped functions returning `Result<bool, _>`, a `parse_` function's signature
/// aside (its `bool` is the value parsed).
pub(crate) fn check_no_result_bool(repo: &Repo) -> Vec<String> {
    let mut failures = Vec::new();
    for (path, text) in repo.texts().filter(|(path, _)| shipped_source(path)) {
        let mut signature = None;
        for (n, line) in code_lines(text) {
            let code = line.split("//").next().unwrap_or_default();
            let parser = signature_part(&mut signature, code)
                .is_some_and(|(name, part)| name.starts_with("parse_") && names_result_bool(part));
            if names_result_bool(code) && !parser {
                failures.push(format!(
                    "{path}:{n}: returns Result<bool, _>: name the outcomes with an enum, so a \
                     caller cannot read `false` as the wrong one"
                ));
            }
        }
    }
    failures
}

#[test]
fn items_go_through_serde_dynamo_or_a_named_encoder() {
    report(
        "hand-built attribute values",
        &check_attribute_maps(&workspace()),
    );
}

#[test]
fn mains_only_build() {
    report("mains", &check_mains_only_build(&workspace()));
}

#[test]
fn no_shipped_function_returns_result_bool() {
    report(
        "Result<bool> in shipped code",
        &check_no_result_bool(&workspace()),
    );
}

#[test]
fn a_hand_built_attribute_value_outside_the_list_fails() {
    let repo = Repo::from_files(&[
        (
            "crates/query/src/service/latest.rs",
            "fn key() -> AttributeValue {\n    AttributeValue::S(pk)\n}\n",
        ),
        // Tests may build what they like.
        (
            "crates/sealer/src/hours.rs",
            "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() { AttributeValue::N(n); }\n}\n",
        ),
        // A harness crate is not shipped.
        (
            "crates/bench/src/query.rs",
            "fn k() { AttributeValue::S(pk); }\n",
        ),
        (
            "crates/store/src/read.rs",
            "fn k() { AttributeValue::S(pk); }\n",
        ),
        // A listed file that no longer builds one.
        ("crates/store/src/size.rs", "fn size() {}\n"),
    ]);
    let failures = check_attribute_maps(&repo);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(failures[0].starts_with("crates/query/src/service/latest.rs:2: builds"));
    assert!(failures[1].starts_with("crates/store/src/size.rs: named in ATTRIBUTE_MAPS"));
}

#[test]
fn a_long_main_fails() {
    let long = "fn a() {}\n".repeat(MAIN_MAX_LINES + 1);
    let short = "fn a() {}\n".repeat(MAIN_MAX_LINES);
    let repo = Repo::from_files(&[
        ("crates/sealer/src/bin/sealer.rs", long.as_str()),
        ("crates/ingest/src/main.rs", short.as_str()),
        ("crates/ingest/src/handler/mod.rs", long.as_str()),
        ("crates/bench/src/main.rs", long.as_str()),
    ]);
    let failures = check_mains_only_build(&repo);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(failures[0].starts_with("crates/sealer/src/bin/sealer.rs: 61 lines"));
}

#[test]
fn a_shipped_result_bool_fails() {
    let repo = Repo::from_files(&[
        (
            "crates/store/src/dynamo.rs",
            "async fn put(&self) -> Result<bool, StoreError> {\n}\nfn f() -> anyhow::Result< bool > {}\n// Result<bool> in a comment\n",
        ),
        (
            "crates/sealer/src/hours.rs",
            "#[cfg(test)]\nmod tests {\n    fn t() -> Result<bool, E> {}\n}\n",
        ),
        (
            "crates/stand-in/src/provision.rs",
            "fn f() -> Result<bool> {}\n",
        ),
        // A parser of a boolean may: its signature, on one line or several. Not its
        // body, nor a function of another name over several lines.
        (
            "crates/query/src/params.rs",
            "fn parse_bool(raw: &str) -> Result<bool, ApiError> {\n    let r: Result<bool, E> = f();\n}\npub(crate) fn parse_flag(\n    raw: &str,\n) -> Result<bool, ApiError> {\n}\nasync fn applied(\n    item: &Item,\n) -> Result<bool, StoreError> {\n}\n",
        ),
    ]);
    let failures = check_no_result_bool(&repo);
    assert_eq!(failures.len(), 4, "{failures:#?}");
    assert!(failures[0].starts_with("crates/query/src/params.rs:2:"));
    assert!(failures[1].starts_with("crates/query/src/params.rs:10:"));
    assert!(failures[2].starts_with("crates/store/src/dynamo.rs:1:"));
    assert!(failures[3].starts_with("crates/store/src/dynamo.rs:3:"));
}
