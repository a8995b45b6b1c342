//! One invocation: the agent CLI as a child process, its output read line by line, handed to
//! whoever follows the run and kept in bounded, redacted tails, and what its structured output
//! said (session, effects, errors, finish).

use std::collections::VecDeque;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::events::{AgentEvent, codex_message, parse_line};
use crate::config::{AgentOutput, AgentProfile};

/// The most of an invocation's stderr kept as evidence.
pub(crate) const STDERR_TAIL: usize = 4 << 10;

/// The most of a run's output kept in its record.
pub(crate) const OUTPUT_TAIL: usize = 64 << 10;

/// The most of one output line kept or forwarded; a longer line is cut.
const LINE_LIMIT: usize = 256 << 10;

/// The last lines of a text, at most `limit` bytes.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
    limit: usize,
}

impl Tail {
    pub(crate) fn new(limit: usize) -> Self {
        Tail {
            limit,
            ..Tail::default()
        }
    }

    /// A tail that starts with `text`'s last lines.
    pub(crate) fn from_text(text: &str, limit: usize) -> Self {
        let mut tail = Tail::new(limit);
        text.lines().for_each(|l| tail.push(l));
        tail
    }

    pub(crate) fn push(&mut self, line: &str) {
        let line = rebound_core::evidence::bound_text(line, self.limit).to_owned();
        self.bytes += line.len() + 1;
        self.lines.push_back(line);
        while self.bytes > self.limit {
            match self.lines.pop_front() {
                Some(old) => self.bytes -= old.len() + 1,
                None => break,
            }
        }
    }

    pub(crate) fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// Which stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What one invocation left behind.
#[derive(Debug, Default)]
pub(crate) struct Ran {
    /// The exit code; `None` when a signal ended it or it never started.
    pub(crate) exit_code: Option<i32>,
    /// Why it never started (the program is missing, the directory too).
    pub(crate) spawn_error: Option<String>,
    /// The session it reported last.
    pub(crate) session: Option<String>,
    /// It called a tool.
    pub(crate) acted: bool,
    /// Model output reached it.
    pub(crate) content: bool,
    /// Its error events, redacted, in order.
    pub(crate) errors: Vec<String>,
    /// Its final event: is_error and text.
    pub(crate) finished: Option<(bool, Option<String>)>,
    /// Its last agent message (Codex reports its answer so).
    pub(crate) last_message: Option<String>,
    /// Its redacted stderr tail.
    pub(crate) stderr: String,
}

impl Ran {
    /// True when the invocation completed the run: exit 0, and no error reported.
    pub(crate) fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
            && self.errors.is_empty()
            && !self
                .finished
                .as_ref()
                .is_some_and(|(is_error, _)| *is_error)
    }

    /// The answer it reported.
    pub(crate) fn result(&self) -> Option<String> {
        self.finished
            .as_ref()
            .and_then(|(_, text)| text.clone())
            .or_else(|| self.last_message.clone())
    }
}

/// Runs `profile` with `args` in `cwd`; every line goes to `on_line` (redacted) with what it
/// said, as it arrives.
pub(crate) async fn invoke(
    profile: &AgentProfile,
    args: &[String],
    cwd: &str,
    mut on_line: impl FnMut(Stream, &str, &[AgentEvent]),
) -> Ran {
    let mut ran = Ran::default();
    let mut command = Command::new(&profile.command);
    command
        .args(args)
        .envs(&profile.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if !cwd.is_empty() {
        command.current_dir(cwd);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            ran.spawn_error = Some(format!("{}: {e}", profile.command));
            return ran;
        }
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        ran.spawn_error = Some(format!("{}: no output pipes", profile.command));
        return ran;
    };
    let mut stdout = BufReader::new(stdout).lines();
    let mut stderr = BufReader::new(stderr).lines();
    let mut stderr_tail = Tail::new(STDERR_TAIL);
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        let (stream, line) = tokio::select! {
            line = stdout.next_line(), if out_open => (Stream::Stdout, line),
            line = stderr.next_line(), if err_open => (Stream::Stderr, line),
        };
        let line = match line {
            Ok(Some(line)) => line,
            // End of the stream, or a line that is not text: that stream is done.
            Ok(None) | Err(_) => {
                match stream {
                    Stream::Stdout => out_open = false,
                    Stream::Stderr => err_open = false,
                }
                continue;
            }
        };
        let line =
            rebound_core::redact::redact(rebound_core::evidence::bound_text(&line, LINE_LIMIT))
                .into_owned();
        let events = match stream {
            Stream::Stdout => parse_line(profile.output, &line),
            Stream::Stderr => {
                stderr_tail.push(&line);
                Vec::new()
            }
        };
        if stream == Stream::Stdout
            && profile.output == AgentOutput::CodexJson
            && let Some(message) = codex_message(&line)
        {
            ran.last_message = Some(message);
        }
        for event in &events {
            match event {
                AgentEvent::Session(id) => ran.session = Some(id.clone()),
                AgentEvent::Content => ran.content = true,
                AgentEvent::Effect(_) => ran.acted = true,
                AgentEvent::Error(message) => ran.errors.push(message.clone()),
                AgentEvent::Finished { is_error, text } => {
                    ran.finished = Some((*is_error, text.clone()));
                }
            }
        }
        on_line(stream, &line, &events);
    }
    ran.exit_code = child.wait().await.ok().and_then(|status| status.code());
    ran.stderr = stderr_tail.text();
    ran
}

#[cfg(test)]
mod tests {
    use super::Tail;

    #[test]
    fn a_tail_keeps_the_last_lines_within_its_bound() {
        let mut tail = Tail::new(10);
        for line in ["aaaa", "bbbb", "cccc"] {
            tail.push(line);
        }
        assert_eq!(tail.text(), "bbbb\ncccc\n");
        tail.push("0123456789abcdef");
        assert_eq!(tail.text(), "");
        assert_eq!(Tail::from_text("x\ny\n", 3).text(), "y\n");
    }
}
