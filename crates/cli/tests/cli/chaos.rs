//! `rebound chaos` as a user starts it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::http;

#[test]
fn serves_scripts_and_counts_attempts() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args([
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--chunk-delay-ms",
            "0",
            "--script",
            "default=503+retry-after:1, ok",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Keep reading the banner's pipe open, as a terminal would.
    let mut banner = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    banner.read_line(&mut first).unwrap();
    let addr = first.trim().rsplit(' ').next().unwrap().to_owned();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let post = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let failed = http(&addr, &post);
    assert!(failed.starts_with("HTTP/1.1 503"), "{failed}");
    assert!(failed.contains("retry-after: 1"), "{failed}");
    let ok = http(&addr, &post);
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(
        ok.contains("Hello from rebound chaos. You said: hi"),
        "{ok}"
    );
    let counts = http(
        &addr,
        "GET /chaos/attempts HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(counts.ends_with(r#"{"default":2}"#), "{counts}");
    child.kill().unwrap();
    child.wait().unwrap();
    drop(banner);
}

#[test]
fn a_closed_stdout_does_not_stop_the_server() {
    // Standard output is a pipe whose reader is gone before the server starts, so writing
    // the banner fails, whenever it happens. The banner cannot tell the address, so the test
    // reads it from the listening socket the child holds: a port picked beforehand could be
    // taken by another process's server in the moment before the child binds, and the probe
    // below would then reach that one.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["chaos", "--listen", "127.0.0.1:0"])
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The server writes its banner before it serves anything (one thread: it serves once
    // `main` waits for Ctrl-C), so an answer means the failed banner did not stop it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        if let Some(port) = listening_port(child.id()) {
            break port;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server stopped: {status}");
        }
        assert!(Instant::now() < deadline, "the server never listened");
        // Not listening yet: the process is still starting.
        std::thread::sleep(Duration::from_millis(10));
    };
    let addr = format!("127.0.0.1:{port}");
    let models = http(
        &addr,
        "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(models.contains("chaos-1"), "{models}");
    assert!(child.try_wait().unwrap().is_none(), "the server stopped");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The port of the IPv4 socket process `pid` listens on, read from `/proc`: the sockets
/// among its open files, matched by inode against the kernel's TCP table.
fn listening_port(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.ok()?.path()).ok()?;
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // local_address is HEXIP:HEXPORT, st 0A is LISTEN, the inode is the tenth field.
        let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
        if *state != "0A" || !inodes.iter().any(|i| i == inode) {
            return None;
        }
        u16::from_str_radix(local.rsplit(':').next()?, 16).ok()
    })
}

#[test]
fn a_bad_script_is_refused_with_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args([
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--script",
            "default=ok, 200",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("step 2 `200`"), "{stderr}");
}
