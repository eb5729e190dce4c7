//! The publisher examples under `examples/`: the Python one sends readings to a private
//! moto's queue, the real ingest (run-local) writes them, and every reading is in the
//! table under the key the example computed with the hash function of docs/formats.md. The
//! TypeScript one is type-checked, and its test fails where Node or npm is missing.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use shardline::env::EnvLookup;
use shardline_local::run_local::{self, Settings};
use stand_in::TestStack;

/// The layout the ingest writes when the table has none, and the example keys with.
const SHARDS: &str = "8";
const BUCKET: &str = "hour";
/// A key's rate (`RAISE_AHEAD_WCU`, 100 readings/s) in one batching window at most: the
/// publisher sends them at once, and a burst above it would raise the device, whose
/// keys the publisher computes at fan-out 1.
const READINGS: usize = 100;
const PER_MESSAGE: usize = 25;

/// Every reading's (PK, SK) in the readings table: an item's own keys, or for a block
/// each member's own sort key under the block's partition key (a block lives where its
/// first member would, and holds one device's readings of one bucket, so each member's
/// partition key at the fan-out it was keyed with). Also how many items are blocks.
async fn stored_keys(stack: &TestStack) -> Result<(BTreeSet<(String, String)>, usize)> {
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let items = store::scan::scan_items(client.scan().table_name(&stack.stack.table_name)).await?;
    let blocks = items
        .iter()
        .filter(|item| store::block::is_block(item))
        .count();
    let mut keys = BTreeSet::new();
    for item in items {
        for reading in store::block::expand(item)? {
            keys.insert((reading.pk, reading.sk));
        }
    }
    Ok((keys, blocks))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_publisher_lands_readings_under_the_keys_it_computes() -> Result<()> {
    let stack = TestStack::start().await?;
    let root = stand_in::repo_root()?;
    let venv = stand_in::ensure_venv(&root)?;
    let s = &stack.stack;
    let output = Command::new(venv.bin("python"))
        .arg(root.join("examples/python/publish.py"))
        .args(["--queue-url", &s.queue_url, "--endpoint-url", &s.endpoint])
        .args(["--region", &s.region, "--device", "example-device-1"])
        .args(["--count", &READINGS.to_string(), "--every-ms", "250"])
        .args(["--per-message", &PER_MESSAGE.to_string(), "--print-keys"])
        .args(["--shards", SHARDS, "--bucket", BUCKET])
        .envs(s.env_pairs())
        .stdin(Stdio::null())
        .output()
        .context("running examples/python/publish.py")?;
    ensure!(
        output.status.success(),
        "publish.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let computed: BTreeSet<(String, String)> = String::from_utf8(output.stdout)?
        .lines()
        .map(|line| {
            let key: serde_json::Value = serde_json::from_str(line)?;
            let text = |name: &str| key[name].as_str().map(str::to_owned).context("a key");
            Ok((text("PK")?, text("SK")?))
        })
        .collect::<Result<_>>()?;
    ensure!(
        computed.len() == READINGS,
        "{} keys printed",
        computed.len()
    );

    let mut env = s.env_pairs();
    env.extend([("SHARDS", SHARDS), ("BUCKET", BUCKET)].map(|(k, v)| (k.into(), v.into())));
    // The template's batching window (1 s), over which the ingest counts the burst.
    let settings = Settings::new(&s.queue_url);
    let running = run_local::start(settings, &EnvLookup::from_pairs(env), None).await?;
    let messages = READINGS.div_ceil(PER_MESSAGE) as u64;
    let mut waited = 0;
    while running.stats().deleted < messages {
        if waited > 600 {
            bail!(
                "the ingest did not take every message: {}",
                running.stats().text()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    running.stop();
    let stats = running.wait().await?;
    ensure!(stats.dead_lettered == 0, "{}", stats.text());

    let (stored, blocks) = stored_keys(&stack).await?;
    // A new table packs blocks: the device's messages of 25 readings over about 6 s
    // each, packed together where they share a batch, are one block a batch (25 s of
    // readings fit a minute's window), so one to four blocks.
    ensure!(
        (1..=READINGS / PER_MESSAGE).contains(&blocks),
        "{blocks} blocks"
    );
    ensure!(
        stored == computed,
        "stored and computed keys differ: only stored {:?}, only computed {:?}",
        stored.difference(&computed).take(3).collect::<Vec<_>>(),
        computed.difference(&stored).take(3).collect::<Vec<_>>()
    );

    // A slab of two devices (one sparse column) and a compacted window's marker beside
    // them, as a table with slabs holds them.
    put_slab_and_marker(&stack).await?;

    // The Python reader expands the blocks and slabs read with boto3 into the readings
    // the store's own decoder reads: the same ids, times, metrics, tags and write orders.
    let output = Command::new(venv.bin("python"))
        .arg(root.join("examples/python/read_blocks.py"))
        .args(["--table", &s.table_name, "--endpoint-url", &s.endpoint])
        .args(["--region", &s.region])
        .envs(s.env_pairs())
        .stdin(Stdio::null())
        .output()
        .context("running examples/python/read_blocks.py")?;
    ensure!(
        output.status.success(),
        "read_blocks.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let from_python: BTreeSet<String> = String::from_utf8(output.stdout)?
        .lines()
        .map(|line| Ok(format!("{:?}", serde_json::from_str::<Expanded>(line)?)))
        .collect::<Result<_>>()?;
    let from_rust = readings_as_json(&stack).await?;
    ensure!(
        from_python.len() == READINGS + SLAB_READINGS,
        "{} readings",
        from_python.len()
    );
    ensure!(
        from_python == from_rust,
        "the Python reader differs: only Python {:?}, only Rust {:?}",
        from_python
            .difference(&from_rust)
            .take(2)
            .collect::<Vec<_>>(),
        from_rust
            .difference(&from_python)
            .take(2)
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// The readings of the slab [`put_slab_and_marker`] writes.
const SLAB_READINGS: usize = 3;

/// Writes a slab of three readings of two devices (`thermo-3`'s humidity alone, so a
/// sparse column) into the table, and a run partition's marker, which holds none.
async fn put_slab_and_marker(stack: &TestStack) -> Result<()> {
    use std::collections::BTreeMap;

    let at = |ms: i64| sharding::time::Timestamp::from_millis(ms).context("a time");
    let reading = |device: &str, ts: i64, id: &str, metrics: &[(&str, &str)], written| {
        Ok::<_, anyhow::Error>(store::item::Reading {
            device_id: device.into(),
            event_id: id.into(),
            ts: at(ts)?,
            metrics: metrics
                .iter()
                .map(|(k, v)| Ok(((*k).to_owned(), store::Decimal::parse(v)?)))
                .collect::<Result<BTreeMap<_, _>>>()?,
            tags: BTreeMap::from([("site".to_owned(), "lab".to_owned())]),
            written: store::WriteOrder(written),
        })
    };
    let t = 1_782_090_000_000;
    let members = [
        reading(
            "sensor-7",
            t,
            "e-0001",
            &[("temperature", "21.5")],
            t + 3_000,
        )?,
        reading(
            "sensor-7",
            t + 1_000,
            "e-0002",
            &[("temperature", "21.75")],
            t + 4_250,
        )?,
        reading(
            "thermo-3",
            t + 500,
            "e-0001",
            &[("humidity", "41")],
            t + 3_000,
        )?,
    ];
    let layout = sharding::slab::SlabLayout::default();
    let window = layout.window(members[0].ts);
    let pk = sharding::slab::slab_pk(3, 0, window);
    let sk = sharding::slab::slab_sk(
        members
            .iter()
            .map(|r| (r.device_id.as_str(), r.ts.as_millis(), r.event_id.as_str())),
    );
    let slab = store::slab::marshal(&members, &pk, &sk, layout.expires_at(window))?;
    let marker = store::slab::marker(
        &layout.run_pk(3, window),
        &sharding::slab::marker_sk(window),
        layout.expires_at(window),
    );
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    for encoded in [slab, marker] {
        client
            .put_item()
            .table_name(&stack.stack.table_name)
            .set_item(Some(encoded.item))
            .send()
            .await
            .context("writing a slab or a marker")?;
    }
    Ok(())
}

/// A reading as examples/python/read_blocks.py prints it (its `Debug` text, maps in
/// name order, is what two readers are compared by).
#[derive(Debug, serde::Deserialize)]
#[expect(dead_code, reason = "read through its Debug text")]
struct Expanded {
    device_id: String,
    event_id: String,
    ts_ms: i64,
    ts: String,
    metrics: std::collections::BTreeMap<String, store::Decimal>,
    tags: std::collections::BTreeMap<String, String>,
    /// The copy's write order (docs/formats.md).
    w: i64,
}

/// Every reading of the readings table as the store expands it.
async fn readings_as_json(stack: &TestStack) -> Result<BTreeSet<String>> {
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let items = store::scan::scan_items(client.scan().table_name(&stack.stack.table_name)).await?;
    let mut out = BTreeSet::new();
    for item in items {
        for r in store::block::expand(item)? {
            let expanded = Expanded {
                device_id: r.device_id,
                event_id: r.event_id,
                ts_ms: r.ts_ms,
                ts: r.ts,
                metrics: r.metrics,
                tags: r.tags,
                w: r.written.0,
            };
            out.insert(format!("{expanded:?}"));
        }
    }
    Ok(out)
}

/// `tsc --noEmit` over examples/typescript, with its pinned dependencies installed
/// from npm. The README requires Node, so this test fails (never skips) where npm is
/// absent, where a pinned package cannot be installed, and where the example does not
/// type-check; each failure says which.
#[test]
fn the_typescript_publisher_type_checks() -> Result<()> {
    let root = stand_in::repo_root()?;
    let dir = root.join("examples/typescript");
    match Command::new("npm").arg("--version").output() {
        Err(e) => bail!(
            "npm is not installed ({e}): the README requires Node, and examples/typescript \
             cannot be type-checked without it"
        ),
        Ok(output) => ensure!(
            output.status.success(),
            "npm does not run (`npm --version` failed), so examples/typescript cannot be \
             type-checked:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
    npm(&["ci", "--no-audit", "--no-fund"], &dir).context(
        "examples/typescript's pinned packages cannot be installed (`npm ci` from \
         package-lock.json needs the npm registry or a warm npm cache)",
    )?;
    npm(&["run", "--silent", "typecheck"], &dir)
        .context("examples/typescript does not type-check (`npm run typecheck`)")
}

/// `npm <args>` in `dir`; an error holding what npm printed unless it succeeds.
fn npm(args: &[&str], dir: &Path) -> Result<()> {
    let output = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run npm {}", args.join(" ")))?;
    ensure!(
        output.status.success(),
        "npm {} failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
