//! One structured line per attempt outcome (G6). Lines carry codes, classes, rule ids,
//! statuses and candidate ids: never headers or bodies, so no key can reach them; the sink
//! redacts anyway.

use std::io::{IoSlice, Write};
use std::sync::{Mutex, PoisonError};

use rebound_core::redact::redact;

/// Where log lines go.
pub trait LogSink: Send + Sync {
    /// One line, without its newline.
    fn line(&self, line: &str);
}

/// Standard error.
#[derive(Clone, Copy, Debug, Default)]
pub struct StderrLog;

impl LogSink for StderrLog {
    fn line(&self, line: &str) {
        // One system call per line: standard error is unbuffered, and `writeln!` would make
        // two (the line, then its newline) on every request.
        let text = redact(line);
        let mut stderr = std::io::stderr().lock();
        let parts = [IoSlice::new(text.as_bytes()), IoSlice::new(b"\n")];
        match stderr.write_vectored(&parts) {
            Ok(n) if n > text.len() => {}
            Ok(n) => {
                let _ = stderr.write_all(&text.as_bytes()[n..]);
                let _ = stderr.write_all(b"\n");
            }
            Err(_) => {}
        }
    }
}

/// Lines kept in memory (tests, the demo).
#[derive(Debug, Default)]
pub struct MemoryLog(Mutex<Vec<String>>);

impl MemoryLog {
    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl LogSink for MemoryLog {
    fn line(&self, line: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(redact(line).into_owned());
    }
}

/// Discards everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLog;

impl LogSink for NoLog {
    fn line(&self, _: &str) {}
}

/// `key=value` pairs; values with spaces or quotes are quoted, empty ones left out.
pub fn format_line<V: AsRef<str>>(pairs: &[(&str, V)]) -> String {
    let room = pairs
        .iter()
        .map(|(key, value)| key.len() + value.as_ref().len() + 2)
        .sum::<usize>();
    let mut out = String::with_capacity("rebound".len() + room);
    out.push_str("rebound");
    for (key, value) in pairs {
        let value = value.as_ref();
        if value.is_empty() {
            continue;
        }
        out.push(' ');
        out.push_str(key);
        out.push('=');
        if value.bytes().any(|b| b == b' ' || b == b'"' || b == b'=') {
            out.push_str(&format!("{value:?}"));
        } else {
            out.push_str(value);
        }
    }
    out
}
