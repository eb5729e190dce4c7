//! The crate's one client of the query HTTP API as run-local serves it on loopback
//! (`GET /devices/{id}/readings`, `GET /devices/{id}/shards`): the demo's range reads
//! and fan-out listing, the soak's reader, and the tests go through it.
//!
//! A request yields the [`Reply`] whatever its status; what a status means is each
//! caller's to decide (the demo reports a refusal, the soak retries a 5xx).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use reqwest::StatusCode;
use serde::Deserialize;

/// The query API at one address.
#[derive(Debug, Clone)]
pub struct QueryApi {
    http: reqwest::Client,
    base: String,
}

/// One paged read: whose readings, which range (`[from, to)`, epoch milliseconds),
/// how many per page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRead<'a> {
    /// The device.
    pub device: &'a str,
    /// First millisecond of the range.
    pub from: i64,
    /// End of the range (excluded).
    pub to: i64,
    /// Most items per page.
    pub limit: u32,
}

impl std::fmt::Display for RangeRead<'_> {
    /// `device [from,to)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{},{})", self.device, self.from, self.to)
    }
}

/// One answer of the API: its status and body, whatever the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body, as text.
    pub body: String,
}

/// A page of readings, as a 200 answer of `GET /devices/{id}/readings` holds it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Page {
    /// The readings of the page.
    pub items: Vec<serde_json::Value>,
    /// Where the next page starts; none after the last.
    pub next_cursor: Option<String>,
}

/// A fan-out epoch of a device, as `GET /devices/{id}/shards` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FanoutEpoch {
    /// RFC 3339 time it took effect.
    pub effective_from: String,
    /// The fan-out k.
    pub k: u32,
}

impl QueryApi {
    /// The API at `addr`, each request given up after `timeout`.
    pub fn new(addr: SocketAddr, timeout: Duration) -> reqwest::Result<Self> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Self::with_client(http, addr))
    }

    /// The API at `addr`, its requests without a time limit.
    pub fn untimed(addr: SocketAddr) -> Self {
        Self::with_client(reqwest::Client::new(), addr)
    }

    fn with_client(http: reqwest::Client, addr: SocketAddr) -> Self {
        Self {
            http,
            base: format!("http://{addr}"),
        }
    }

    /// The URL of `device`'s readings, without a query.
    pub fn readings_url(&self, device: &str) -> String {
        format!("{}/devices/{device}/readings", self.base)
    }

    /// The URL of the fleet's stats, `GET /stats`.
    pub fn fleet_stats_url(&self) -> String {
        format!("{}/stats", self.base)
    }

    /// The URL of `device`'s shards (its fan-out epochs).
    pub fn shards_url(&self, device: &str) -> String {
        format!("{}/devices/{device}/shards", self.base)
    }

    /// `GET url?query`. An error only when no answer arrived (no connection, a timeout,
    /// a body cut off); any status is a [`Reply`].
    pub async fn get(&self, url: &str, query: &[(&str, String)]) -> reqwest::Result<Reply> {
        let mut request = self.http.get(url);
        if !query.is_empty() {
            request = request.query(query);
        }
        let response = request.send().await?;
        let status = response.status();
        let body = response.text().await?;
        Ok(Reply { status, body })
    }

    /// One page of `read`: its first without a cursor, the next from the cursor the
    /// page before gave.
    pub async fn readings_page(
        &self,
        read: &RangeRead<'_>,
        cursor: Option<&str>,
    ) -> reqwest::Result<Reply> {
        let mut query = vec![
            ("from", read.from.to_string()),
            ("to", read.to.to_string()),
            ("limit", read.limit.to_string()),
        ];
        if let Some(c) = cursor {
            query.push(("cursor", c.to_owned()));
        }
        self.get(&self.readings_url(read.device), &query).await
    }

    /// The fan-out epochs of `device`; an error unless the API lists them.
    pub async fn fanout(&self, device: &str) -> anyhow::Result<Vec<FanoutEpoch>> {
        #[derive(Deserialize)]
        struct Shards {
            fanout: Vec<FanoutEpoch>,
        }
        let url = self.shards_url(device);
        let reply = self
            .get(&url, &[])
            .await
            .with_context(|| format!("GET {url}"))?;
        if !reply.status.is_success() {
            bail!("GET {url}: {} {}", reply.status, reply.error_line());
        }
        let shards: Shards = serde_json::from_str(&reply.body)
            .with_context(|| format!("GET {url}: unexpected body"))?;
        Ok(shards.fanout)
    }
}

impl Reply {
    /// The body as a page of readings (`items` required).
    pub fn page(&self) -> serde_json::Result<Page> {
        serde_json::from_str(&self.body)
    }

    /// The body's `error` (the whole body when it has none), at most 120 characters.
    pub fn error_line(&self) -> String {
        let error: Option<serde_json::Value> = serde_json::from_str(&self.body).ok();
        let text = error
            .as_ref()
            .and_then(|v| v.get("error").or(Some(v)))
            .map_or_else(|| self.body.clone(), |v| v.to_string());
        text.chars().take(120).collect()
    }
}
