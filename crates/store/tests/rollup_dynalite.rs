//! Scenarios 39 to 41, the adapter's side: `store::rollup::dynamo::DynamoRollups` on
//! dynalite (a second implementation of DynamoDB on loopback, whose conditional writes
//! are atomic as DynamoDB's are; moto's are not), the rollups table created from
//! template.yaml's `RollupTable`. Each write answers as the in-memory fake
//! (`store::memory::MemoryRollups`) does, Queries page as it pages (DynamoDB's own 1 MB
//! pages included), bodies keep their decimals to the last digit, and conditional
//! writes at once leave what their conditions allow.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use bigdecimal::BigDecimal;
use stand_in::{Backend, Dynalite, ensure_dynalite, provision_tables, repo_root};
use store::memory::MemoryRollups;
use store::rollup::dynamo::DynamoRollups;
use store::rollup::stored::CHUNK_BYTES;
use store::rollup::{
    DeviceHour, FleetPart, RollupItem, RollupKey, RollupQuery, RollupTable, decimal_text,
    late_mark, query_all,
};
use store::{Decimal, Written};

/// The rollups table on a dynalite started for one test.
struct OnDynalite {
    /// Dropping it stops the server.
    server: Dynalite,
    client: Client,
    table: String,
    rollups: DynamoRollups,
}

impl OnDynalite {
    async fn start(prefix: &str) -> anyhow::Result<Self> {
        let root = repo_root()?;
        let server = Dynalite::start(&ensure_dynalite(&root)?)?;
        let tables = provision_tables(
            &server.endpoint(),
            &root.join("template.yaml"),
            prefix,
            Backend::Dynalite,
        )
        .await?;
        let client = Client::new(&stand_in::sdk_config(&server.endpoint()).await);
        let table = tables.name("RollupTable")?.to_owned();
        let rollups = DynamoRollups::new(client.clone(), &table);
        Ok(Self {
            server,
            client,
            table,
            rollups,
        })
    }

    /// An adapter over the same table through a client of its own (its own
    /// connections), as another Lambda's.
    async fn another_adapter(&self) -> DynamoRollups {
        let client = Client::new(&stand_in::sdk_config(&self.server.endpoint()).await);
        DynamoRollups::new(client, &self.table)
    }

    /// The stored attributes of `(pk, sk)`, as DynamoDB holds them.
    async fn raw(&self, pk: &str, sk: &str) -> anyhow::Result<HashMap<String, AttributeValue>> {
        Ok(self
            .client
            .get_item()
            .table_name(&self.table)
            .key("PK", AttributeValue::S(pk.to_owned()))
            .key("SK", AttributeValue::S(sk.to_owned()))
            .consistent_read(true)
            .send()
            .await?
            .item
            .unwrap_or_default())
    }

    /// Every item of the table, read by a Scan (each decoded here, not by the adapter).
    async fn scan(&self) -> anyhow::Result<BTreeMap<RollupKey, RollupItem>> {
        let mut out = BTreeMap::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            for item in page.items.unwrap_or_default() {
                let item = decode(&item)?;
                out.insert(item.key(), item);
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }
}

/// A stored item read by its attributes' documented types: `PK`, `SK`, `body` (S),
/// `version`, `ttl` (N).
fn decode(item: &HashMap<String, AttributeValue>) -> anyhow::Result<RollupItem> {
    let s = |name: &str| -> anyhow::Result<Option<String>> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
            Some(other) => anyhow::bail!("{name} is not S: {other:?}"),
        }
    };
    let n = |name: &str| -> anyhow::Result<Option<String>> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => Ok(Some(v.clone())),
            Some(other) => anyhow::bail!("{name} is not N: {other:?}"),
        }
    };
    let required =
        |v: Option<String>, name: &str| v.ok_or_else(|| anyhow::anyhow!("no {name} in {item:?}"));
    Ok(RollupItem {
        pk: required(s("PK")?, "PK")?,
        sk: required(s("SK")?, "SK")?,
        version: required(n("version")?, "version")?.parse()?,
        body: s("body")?.unwrap_or_default(),
        ttl: n("ttl")?.map(|t| t.parse()).transpose()?,
    })
}

