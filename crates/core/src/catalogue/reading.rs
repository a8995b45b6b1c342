//! How the classifier reads a text (C8): typographic apostrophes as the ASCII one, and a
//! second reading of a text another program printed again.
//!
//! Relays put an upstream's error inside a JSON string (`\"type\":\"rate_limit_error\"`), web
//! pages HTML-escape it (`&quot;`), log viewers and mail wrap it at a column ("Your credit\n
//! balance is too low"). Rules are written for the text as the provider printed it, so such a
//! reprint read by its words alone lost the specific rule, and a 429 around a wall was then read
//! by its status as a rate limit. The classifier also reads the text with the reprint undone and
//! takes the rules either reading matches. A text printed as one quoted string (Python's
//! `repr()`) is read inside its quotes; a log's prefix, a terminal's colour codes, a quote's `> `
//! and a panel's borders are dropped in the same reading.

use std::borrow::Cow;

use super::log_line;
use super::splice::Splice;

/// The text with typographic apostrophes (’ and ‘) read as the ASCII one, so a rule's
/// `you've` or `don.t` matches what a phone, a word processor or an app with smart quotes
/// printed: the body set matches bytes, where one of those is three bytes, not one.
pub(super) fn plain_apostrophes(text: &str) -> Cow<'_, str> {
    // Both are E2 80 98/99 in UTF-8: one vectorised search for the lead byte, usually absent.
    let bytes = text.as_bytes();
    let typographic = memchr::memchr_iter(0xE2, bytes).any(|at| {
        bytes.get(at + 1) == Some(&0x80) && matches!(bytes.get(at + 2), Some(0x98 | 0x99))
    });
    if typographic {
        Cow::Owned(text.replace(['\u{2019}', '\u{2018}'], "'"))
    } else {
        Cow::Borrowed(text)
    }
}

/// A text read again with what other programs did to it undone (`unwrapped`): the rules any of
/// these readings matches count, as do the text's own.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Readings {
    /// Every reprint undone, wrapped lines joined.
    joined: Option<String>,
    /// The same before the join, when the join changed it and something at a line's start was
    /// dropped (a log prefix, colour codes, a quote's `> `, a panel's border, or the quote that
    /// opened a quoted text): the text as printed then starts its lines otherwise, so a rule that reads
    /// a whole line (`^context size exceeded$`) would meet them nowhere. Only then: a text
    /// escaped in JSON or HTML has the same problem, but a third scan of every escaped text of
    /// several lines (a relay's traceback: 18 to 30 µs) bought 5 of 5,172 reprinted training
    /// texts and no corpus text.
    lines: Option<String>,
}

impl Readings {
    /// The readings that differ from the text as printed, the joined one first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &str> {
        self.joined
            .as_deref()
            .into_iter()
            .chain(self.lines.as_deref())
    }
}

/// How many times a text's JSON escapes are undone at most. A text printed again by each
/// program it passed through has one level per program: the corpus has texts of two (an SDK's
/// exception quoting a 400 inside another's `repr()`), and its reprint suite adds three more
/// (`tests/it/reprints.rs`); six reads one program beyond. The bound keeps a crafted text from
/// costing a scan per escape it nests (`\u005cu005c…` sheds five bytes a pass).
const JSON_DEPTH: usize = 6;

/// The text with JSON string escapes and HTML entities undone, a log's or a terminal's
/// decoration dropped (`log_line.rs`) and a line break between two words read as a space, when
/// that changes it (`Readings`). Each step first looks for what it undoes, so a text with
/// nothing to undo costs a few vectorised scans and no copy.
pub(super) fn unwrapped(text: &str) -> Readings {
    let quoted = unquoted(text);
    let mut current = quoted.map_or(Cow::Borrowed(text), Cow::Borrowed);
    // JSON until nothing is left to undo (a body escaped inside a string that was escaped
    // again, by each relay, SDK wrapper or `repr()` it passed through), then HTML once, then
    // JSON again when a page had escaped the escapes (`\\&#x27;`).
    let (mut json_left, mut html_left) = (JSON_DEPTH, true);
    loop {
        if json_left > 0
            && let Some(changed) = unescape_json(&current)
        {
            json_left -= 1;
            current = Cow::Owned(changed);
            continue;
        }
        if !html_left {
            break;
        }
        html_left = false;
        match unescape_html(&current) {
            Some(changed) => current = Cow::Owned(changed),
            None => break,
        }
    }
    let bare = log_line::undecorated(&current);
    // A quoted text's lines start otherwise once its `\n` are undone and its quotes dropped.
    let decorated = bare.is_some() || quoted.is_some();
    if let Some(bare) = bare {
        current = Cow::Owned(bare);
    }
    let unwrapped = match current {
        Cow::Owned(changed) if changed != text => Some(changed),
        Cow::Borrowed(inside) if inside.len() != text.len() => Some(inside.to_owned()),
        _ => None,
    };
    match join_wrapped_lines(unwrapped.as_deref().unwrap_or(text)) {
        Some(joined) => Readings {
            joined: Some(joined),
            lines: unwrapped.filter(|_| decorated),
        },
        None => Readings {
            joined: unwrapped,
            lines: None,
        },
    }
}

