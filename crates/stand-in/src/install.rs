use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// The project-local Python virtualenv (`.local/venv`) holding moto's server.
#[derive(Debug, Clone)]
pub struct Venv {
    root: PathBuf,
    dir: PathBuf,
}

impl Venv {
    /// The repository root the venv belongs to (logs and pid files go under it).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The venv directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of an executable installed in the venv, e.g. `bin("moto_server")`.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }
}

/// The project-local Node packages (`.local/node`) holding dynalite.
#[derive(Debug, Clone)]
pub struct NodeTools {
    root: PathBuf,
    dir: PathBuf,
}

impl NodeTools {
    /// The repository root the packages belong to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `node_modules` inside `.local/node`.
    pub fn node_modules(&self) -> PathBuf {
        self.dir.join("node_modules")
    }

    /// dynalite's command-line entry point.
    pub fn dynalite_cli(&self) -> PathBuf {
        self.node_modules().join("dynalite").join("cli.js")
    }
}

/// Creates `.local/venv` and installs `infra/local/requirements.txt` (moto) into it,
/// unless a stamp shows that exactly these requirements are already installed.
///
/// Safe to call from several processes at once (parallel test binaries): the work is
/// done under an exclusive lock on `.local/venv.lock`, and the stamp is written last.
pub fn ensure_venv(root: &Path) -> Result<Venv> {
    ensure_python_venv(
        root,
        "venv",
        "infra/local/requirements.txt",
        &["moto_server"],
    )
}

/// Creates `.local/venv-deploy` from `infra/deploy/requirements.txt` (SAM CLI, cfn-lint,
/// cargo-lambda, zig), like [`ensure_venv`]; `cargo xtask validate` and the Lambda
/// tests use it.
pub fn ensure_deploy_venv(root: &Path) -> Result<Venv> {
    ensure_python_venv(
        root,
        "venv-deploy",
        "infra/deploy/requirements.txt",
        &["sam", "cfn-lint", "cargo-lambda"],
    )
}

/// `.local/{name}` with the requirements file `requirements` (relative to `root`)
/// installed and every one of `tools` present, unless the stamp `.local/{name}.stamp`
/// holds the digest of exactly these requirements and the tools are there. Works under
/// an exclusive lock on `.local/{name}.lock`; the stamp is written last.
fn ensure_python_venv(root: &Path, name: &str, requirements: &str, tools: &[&str]) -> Result<Venv> {
    let requirements = root.join(requirements);
    let dir = root.join(".local").join(name);
    let venv = Venv {
        root: root.to_path_buf(),
        dir: dir.clone(),
    };
    let digest = digest_files(&[&requirements])?;
    let stamp = root.join(format!(".local/{name}.stamp"));
    with_lock(&root.join(format!(".local/{name}.lock")), || {
        let complete = tools.iter().all(|tool| venv.bin(tool).is_file());
        if stamp_matches(&stamp, &digest) && complete {
            return Ok(());
        }
        eprintln!(
            "stand-in: installing {} into {}",
            requirements.display(),
            dir.display()
        );
        run(Command::new(python()).arg("-m").arg("venv").arg(&dir))?;
        run(Command::new(venv.bin("python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements))?;
        if let Some(missing) = tools.iter().find(|tool| !venv.bin(tool).is_file()) {
            bail!(
                "pip finished but {} is missing",
                venv.bin(missing).display()
            );
        }
        fs::write(&stamp, &digest).with_context(|| format!("writing {}", stamp.display()))
    })?;
    Ok(venv)
}

/// Installs `infra/local/package.json` (dynalite) into `.local/node`, with `npm ci`
/// from the committed lock file, unless a stamp shows it is already there.
/// Safe to call from several processes at once, like [`ensure_venv`].
pub fn ensure_dynalite(root: &Path) -> Result<NodeTools> {
    let spec_dir = root.join("infra/local");
    let package = spec_dir.join("package.json");
    let lock = spec_dir.join("package-lock.json");
    let dir = root.join(".local/node");
    let tools = NodeTools {
        root: root.to_path_buf(),
        dir: dir.clone(),
    };
    let inputs: Vec<&Path> = if lock.is_file() {
        vec![&package, &lock]
    } else {
        vec![&package]
    };
    let digest = digest_files(&inputs)?;
    let stamp = root.join(".local/node.stamp");
    with_lock(&root.join(".local/node.lock"), || {
        if stamp_matches(&stamp, &digest) && tools.dynalite_cli().is_file() {
            return Ok(());
        }
        eprintln!(
            "stand-in: installing {} into {}",
            package.display(),
            dir.display()
        );
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // npm works on the package.json of the prefix directory, so the spec is copied
        // there; the copies are outputs, the files under infra/local stay the source.
        fs::copy(&package, dir.join("package.json"))
            .with_context(|| format!("copying {}", package.display()))?;
        let mut npm = Command::new("npm");
        if lock.is_file() {
            fs::copy(&lock, dir.join("package-lock.json"))
                .with_context(|| format!("copying {}", lock.display()))?;
            npm.arg("ci");
        } else {
            npm.arg("install");
        }
        npm.args(["--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
            .arg(&dir);
        run(&mut npm)?;
        if !tools.dynalite_cli().is_file() {
            bail!(
                "npm finished but {} is missing",
                tools.dynalite_cli().display()
            );
        }
        fs::write(&stamp, &digest).with_context(|| format!("writing {}", stamp.display()))
    })?;
    Ok(tools)
}

fn python() -> String {
    std::env::var("SHARDLINE_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn digest_files(paths: &[&Path]) -> Result<String> {
    let mut hasher = Sha256::new();
    for path in paths {
        let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(&bytes);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn stamp_matches(stamp: &Path, digest: &str) -> bool {
    fs::read_to_string(stamp).is_ok_and(|s| s.trim() == digest)
}

/// Runs `work` while holding an exclusive lock on `lock_path`; the lock is released
/// when the file is closed, also if `work` fails or the process dies.
fn with_lock<T>(lock_path: &Path, work: impl FnOnce() -> Result<T>) -> Result<T> {
    if let Some(parent) = lock_path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let file: File = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    let result = work();
    drop(file);
    result
}

fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_lock_serialises_concurrent_work() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("x.lock");
        let inside = Arc::new(AtomicUsize::new(0));
        let max_seen = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (lock, inside, max_seen) = (lock.clone(), inside.clone(), max_seen.clone());
                std::thread::spawn(move || {
                    with_lock(&lock, || {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max_seen.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(max_seen.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn digest_changes_with_content() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("r.txt");
        fs::write(&f, "a==1\n").unwrap();
        let one = digest_files(&[&f]).unwrap();
        fs::write(&f, "a==2\n").unwrap();
        assert_ne!(one, digest_files(&[&f]).unwrap());
    }
}
