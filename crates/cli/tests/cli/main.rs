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