/// The inside of a text that is one quoted string (`'…'`, `"…"`), as Python's `repr()` or a
/// log's `%r` prints a message: a rule that reads a text from its start (`\Ahttp error: 429`)
/// then meets its first word, not the quote.
fn unquoted(text: &str) -> Option<&str> {
    // The start first: most texts open with no quote, and their end (a body padded with
    // hundreds of spaces) is then never walked.
    let opened = text.trim_start();
    let quote = opened.chars().next().filter(|c| matches!(c, '\'' | '"'))?;
    opened
        .trim_end()
        .strip_prefix(quote)
        .and_then(|inside| inside.strip_suffix(quote))
}

/// A JSON string's escapes (`\"`, `\\`, `\/`, `\n`, `\r`, `\t`, `\uXXXX`) and the `\'` of a
/// Python or JavaScript string literal (Python's `repr()` of a text with both quotes in it)
/// undone, when the text has one; any other backslash kept.
fn unescape_json(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut splice = Splice::new(text);
    let mut from = 0;
    while let Some(at) = bytes
        .get(from..)
        .and_then(|rest| memchr::memchr(b'\\', rest))
        .map(|i| from + i)
    {
        let after = text.get(at + 1..).unwrap_or("");
        let decoded = match after.as_bytes().first() {
            Some(&next @ (b'"' | b'\'' | b'\\' | b'/')) => Some((char::from(next), 1)),
            Some(b'n') => Some(('\n', 1)),
            Some(b'r') => Some(('\r', 1)),
            Some(b't') => Some(('\t', 1)),
            Some(b'u') => after
                .get(1..5)
                .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .and_then(char::from_u32)
                .map(|c| (c, 5)),
            _ => None,
        };
        from = at + 1;
        if let Some((c, used)) = decoded {
            splice.replace(at..at + 1 + used, c.encode_utf8(&mut [0; 4]));
            from += used;
        }
    }
    splice.finish()
}

/// The entities a web page escapes an error's text with, undone in one pass (`&amp;lt;` is
/// `&lt;`, not `<`), when the text has one.
fn unescape_html(text: &str) -> Option<String> {
    const ENTITIES: [(&str, char); 7] = [
        ("&quot;", '"'),
        ("&#39;", '\''),
        ("&#x27;", '\''),
        ("&apos;", '\''),
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&amp;", '&'),
    ];
    let mut splice = Splice::new(text);
    // An entity holds one `&`, its first byte, so no hit falls inside a replaced one.
    for at in memchr::memchr_iter(b'&', text.as_bytes()) {
        let from = text.get(at..).unwrap_or("");
        if let Some((entity, c)) = ENTITIES.iter().find(|(entity, _)| from.starts_with(entity)) {
            splice.replace(at..at + entity.len(), c.encode_utf8(&mut [0; 4]));
        }
    }
    splice.finish()
}

