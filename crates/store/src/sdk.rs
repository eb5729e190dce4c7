//! The AWS SDK configuration a Lambda function loads at its start: one loader for the
//! ingest and the query, so both read the region, credentials and endpoint the same way
//! (the function's environment, `AWS_ENDPOINT_URL` included, which `cargo lambda watch`
//! and the local stand-in use).

use aws_config::{BehaviorVersion, SdkConfig};

/// The configuration from the function's environment, with the SDK's latest behaviour.
pub async fn lambda_config() -> SdkConfig {
    aws_config::load_defaults(BehaviorVersion::latest()).await
}
