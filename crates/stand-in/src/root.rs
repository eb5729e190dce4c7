use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The workspace root: the nearest ancestor of this crate's manifest directory (or,
/// failing that, of the current directory) holding `template.yaml` and a `Cargo.toml`
/// with a `[workspace]` table.
pub fn repo_root() -> Result<PathBuf> {
    // CARGO_MANIFEST_DIR at build time is the stand-in crate inside the repository,
    // valid for every binary and test built from this tree.
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Ok(root) = repo_root_from(compiled) {
        return Ok(root);
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    repo_root_from(&cwd)
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
