//! Library errors.

/// Errors of the proxy library.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Invalid configuration (flags, TOML file, URL).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The listen address could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: std::net::SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The upstream endpoint failed (connection refused, reset, bad reply).
    #[error("upstream: {0}")]
    Upstream(String),
    /// A connection deliberately closed without a reply (drop fault).
    #[error("connection dropped by fault injection")]
    Dropped,
    /// The heat CSV file could not be written.
    #[error("heat csv: {0}")]
    HeatCsv(#[from] std::io::Error),
}

impl ProxyError {
    /// True when a caller may retry the same operation.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Upstream(_) | Self::Dropped)
    }
}
