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
//! table-level caps.
//!
//! Writes cost ceil(item bytes / 1 KB) WCU, at least 1 (item size: see [`item`]), by the
//! larger of the item before and after the write, as DynamoDB bills them. In forward mode
//! the proxy looks the item up under the call's key (a strongly consistent `GetItem` of
//! its own, neither charged nor counted) and forwards the call unchanged:
//! - `PutItem`: the larger of the item it replaces, if any, and its own item;
//! - `UpdateItem`: the larger of the item before and after the update (after: the
//!   caller's `ALL_NEW` answer, else a second lookup);
//! - `DeleteItem`: the item deleted (1 when there is none);
//! - a failed condition (`ConditionalCheckFailedException`): the units of the item it
//!   found, at least 1; any other refusal by the upstream costs nothing.
//!
//! A write is admitted when its key's and table's buckets cover what is known before it is
//! sent (a put's whole cost, the existing item's units for an update or a delete), then
//! settled to its cost. A `BatchWriteItem` put is charged by its own item and a batch
//! delete 1: the items they replace or delete are not looked up. In sink mode a `PutItem`
//! is charged by its own item (the sink keeps no values and evaluates no condition).
//!
//! Reads (`GetItem`, `Query`) are refused before forwarding when the key's bucket cannot
//! cover the smallest read, then charged ceil(bytes / 4 KB) RCU (halved when eventually
//! consistent) by what they read: a `GetItem` by its whole item, a `Query` by the sum of
//! the items its page read, rounded once per call. When a projection, a filter or a count
//! leaves the answer smaller than the read, the proxy sizes the read with an uncharged
//! call of its own (the whole item; the page's items again, whole and unfiltered).
//!
//! Transactions cost twice the units of each action, charged to the action's own key and
//! table: a `TransactWriteItems` `Put`, `Update` or `Delete` twice its write units as a
//! single-item write's above, a `ConditionCheck` twice those of the item it checks; a
//! `TransactGetItems` `Get` twice the strongly consistent read units of its item. A
//! transaction's actions are admitted together or it is cancelled before it is sent
//! (`TransactionCanceledException` with a `ThrottlingError` reason for each action over
//! its budget). A transaction cancelled upstream by a failed condition costs each action
//! once the units of the item it found, at least 1: DynamoDB does not document it, this
//! is an assumption.
//!
//! Everything else (`BatchGetItem`, `Scan`, the control plane) passes through uncharged.
//!
//! # Partition key attribute
//! Per table, the first of: `pk_attr` in the `--config` file; the key schema seen in a
//! `CreateTable` that passed through the proxy; `DescribeTable` sent upstream on first sight
//! with the caller's own auth headers (then cached); `--pk-attr` (default `PK`). The whole
//! key schema, which a `PutItem`'s lookup needs, is learned the same way.
//!
//! # Signatures
//! Requests are forwarded with their headers and body unchanged except `Host` (rewritten to
//! the upstream). A `BatchWriteItem` with items held back is forwarded with a rewritten
//! body, and the proxy's own lookups (`DescribeTable`, `GetItem`) carry the caller's
//! headers with a target and body of their own, so their SigV4 signatures no longer match:
//! the upstream must not verify signatures (moto and dynalite do not).
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
