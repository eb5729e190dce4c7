//! What API Gateway and the query Lambda do in AWS: the query service, configured from
//! the same variables, answering HTTP on a loopback port (hyper, no auth: loopback
//! only), each request at the wall clock's `now` and under the query function's
//! timeout.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use query::config::CursorKeySource;
use query::service::error_response;
use query::{ApiError, QueryService};
use shardline::env::EnvLookup;
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;
use store::rollup::dynamo::DynamoRollups;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::{QUERY_TIMEOUT, Query, Stats};

/// Serves the query API on `addr` (a loopback address) until `stop`; returns the
/// address it listens on (the port chosen when `addr`'s is 0) and the server's task.
pub(super) async fn listen(
    addr: SocketAddr,
    env: &EnvLookup,
    dynamo: &aws_sdk_dynamodb::Client,
    stop: watch::Receiver<bool>,
    stats: Arc<Mutex<Stats>>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    if !addr.ip().is_loopback() {
        bail!("--query-listen must be a loopback address (the local API has no auth): {addr}");
    }
    let service = Arc::new(query_service(env, dynamo)?);
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr().context("no local address")?;
    Ok((local, tokio::spawn(serve(listener, service, stop, stats))))
}

/// A random cursor key, for a local run without `CURSOR_KEY`: cursors then only live
/// as long as the process, which is all a local run needs.
fn ephemeral_cursor_key() -> String {
    use rand::Rng as _;
    let bytes: [u8; 32] = rand::rng().random();
    hex::encode(bytes)
}

/// The query service of `env`'s tables, with `CURSOR_KEY` (or an ephemeral key).
fn query_service(env: &EnvLookup, dynamo: &aws_sdk_dynamodb::Client) -> anyhow::Result<Query> {
    let mut lookup = env.clone();
    if env.get("CURSOR_KEY").is_none() && env.get("CURSOR_SECRET_ARN").is_none() {
        lookup.set("CURSOR_KEY", ephemeral_cursor_key());
    }
    let config =
        query::Config::from_lookup(|name| lookup.get(name)).context("query configuration")?;
    let (current, previous) = match &config.cursor_key {
        CursorKeySource::Inline { current, previous } => (
            query::CursorKey::new(current.clone()).map_err(|e| anyhow!("CURSOR_KEY: {e}"))?,
            previous
                .clone()
                .map(query::CursorKey::new)
                .transpose()
                .map_err(|e| anyhow!("CURSOR_PREVIOUS_KEY: {e}"))?,
        ),
        CursorKeySource::SecretArn(arn) => {
            bail!("CURSOR_SECRET_ARN ({arn}) is not read by run-local; set CURSOR_KEY")
        }
    };
    let service = QueryService::new(
        DynamoReadingSource::new(dynamo.clone(), &config.table_name),
        DynamoShards::new(dynamo, &config.shard_table_name),
        config.service.with_keys(current, previous),
    );
    // `GET /devices` and `GET /stats` read the sealer's items when the stack has them.
    Ok(match &config.rollup_table {
        Some(table) => service.with_rollups(DynamoRollups::new(dynamo.clone(), table)),
        None => service,
    })
}

/// Accepts connections until `stop`, each served on its own task.
async fn serve(
    listener: TcpListener,
    service: Arc<Query>,
    mut stop: watch::Receiver<bool>,
    stats: Arc<Mutex<Stats>>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, service.clone(), stats.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
        while connections.try_join_next().is_some() {}
    }
    // Requests in progress get a moment to finish; idle keep-alive connections do not
    // hold the stop up.
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        connections.abort_all();
    }
}

/// The requests of one HTTP/1 connection, until it ends.
/// Each request is counted as an invocation of the query function, timed.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    service: Arc<Query>,
    stats: Arc<Mutex<Stats>>,
) {
    let handler = service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let (service, stats) = (service.clone(), stats.clone());
        async move {
            let started = std::time::Instant::now();
            let response = answer(&service, &request).await;
            stats.lock().bill("query", started.elapsed());
            Ok::<_, Infallible>(response)
        }
    });
    if let Err(e) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), handler)
        .await
    {
        tracing::debug!(error = %e, "query connection ended");
    }
}

/// One request's response. As under Lambda: the wall clock is read once, here, as the
/// request's `now`; the reads stop by the function's timeout less the margin, and
/// answer a page or a 400.
async fn answer<B>(service: &Query, request: &http::Request<B>) -> http::Response<Full<Bytes>> {
    let response = match store::clock::wall_clock() {
        Ok(now) => {
            let deadline = service
                .config()
                .budget
                .deadline_from(QUERY_TIMEOUT, std::time::Instant::now());
            service
                .handle_parts_by(
                    request.method().as_str(),
                    request.uri().path(),
                    request.uri().query(),
                    now,
                    Some(deadline),
                )
                .await
        }
        Err(e) => {
            tracing::error!(error = %e, "no usable clock");
            error_response(&ApiError::internal("the read failed"))
        }
    };
    response.map(|body| Full::new(Bytes::from(body)))
}
