//! `capacity-proxy`: a local hot-partition emulator and fault injector for DynamoDB.
//!
//! An HTTP server on loopback that speaks DynamoDB's JSON 1.0 protocol
//! (`X-Amz-Target: DynamoDB_20120810.<Op>`). It either forwards to an upstream
//! DynamoDB-compatible endpoint (moto, dynalite) or, in sink mode, answers `BatchWriteItem`
//! and `PutItem` itself and keeps the written keys. Any AWS SDK pointed at it works unchanged.
//!
//! # Capacity model
//! Per (table, partition key value): token buckets of 1,000 WCU/s and 3,000 RCU/s by default,
//! refilled continuously, holding one second of rate plus optional burst seconds; optional
//! table-level caps. Writes cost ceil(item bytes / 1 KB) WCU (item size: see [`item`]); a
//! delete or an unknown item costs 1. Reads (`GetItem`, `Query`) are refused before
//! forwarding when the key's bucket cannot cover the smallest read, then charged
//! ceil(bytes / 4 KB) RCU (halved when eventually consistent) by the size actually
//! returned. `UpdateItem` is charged for its key plus the values in
//! `ExpressionAttributeValues`. Everything else passes through uncharged.
//!
//! # Partition key attribute
//! Per table, the first of: `pk_attr` in the `--config` file; the key schema seen in a
//! `CreateTable` that passed through the proxy; `DescribeTable` sent upstream on first sight
//! with the caller's own auth headers (then cached); `--pk-attr` (default `PK`).
//!
//! # Signatures
//! Requests are forwarded with their headers and body unchanged except `Host` (rewritten to
//! the upstream). A `BatchWriteItem` with items held back is forwarded with a rewritten body,
//! so its SigV4 signature no longer matches: the upstream must not verify signatures (moto and
//! dynalite do not).
//!
//! # Embedding
//! ```no_run
//! # async fn demo() -> Result<(), capacity_proxy::ProxyError> {
//! let mut config = capacity_proxy::ProxyConfig::forward("http://127.0.0.1:5000")?;
//! config.limits.key_wcu = 200.0;
//! let proxy = capacity_proxy::Proxy::start(config).await?;
//! println!("endpoint {}", proxy.url());
//! let stats = proxy.stats();
//! # let _ = stats;
//! proxy.shutdown().await
//! # }
//! ```

pub mod capacity;
pub mod clock;
pub mod config;
pub mod ddb;
pub mod error;
pub mod faults;
pub mod item;
mod server;
pub mod stats;

pub use capacity::{Limits, ThrottleReason};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::{ConfigFile, Faults, Mode, ProxyConfig, TableConfig};
pub use error::ProxyError;
pub use server::{Proxy, ProxyHandle, SinkKey};
pub use stats::{FaultStats, HeatRow, KeyStats, StatsSnapshot};
