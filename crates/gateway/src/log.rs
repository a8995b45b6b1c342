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

/// Standard error, one write per line as it comes. For a busy gateway, [`BatchedStderrLog`]
/// keeps those writes off the requests' path.
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

/// Standard error, written in batches: lines gather in memory and go out in one write when
/// [`flush`](BatchedStderrLog::flush) is called, when 64 KiB have gathered, or when the log is
/// dropped. `rebound serve` flushes it each time its runtime is about to wait for events
/// (`on_thread_park`): a line never waits while the gateway is idle, and no request's
/// response waits behind a write to standard error.
#[derive(Debug, Default)]
pub struct BatchedStderrLog(Mutex<Vec<u8>>);

/// Gathered bytes that are written at once, without waiting for a flush.
const BATCH_LIMIT: usize = 64 << 10;

impl BatchedStderrLog {
    /// Writes the lines gathered so far.
    pub fn flush(&self) {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !pending.is_empty() {
            let _ = std::io::stderr().lock().write_all(&pending);
            pending.clear();
        }
    }
}

impl LogSink for BatchedStderrLog {
    fn line(&self, line: &str) {
        let text = redact(line);
        let full = {
            let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            pending.extend_from_slice(text.as_bytes());
            pending.push(b'\n');
            pending.len() >= BATCH_LIMIT
        };
        if full {
            self.flush();
        }
    }
}

impl Drop for BatchedStderrLog {
    fn drop(&mut self) {
        self.flush();
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

#[cfg(test)]
mod tests {
    use super::{BATCH_LIMIT, BatchedStderrLog, LogSink};

    fn pending(log: &BatchedStderrLog) -> usize {
        log.0.lock().unwrap().len()
    }

    #[test]
    fn a_batch_gathers_redacted_lines_until_flushed_or_full() {
        let log = BatchedStderrLog::default();
        log.line("rebound outcome=ok key=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789");
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.ends_with('\n') && !text.contains("abcdefghijklmnop"),
            "{text}"
        );
        log.line("rebound outcome=ok");
        assert_eq!(pending(&log), text.len() + "rebound outcome=ok\n".len());
        log.flush();
        assert_eq!(pending(&log), 0);
        // A full batch goes out without waiting for a flush.
        let long = "x".repeat(BATCH_LIMIT / 4);
        for _ in 0..3 {
            log.line(&long);
        }
        assert!(pending(&log) > 0);
        log.line(&long);
        assert_eq!(pending(&log), 0);
    }
}
