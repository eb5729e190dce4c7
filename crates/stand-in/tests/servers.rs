//! Starts the real servers from the project-local installs.

use std::io::{Read, Write};
use std::net::TcpStream;

use stand_in::{Dynalite, Moto, ensure_dynalite, ensure_venv, pids, repo_root};

fn http_status(endpoint: &str, request: &str) -> Option<String> {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.lines().next().map(str::to_owned)
}

#[test]
fn moto_starts_answers_and_stops_on_drop() {
    let root = repo_root().unwrap();
    let venv = ensure_venv(&root).unwrap();
    let moto = Moto::start(&venv).unwrap();
    let endpoint = moto.endpoint();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint}");
    let status = http_status(&endpoint, "GET /moto-api/ HTTP/1.0\r\n\r\n").unwrap();
    assert!(status.contains(" 200"), "{status}");
    drop(moto);
    assert!(http_status(&endpoint, "GET / HTTP/1.0\r\n\r\n").is_none());
}

#[test]
fn detached_moto_is_recorded_and_stopped_through_its_pid_file() {
    let root = repo_root().unwrap();
    let venv = ensure_venv(&root).unwrap();
    let moto = Moto::start(&venv).unwrap();
    let endpoint = moto.endpoint();
    // A unique name so parallel runs do not share the record.
    let name = format!("test-moto-{}", moto.port());
    let record = moto.detach(&name).unwrap();
    assert!(record.is_alive());
    assert_eq!(record.endpoint.as_deref(), Some(endpoint.as_str()));
    let on_disk = pids::recorded(&root).unwrap();
    assert!(on_disk.contains(&record));
    assert_eq!(
        record.stop(std::time::Duration::from_secs(10)).unwrap(),
        pids::StopOutcome::Stopped
    );
    std::fs::remove_file(record.path(&root)).unwrap();
    assert!(http_status(&endpoint, "GET / HTTP/1.0\r\n\r\n").is_none());
}

#[test]
fn dynalite_starts_and_answers_dynamodb_requests() {
    let root = repo_root().unwrap();
    let tools = ensure_dynalite(&root).unwrap();
    let dynalite = Dynalite::start(&tools).unwrap();
    // Unsigned requests are refused with a DynamoDB error, which proves the protocol.
    let status = http_status(
        &dynalite.endpoint(),
        "POST / HTTP/1.0\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Content-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\n\r\n{}",
    )
    .unwrap();
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
}
