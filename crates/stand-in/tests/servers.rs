//! Starts the real servers from the project-local installs.

use std::io::{Read, Write};
use std::net::TcpStream;

use stand_in::{
    ActionCount, Dynalite, MOTO_LAUNCHER, Moto, SqsRequests, ensure_dynalite, ensure_venv, pids,
    repo_root,
};

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
    // The launcher's moto, whose queues are safe under concurrent requests.
    let log = std::fs::read_to_string(moto.log()).unwrap();
    assert!(
        log.contains("moto_launch: SQS queues locked, requests counted"),
        "{log}"
    );
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

/// moto's SQS drops a message sent while two deletes overlap, and puts a deleted one
/// back; the launcher the stand-in starts moto with closes that race
/// (docs/reliability.md scenario 45). The check plays the interleaving step by step on
/// moto's models: it fails unless moto as installed shows the race and the launcher's
/// does not.
#[test]
fn the_moto_launcher_keeps_a_message_sent_between_two_deletes() {
    let root = repo_root().unwrap();
    let venv = ensure_venv(&root).unwrap();
    let check = root
        .join(MOTO_LAUNCHER)
        .with_file_name("moto_launch_check.py");
    let out = std::process::Command::new(venv.bin("python"))
        .arg(&check)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{}: {text}", check.display());
    assert!(
        text.contains("moto as installed: 1 sent message lost, 1 deleted message back"),
        "{text}"
    );
    assert!(
        text.contains("moto_launch.py: 0 sent message lost, 0 deleted message back"),
        "{text}"
    );
}

/// The launcher's moto counts each SQS request it answers as SQS bills it (a request per
/// 64-KB chunk of the messages' bodies and attributes, at least one), and answers the
/// counts on its own path: a known sequence of calls (`moto_count_sequence.py`, whose
/// docstring sizes each) is counted exactly.
#[test]
fn the_moto_launcher_counts_each_sqs_request_as_billed() {
    let root = repo_root().unwrap();
    let venv = ensure_venv(&root).unwrap();
    let moto = Moto::start(&venv).unwrap();
    let before = SqsRequests::read(&moto.endpoint()).unwrap();
    assert_eq!(
        before,
        SqsRequests::default(),
        "a new server has counted nothing"
    );
    let sequence = root
        .join(MOTO_LAUNCHER)
        .with_file_name("moto_count_sequence.py");
    let out = std::process::Command::new(venv.bin("python"))
        .arg(&sequence)
        .arg(moto.endpoint())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        sequence.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let counted = SqsRequests::read(&moto.endpoint()).unwrap();
    let c = |calls, requests| ActionCount { calls, requests };
    let expected = [
        ("CreateQueue", c(1, 1)),
        // 100 bytes: 1; 200,000 bytes: ceil(200,000 / 65,536) = 4.
        ("SendMessage", c(2, 5)),
        // 3 x (30,000 + "k" + "String" + "v") = 90,024 bytes: 2.
        ("SendMessageBatch", c(1, 2)),
        // 200,100 bytes: 4; the empty queue: 1; the batch's 90,024 bytes: 2.
        ("ReceiveMessage", c(3, 7)),
        ("DeleteMessageBatch", c(1, 1)),
        ("ChangeMessageVisibility", c(1, 1)),
        ("DeleteMessage", c(2, 2)),
        ("GetQueueAttributes", c(1, 1)),
    ];
    let expected: std::collections::BTreeMap<String, ActionCount> = expected
        .into_iter()
        .map(|(a, n)| (a.to_owned(), n))
        .collect();
    assert_eq!(counted.actions, expected);
    assert_eq!(
        (counted.sends(), counted.receives(), counted.deletes()),
        (7, 7, 4)
    );
}
