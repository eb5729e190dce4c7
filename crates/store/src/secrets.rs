//! Secrets Manager, read once at a function's start: a secret's value as bytes.

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::DisplayErrorContext;

/// The value of the secret `id` (an ARN or a name): its `SecretString` as UTF-8 bytes,
/// or its `SecretBinary`. `Err(why)` names what went wrong, for the caller to put in
/// its configuration error.
pub async fn secret_bytes(client: &Client, id: &str) -> Result<Vec<u8>, String> {
    let out = client
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .map_err(|e| format!("secret could not be read: {}", DisplayErrorContext(&e)))?;
    match (out.secret_string, out.secret_binary) {
        (Some(text), _) => Ok(text.into_bytes()),
        (None, Some(blob)) => Ok(blob.into_inner()),
        (None, None) => Err("the secret has no value".to_owned()),
    }
}