fn item(pk: &str, sk: &str, version: u64, body: &str) -> RollupItem {
    RollupItem {
        pk: pk.to_owned(),
        sk: sk.to_owned(),
        version,
        body: body.to_owned(),
        ttl: Some(1_790_000_000),
    }
}

/// One write, as both tables are given it.
#[derive(Debug, Clone)]
enum Op {
    Newer(RollupItem),
    IfVersion(RollupItem, Option<u64>),
    Delete(&'static str, &'static str, u64),
    Put(RollupItem),
}

async fn apply<T: RollupTable>(table: &T, op: &Op) -> anyhow::Result<Option<Written>> {
    Ok(match op {
        Op::Newer(item) => Some(table.put_if_newer(item).await?),
        Op::IfVersion(item, expected) => Some(table.put_if_version(item, *expected).await?),
        Op::Delete(pk, sk, version) => Some(table.delete_if(pk, sk, *version).await?),
        Op::Put(item) => {
            table.put(item).await?;
            None
        }
    })
}

/// Bodies over a chunk's bytes, stored in chunks: read back whole by get and by Query.
fn long_items() -> Vec<RollupItem> {
    [
        ("site-c-long", CHUNK_BYTES),
        ("site-c-longer", 3 * CHUNK_BYTES),
    ]
    .into_iter()
    .map(|(sk, n)| item("dir", sk, 5, &format!("{{\"v\":\"{}\"}}", "y".repeat(n))))
    .collect()
}

/// The long bodies of the query test, read back whole by get on both, from chunks.
async fn long_bodies_read_back(db: &OnDynalite, fake: &MemoryRollups) -> anyhow::Result<()> {
    for sk in ["site-c-long", "site-c-longer"] {
        let got = db.rollups.get("dir", sk, true).await?;
        assert!(
            got.as_ref().is_some_and(|i| i.body.len() > CHUNK_BYTES),
            "{sk}"
        );
        assert_eq!(got, fake.get("dir", sk, true).await?, "{sk}");
        // Its head and each chunk within DynamoDB's limit: dynalite took them.
        assert!(
            !db.raw("dir", sk).await?.contains_key("body"),
            "{sk}: in chunks"
        );
    }
    Ok(())
}

