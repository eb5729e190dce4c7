//! `cargo xtask validate`: template.yaml checked the way `sam deploy` would need it,
//! without an AWS account or network: `cfn-lint` with the serverless rules,
//! `sam validate --lint`, and `sam build` (x86_64, the only target these machines have)
//! producing a `bootstrap` for both functions.
//!
//! The tools come from `infra/deploy/requirements.txt`, installed into
//! `.local/venv-deploy` (apart from the stand-in's venv, so neither pins the other).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

/// The functions of template.yaml whose build must yield a `bootstrap`.
const FUNCTIONS: [&str; 3] = ["IngestFunction", "QueryFunction", "SealerFunction"];

#[derive(Debug, Default, Args)]
pub struct ValidateArgs {
    /// Lint and validate only; skip `sam build` (which compiles every function in release).
    #[arg(long)]
    pub no_build: bool,
}

pub fn run(root: &Path, args: &ValidateArgs) -> Result<()> {
    let started = Instant::now();
    let installing = Instant::now();
    let venv = stand_in::ensure_deploy_venv(root)?;
    eprintln!("    deploy venv ready after {:.1?}", installing.elapsed());
    let tools = Tools::new(root, venv.dir())?;
    tools.step(
        "cfn-lint",
        "cfn-lint",
        &[
            "template.yaml",
            "--append-rules",
            "cfn_lint_serverless.rules",
        ],
    )?;
    tools.step("sam validate", "sam", &["validate", "--lint"])?;
    if !args.no_build {
        // --beta-features: BuildMethod rust-cargolambda is a beta feature of SAM CLI.
        tools.step(
            "sam build",
            "sam",
            &[
                "build",
                "--beta-features",
                "--parameter-overrides",
                "Architecture=x86_64",
            ],
        )?;
        for function in FUNCTIONS {
            let bootstrap = root.join(".aws-sam/build").join(function).join("bootstrap");
            let size = fs::metadata(&bootstrap)
                .with_context(|| format!("sam build left no {}", bootstrap.display()))?
                .len();
            if size == 0 {
                bail!("{} is empty", bootstrap.display());
            }
            eprintln!("    {} ({size} bytes)", bootstrap.display());
        }
    }
    eprintln!(
        "==> validate: template checks passed in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// The deploy tools with an environment that keeps them off the network: a fixed
/// region, dummy credentials, no profile or instance-metadata lookups, no telemetry.
struct Tools {
    root: PathBuf,
    path: String,
    aws_config_dir: PathBuf,
}

impl Tools {
    fn new(root: &Path, venv: &Path) -> Result<Self> {
        let bin = venv.join("bin");
        let inherited = std::env::var_os("PATH").unwrap_or_default();
        // The venv's bin first: `cargo lambda` finds `cargo-lambda`, and cargo lambda
        // finds zig through the venv's `python3 -m ziglang`.
        let path =
            std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&inherited)))
                .context("building PATH")?
                .into_string()
                .map_err(|_| anyhow::anyhow!("PATH is not UTF-8"))?;
        let aws_config_dir = root.join(".local/aws-offline");
        fs::create_dir_all(&aws_config_dir)
            .with_context(|| format!("creating {}", aws_config_dir.display()))?;
        Ok(Self {
            root: root.to_path_buf(),
            path,
            aws_config_dir,
        })
    }

    fn step(&self, step: &str, program: &str, args: &[&str]) -> Result<()> {
        eprintln!("==> {step}: {program} {}", args.join(" "));
        let started = Instant::now();
        let status = Command::new(program)
            .args(args)
            .current_dir(&self.root)
            .env("PATH", &self.path)
            .env("AWS_REGION", stand_in::LOCAL_REGION)
            .env("AWS_DEFAULT_REGION", stand_in::LOCAL_REGION)
            .env("AWS_ACCESS_KEY_ID", stand_in::DUMMY_ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", stand_in::DUMMY_SECRET_ACCESS_KEY)
            .env("AWS_CONFIG_FILE", self.aws_config_dir.join("config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                self.aws_config_dir.join("credentials"),
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("SAM_CLI_TELEMETRY", "0")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_ENDPOINT_URL")
            .status()
            .with_context(|| {
                format!("step '{step}': could not start {program} (is {program} on PATH?)")
            })?;
        if !status.success() {
            bail!(
                "step '{step}' failed ({program} {} exited with {status})",
                args.join(" ")
            );
        }
        eprintln!("    {step} took {:.1?}", started.elapsed());
        Ok(())
    }
}
