//! The runner's record of what it received: the id of every message a receive handed
//! it, a line each, appended as the receive returns. The demo and the soaks cross it
//! with the publisher's manifest, so a message SQS accepted and never handed out is
//! named as the stand-in's loss, apart from any of ours.
//!
//! Appended, never rewritten: a soak's run-local is SIGKILLed and restarted onto the
//! same file, and what a killed run wrote stays (each receive's lines are one write).

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aws_sdk_sqs::types::Message;

/// The file the runner appends received message ids to.
#[derive(Debug)]
pub(super) struct ReceivedLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl ReceivedLog {
    /// Opens `path` for appending, creating it (and its directory) if needed.
    pub(super) fn open(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Appends the ids of `messages`, one write; an error names the file.
    pub(super) fn record(&self, messages: &[Message]) -> anyhow::Result<()> {
        let mut lines = String::new();
        for id in messages.iter().filter_map(|m| m.message_id.as_deref()) {
            lines.push_str(id);
            lines.push('\n');
        }
        self.file
            .lock()
            .write_all(lines.as_bytes())
            .with_context(|| format!("cannot append to {}", self.path.display()))
    }
}

/// The ids a received log holds (each once, however often it was received); an absent
/// file holds none.
pub fn read_received(path: &Path) -> anyhow::Result<BTreeSet<String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str) -> Message {
        Message::builder().message_id(id).body("{}").build()
    }

    #[test]
    fn ids_are_appended_across_opens_and_read_back_once_each() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("run/received.txt");
        assert!(read_received(&path).expect("absent is empty").is_empty());
        let log = ReceivedLog::open(&path).expect("opens");
        log.record(&[message("a"), message("b")]).expect("writes");
        drop(log);
        // A restarted runner appends to what the killed one wrote.
        let log = ReceivedLog::open(&path).expect("opens again");
        log.record(&[message("b"), message("c")]).expect("writes");
        let ids: Vec<String> = read_received(&path).expect("reads").into_iter().collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }
}
