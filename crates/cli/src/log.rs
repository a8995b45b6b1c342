//! `rebound serve`'s log: the libraries' `tracing` events, written to standard error as text
//! (the default) or as JSON lines, every line redacted on its way out.
//!
//! Formatting happens where an event is made; writing does not. Lines go through
//! `tracing-appender`'s non-blocking writer to its own thread, which redacts them and writes
//! them in batches (one write per burst of lines, not one per line), so no response waits
//! behind a write to standard error, and an idle gateway holds no line back. If standard
//! error stops draining (a full pipe nobody reads), lines beyond the writer's queue are
//! dropped rather than stalling requests.
//!
//! Redaction is the last step before standard error, whatever the fields: events carry codes,
//! classes, rule ids, statuses and candidate ids, never headers or bodies, and a key that
//! reached a field anyway would still not reach the output. Lines are written without colour
//! codes: an escape sequence between a field's name and its value would hide the pair from
//! the redaction patterns.

use std::borrow::Cow;
use std::io::{self, BufWriter, Write};

use anyhow::Result;
use rebound_core::redact::{REDACTED, redact};
use serde_json::Value;
use tracing::Subscriber;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::bad_input;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// The time, level and target, then the fields as `key=value`.
    #[default]
    Text,
    /// One JSON object a line, the event's fields at its top level.
    Json,
}

/// The environment variable that filters events, in `RUST_LOG` syntax.
pub(crate) const FILTER_ENV: &str = "REBOUND_LOG";

/// The filter without [`FILTER_ENV`]: rebound's own events from `info`, other crates' from
/// `warn`.
const DEFAULT_FILTER: &str = "warn,rebound=info";

/// Makes `format` lines of standard error the process's log. Lines are written until the
/// returned guard is dropped, which writes what is still queued.
pub(crate) fn install(format: LogFormat) -> Result<WorkerGuard> {
    let filter = match std::env::var(FILTER_ENV) {
        Ok(directives) if !directives.trim().is_empty() => {
            EnvFilter::try_new(&directives).map_err(|e| bad_input(format!("{FILTER_ENV}: {e}")))?
        }
        _ => EnvFilter::new(DEFAULT_FILTER),
    };
    let stderr = Redacting::new(BufWriter::with_capacity(64 << 10, io::stderr()), format);
    let (writer, guard) = NonBlockingBuilder::default()
        .thread_name("rebound-log")
        .finish(stderr);
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(layer(format, writer));
    tracing::subscriber::set_global_default(subscriber)?;
    Ok(guard)
}

/// The formatting layer for `format`, writing through `writer`.
pub(crate) fn layer<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let text = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Text => text.boxed(),
        LogFormat::Json => text
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .boxed(),
    }
}

/// Passes every line through [`redact`] on its way to `inner`.
///
/// Text is held back until its newline, so a secret split across two writes is still seen
/// whole. A JSON line that holds a secret is redacted field by field and written again as
/// JSON (redacting its text could take a closing quote with the secret).
pub(crate) struct Redacting<W: Write> {
    inner: W,
    format: LogFormat,
    pending: Vec<u8>,
}

impl<W: Write> Redacting<W> {
    pub(crate) fn new(inner: W, format: LogFormat) -> Self {
        Redacting {
            inner,
            format,
            pending: Vec::new(),
        }
    }

    /// Writes one line (with its newline, unless it is a last unfinished one).
    fn line(&mut self, line: &[u8]) -> io::Result<()> {
        let text = String::from_utf8_lossy(line);
        let redacted = match redact(&text) {
            Cow::Borrowed(_) => return self.inner.write_all(line),
            Cow::Owned(redacted) => redacted,
        };
        let json = match self.format {
            LogFormat::Json => redact_json(text.trim_end()),
            LogFormat::Text => None,
        };
        match json {
            Some(mut json) => {
                if text.ends_with('\n') {
                    json.push('\n');
                }
                self.inner.write_all(json.as_bytes())
            }
            None => self.inner.write_all(redacted.as_bytes()),
        }
    }
}

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, tail) = rest.split_at(end + 1);
            if self.pending.is_empty() {
                self.line(line)?;
            } else {
                let mut whole = std::mem::take(&mut self.pending);
                whole.extend_from_slice(line);
                self.line(&whole)?;
            }
            rest = tail;
        }
        self.pending.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for Redacting<W> {
    fn drop(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        if !rest.is_empty() {
            let _ = self.line(&rest);
        }
        let _ = self.inner.flush();
    }
}

/// `line`, a JSON object, with every string redacted and every field that names a credential
/// blanked; `None` if it is not JSON. Fields come out in name order.
fn redact_json(line: &str) -> Option<String> {
    let mut value: Value = serde_json::from_str(line).ok()?;
    scrub(&mut value);
    serde_json::to_string(&value).ok()
}

