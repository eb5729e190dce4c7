//! Shared helpers: SDK clients, a private moto, item builders, a load driver over
//! simulated seconds, the bill read from the stats.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemError;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use capacity_proxy::{ManualClock, ProxyHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An SDK client for an endpoint with retries off, so every proxy answer is observed.
pub use stand_in::dynamodb_client_without_retries as client;

/// A private moto on a free loopback port (stopped on drop).
pub fn moto() -> Result<stand_in::Moto> {
    let root = stand_in::repo_root()?;
    let venv = stand_in::ensure_venv(&root)?;
    stand_in::Moto::start(&venv)
}

/// An item of exactly `bytes` bytes by DynamoDB's rule under `PK = pk`, `SK = sk`, its
/// bulk in the attribute `ballast`.
pub fn sized_item(pk: &str, sk: &str, bytes: usize) -> HashMap<String, AttributeValue> {
    let fixed = "PK".len() + pk.len() + "SK".len() + sk.len() + "ballast".len();
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
        (
            "ballast".to_owned(),
            AttributeValue::S("y".repeat(bytes - fixed)),
        ),
    ])
}

/// The primary key `PK = pk`, `SK = sk`.
pub fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

/// Write units the proxy has charged to `table` so far (the write bill).
pub fn wcu(proxy: &ProxyHandle, table: &str) -> f64 {
    proxy
        .stats()
        .wcu_by_table
        .get(table)
        .copied()
        .unwrap_or(0.0)
}

/// Read units the proxy has charged to `table` so far (the read bill).
pub fn rcu(proxy: &ProxyHandle, table: &str) -> f64 {
    proxy
        .stats()
        .rcu_by_table
        .get(table)
        .copied()
        .unwrap_or(0.0)
}

/// An item of about 560 bytes (1 WCU) under `PK = pk`, `SK = sk`.
pub fn item(pk_attr: &str, pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (pk_attr.to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
        ("payload".to_owned(), AttributeValue::S("x".repeat(500))),
    ])
}

/// A put request for `item`.
pub fn put(item: HashMap<String, AttributeValue>) -> Result<WriteRequest> {
    Ok(WriteRequest::builder()
        .put_request(PutRequest::builder().set_item(Some(item)).build()?)
        .build())
}

/// Outcome of one BatchWriteItem.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchOutcome {
    /// Items the call acknowledged (sent minus unprocessed).
    pub accepted: usize,
    /// Items returned in UnprocessedItems.
    pub unprocessed: Vec<WriteRequest>,
    /// `(reason, resource)` pairs when the whole call was throttled.
    pub throttled: Vec<(String, String)>,
}

/// Sends one BatchWriteItem and classifies its answer.
pub async fn batch(client: &Client, table: &str, reqs: Vec<WriteRequest>) -> Result<BatchOutcome> {
    let sent = reqs.len();
    match client
        .batch_write_item()
        .request_items(table, reqs)
        .send()
        .await
    {
        Ok(out) => {
            let unprocessed = out
                .unprocessed_items()
                .and_then(|m| m.get(table))
                .cloned()
                .unwrap_or_default();
            Ok(BatchOutcome {
                accepted: sent - unprocessed.len(),
                unprocessed,
                throttled: Vec::new(),
            })
        }
        Err(SdkError::ServiceError(e)) => match e.into_err() {
            BatchWriteItemError::ProvisionedThroughputExceededException(ex) => Ok(BatchOutcome {
                accepted: 0,
                unprocessed: Vec::new(),
                throttled: ex
                    .throttling_reasons()
                    .iter()
                    .map(|r| {
                        (
                            r.reason().unwrap_or_default().to_owned(),
                            r.resource().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
            }),
            other => Err(other).context("BatchWriteItem"),
        },
        Err(e) => Err(e).context("BatchWriteItem"),
    }
}

/// Totals of a load run.
#[derive(Debug, Default)]
pub struct LoadOutcome {
    /// Accepted items in each simulated second.
    pub accepted_per_second: Vec<usize>,
    /// Items returned unprocessed.
    pub unprocessed: usize,
    /// Items in calls throttled as a whole.
    pub throttled_items: usize,
    /// Every `(reason, resource)` seen in throttled calls.
    pub reasons: Vec<(String, String)>,
}

/// Offers `per_second` items each simulated second for `seconds`, in batches of 25 spread
/// round-robin over `keys` partition keys, advancing `clock` one second between rounds.
pub async fn offer_load(
    client: &Client,
    clock: &ManualClock,
    table: &str,
    keys: &[&str],
    per_second: usize,
    seconds: usize,
) -> Result<LoadOutcome> {
    let mut out = LoadOutcome::default();
    let mut n = 0usize;
    for sec in 0..seconds {
        let mut accepted = 0;
        for _ in 0..per_second / 25 {
            let mut reqs = Vec::new();
            for _ in 0..25 {
                let pk = keys[n % keys.len()];
                reqs.push(put(item("PK", pk, &format!("s{sec:03}#{n:08}")))?);
                n += 1;
            }
            let b = batch(client, table, reqs).await?;
            accepted += b.accepted;
            out.unprocessed += b.unprocessed.len();
            if !b.throttled.is_empty() {
                out.throttled_items += 25;
                out.reasons.extend(b.throttled);
            }
        }
        out.accepted_per_second.push(accepted);
        clock.advance(Duration::from_secs(1));
    }
    Ok(out)
}

/// `GET path` on the proxy, returning the JSON body.
pub async fn get_json(addr: std::net::SocketAddr, path: &str) -> Result<serde_json::Value> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8(raw)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "status: {head}");
    Ok(serde_json::from_str(body)?)
}
