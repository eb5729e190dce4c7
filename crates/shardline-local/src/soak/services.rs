//! The soak's private services: moto with the template's stack (its queue's visibility
//! timeout shortened), and capacity-proxy in front of it with the soak's faults.

use anyhow::Context as _;
use aws_sdk_sqs::types::QueueAttributeName;
use capacity_proxy::{Proxy, ProxyConfig};

use super::SoakConfig;

/// The soak's private services: moto with the template's stack, and capacity-proxy in
/// front of it with the soak's faults. Fields drop in order: the proxy before moto
/// behind it.
pub(super) struct Services {
    pub(super) proxy: capacity_proxy::ProxyHandle,
    pub(super) dynamo: aws_sdk_dynamodb::Client,
    pub(super) sqs: aws_sdk_sqs::Client,
    pub(super) stack: stand_in::Stack,
    pub(super) moto: stand_in::Moto,
}

impl Services {
    /// Starts moto, provisions the stack under `prefix`, and starts the proxy.
    pub(super) async fn start(cfg: &SoakConfig, prefix: &str) -> anyhow::Result<Self> {
        let root = cfg.root.clone();
        let moto = tokio::task::spawn_blocking(move || -> anyhow::Result<stand_in::Moto> {
            let venv = stand_in::ensure_venv(&root)?;
            stand_in::Moto::start(&venv)
        })
        .await
        .context("moto start task")??;
        let stack = stand_in::provision(&moto.endpoint(), &cfg.root.join("template.yaml"), prefix)
            .await
            .context("provisioning the soak stack")?;
        let sdk = stand_in::sdk_config(&moto.endpoint()).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
        // A short visibility timeout so messages held by a killed run-local come back
        // within the soak (the template's 185 s suits a 30 s Lambda, not a soak).
        sqs.set_queue_attributes()
            .queue_url(&stack.queue_url)
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                cfg.visibility_timeout_secs.to_string(),
            )
            .send()
            .await
            .context("setting the soak queue's visibility timeout")?;

        let mut proxy_config = ProxyConfig::forward(&moto.endpoint())?;
        proxy_config.faults = cfg.faults;
        proxy_config.seed = Some(cfg.seed);
        proxy_config.limits.key_wcu = cfg.key_wcu;
        let proxy = Proxy::start(proxy_config).await?;
        say!(
            cfg.verbose,
            "moto {}, capacity-proxy {}",
            moto.endpoint(),
            proxy.url()
        );
        Ok(Self {
            moto,
            stack,
            sqs,
            dynamo,
            proxy,
        })
    }

    /// Stops the proxy, then moto.
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        self.proxy.shutdown().await?;
        drop(self.moto);
        Ok(())
    }
}
