//! Shared helpers for the end-to-end tests.

use std::path::PathBuf;

use anyhow::Result;
pub use stand_in::TestStack;

/// `template.yaml` of this repository.
pub fn template_path() -> Result<PathBuf> {
    Ok(stand_in::repo_root()?.join("template.yaml"))
}

/// A DynamoDB client for a local endpoint.
pub async fn dynamodb(endpoint: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(endpoint).await)
}

/// An SQS client for a local endpoint.
pub async fn sqs(endpoint: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&stand_in::sdk_config(endpoint).await)
}
