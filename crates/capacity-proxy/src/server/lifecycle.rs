//! The proxy's lifecycle: binding and starting it, the accept loop serving each
//! connection over HTTP/1, the once-a-second maintenance (idle keys pruned, heat rows
//! written), and the handle that reads its counters and shuts it down.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::Rng;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Inner;
use super::sink::SinkKey;
use crate::capacity::CapacityModel;
use crate::config::ProxyConfig;
use crate::error::ProxyError;
use crate::faults::FaultInjector;
use crate::stats::{HeatRow, Stats, StatsSnapshot};

/// Entry point: `Proxy::start(config)`.
#[derive(Debug)]
pub struct Proxy;

impl Proxy {
    /// Binds `config.listen` and serves until [`ProxyHandle::shutdown`].
    pub async fn start(config: ProxyConfig) -> Result<ProxyHandle, ProxyError> {
        config.validate()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ProxyError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
            addr: config.listen,
            source,
        })?;
        let heat_file = match &config.heat_csv {
            Some(path) => {
                let mut f = std::fs::File::create(path)?;
                f.write_all(HeatRow::HEADER.as_bytes())?;
                Some(f)
            }
            None => None,
        };
        let seed = config.seed.unwrap_or_else(|| rand::rng().random());
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(256)
            .build(connector);
        let per_table = config
            .tables
            .iter()
            .map(|(t, c)| (t.clone(), c.limits(config.limits)))
            .collect();
        let inner = Arc::new(Inner {
            capacity: Mutex::new(CapacityModel::new(config.limits, per_table)),
            stats: Mutex::new(Stats::new(heat_file.is_some())),
            faults: FaultInjector::new(config.faults, seed),
            sink: Mutex::new(HashSet::new()),
            key_schemas: Mutex::new(HashMap::new()),
            client,
            config,
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let server = tokio::spawn(accept_loop(listener, inner.clone(), shutdown_rx.clone()));
        let maintenance = tokio::spawn(maintenance_loop(inner.clone(), heat_file, shutdown_rx));
        tracing::info!(%addr, seed, "capacity-proxy listening");
        Ok(ProxyHandle {
            addr,
            inner,
            shutdown_tx,
            server,
            maintenance,
        })
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct ProxyHandle {
    /// The bound address.
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    shutdown_tx: watch::Sender<bool>,
    server: JoinHandle<()>,
    maintenance: JoinHandle<Result<(), ProxyError>>,
}

impl ProxyHandle {
    /// `http://ADDR`, the endpoint URL to give an SDK.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// All counters, every key included.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.snapshot(None)
    }

    /// The keys the sink holds, sorted.
    pub fn sink_keys(&self) -> Vec<SinkKey> {
        let mut keys: Vec<_> = self.inner.sink.lock().iter().cloned().collect();
        keys.sort();
        keys
    }

    /// Stops accepting, closes connections, writes the last heat rows.
    pub async fn shutdown(self) -> Result<(), ProxyError> {
        // Receivers may already be gone if the tasks ended; nothing to signal then.
        let _ = self.shutdown_tx.send(true);
        if let Err(e) = self.server.await {
            tracing::warn!("accept loop ended abnormally: {e}");
        }
        match self.maintenance.await {
            Ok(r) => r,
            Err(e) => Err(ProxyError::HeatCsv(std::io::Error::other(e))),
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    inner: Arc<Inner>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Usually fd exhaustion; back off briefly instead of spinning.
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let inner = inner.clone();
                let mut shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let inner = inner.clone();
                        async move { inner.handle(req).await }
                    });
                    let conn = http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        r = conn.as_mut() => {
                            if let Err(e) = r {
                                tracing::debug!("connection: {e}");
                            }
                        }
                        _ = shutdown.changed() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                        }
                    }
                });
            }
        }
    }
}

async fn maintenance_loop(
    inner: Arc<Inner>,
    mut heat_file: Option<std::fs::File>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ProxyError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let stop = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.changed() => true,
        };
        let now = inner.config.clock.now();
        {
            let mut cap = inner.capacity.lock();
            // Idle keys hold full buckets and carry no state worth keeping.
            if cap.tracked_keys() > 10_000 {
                cap.prune(now);
            }
        }
        if let Some(file) = &mut heat_file {
            let rows = inner
                .stats
                .lock()
                .drain_heat(if stop { None } else { Some(now.as_secs()) });
            if !rows.is_empty() {
                let text: String = rows.iter().map(|r| r.to_csv_line()).collect();
                file.write_all(text.as_bytes())?;
                file.flush()?;
            }
        }
        if stop {
            return Ok(());
        }
    }
}
