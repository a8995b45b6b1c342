//! How the classifier reads a text (C8): typographic apostrophes as the ASCII one, and a
//! second reading of a text another program printed again.
//!
//! Relays put an upstream's error inside a JSON string (`\"type\":\"rate_limit_error\"`), web
//! pages HTML-escape it (`&quot;`), log viewers and mail wrap it at a column ("Your credit\n
//! balance is too low"). Rules are written for the text as the provider printed it, so such a
//! reprint read by its words alone lost the specific rule, and a 429 around a wall was then read
//! by its status as a rate limit. The classifier also reads the text with the reprint undone and
//! takes the rules either reading matches. A log's prefix and a terminal's colour codes are
//! dropped in the same reading.

use std::borrow::Cow;

use super::log_line;

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

/// The text with JSON string escapes and HTML entities undone, a log's or a terminal's
/// decoration dropped (`log_line.rs`) and a line break between two words read as a space, when
/// that changes it. Each step first looks for what it undoes, so a text with nothing to undo
/// costs a few scans and no copy.
pub(super) fn unwrapped(text: &str) -> Option<String> {
    // Most texts hold no escape, entity or line break: one vectorised pass says so, and then
    // only a colour code or a log prefix on the one line can change them.
    if memchr::memchr3(b'\\', b'&', b'\n', text.as_bytes()).is_none() {
        return log_line::undecorated(text);
    }
    let mut current = Cow::Borrowed(text);
    // Twice: a body escaped inside a string that was escaped again.
    for _ in 0..2 {
        if memchr::memchr(b'\\', current.as_bytes()).is_some() {
            current = Cow::Owned(unescape_json(&current));
        }
    }
    if memchr::memchr(b'&', current.as_bytes()).is_some() {
        current = Cow::Owned(unescape_html(&current));
    }
    if let Some(bare) = log_line::undecorated(&current) {
        current = Cow::Owned(bare);
    }
    if let Some(joined) = join_wrapped_lines(&current) {
        current = Cow::Owned(joined);
    }
    match current {
        Cow::Owned(changed) if changed != text => Some(changed),
        _ => None,
    }
}

/// `\"`, `\\`, `\/`, `\n`, `\r`, `\t` and `\uXXXX` undone; any other backslash kept. The text
/// between escapes is copied whole.
fn unescape_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = memchr::memchr(b'\\', rest.as_bytes()) {
        out.push_str(rest.get(..at).unwrap_or(""));
        let after = rest.get(at + 1..).unwrap_or("");
        let decoded = match after.as_bytes().first() {
            Some(&next @ (b'"' | b'\\' | b'/')) => Some((char::from(next), 1)),
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
        match decoded {
            Some((c, used)) => {
                out.push(c);
                rest = after.get(used..).unwrap_or("");
            }
            None => {
                out.push('\\');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The entities a web page escapes an error's text with, undone in one pass (`&amp;lt;` is
/// `&lt;`, not `<`).
fn unescape_html(text: &str) -> String {
    const ENTITIES: [(&str, char); 7] = [
        ("&quot;", '"'),
        ("&#39;", '\''),
        ("&#x27;", '\''),
        ("&apos;", '\''),
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&amp;", '&'),
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = memchr::memchr(b'&', rest.as_bytes()) {
        out.push_str(rest.get(..at).unwrap_or(""));
        let from = rest.get(at..).unwrap_or("");
        let (decoded, used) = ENTITIES
            .iter()
            .find(|(entity, _)| from.starts_with(entity))
            .map_or(('&', 1), |&(entity, c)| (c, entity.len()));
        out.push(decoded);
        rest = from.get(used..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// A line break between two words (a wrap: a letter, a digit, closing punctuation or a key's `=`
/// before it, a letter, a digit, opening punctuation or a path's `/` after it; not an indented,
/// blank or bracket line)
/// read as one space, when there is one.
fn join_wrapped_lines(text: &str) -> Option<String> {
    let ends_word = |c: Option<char>| {
        c.is_some_and(|c| {
            c.is_alphanumeric()
                || matches!(
                    c,
                    '.' | ',' | ';' | ':' | '!' | '?' | ')' | ']' | '\'' | '"' | '`' | '='
                )
        })
    };
    let starts_word = |c: Option<char>| {
        c.is_some_and(|c| c.is_alphanumeric() || matches!(c, '(' | '[' | '\'' | '"' | '`' | '/'))
    };
    let mut out: Option<String> = None;
    let mut copied = 0;
    for at in memchr::memchr_iter(b'\n', text.as_bytes()) {
        let line = text.get(..at).unwrap_or("");
        let line = line.strip_suffix('\r').unwrap_or(line);
        let next = text.get(at + 1..).and_then(|rest| rest.chars().next());
        if !(ends_word(line.chars().next_back()) && starts_word(next)) {
            continue;
        }
        let joined = out.get_or_insert_with(|| String::with_capacity(text.len()));
        joined.push_str(text.get(copied..line.len()).unwrap_or(""));
        joined.push(' ');
        copied = at + 1;
    }
    let mut joined = out?;
    joined.push_str(text.get(copied..).unwrap_or(""));
    Some(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_html_entities_and_wraps_are_undone() {
        assert_eq!(
            unwrapped(r#"{\"type\":\"rate_limit_error\",\"message\":\"It\u0027s\\n\\n\"}"#)
                .as_deref(),
            Some("{\"type\":\"rate_limit_error\",\"message\":\"It's\n\n\"}")
        );
        assert_eq!(
            unwrapped(
                "Your credit\nbalance is &quot;too low&quot; occurred\n(ValidationException)"
            )
            .as_deref(),
            Some("Your credit balance is \"too low\" occurred (ValidationException)")
        );
        assert_eq!(
            unwrapped("a\r\nb").as_deref(),
            Some("a b"),
            "a CRLF wrap is one space"
        );
        assert_eq!(
            unwrapped("error=\"could not load model: desc =\nstat /models\" status=500 [ai-proxy]\n/usr/kong").as_deref(),
            Some("error=\"could not load model: desc = stat /models\" status=500 [ai-proxy] /usr/kong"),
            "a log line wrapped after a key's `=` or before a path"
        );
    }

    #[test]
    fn escapes_are_undone_once_and_broken_ones_kept() {
        assert_eq!(
            unescape_html("a &amp;lt;b&amp;gt; &quot;c&#39; &x; &"),
            "a &lt;b&gt; \"c' &x; &"
        );
        assert_eq!(
            unescape_json(r"\u00e9\u+123 \ud83d\/ \q \"),
            "\u{e9}\\u+123 \\ud83d/ \\q \\"
        );
        assert_eq!(unescape_json(r"\u00"), r"\u00", "a cut \\u escape stays");
        assert_eq!(
            unescape_json("\\u00é9"),
            "\\u00é9",
            "no hex, no split character"
        );
    }

    #[test]
    fn a_text_with_nothing_to_undo_has_no_second_reading() {
        assert_eq!(unwrapped("Rate limit reached for gpt-4o"), None);
        // Indented and blank lines are structure, not a wrap.
        assert_eq!(unwrapped("{\n    \"error\": 1\n}\n\nnext"), None);
        // A backslash that escapes nothing JSON knows stays.
        assert_eq!(unwrapped(r"C:\Users\app \q"), None);
    }
}
