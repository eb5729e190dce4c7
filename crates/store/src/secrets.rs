//! Secrets Manager, read at a function's start (and again when what it holds may have
//! rotated): a secret's value as bytes.

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

/// The value of the version of secret `id` that carries staging label `stage`
/// (`AWSCURRENT`, `AWSPREVIOUS`), as [`secret_bytes`] reads it; `None` when no version
/// carries it (a secret never rotated has no `AWSPREVIOUS`).
pub async fn secret_stage_bytes(
    client: &Client,
    id: &str,
    stage: &str,
) -> Result<Option<Vec<u8>>, String> {
    let out = match client
        .get_secret_value()
        .secret_id(id)
        .version_stage(stage)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            return Ok(None);
        }
        Err(e) => {
            return Err(format!(
                "secret version {stage} could not be read: {}",
                DisplayErrorContext(&e)
            ));
        }
    };
    match (out.secret_string, out.secret_binary) {
        (Some(text), _) => Ok(Some(text.into_bytes())),
        (None, Some(blob)) => Ok(Some(blob.into_inner())),
        (None, None) => Err(format!("the secret's {stage} version has no value")),
    }
}

/// The keys a rotated secret `id` holds, each made by `key` from its version's bytes:
/// its `AWSCURRENT` version (which must exist) is the current key, its `AWSPREVIOUS`
/// (absent until the first rotation) the previous one, still accepted. The one reading
/// of a rotated key, for the front door's keys (the ingest) and the cursor keys (the
/// query). `Err(why)` names what went wrong, for the caller's configuration error.
pub async fn current_and_previous<K, E: std::fmt::Display>(
    client: &Client,
    id: &str,
    key: impl Fn(Vec<u8>) -> Result<K, E>,
) -> Result<(K, Option<K>), String> {
    let current = secret_stage_bytes(client, id, "AWSCURRENT")
        .await?
        .ok_or_else(|| "the secret has no AWSCURRENT version".to_owned())?;
    let previous = secret_stage_bytes(client, id, "AWSPREVIOUS").await?;
    let key = |bytes| key(bytes).map_err(|e| e.to_string());
    Ok((key(current)?, previous.map(key).transpose()?))
}
