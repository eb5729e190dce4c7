//! The query service of Shardline: time-range reads of readings behind an API Gateway
//! HTTP API (payload 2.0), by scatter-gather over the key ranges of a read plan.
//!
//! - [`params`]: routing and validation, pure: every 4xx is decided before any read.
//! - [`cursor`]: sealed, request-bound page cursors (HMAC-SHA256).
//! - [`exec`]: concurrent paged reads and the k-way merge that reads only what the
//!   page needs, and shows a reading stored under two keys once.
//! - [`stats`]: stats pages of complete buckets within a read budget.
//! - [`slabs`]: a device's readings held by slabs and runs of many devices, as merge
//!   streams beside its own keys.
//! - [`budget`]: what one request may cost (Queries, items evaluated, answer bytes,
//!   wall time), and where a page that a budget ended resumes.
//! - [`scope`]: who may read which device, from a claim of the caller's token.
//! - [`service`]: [`QueryService`], request in, response out, independent of the Lambda
//!   runtime and of the clock (the local runner and tests call
//!   [`QueryService::handle`] with the time they read), one module per route.
//! - [`lambda`]: the API Gateway adapter and [`config::Config`] for the `query` binary.
//!
//! # Routes
//! - `GET /devices/{device_id}/readings?from=&to=&limit=&order=&cursor=&consistent=`
//! - `GET /devices/{device_id}/readings/{event_id}?ts=&consistent=`
//! - `GET /readings?from=&to=&limit=&order=&cursor=&consistent=`
//! - `GET /devices/{device_id}/stats?from=&to=&interval=&metric=&consistent=&cursor=`
//!   (the sealer's cells over the hours it sealed, the readings elsewhere)
//! - `GET /devices/{device_id}/series?metric=&from=&to=&interval_ms=&agg=&consistent=`
//!   (the same, as one answer of points)
//! - `GET /devices/{device_id}/shards`
//! - `GET /devices/{device_id}/latest?consistent=`
//! - `GET /devices?prefix=&seen_since=&limit=&cursor=` (the sealer's directory)
//! - `GET /stats?from=&to=&interval=&metric=&cursor=` (the fleet's sealed buckets)
//! - `GET /series?metric=&from=&to=&interval_ms=&agg=` (the same, as one answer of
//!   points)

pub mod budget;
pub mod config;
pub mod cursor;
pub mod error;
pub mod exec;
pub mod lambda;
pub mod model;
pub mod params;
pub mod scope;
pub mod service;
pub mod slabs;
pub mod stats;

pub use config::Config;
pub use cursor::{Binding, CursorKey, decode_cursor, encode_cursor};
pub use error::ApiError;
pub use params::{Endpoint, Limits, parse_params, parse_request};
pub use scope::ReadScope;
pub use service::{QueryService, ServiceConfig};