/// Every conditional write answers on dynalite as the fake answers, and leaves the same
/// items: `put_if_newer` writes over no item or a smaller version (compared as numbers:
/// 10 is newer than 9) and refuses an equal or larger one; `put_if_version` writes over
/// no item (`None`) or the exact version read (`Some`), and nothing else, a missing item
/// included; `delete_if` deletes the exact version only; `put` writes whatever is
/// stored (a late mark, whose nonce may be any `u64`). An empty body and a missing
/// expiry are stored as no attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_on_dynalite_write_only_under_their_conditions_as_the_fake_does()
-> anyhow::Result<()> {
    use Written::{Applied, Refused};
    let db = OnDynalite::start("rollup-conditions").await?;
    let fake = MemoryRollups::new();
    let (pk, sk) = ("dh#1782090000000#3", "d-1");
    let ops: Vec<(Op, Option<Written>)> = vec![
        // put_if_newer: absent, then equal, smaller, larger (numerically) versions.
        (Op::Newer(item(pk, sk, 9, "{\"v\":9}")), Some(Applied)),
        (
            Op::Newer(item(pk, sk, 9, "{\"v\":\"other 9\"}")),
            Some(Refused),
        ),
        (Op::Newer(item(pk, sk, 2, "{\"v\":2}")), Some(Refused)),
        (Op::Newer(item(pk, sk, 10, "{\"v\":10}")), Some(Applied)),
        (Op::Newer(item(pk, sk, 9, "{\"v\":9}")), Some(Refused)),
        // put_if_version: None over an item, a wrong version, the right one.
        (Op::IfVersion(item(pk, sk, 11, "{}"), None), Some(Refused)),
        (
            Op::IfVersion(item(pk, sk, 11, "{}"), Some(9)),
            Some(Refused),
        ),
        (
            Op::IfVersion(item(pk, sk, 11, "{\"v\":11}"), Some(10)),
            Some(Applied),
        ),
        // ... and over no item: only None writes.
        (
            Op::IfVersion(item("dir", "d-1", 1, "{}"), Some(0)),
            Some(Refused),
        ),
        (
            Op::IfVersion(item("dir", "d-1", 1, "{}"), Some(1)),
            Some(Refused),
        ),
        (
            Op::IfVersion(item("dir", "d-1", 1, "{\"a\":1}"), None),
            Some(Applied),
        ),
        (
            Op::IfVersion(item("dir", "d-1", 2, "{\"a\":2}"), None),
            Some(Refused),
        ),
        (
            Op::IfVersion(item("dir", "d-1", 2, "{\"a\":2}"), Some(1)),
            Some(Applied),
        ),
        // delete_if: a wrong version, the right one, then nothing left to delete.
        (Op::Delete("dir", "d-1", 1), Some(Refused)),
        (Op::Delete("dir", "d-1", 3), Some(Refused)),
        (Op::Delete("dir", "d-1", 2), Some(Applied)),
        (Op::Delete("dir", "d-1", 2), Some(Refused)),
        (Op::Delete("dir", "never", 0), Some(Refused)),
        // put: whatever is stored, the largest u64 nonce included; then a smaller one.
        (Op::Put(late_mark("d-1", 1_782_090_000_000, u64::MAX)), None),
        (
            Op::Newer(late_mark("d-1", 1_782_090_000_000, u64::MAX - 1)),
            Some(Refused),
        ),
        (Op::Put(late_mark("d-1", 1_782_090_000_000, 7)), None),
        (Op::Put(late_mark("d-2", 1_782_090_000_000, u64::MAX)), None),
        (Op::Delete("late#09", "never", u64::MAX), Some(Refused)),
        // An item without body or expiry.
        (
            Op::Newer(RollupItem {
                ttl: None,
                ..item("seal", "state", 1_782_093_600_000, "")
            }),
            Some(Applied),
        ),
    ];
    for (i, (op, want)) in ops.iter().enumerate() {
        let on_dynalite = apply(&db.rollups, op).await?;
        let on_fake = apply(&fake, op).await?;
        assert_eq!(on_dynalite, *want, "step {i} on dynalite: {op:?}");
        assert_eq!(on_fake, *want, "step {i} on the fake: {op:?}");
        assert_eq!(db.scan().await?, fake.items(), "after step {i}: {op:?}");
    }
    // Read back through the adapter, each as stored.
    for (key, stored) in fake.items() {
        let got = db.rollups.get(&key.pk, &key.sk, true).await?;
        assert_eq!(got.as_ref(), Some(&stored), "{key:?}");
        assert_eq!(db.rollups.get(&key.pk, &key.sk, false).await?, got);
    }
    assert_eq!(db.rollups.get("dir", "d-1", true).await?, None);
    let RollupKey {
        pk: mark_pk,
        sk: mark_sk,
        ..
    } = store::rollup::keys::late_mark("d-2", 1_782_090_000_000);
    let mark = db.rollups.get(&mark_pk, &mark_sk, true).await?;
    assert_eq!(mark.map(|m| m.version), Some(u64::MAX));
    let raw = db.raw("seal", "state").await?;
    assert!(
        !raw.contains_key("body") && !raw.contains_key("ttl"),
        "{raw:?}"
    );
    let raw = db.raw(pk, sk).await?;
    assert_eq!(
        raw.get("version"),
        Some(&AttributeValue::N("11".to_owned()))
    );
    assert_eq!(
        raw.get("ttl"),
        Some(&AttributeValue::N("1790000000".to_owned()))
    );
    Ok(())
}

