//! The SQS requests the launcher's moto answered, as SQS bills them: read from the
//! server itself (`GET /_shardline/sqs-requests`, `infra/local/moto_launch.py`), so a
//! run's SQS bill is counted where its requests were served, not from what a client
//! meant to send.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// The path on moto's server that answers the counts.
pub const SQS_REQUESTS_PATH: &str = "/_shardline/sqs-requests";

/// One action's calls and the requests SQS bills for them (a call per 64-KB chunk of
/// its messages' bodies and attributes, at least one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionCount {
    pub calls: u64,
    pub requests: u64,
}

/// Every SQS action moto answered without an error, by its name (`SendMessage`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SqsRequests {
    pub actions: BTreeMap<String, ActionCount>,
}

impl SqsRequests {
    /// Reads the counts from the launcher's moto at `endpoint` (`http://127.0.0.1:PORT`).
    pub fn read(endpoint: &str) -> Result<Self> {
        let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
        let mut stream =
            TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "GET {SQS_REQUESTS_PATH} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )?;
        let mut text = String::new();
        stream
            .read_to_string(&mut text)
            .with_context(|| format!("GET {SQS_REQUESTS_PATH} from {addr}"))?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .with_context(|| format!("GET {SQS_REQUESTS_PATH}: no body in {text:?}"))?;
        if !head.lines().next().is_some_and(|l| l.contains(" 200")) {
            bail!("GET {SQS_REQUESTS_PATH} from {addr}: {head}");
        }
        Self::parse(body)
    }

    /// The server's JSON: `{"SendMessage": {"calls": 2, "requests": 5}, ...}`.
    pub fn parse(json: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(json).context("the SQS counts are not JSON")?;
        let object = value
            .as_object()
            .context("the SQS counts are not an object")?;
        let mut actions = BTreeMap::new();
        for (action, count) in object {
            let field = |name: &str| {
                count[name]
                    .as_u64()
                    .with_context(|| format!("{action}: no {name}"))
            };
            actions.insert(
                action.clone(),
                ActionCount {
                    calls: field("calls")?,
                    requests: field("requests")?,
                },
            );
        }
        Ok(Self { actions })
    }

    /// `action`'s count (zero when moto never answered it).
    pub fn action(&self, action: &str) -> ActionCount {
        self.actions.get(action).copied().unwrap_or_default()
    }

    /// Billed requests of `actions` together.
    pub fn requests(&self, actions: &[&str]) -> u64 {
        actions.iter().map(|a| self.action(a).requests).sum()
    }

    /// Billed send requests: SendMessage and SendMessageBatch.
    pub fn sends(&self) -> u64 {
        self.requests(&["SendMessage", "SendMessageBatch"])
    }

    /// Billed receive requests.
    pub fn receives(&self) -> u64 {
        self.requests(&["ReceiveMessage"])
    }

    /// Billed delete requests, and visibility changes (what a consumer does with a
    /// message it received).
    pub fn deletes(&self) -> u64 {
        self.requests(&[
            "DeleteMessage",
            "DeleteMessageBatch",
            "ChangeMessageVisibility",
            "ChangeMessageVisibilityBatch",
        ])
    }

    /// What was counted since `earlier` (a read of the same server before).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        let actions = self
            .actions
            .iter()
            .map(|(action, now)| {
                let then = earlier.action(action);
                let count = ActionCount {
                    calls: now.calls.saturating_sub(then.calls),
                    requests: now.requests.saturating_sub(then.requests),
                };
                (action.clone(), count)
            })
            .collect();
        Self { actions }
    }
}
