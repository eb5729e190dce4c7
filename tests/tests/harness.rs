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

/// Variables cargo sets for this test process, not for a cargo it runs (they would
/// change build-script fingerprints and rebuild dependencies).
pub fn leaks_from_cargo_test(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || matches!(
            name,
            "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR" | "CARGO_RUSTC_CURRENT_DIR"
        )
}
