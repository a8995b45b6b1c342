//! What a log or a terminal adds around a message (C8): colour codes, and a log line's prefix
//! (its time, level and logger) before the message.
//!
//! An agent's or an app's log prints a provider's error after `2026-11-30T08:15:02.123Z ERROR
//! agent: `, `ERROR:root:`, `[WARN]` or glog's `E1130 08:15:02.123456 12345 client.go:88] `, and
//! a terminal colours the word "Error" with escape codes. A rule or a `[[text_status]]` pattern
//! that reads the message from its start (`429 Provider returned error`, `\AFailed to fetch`)
//! then missed it. The second reading drops both; the text as printed is still read too.

use std::sync::LazyLock;

use regex_automata::meta::Regex;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input};

use super::frame;
use super::splice::Splice;

/// A log line's prefix on any line, matched anchored at the line's start:
/// - a time (with or without a date, bracketed or not), then up to two of a level and a logger
///   name in either order (`ERROR agent:`, Python's `- openai._base_client - INFO -`);
/// - a bracketed level in any case (`[warn]`), then optionally a logger;
/// - glog's and klog's header.
///
/// What follows must be the message, so each form ends at a separator and a space; a logger is
/// one word (letters, digits, `.`, `:`, `/`, `<>`, `-`) before a colon or a dash.
const ANY_LINE: &str = r"
    # A time first: 2026-11-30T08:15:02.123Z, 2026/11/30 08:15:02, [08:15:02,123].
    \[?
    (?: \d{4}[-/.]\d{2}[-/.]\d{2}[T\ ] )?
    \d{2}:\d{2}:\d{2} (?:[.,]\d{1,9})? (?: Z | [+-]\d{2}:?\d{2} | \ ?UTC )?
    \]?
    (?: [\ \t]*[-|][\ \t]* | [\ \t]+ )
    (?:
        \[? (?i:error|err|warning|warn|info|debug|trace|fatal|critical|panic) \]?
        (?: [\ \t]*[-|:][\ \t]* | [\ \t]+ )
    |
        [\w.:/<>-]{1,60}? (?: :[\ \t]+ | [\ \t]+[-|][\ \t]+ )
    ){0,2}
|
    \[ (?i:error|err|warning|warn|info|debug|trace|fatal|critical|panic) \] [\ \t]* :?[\ \t]*
    (?: [\w.:/<>-]{1,60}? :[\ \t]+ )?
|
    # glog and klog: E1130 08:15:02.123456   12345 client.go:88] …
    [IWEF]\d{4}\ \d{2}:\d{2}:\d{2}\.\d{6}[\ \t]+\d+\ [\w.-]+:\d+\][\ \t]
";

/// A level first, read as a prefix on a text's first line only: in capitals, then optionally a
/// logger (`ERROR agent:`, `WARN`, Python's `ERROR:root:`), or an error's own word and a colon
/// alone (`Error:`, `fatal:`; what follows is the message, `Forbidden: …` included). Further down a text such words start a wrapped line's continuation as
/// often as a log line ("… delayed connect\nerror: Connection refused").
const FIRST_LINE: &str = r"
    (?-i:ERROR|WARN|WARNING|INFO|DEBUG|TRACE|FATAL|CRITICAL|PANIC)
    (?: :[\w.<>-]{1,60}: | [\ \t]*:[\ \t]* | [\ \t]+ )
    (?: [\w.:/<>-]{1,60}? :[\ \t]+ )?
|
    (?i:error|fatal|panic) :[\ \t]+
";

/// The prefixes: pattern 0 on any line, pattern 1 on a text's first line only. Both are tried
/// anchored at a line's start; where both match, the first in order wins, as in an alternation.
static PREFIXES: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let forms = [ANY_LINE, FIRST_LINE].map(|forms| format!("(?x)[\\ \\t]*(?:{forms})"));
    Regex::builder()
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .build_many(&forms)
        .ok()
});

/// The text without colour codes, without what is drawn around its lines (`frame.rs`) and
/// without a log prefix at the start of any line, when it has any of them.
pub(super) fn undecorated(text: &str) -> Option<String> {
    let plain = without_colour(text);
    // Quote markers and a panel's borders are drawn outside the log line: `> 2026-… ERROR …`.
    let unframed = frame::unframed(plain.as_deref().unwrap_or(text)).or(plain);
    match without_prefixes(unframed.as_deref().unwrap_or(text)) {
        Some(bare) => Some(bare),
        None => unframed,
    }
}

