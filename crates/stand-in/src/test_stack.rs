use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Result;
use aws_config::SdkConfig;

use crate::install::ensure_venv;
use crate::provision::provision_with;
use crate::root::repo_root;
use crate::server::Moto;
use crate::stack::Stack;

/// A private stand-in for one test: its own moto on a free loopback port, the
/// template's tables and queues under a unique prefix. Dropping it stops moto.
#[derive(Debug)]
pub struct TestStack {
    pub stack: Stack,
    moto: Moto,
}

impl TestStack {
    /// Installs the venv if needed, starts moto and provisions `template.yaml`.
    pub async fn start() -> Result<Self> {
        Self::start_with(&[]).await
    }

    /// [`TestStack::start`] with template parameters in place of their defaults, e.g.
    /// `TimeIndex=enabled`.
    pub async fn start_with(parameters: &[(&str, &str)]) -> Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = repo_root()?;
        let venv = ensure_venv(&root)?;
        let moto = Moto::start(&venv)?;
        // Unique per process and call, so names never collide even on a shared server.
        let prefix = format!(
            "test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let parameters: Vec<(String, String)> = parameters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let stack = provision_with(
            &moto.endpoint(),
            &root.join("template.yaml"),
            &prefix,
            &parameters,
        )
        .await?;
        Ok(Self { stack, moto })
    }

    /// `http://127.0.0.1:PORT` of this test's moto.
    pub fn endpoint(&self) -> String {
        self.moto.endpoint()
    }

    /// An SDK configuration for this stack.
    pub async fn sdk_config(&self) -> SdkConfig {
        self.stack.sdk_config().await
    }
}