fn scrub(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(redacted) = redact(text) {
                *text = redacted;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                // The patterns that find `api_key=…` decide which names are credentials.
                let secret_name = matches!(redact(&format!("{name}=x")), Cow::Owned(_));
                if secret_name && !field.is_null() {
                    *field = Value::String(REDACTED.to_owned());
                } else {
                    scrub(field);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    const KEY: &str = "sk-proj-LogCanary0123456789abcdefghij";

    fn redacted(format: LogFormat, writes: &[&str]) -> String {
        let mut out = Vec::new();
        {
            let mut writer = Redacting::new(&mut out, format);
            for w in writes {
                writer.write_all(w.as_bytes()).unwrap();
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn keys_of_any_shape_that_rebound_holds_are_redacted_by_value() {
        // An Azure OpenAI key: 32 hex digits, a shape no pattern knows.
        let key = "9e1d2c3b4a5f60718293a4b5c6d7e8f0";
        rebound_core::redact::secrets::remember([key]);
        let line = format!("WARN rebound::attempt: error=\"Incorrect API key provided: {key}.\"\n");
        for format in [LogFormat::Text, LogFormat::Json] {
            let written = match format {
                LogFormat::Text => line.clone(),
                LogFormat::Json => format!(
                    "{}\n",
                    serde_json::json!({"target": "rebound::attempt", "error": line.trim_end()})
                ),
            };
            let out = redacted(format, &[&written]);
            assert!(!out.contains(key), "{out}");
            assert!(
                out.contains("Incorrect API key provided: [redacted]."),
                "{out}"
            );
        }
    }

    #[test]
    fn text_lines_are_redacted_even_when_a_key_is_split_across_writes() {
        let out = redacted(
            LogFormat::Text,
            &[
                "INFO rebound::attempt: outcome=ok\nINFO x: error=\"echoed sk-proj-LogCan",
                "ary0123456789abcdefghij\"\n",
            ],
        );
        assert_eq!(
            out,
            "INFO rebound::attempt: outcome=ok\nINFO x: error=\"echoed [redacted]\"\n"
        );
    }

    #[test]
    fn json_lines_stay_json_when_redacted() {
        let line = format!(
            "{{\"level\":\"WARN\",\"api_key\":\"plain-secret\",\"error\":\"echoed {KEY}\",\"attempt\":2}}\n"
        );
        let out = redacted(LogFormat::Json, &[&line, "{\"outcome\":\"ok\"}\n"]);
        assert!(
            !out.contains("LogCanary") && !out.contains("plain-secret"),
            "{out}"
        );
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0]["api_key"], "[redacted]");
        assert_eq!(lines[0]["error"], "echoed [redacted]");
        assert_eq!(lines[0]["attempt"], 2);
        assert_eq!(lines[1]["outcome"], "ok");
    }

    /// Formatted lines, in `format`, of the events `emit` makes.
    fn formatted(format: LogFormat, emit: impl FnOnce()) -> String {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        let writer = move || Redacting::new(Shared(Arc::clone(&sink)), format);
        let subscriber = tracing_subscriber::registry().with(layer(format, writer));
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(buffer.lock().unwrap().clone()).unwrap()
    }

    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn attempt_events() {
        tracing::info!(
            target: "rebound::attempt",
            route = %"main",
            candidate = %"oa",
            attempt = 1u32,
            outcome = %"failed",
            status = Some(502u16),
            transport = None::<&str>,
            code = %"upstream_error",
            action = %"retry",
            delay_ms = 1000u64,
        );
        tracing::warn!(target: "rebound::attempt", route = %"main", error = %format!("echoed {KEY}"));
    }

    #[test]
    fn json_mode_writes_one_object_a_line_with_the_fields_at_the_top() {
        let out = formatted(LogFormat::Json, attempt_events);
        assert!(!out.contains("LogCanary"), "{out}");
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        let first = &lines[0];
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["target"], "rebound::attempt");
        assert!(first["timestamp"].is_string(), "{first}");
        assert_eq!(first["route"], "main");
        assert_eq!(first["attempt"], 1);
        assert_eq!(first["status"], 502);
        assert_eq!(first["code"], "upstream_error");
        assert_eq!(first["delay_ms"], 1000);
        assert!(
            first.get("transport").is_none(),
            "absent fields are left out: {first}"
        );
        assert_eq!(lines[1]["level"], "WARN");
        assert_eq!(lines[1]["error"], "echoed [redacted]");
    }

    #[test]
    fn text_mode_writes_key_value_lines() {
        let out = formatted(LogFormat::Text, attempt_events);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].ends_with(
                " INFO rebound::attempt: route=main candidate=oa attempt=1 outcome=failed status=502 code=upstream_error action=retry delay_ms=1000"
            ),
            "{out}"
        );
        assert!(
            lines[1].ends_with(" WARN rebound::attempt: route=main error=echoed [redacted]"),
            "{out}"
        );
    }
}