/// The Queries, page by page, answer the fake's items: a partition in either order,
/// pages of `limit` continued after their `last_sk`, inclusive `sk_between` bounds, an
/// `sk_prefix`, each with `after` inside the range, and neighbouring partitions left
/// out. A partition of 2.4 MB comes in DynamoDB's own pages of at most 1 MB, each
/// continued after its `last_sk` to every item, in order, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_on_dynalite_query_pages_as_the_fake_and_across_dynamodbs_own_pages()
-> anyhow::Result<()> {
    let db = OnDynalite::start("rollup-queries").await?;
    let fake = MemoryRollups::new();
    let mut items = Vec::new();
    for i in 0..30 {
        items.push(item("dir", &format!("site-a-{i:02}"), 1, "{}"));
        items.push(item("dir", &format!("site-b-{i:02}"), 2, "{}"));
    }
    items.push(item("dir", "site-", 3, "{}"));
    items.push(item("dir", "x", 3, "{}"));
    items.push(item("dir2", "site-a-05", 4, "{}"));
    items.push(item("di", "site-a-05", 4, "{}"));
    items.extend(long_items());
    for item in &items {
        assert_eq!(db.rollups.put_if_newer(item).await?, Written::Applied);
        assert_eq!(fake.put_if_newer(item).await?, Written::Applied);
    }
    let between = |lo: &str, hi: &str| Some((lo.to_owned(), hi.to_owned()));
    let mut queries = Vec::new();
    for ascending in [true, false] {
        for limit in [None, Some(1), Some(7), Some(62), Some(100)] {
            for (sk_between, sk_prefix, after) in [
                (None, None, None),
                (None, None, Some("site-a-17")),
                (between("site-a-05", "site-b-03"), None, None),
                (between("site-a-05", "site-b-03"), None, Some("site-a-29")),
                (between("site-a-05", "site-a-05"), None, None),
                (between("y", "z"), None, None),
                (None, Some("site-b-"), None),
                (None, Some("site-b-"), Some("site-b-11")),
                (None, Some("site-"), None),
                (None, Some("site-b-1"), None),
                (None, Some("nothing"), None),
                // A range and a prefix: the adapter sends the range alone, and the
                // fake answers as it does.
                (between("site-a-05", "site-b-03"), Some("site-b-"), None),
                (between("site-c", "site-d"), Some("site-a"), None),
            ] {
                queries.push(RollupQuery {
                    pk: "dir".to_owned(),
                    sk_between: sk_between.clone(),
                    sk_prefix: sk_prefix.map(str::to_owned),
                    after: after.map(str::to_owned),
                    limit,
                    ascending,
                    consistent: true,
                });
            }
        }
    }
    queries.push(RollupQuery::partition("dir2", false));
    queries.push(RollupQuery::partition("nowhere", true));
    for q in &queries {
        let want = query_all(&fake, q.clone()).await?;
        let mut got = Vec::new();
        let mut next = q.clone();
        for pages in 1.. {
            assert!(pages <= 100, "{q:?}: the pages never end");
            let page = db.rollups.query(&next).await?;
            if let Some(limit) = q.limit {
                assert!(page.items.len() <= limit as usize, "{q:?}");
            }
            assert_eq!(page.evaluated, page.items.len() as u64, "{q:?}");
            if let Some(last) = &page.last_sk {
                assert_eq!(page.items.last().map(|i| &i.sk), Some(last), "{q:?}");
            }
            got.extend(page.items);
            match page.last_sk {
                Some(last) => next.after = Some(last),
                None => break,
            }
        }
        assert_eq!(got, want, "{q:?}");
        assert_eq!(query_all(&db.rollups, q.clone()).await?, want, "{q:?}");
    }
    long_bodies_read_back(&db, &fake).await?;
    // A few answers spelled out, so the fake is held to them too.
    let sks = |items: Vec<RollupItem>| items.into_iter().map(|i| i.sk).collect::<Vec<_>>();
    let mut q = RollupQuery::partition("dir", true);
    q.sk_prefix = Some("site-b-1".to_owned());
    q.after = Some("site-b-15".to_owned());
    q.ascending = false;
    assert_eq!(
        sks(query_all(&db.rollups, q).await?),
        [
            "site-b-14",
            "site-b-13",
            "site-b-12",
            "site-b-11",
            "site-b-10"
        ]
    );
    let mut q = RollupQuery::partition("dir", true);
    q.sk_between = between("site-a-28", "site-b-01");
    assert_eq!(
        sks(query_all(&db.rollups, q).await?),
        ["site-a-28", "site-a-29", "site-b-00", "site-b-01"]
    );

    dynamodbs_own_pages(&db).await
}