/// A line break between two words (a wrap: a letter, a digit, closing punctuation or a key's `=`
/// before it, a letter, a digit, opening punctuation or a path's `/` after it; not an indented,
/// blank or bracket line) read as one space, when there is one.
fn join_wrapped_lines(text: &str) -> Option<String> {
    let ends_word = |c: Option<char>| {
        c.is_some_and(|c| {
            c.is_alphanumeric()
                || matches!(
                    c,
                    '.' | ','
                        | ';'
                        | ':'
                        | '!'
                        | '?'
                        | ')'
                        | ']'
                        | '}'
                        | '>'
                        | '\''
                        | '"'
                        | '`'
                        | '='
                        | '-'
                )
        })
    };
    let starts_word = |c: Option<char>| {
        c.is_some_and(|c| {
            c.is_alphanumeric() || matches!(c, '(' | '[' | '{' | '\'' | '"' | '`' | '/' | '=' | '+')
        })
    };
    let mut splice = Splice::new(text);
    for at in memchr::memchr_iter(b'\n', text.as_bytes()) {
        let line = text.get(..at).unwrap_or("");
        let line = line.strip_suffix('\r').unwrap_or(line);
        let rest = text.get(at + 1..).unwrap_or("");
        // A command-line flag (`--provider`) starts a word; a list's `- ` and a rule's `---`
        // do not.
        let flag = rest
            .strip_prefix("--")
            .is_some_and(|flag| flag.chars().next().is_some_and(char::is_alphanumeric));
        if ends_word(line.chars().next_back()) && (starts_word(rest.chars().next()) || flag) {
            splice.replace(line.len()..at + 1, " ");
        }
    }
    splice.finish()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Texts made of what the reading undoes, in any order and any number: escapes cut
    /// anywhere, quotes unpaired, frames half drawn, line ends of both kinds.
    fn decorated_text() -> impl Strategy<Value = String> {
        let pieces = vec![
            "> ",
            ">",
            "│ ",
            " │",
            "┃",
            "╭──╮",
            "╰─",
            "─",
            "\n",
            "\r\n",
            "'",
            "\"",
            "\\",
            "\\'",
            "\\n",
            "\\u00e9",
            "\\u00",
            "\\ud83d",
            "&amp;",
            "&quot;",
            "&",
            " ",
            "\t",
            "a",
            "é",
            "漢",
            "-",
            "=",
            "+",
            "{",
            "}",
            "<p>",
            "\u{1b}[31m",
            "\u{1b}",
            "2026-11-30T08:15:02Z ERROR x: ",
            "[warn] ",
            "Error: ",
        ];
        prop::collection::vec(prop::sample::select(pieces), 0..48).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Whatever a text holds, reading it again neither panics nor makes it longer: every
        /// step removes or replaces with something no longer (C2's bound holds for readings).
        #[test]
        fn a_reading_never_panics_nor_grows(text in decorated_text()) {
            let readings = unwrapped(&text);
            for reading in readings.iter() {
                prop_assert!(reading.len() <= text.len(), "{text:?} read as {reading:?}");
            }
        }
    }

    #[test]
    fn json_escapes_html_entities_and_wraps_are_undone() {
        assert_eq!(
            unwrapped(r#"{\"type\":\"rate_limit_error\",\"message\":\"It\u0027s\\n\\n\"}"#)
                .joined
                .as_deref(),
            Some("{\"type\":\"rate_limit_error\",\"message\":\"It's\n\n\"}")
        );
        assert_eq!(
            unwrapped(
                "Your credit\nbalance is &quot;too low&quot; occurred\n(ValidationException)"
            )
            .joined
            .as_deref(),
            Some("Your credit balance is \"too low\" occurred (ValidationException)")
        );
        assert_eq!(
            unwrapped("a\r\nb").joined.as_deref(),
            Some("a b"),
            "a CRLF wrap is one space"
        );
        assert_eq!(
            unwrapped("error=\"could not load model: desc =\nstat /models\" status=500 [ai-proxy]\n/usr/kong").joined.as_deref(),
            Some("error=\"could not load model: desc = stat /models\" status=500 [ai-proxy] /usr/kong"),
            "a log line wrapped after a key's `=` or before a path"
        );
        assert_eq!(
            unwrapped("OpenAIException -\nConnection error. desc\n= stat tokens\n+ `max`\n{'error':\n{'message'}").joined.as_deref(),
            Some("OpenAIException - Connection error. desc = stat tokens + `max` {'error': {'message'}"),
            "a wrap after a dash or a brace, or before a key's `=`, a `+` or a brace"
        );
        assert_eq!(
            unwrapped("- one\n- two\n\n# Title\n<p>a</p>\n<p>b</p>").joined,
            None,
            "a list, a heading and markup are no wrap"
        );
        assert_eq!(
            unwrapped("specify a provider with\n--provider and a key\n--- a/file\n-- note")
                .joined
                .as_deref(),
            Some("specify a provider with --provider and a key\n--- a/file\n-- note"),
            "a wrap before a command-line flag, not before a diff's header or a dash and a space"
        );
    }

    #[test]
    fn escapes_are_undone_to_any_depth_up_to_the_bound() {
        let joined = |text: &str| unwrapped(text).joined;
        // Five programs deep: each printed the one before inside a JSON string.
        let mut deep = String::from("{\"error\": \"Unsupported parameter: 'max_tokens'\"}");
        for _ in 0..5 {
            let quoted = serde_json::to_string(&deep).unwrap();
            deep = quoted[1..quoted.len() - 1].to_owned();
        }
        assert_eq!(
            joined(&deep).as_deref(),
            Some("{\"error\": \"Unsupported parameter: 'max_tokens'\"}")
        );
        // A page escaped the escapes: HTML is undone, then JSON again.
        assert_eq!(
            joined(r"Unsupported parameter: \\\&#x27;max_tokens\\\&#x27;").as_deref(),
            Some("Unsupported parameter: 'max_tokens'")
        );
        // A crafted text that sheds one level a pass is read JSON_DEPTH levels deep, and no
        // deeper: each pass turns its first `\u005c` into the backslash of the next one, and
        // one level is left when the bound is reached.
        let crafted = format!("a\\u005c{}n", "u005c".repeat(JSON_DEPTH));
        assert_eq!(joined(&crafted).as_deref(), Some(r"a\u005cn"));
    }

    #[test]
    fn a_quoted_text_is_read_inside_its_quotes() {
        assert_eq!(unquoted("'http error: 429' "), Some("http error: 429"));
        assert_eq!(
            unquoted("\"Model 'x' is not available\""),
            Some("Model 'x' is not available")
        );
        assert_eq!(unquoted("'half\""), None);
        assert_eq!(unquoted("'"), None, "one quote is no pair");
        assert_eq!(unquoted("http error: 429"), None);
        // Python's repr() of a text with both quotes in it: `\'` is undone with the rest.
        assert_eq!(
            unwrapped(r#"'Error code: 400 - {\'error\': {\'message\': "unexpected EOF"}}'"#)
                .joined
                .as_deref(),
            Some(r#"Error code: 400 - {'error': {'message': "unexpected EOF"}}"#)
        );
    }

    #[test]
    fn escapes_are_undone_once_and_broken_ones_kept() {
        assert_eq!(
            unescape_html("a &amp;lt;b&amp;gt; &quot;c&#39; &x; &").as_deref(),
            Some("a &lt;b&gt; \"c' &x; &")
        );
        assert_eq!(unescape_html("a &x; & b"), None, "no entity, no copy");
        assert_eq!(
            unescape_json(r"\u00e9\u+123 \ud83d\/ \q \").as_deref(),
            Some("\u{e9}\\u+123 \\ud83d/ \\q \\")
        );
        assert_eq!(
            unescape_json(r"\\\\n").as_deref(),
            Some(r"\\n"),
            "an escaped backslash is one"
        );
        assert_eq!(
            unescape_json(r"doesn\'t").as_deref(),
            Some("doesn't"),
            "a Python or JavaScript literal's escaped quote"
        );
        assert_eq!(unescape_json(r"\u00"), None, "a cut \\u escape stays");
        assert_eq!(unescape_json("\\u00é9"), None, "no hex, no split character");
    }

    #[test]
    fn a_decorated_text_is_also_read_with_its_lines_kept() {
        let readings = |joined: &str, lines: Option<&str>| Readings {
            joined: Some(joined.to_owned()),
            lines: lines.map(str::to_owned),
        };
        // After a log prefix the text as printed starts its lines otherwise, so they are kept
        // in a reading of their own.
        assert_eq!(
            unwrapped("2026-11-30T08:15:02.123Z ERROR agent: context size exceeded\nfailed"),
            readings(
                "context size exceeded failed",
                Some("context size exceeded\nfailed")
            )
        );
        // Escaped in JSON they are not: a third scan of every escaped text costs more than
        // it reads (`Readings::lines`).
        assert_eq!(
            unwrapped(r"context size exceeded\nfailed"),
            readings("context size exceeded failed", None)
        );
        // As printed the text has its lines: only the joined reading.
        assert_eq!(
            unwrapped("context size exceeded\nfailed"),
            readings("context size exceeded failed", None)
        );
        // Nor are they inside a quoted text once its `\n` are undone (Python's repr()).
        assert_eq!(
            unwrapped(r"'context size exceeded\nfailed'"),
            readings(
                "context size exceeded failed",
                Some("context size exceeded\nfailed")
            )
        );
        // Or under a quote's `> `.
        assert_eq!(
            unwrapped("> reached its\n> configured limit"),
            readings(
                "reached its configured limit",
                Some("reached its\nconfigured limit")
            )
        );
        // A reprint of one line has nothing to join.
        assert_eq!(
            unwrapped("ERROR: context size exceeded"),
            readings("context size exceeded", None)
        );
    }

    #[test]
    fn a_text_with_nothing_to_undo_has_no_second_reading() {
        assert_eq!(
            unwrapped("Rate limit reached for gpt-4o"),
            Readings::default()
        );
        // Indented and blank lines are structure, not a wrap.
        assert_eq!(
            unwrapped("{\n    \"error\": 1\n}\n\nnext"),
            Readings::default()
        );
        // A backslash that escapes nothing JSON knows stays.
        assert_eq!(unwrapped(r"C:\Users\app \q"), Readings::default());
    }
}
