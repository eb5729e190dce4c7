use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The workspace root: the nearest ancestor of the current directory (or, failing
/// that, of this crate's source directory) holding `template.yaml` and a `Cargo.toml`
/// with a `[workspace]` table.
pub fn repo_root() -> Result<PathBuf> {
    // cargo runs tests in their package directory and `cargo xtask` in the caller's,
    // both inside the repository; the compile-time path is the fallback for binaries
    // started elsewhere.
    if let Ok(cwd) = std::env::current_dir()
        && let Ok(root) = repo_root_from(&cwd)
    {
        return Ok(root);
    }
    repo_root_from(Path::new(env!("CARGO_MANIFEST_DIR")))
}

/// Walks up from `start` to the first directory that holds `template.yaml` and a
/// workspace `Cargo.toml`.
pub fn repo_root_from(start: &Path) -> Result<PathBuf> {
    for dir in start.ancestors() {
        let manifest = dir.join("Cargo.toml");
        if dir.join("template.yaml").is_file() && manifest.is_file() {
            let text = std::fs::read_to_string(&manifest)
                .with_context(|| format!("reading {}", manifest.display()))?;
            if text.lines().any(|l| l.trim() == "[workspace]") {
                return Ok(dir.to_path_buf());
            }
        }
    }
    bail!(
        "no Shardline repository root (template.yaml next to a workspace Cargo.toml) above {}",
        start.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_root_from_a_nested_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
        std::fs::write(root.join("template.yaml"), "Resources: {}\n").unwrap();
        let nested = root.join("crates/a/src");
        std::fs::create_dir_all(&nested).unwrap();
        // A member manifest on the way up must not stop the walk.
        std::fs::write(root.join("crates/a/Cargo.toml"), "[package]\n").unwrap();
        assert_eq!(repo_root_from(&nested).unwrap(), root);
    }

    #[test]
    fn rejects_a_tree_without_template() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "[workspace]\n").unwrap();
        assert!(repo_root_from(dir.path()).is_err());
    }

    #[test]
    fn this_repository_has_a_root() {
        let root = repo_root().unwrap();
        assert!(root.join("template.yaml").is_file());
    }
}
