//! The soak's private services, as the demo's: moto for SQS (its queue's visibility
//! timeout shortened), dynalite for DynamoDB, and capacity-proxy in front of dynalite
//! with the soak's faults. dynalite reads a Query's key range as DynamoDB does, where
//! moto scans the whole table for every Query, so the soak's reads measure Shardline's
//! code rather than moto's scans.

use anyhow::Context as _;
use aws_sdk_sqs::types::QueueAttributeName;
use capacity_proxy::{Proxy, ProxyConfig};

use super::SoakConfig;

/// The soak's private services. Fields drop in order: the proxy before dynalite behind
/// it.
pub(super) struct Services {
    pub(super) proxy: capacity_proxy::ProxyHandle,
    /// DynamoDB on dynalite itself, for the checks (no faults, no limits).
    pub(super) dynamo: aws_sdk_dynamodb::Client,
    pub(super) sqs: aws_sdk_sqs::Client,
    /// The queues on moto; the tables, under the same names, on dynalite.
    pub(super) stack: stand_in::Stack,
    pub(super) moto: stand_in::Moto,
    pub(super) dynalite: stand_in::Dynalite,
}

impl Services {
    /// Starts moto and dynalite, provisions the stack under `prefix` (queues on moto,
    /// tables on dynalite), and starts the proxy in front of dynalite.
    pub(super) async fn start(cfg: &SoakConfig, prefix: &str) -> anyhow::Result<Self> {
        let (moto, dynalite, stack) = crate::provision::start_stand_ins(&cfg.root, prefix)
            .await
            .context("provisioning the soak stack")?;
        let sqs = aws_sdk_sqs::Client::new(&stand_in::sdk_config(&moto.endpoint()).await);
        let dynamo =
            aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&dynalite.endpoint()).await);
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

        let mut proxy_config = ProxyConfig::forward(&dynalite.endpoint())?;
        proxy_config.faults = cfg.faults;
        proxy_config.seed = Some(cfg.seed);
        proxy_config.limits.key_wcu = cfg.key_wcu;
        let proxy = Proxy::start(proxy_config).await?;
        say!(
            cfg.verbose,
            "moto (SQS) {}, dynalite (DynamoDB) {}, capacity-proxy {}",
            moto.endpoint(),
            dynalite.endpoint(),
            proxy.url()
        );
        Ok(Self {
            proxy,
            dynamo,
            sqs,
            stack,
            moto,
            dynalite,
        })
    }

    /// The DynamoDB the soak runs on, in words: dynalite, behind the proxy.
    pub(super) fn dynamodb(&self) -> String {
        format!(
            "dynalite {} behind capacity-proxy {}",
            self.dynalite.endpoint(),
            self.proxy.url()
        )
    }

    /// Stops the proxy, then dynalite and moto.
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        self.proxy.shutdown().await?;
        drop((self.dynalite, self.moto));
        Ok(())
    }
}
