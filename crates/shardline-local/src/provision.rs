//! `shardline-local provision`: creates `template.yaml`'s tables and queues on a local
//! stand-in and writes the env file the other commands read. `cargo xtask local up`
//! starts moto and runs this, so that xtask itself builds without the AWS SDK.
//! [`queues_on_moto_tables_on_dynalite`] is the stack the demo and the soaks run on.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct ProvisionArgs {
    /// The local server's endpoint (moto on loopback).
    #[arg(long)]
    pub endpoint: String,
    /// Prefix of the resource names (`{prefix}-{LogicalId}`).
    #[arg(long, default_value = "shardline-local")]
    pub prefix: String,
    /// The template to provision (default: the workspace's `template.yaml`).
    #[arg(long)]
    pub template: Option<PathBuf>,
    /// Where to write the stack's variables (default: `.local/stack.env`).
    #[arg(long)]
    pub env_file: Option<PathBuf>,
    /// A further `KEY=VALUE` line for the env file (repeatable), e.g. `MOTO_URL=...`.
    #[arg(long = "env", value_parser = parse_pair)]
    pub extra: Vec<(String, String)>,
    /// A template parameter in place of its default (repeatable), as `sam deploy
    /// --parameter-overrides` takes it, e.g. `TimeIndex=enabled`.
    #[arg(long = "parameter", value_parser = parse_pair)]
    pub parameters: Vec<(String, String)>,
}

pub async fn run(args: &ProvisionArgs) -> Result<()> {
    let root = stand_in::repo_root()?;
    let template = args
        .template
        .clone()
        .unwrap_or_else(|| root.join("template.yaml"));
    let env_file = args
        .env_file
        .clone()
        .unwrap_or_else(|| root.join(".local/stack.env"));
    let stack = stand_in::provision_with(&args.endpoint, &template, &args.prefix, &args.parameters)
        .await
        .with_context(|| format!("provisioning {} on {}", template.display(), args.endpoint))?;
    stack.write_env_with(&env_file, &args.extra)?;
    eprintln!(
        "provisioned {} on {}; variables in {}",
        template.display(),
        args.endpoint,
        env_file.display()
    );
    Ok(())
}

/// moto and dynalite started side by side from `root`'s tools, and the stack provisioned
/// on them under `prefix` ([`queues_on_moto_tables_on_dynalite`]): what the soak and the
/// one-reading fleet run on. The servers stop when dropped.
pub async fn start_stand_ins(
    root: &Path,
    prefix: &str,
) -> Result<(stand_in::Moto, stand_in::Dynalite, stand_in::Stack)> {
    let venv = root.to_path_buf();
    let moto = tokio::task::spawn_blocking(move || -> Result<stand_in::Moto> {
        stand_in::Moto::start(&stand_in::ensure_venv(&venv)?)
    });
    let tools = root.to_path_buf();
    let dynalite = tokio::task::spawn_blocking(move || -> Result<stand_in::Dynalite> {
        stand_in::Dynalite::start(&stand_in::ensure_dynalite(&tools)?)
    });
    let moto = moto.await.context("moto start task")??;
    let dynalite = dynalite.await.context("dynalite start task")??;
    let stack = queues_on_moto_tables_on_dynalite(
        &root.join("template.yaml"),
        prefix,
        &moto.endpoint(),
        &dynalite.endpoint(),
    )
    .await?;
    Ok((moto, dynalite, stack))
}

/// The template's queues on moto and its tables, under the same names, on dynalite:
/// the stack the demo and the soaks run on. dynalite keeps each partition's items in key
/// order, so a Query reads one key's range as DynamoDB does, where moto scans the whole
/// table for every Query; moto's SQS stays. The stack's endpoint is moto's (moto holds
/// copies of the tables too, unused): DynamoDB clients are pointed at dynalite, or at a
/// capacity-proxy in front of it.
pub async fn queues_on_moto_tables_on_dynalite(
    template: &Path,
    prefix: &str,
    moto_url: &str,
    dynalite_url: &str,
) -> Result<stand_in::Stack> {
    let stack = stand_in::provision(moto_url, template, prefix)
        .await
        .with_context(|| format!("provisioning the queues on {moto_url}"))?;
    stand_in::provision_tables(dynalite_url, template, prefix, stand_in::Backend::Dynalite)
        .await
        .with_context(|| format!("provisioning the tables on {dynalite_url}"))?;
    Ok(stack)
}

fn parse_pair(text: &str) -> Result<(String, String)> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => bail!("expected KEY=VALUE, got {text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_pair_needs_a_key_and_an_equals_sign() {
        assert_eq!(
            parse_pair("MOTO_URL=http://127.0.0.1:1=x").unwrap(),
            ("MOTO_URL".to_owned(), "http://127.0.0.1:1=x".to_owned())
        );
        assert!(parse_pair("MOTO_URL").is_err());
        assert!(parse_pair("=value").is_err());
    }
}