/// Printable text of no pattern, `len` characters (none a JSON string escapes): stored
/// compressed, it still takes over 80% of its bytes.
fn noise(len: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let c = b'#' + (x % 90) as u8; // '#' to '|': no '"', and '\\' skipped below
            char::from(if c == b'\\' { b'~' } else { c })
        })
        .collect()
}

/// 36 items of 100 KB of text of no pattern (over 80 KB each, stored compressed): over
/// 2.9 MB in one partition, three pages or more of DynamoDB's.
async fn dynamodbs_own_pages(db: &OnDynalite) -> anyhow::Result<()> {
    let mut stored = Vec::new();
    for i in 0..36 {
        let big = noise(100_000, i);
        let item = item("big", &format!("{i:02}"), i, &format!("\"{big}\""));
        assert_eq!(db.rollups.put_if_newer(&item).await?, Written::Applied);
        stored.push(item);
    }
    for ascending in [true, false] {
        let mut want = stored.clone();
        if !ascending {
            want.reverse();
        }
        let mut q = RollupQuery::partition("big", true);
        q.ascending = ascending;
        let mut got = Vec::new();
        let mut pages = Vec::new();
        loop {
            let page = db.rollups.query(&q).await?;
            pages.push(page.items.len());
            assert!(page.items.len() <= 13, "at most 1 MB a page: {pages:?}");
            got.extend(page.items);
            match page.last_sk {
                Some(last) => q.after = Some(last),
                None => break,
            }
        }
        assert!(pages.len() >= 3, "{pages:?}");
        assert_eq!(got, want, "ascending {ascending}: pages {pages:?}");
        q.after = None;
        assert_eq!(
            query_all(&db.rollups, q).await?,
            want,
            "ascending {ascending}"
        );
    }
    Ok(())
}

/// Derived bodies keep their decimals exactly: sums of 38-digit numbers that run past
/// 38 digits, a 38-digit number plus 1e-130, negatives, minima and maxima of 38 digits
/// are stored as the JSON text written (never a DynamoDB number) and read back equal,
/// to the last digit, in a device-hour and in a fleet part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_on_dynalite_keep_38_digit_sums_exact() -> anyhow::Result<()> {
    let db = OnDynalite::start("rollup-decimals").await?;
    let hour = 1_782_090_000_000;
    let values = [
        "12345678901234567890123456789012345678",
        "99999999999999999999999999999999999999",
        "-9.9999999999999999999999999999999999999e125",
        "1e-130",
        "0.1000000000000000055511151231257827",
        "-0.000000000000000000000000000000000001",
    ];
    let mut dh = DeviceHour::new("d-38", hour);
    let mut exact = BigDecimal::from(0);
    for (i, v) in values.iter().cycle().take(60).enumerate() {
        let metrics = BTreeMap::from([("m".to_owned(), Decimal::parse(v)?)]);
        dh.add(
            hour + i as i64 * 60_000,
            &format!("e{i:02}"),
            &metrics,
            &BTreeMap::new(),
        );
        exact += BigDecimal::from_str(v)?;
    }
    let cell = &dh.hour.metrics["m"];
    assert_eq!(cell.sum, exact);
    let sum_text = decimal_text(&cell.sum);
    assert!(
        sum_text.chars().filter(char::is_ascii_digit).count() > 38,
        "{sum_text}"
    );
    let stored = RollupItem::with_body(
        store::rollup::keys::device_hour("d-38", hour),
        dh.readings(),
        &dh,
        Some(1_790_000_000),
    )?;
    let fleet = FleetPart::of(hour, store::rollup::part_of("d-38"), [&dh]);
    let part = RollupItem::with_body(
        store::rollup::keys::fleet_part(hour, fleet.part),
        fleet.readings(),
        &fleet,
        None,
    )?;
    for item in [&stored, &part] {
        assert_eq!(db.rollups.put_if_newer(item).await?, Written::Applied);
        // Stored as the text written (compressed: `store::rollup::stored`), never a
        // DynamoDB number.
        let raw = db.raw(&item.pk, &item.sk).await?;
        let row = store::rollup::stored::from_attributes(raw)?;
        assert_eq!(row.body, item.body);
        let back = db.rollups.get(&item.pk, &item.sk, true).await?;
        assert_eq!(back.as_ref(), Some(item));
    }
    let back: DeviceHour = db
        .rollups
        .get(&stored.pk, &stored.sk, true)
        .await?
        .expect("stored")
        .body()?;
    assert_eq!(back, dh);
    assert_eq!(back.hour.metrics["m"].sum, exact);
    assert_eq!(
        back.hour.metrics["m"].min,
        BigDecimal::from_str("-9.9999999999999999999999999999999999999e125")?
    );
    assert_eq!(
        back.hour.metrics["m"].max,
        BigDecimal::from_str("99999999999999999999999999999999999999")?
    );
    let back: FleetPart = db
        .rollups
        .get(&part.pk, &part.sk, true)
        .await?
        .expect("stored")
        .body()?;
    assert_eq!(back, fleet);
    assert_eq!(back.hour.metrics["m"].sum, exact);
    Ok(())
}