/// Escape sequences (colour codes and any other control sequence a terminal reads) removed,
/// by `vte`'s parser, the one terminals built on it use: what it prints, and the line breaks and
/// tabs it executes, are kept.
fn without_colour(text: &str) -> Option<String> {
    memchr::memchr(0x1b, text.as_bytes())?;
    let mut plain = Printed(String::with_capacity(text.len()));
    vte::Parser::new().advance(&mut plain, text.as_bytes());
    Some(plain.0)
}

/// What a terminal would print of a text.
struct Printed(String);

impl vte::Perform for Printed {
    fn print(&mut self, c: char) {
        self.0.push(c);
    }

    fn execute(&mut self, byte: u8) {
        if matches!(byte, b'\n' | b'\r' | b'\t') {
            self.0.push(char::from(byte));
        }
    }
}

/// The text with each line's log prefix removed, when a line has one. A line is looked at
/// only when its first character after at most three spaces could start a prefix (a digit, `[`
/// or a level's letter), so a JSON body or a sentence costs a glance at each line's start.
fn without_prefixes(text: &str) -> Option<String> {
    let prefixes = PREFIXES.as_ref()?;
    let bytes = text.as_bytes();
    let mut splice = Splice::new(text);
    let starts = std::iter::once(0).chain(memchr::memchr_iter(b'\n', bytes).map(|at| at + 1));
    for start in starts {
        // A prefix is indented by a few spaces at most: a long run of them is layout.
        let first = bytes
            .get(start..)
            .and_then(|rest| rest.iter().take(4).find(|b| !matches!(b, b' ' | b'\t')));
        let candidate =
            first.is_some_and(|b| b.is_ascii_digit() || b"[EWIDTFCPewidtfcp".contains(b));
        if !candidate {
            continue;
        }
        let input = Input::new(bytes).range(start..).anchored(Anchored::Yes);
        let Some(found) = prefixes.find(input) else {
            continue;
        };
        let any_line = found.pattern().as_usize() == 0;
        // Nothing after the prefix on its line: a prefix alone is no message to read.
        let message_follows = !matches!(bytes.get(found.end()), None | Some(b'\n' | b'\r'));
        if (any_line || start == 0) && message_follows {
            splice.replace(start..found.end(), "");
        }
    }
    splice.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_prefixes_of_common_loggers_are_removed() {
        for (line, message) in [
            (
                "2026-11-30T08:15:02.123Z ERROR agent: 429 Provider returned error",
                "429 Provider returned error",
            ),
            (
                "2026-11-30 08:15:02,123 - openai._base_client - INFO - Retrying request",
                "Retrying request",
            ),
            ("ERROR:root:Failed to fetch", "Failed to fetch"),
            ("[ERROR] 503 Service Unavailable", "503 Service Unavailable"),
            (
                "2026/11/30 08:15:02 dial tcp: i/o timeout",
                "dial tcp: i/o timeout",
            ),
            (
                "E1130 08:15:02.123456   12345 client.go:88] rpc error: code = Unavailable",
                "rpc error: code = Unavailable",
            ),
            ("[08:15:02] WARN 500 Internal", "500 Internal"),
            ("error: connection refused", "connection refused"),
            ("Error: Forbidden: try again", "Forbidden: try again"),
        ] {
            assert_eq!(undecorated(line).as_deref(), Some(message), "{line}");
        }
        assert_eq!(
            undecorated("first\n2026-11-30T08:15:02Z WARN x: 529 Overloaded").as_deref(),
            Some("first\n529 Overloaded"),
            "on any line"
        );
    }

    #[test]
    fn colour_codes_are_removed() {
        assert_eq!(
            undecorated("\u{1b}[31mError:\u{1b}[39m Failed to fetch").as_deref(),
            Some("Failed to fetch"),
        );
        assert_eq!(
            undecorated("\u{1b}[1;33mslow\u{1b}[0m down\r\n\tnow").as_deref(),
            Some("slow down\r\n\tnow"),
            "line breaks and tabs stay"
        );
        assert_eq!(
            undecorated("\u{1b}]8;;https://status.example\u{7}outage\u{1b}]8;;\u{7} ongoing")
                .as_deref(),
            Some("outage ongoing"),
            "a terminal hyperlink (OSC 8) is no text"
        );
    }

    #[test]
    fn a_message_without_decoration_is_left_alone() {
        for text in [
            "Rate limit reached for gpt-4o",
            "{\n  \"error\": {\"code\": 429}\n}",
            "429 Too Many Requests",
            "Internal server error",
            "Error code: 429 - {'error': {}}",
            "2026-11-30 is the day the quota resets",
            "12:30 is when the quota resets",
            "reset reason: delayed connect\nerror: Connection refused",
            "a message wrapped before\nERROR codes",
        ] {
            assert_eq!(undecorated(text), None, "{text}");
        }
    }
}
