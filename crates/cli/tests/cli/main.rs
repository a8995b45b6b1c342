//! The `rebound` binary, run as a user runs it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod browser;
mod chaos;
mod classify;
mod jobs;
mod postgres;
mod postgres_health;
mod runs;
mod serve;

use std::io::{Read, Write};
use std::net::TcpStream;

/// One raw HTTP/1.1 exchange (`connection: close`), the whole answer as text.
pub(crate) fn http(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e} after {:?}", String::from_utf8_lossy(&response)),
        }
    }
    String::from_utf8(response).unwrap()
}

/// A loopback port that was free a moment ago, for a child that must be told its port.
///
/// It is taken below the kernel's ephemeral range: a port from that range can be handed to
/// another test's listener on port 0, or become the source port of a connection to itself
/// (a probe then "connects" with no server listening), in the moment before the child binds.
/// Ports are handed out in turn, so two tests of this process never get the same one.
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16;
    let span = ephemeral_low.saturating_sub(low).max(1);
    // Start where this process's id points, so runs side by side start apart.
    let start = u16::try_from(std::process::id() % u32::from(span)).unwrap_or(0);
    for _ in 0..span {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed) % span) % span;
        let port = low + offset;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {low} and {ephemeral_low}");
}