/// Conditions are checked atomically with the write: eight `put_if_newer` of versions
/// 1 to 8 of one item at once (the largest sent first, each through a client of its
/// own) leave version 8, round after round; of eight `put_if_version` on one version
/// read, and of eight `delete_if` of it, exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_conditional_writes_at_once_on_dynalite_leave_what_their_conditions_allow()
-> anyhow::Result<()> {
    let db = OnDynalite::start("rollup-race").await?;
    let mut adapters = Vec::new();
    for _ in 0..8 {
        adapters.push(Arc::new(db.another_adapter().await));
    }
    for round in 0..24 {
        let sk = format!("d-{round:02}");
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for (i, adapter) in adapters.iter().enumerate() {
            let version = 8 - i as u64;
            let item = item("dh#race", &sk, version, &format!("{{\"v\":{version}}}"));
            let (adapter, start) = (adapter.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                adapter.put_if_newer(&item).await.map(|w| (version, w))
            }));
        }
        let mut written = BTreeMap::new();
        for task in tasks {
            let (version, wrote) = task.await??;
            written.insert(version, wrote);
        }
        assert_eq!(
            written.get(&8),
            Some(&Written::Applied),
            "round {round}: {written:?}"
        );
        let stored = db.rollups.get("dh#race", &sk, true).await?;
        assert_eq!(
            stored.map(|s| (s.version, s.body)),
            Some((8, "{\"v\":8}".to_owned())),
            "round {round}: {written:?}"
        );
    }
    for round in 0..8 {
        let sk = format!("e-{round}");
        assert_eq!(
            db.rollups
                .put_if_version(&item("dir", &sk, 1, "{}"), None)
                .await?,
            Written::Applied
        );
        let start = Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for (i, adapter) in adapters.iter().enumerate() {
            let merged = item("dir", &sk, 2, &format!("{{\"by\":{i}}}"));
            let (adapter, start) = (adapter.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                adapter.put_if_version(&merged, Some(1)).await
            }));
        }
        let deletes: Vec<_> = adapters
            .iter()
            .map(|adapter| {
                let (adapter, start, sk) = (adapter.clone(), start.clone(), sk.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    adapter.delete_if("dir", &sk, 2).await
                })
            })
            .collect();
        let mut puts = 0;
        for task in tasks {
            puts += u32::from(task.await?? == Written::Applied);
        }
        let mut deleted = 0;
        for task in deletes {
            deleted += u32::from(task.await?? == Written::Applied);
        }
        assert_eq!(puts, 1, "round {round}: one merge on the version read wins");
        assert!(
            deleted <= 1,
            "round {round}: {deleted} deletes of one version"
        );
        let stored = db.rollups.get("dir", &sk, true).await?;
        assert_eq!(
            stored.is_none(),
            deleted == 1,
            "round {round}: {stored:?} after {deleted} deletes"
        );
        if deleted == 0 {
            assert_eq!(db.rollups.delete_if("dir", &sk, 2).await?, Written::Applied);
        }
    }
    Ok(())
}
