//! Pid files for processes that outlive the command that started them.
//!
//! `cargo xtask local up` (and later `run-local`, the capacity proxy, ...) record each
//! background process as `.local/pids/<name>.pid`, `key=value` lines; `local status`
//! and `local down` read every file there, whatever started it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One recorded background process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidRecord {
    /// Unique name, also the file stem (`moto`, `capacity-proxy`, ...).
    pub name: String,
    pub pid: u32,
    /// Executable (or script) path it was started with; used to recognise the process,
    /// so a pid reused by an unrelated program is never signalled.
    pub program: String,
    /// Where it listens, if it is a server.
    pub endpoint: Option<String>,
    /// Its log file, if any.
    pub log: Option<PathBuf>,
}

/// What [`PidRecord::stop`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// It was running and has exited.
    Stopped,
    /// It was no longer running (or the pid now belongs to another program).
    NotRunning,
}

/// `.local/pids` under the repository root.
pub fn pid_dir(root: &Path) -> PathBuf {
    root.join(".local/pids")
}

impl PidRecord {
    /// The file this record lives in.
    pub fn path(&self, root: &Path) -> PathBuf {
        pid_dir(root).join(format!("{}.pid", self.name))
    }

    /// Writes (or replaces) the pid file.
    pub fn write(&self, root: &Path) -> Result<PathBuf> {
        if self.name.is_empty() || self.name.contains(['/', '\\', '\n']) {
            bail!("invalid process name {:?}", self.name);
        }
        let dir = pid_dir(root);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut text = format!(
            "name={}\npid={}\nprogram={}\n",
            self.name, self.pid, self.program
        );
        if let Some(endpoint) = &self.endpoint {
            text.push_str(&format!("endpoint={endpoint}\n"));
        }
        if let Some(log) = &self.log {
            text.push_str(&format!("log={}\n", log.display()));
        }
        let path = self.path(root);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Parses a pid file.
    pub fn parse(text: &str) -> Result<Self> {
        let (mut name, mut pid, mut program, mut endpoint, mut log) =
            (None, None, None, None, None);
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (key, value) = line
                .split_once('=')
                .with_context(|| format!("pid file line without '=': {line:?}"))?;
            match key {
                "name" => name = Some(value.to_owned()),
                "pid" => {
                    pid = Some(
                        value
                            .parse::<u32>()
                            .with_context(|| format!("bad pid {value:?}"))?,
                    )
                }
                "program" => program = Some(value.to_owned()),
                "endpoint" => endpoint = Some(value.to_owned()),
                "log" => log = Some(PathBuf::from(value)),
                // Later writers may add keys; readers keep working.
                _ => {}
            }
        }
        Ok(Self {
            name: name.context("pid file without name")?,
            pid: pid.context("pid file without pid")?,
            program: program.unwrap_or_default(),
            endpoint,
            log,
        })
    }

    /// Whether the recorded process still runs (and is still the recorded program).
    pub fn is_alive(&self) -> bool {
        let signalable = Command::new("kill")
            .arg("-0")
            .arg(self.pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        signalable && self.is_same_program() && !is_zombie(self.pid)
    }

    /// On Linux, compares /proc/PID/cmdline with the recorded program; elsewhere
    /// trusts the pid.
    fn is_same_program(&self) -> bool {
        if self.program.is_empty() {
            return true;
        }
        match fs::read(format!("/proc/{}/cmdline", self.pid)) {
            Ok(cmdline) => String::from_utf8_lossy(&cmdline).contains(&self.program),
            Err(_) => !Path::new("/proc/self").exists(),
        }
    }

    /// Sends SIGTERM, waits up to `grace` for the exit, then SIGKILL.
    pub fn stop(&self, grace: Duration) -> Result<StopOutcome> {
        if !self.is_alive() {
            return Ok(StopOutcome::NotRunning);
        }
        signal(self.pid, "-TERM")?;
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_alive() {
                return Ok(StopOutcome::Stopped);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal(self.pid, "-KILL")?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !self.is_alive() {
                return Ok(StopOutcome::Stopped);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("{} (pid {}) survived SIGKILL", self.name, self.pid)
    }
}

/// Every record under `.local/pids`, sorted by name.
pub fn recorded(root: &Path) -> Result<Vec<PidRecord>> {
    let dir = pid_dir(root);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut records = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "pid") {
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            records.push(
                PidRecord::parse(&text).with_context(|| format!("parsing {}", path.display()))?,
            );
        }
    }
    records.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(records)
}

/// Stops every recorded process and removes its pid file; returns what happened to
/// each. Files that cannot be parsed are reported as errors but do not stop the rest.
pub fn stop_all(root: &Path, grace: Duration) -> Result<Vec<(PidRecord, StopOutcome)>> {
    let mut done = Vec::new();
    let mut failures = Vec::new();
    for record in recorded(root)? {
        match record.stop(grace) {
            Ok(outcome) => {
                let path = record.path(root);
                if let Err(e) = fs::remove_file(&path) {
                    failures.push(format!("removing {}: {e}", path.display()));
                }
                done.push((record, outcome));
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if !failures.is_empty() {
        bail!("could not stop everything: {}", failures.join("; "));
    }
    Ok(done)
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    // `kill` may fail because the process exited meanwhile: the caller re-checks.
    Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running kill {sig} {pid}"))?;
    Ok(())
}

fn is_zombie(pid: u32) -> bool {
    // /proc/PID/stat: "pid (comm) S ..."; the state follows the last ')'.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let rec = PidRecord {
            name: "moto".into(),
            pid: 4242,
            program: "/x/bin/moto_server".into(),
            endpoint: Some("http://127.0.0.1:5000".into()),
            log: Some(PathBuf::from("/x/.local/logs/moto.log")),
        };
        rec.write(dir.path()).unwrap();
        assert_eq!(recorded(dir.path()).unwrap(), vec![rec]);
    }

    #[test]
    fn stops_a_real_process_and_reports_a_dead_one() {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        let rec = PidRecord {
            name: "sleeper".into(),
            pid: child.id(),
            program: "sleep".into(),
            endpoint: None,
            log: None,
        };
        rec.write(dir.path()).unwrap();
        assert!(rec.is_alive());
        // Reap the child from another thread so it does not linger as a zombie.
        let reaper = std::thread::spawn(move || {
            let mut child = child;
            child.wait().unwrap()
        });
        let done = stop_all(dir.path(), Duration::from_secs(5)).unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].1, StopOutcome::Stopped);
        assert!(!reaper.join().unwrap().success());
        assert!(recorded(dir.path()).unwrap().is_empty());
        assert_eq!(
            rec.stop(Duration::from_secs(1)).unwrap(),
            StopOutcome::NotRunning
        );
    }

    #[test]
    fn a_reused_pid_of_another_program_is_not_alive() {
        let rec = PidRecord {
            name: "x".into(),
            pid: std::process::id(),
            program: "definitely-not-this-test-binary".into(),
            endpoint: None,
            log: None,
        };
        assert!(!rec.is_alive());
    }
}
