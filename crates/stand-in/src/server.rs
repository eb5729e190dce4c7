use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::install::{NodeTools, Venv};
use crate::pids::PidRecord;

/// How long a server may take to answer its first request (moto imports a lot).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts when the chosen port is taken between probing and binding.
const PORT_ATTEMPTS: usize = 3;

/// A free TCP port on 127.0.0.1, found by binding port 0.
pub fn free_loopback_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A child server process on a loopback port, killed on drop unless detached.
#[derive(Debug)]
struct ServerProcess {
    kind: &'static str,
    child: Option<Child>,
    program: PathBuf,
    port: u16,
    log: PathBuf,
}

impl ServerProcess {
    /// Starts `program args(port)` with output to `.local/logs/<kind>-<port>.log` and
    /// waits until it answers HTTP on the port.
    fn start(
        root: &Path,
        kind: &'static str,
        program: &Path,
        args: impl Fn(u16) -> Vec<String>,
    ) -> Result<Self> {
        if !program.is_file() {
            bail!(
                "{} not found: install it first (cargo xtask local install)",
                program.display()
            );
        }
        let logs = root.join(".local/logs");
        fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_loopback_port()?;
            let log = logs.join(format!("{kind}-{port}.log"));
            let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
            let err = out.try_clone()?;
            let child = Command::new(program)
                .args(args(port))
                .current_dir(root)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .with_context(|| format!("starting {}", program.display()))?;
            let mut server = Self {
                kind,
                child: Some(child),
                program: program.to_path_buf(),
                port,
                log,
            };
            match server.wait_ready(READY_TIMEOUT) {
                Ok(()) => {
                    tracing::debug!(kind, port, "stand-in server ready");
                    return Ok(server);
                }
                Err(e) => {
                    let taken = log_tail(&server.log, 40).contains("ddress already in use");
                    // Drop kills the child; retry only the port race.
                    drop(server);
                    if !taken {
                        return Err(e);
                    }
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("{kind}: no attempt made")))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "{} exited with {status} before answering on {addr}; log {}:\n{}",
                    self.kind,
                    self.log.display(),
                    log_tail(&self.log, 40)
                );
            }
            if answers_http(addr) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not answer on {addr} within {timeout:?}; log {}:\n{}",
                    self.kind,
                    self.log.display(),
                    log_tail(&self.log, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Leaves the process running and records it in `.local/pids/<name>.pid`.
    fn detach(mut self, root: &Path, name: &str) -> Result<PidRecord> {
        let record = PidRecord {
            name: name.to_owned(),
            pid: self.pid().context("server already stopped")?,
            program: self.program.display().to_string(),
            endpoint: Some(self.endpoint()),
            log: Some(self.log.clone()),
        };
        record.write(root)?;
        // Dropping a std Child neither kills nor waits; the process lives on.
        self.child = None;
        Ok(record)
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The server may already be gone; nothing else to do then.
            let _ = child.kill();
            let _ = child.wait();
            if !std::thread::panicking() {
                // Keep the log of a failed test, drop the rest.
                let _ = fs::remove_file(&self.log);
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Any HTTP status line on the socket means the server is up.
fn answers_http(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET / HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    let mut read = 0;
    while read < head.len() {
        match stream.read(&mut head[read..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    head[..read].starts_with(b"HTTP/1.")
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The launcher of moto's server, relative to the repository root: moto_server with
/// its SQS queues' message lists locked (see the file).
pub const MOTO_LAUNCHER: &str = "infra/local/moto_launch.py";

/// moto's server (the project venv's moto, started by [`MOTO_LAUNCHER`]) on a free
/// loopback port. Stopped when dropped; [`Moto::detach`] keeps it running for
/// `cargo xtask local`.
#[derive(Debug)]
pub struct Moto {
    root: PathBuf,
    server: ServerProcess,
}

impl Moto {
    /// Starts moto on 127.0.0.1 and waits until it answers (bounded; the error then
    /// carries the tail of its log).
    ///
    /// Not `moto_server` itself: moto's SQS drops a message sent while another is
    /// deleted, and the launcher closes that race before it runs moto's server.
    pub fn start(venv: &Venv) -> Result<Self> {
        let launcher = venv.root().join(MOTO_LAUNCHER);
        if !launcher.is_file() {
            bail!("{} not found", launcher.display());
        }
        let server = ServerProcess::start(venv.root(), "moto", &venv.bin("python"), |port| {
            vec![
                launcher.display().to_string(),
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ]
        })?;
        Ok(Self {
            root: venv.root().to_path_buf(),
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// The server's log file.
    pub fn log(&self) -> &Path {
        &self.server.log
    }

    /// Keeps the server running past this value and writes `.local/pids/<name>.pid`
    /// so `cargo xtask local down` can stop it.
    pub fn detach(self, name: &str) -> Result<PidRecord> {
        let Self { root, server } = self;
        let mut record = server.detach(&root, name)?;
        // The pid's program is the venv's python; recognise it by the launcher instead.
        record.program = root.join(MOTO_LAUNCHER).display().to_string();
        record.write(&root)?;
        Ok(record)
    }
}

/// dynalite (DynamoDB only, from `.local/node`) on a free loopback port.
/// Stopped when dropped; [`Dynalite::detach`] keeps it running.
#[derive(Debug)]
pub struct Dynalite {
    root: PathBuf,
    server: ServerProcess,
}

impl Dynalite {
    /// Starts dynalite (in-memory) on 127.0.0.1 and waits until it answers.
    pub fn start(tools: &NodeTools) -> Result<Self> {
        let node = which("node").context("node is needed for dynalite")?;
        let cli = tools.dynalite_cli();
        let server = ServerProcess::start(tools.root(), "dynalite", &node, |port| {
            vec![
                cli.display().to_string(),
                "--host".into(),
                "127.0.0.1".into(),
                "--port".into(),
                port.to_string(),
                // Tables become ACTIVE at once instead of after 500 ms.
                "--createTableMs".into(),
                "0".into(),
            ]
        })?;
        Ok(Self {
            root: tools.root().to_path_buf(),
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    pub fn log(&self) -> &Path {
        &self.server.log
    }

    /// Keeps the server running and records it in `.local/pids/<name>.pid`.
    pub fn detach(self, name: &str) -> Result<PidRecord> {
        let Self { root, server } = self;
        let mut record = server.detach(&root, name)?;
        // The pid's program is node; recognise it by the script instead.
        record.program = "dynalite".into();
        record.write(&root)?;
        Ok(record)
    }
}

fn which(name: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").context("PATH is not set")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name} not found on PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_loopback_and_nonzero() {
        assert_ne!(free_loopback_port().unwrap(), 0);
    }

    #[test]
    fn a_server_that_exits_at_once_reports_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let err = ServerProcess::start(dir.path(), "false-server", Path::new("/bin/sh"), |_| {
            vec!["-c".into(), "echo boom-from-log; exit 3".into()]
        })
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("boom-from-log"), "{msg}");
        assert!(msg.contains("exited"), "{msg}");
    }
}

/// Any other local server of the project (capacity-proxy, `shardline-local run-local`'s query
/// port) started on a free loopback port, with the same readiness wait, log file and
/// pid-file handling as moto. Stopped when dropped; [`Service::detach`] keeps it running.
#[derive(Debug)]
pub struct Service {
    root: PathBuf,
    server: ServerProcess,
}

impl Service {
    /// Starts `program args(port)` in `root` and waits until it answers HTTP on the port.
    pub fn start(
        root: &Path,
        kind: &'static str,
        program: &Path,
        args: impl Fn(u16) -> Vec<String>,
    ) -> Result<Self> {
        let server = ServerProcess::start(root, kind, program, args)?;
        Ok(Self {
            root: root.to_path_buf(),
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    pub fn log(&self) -> &Path {
        &self.server.log
    }

    /// Keeps the server running and records it in `.local/pids/<name>.pid`.
    pub fn detach(self, name: &str) -> Result<PidRecord> {
        let Self { root, server } = self;
        server.detach(&root, name)
    }
}
