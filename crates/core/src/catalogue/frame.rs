//! What is drawn around a message's lines (C8): a reply's or a Markdown quote's `> ` before
//! each line, and a terminal panel's borders.
//!
//! A person quoting an error in a mail or an issue puts `> ` before each of its lines; Python's
//! rich and Node's Ink draw an error in a panel, `│ ` before each line and ` │` after it, under
//! a `╭────╮` and above a `╰────╯`. A rule that reads words across a wrapped line ("reached
//! its\nconfigured enforced spend limit") then met a `>` or a `│` between them, and lost to a
//! rule that reads the status alone. An agent's terminal also marks the line it prints an error
//! on: Claude Code hangs it under `⎿` or after `⏺`, Codex starts it with `■` or `⚠`, Gemini CLI
//! with `✕`; a rule that reads a message from its line's start (`envoy overloaded`, a JSON
//! parser's `Unexpected end of JSON input`) met the mark first. The second reading drops what
//! is drawn; the text as printed is still read too.

use super::splice::Splice;

/// The text with quote markers, a terminal's marks and box-drawing characters removed from its
/// lines' starts (box-drawing characters from their ends too), and a line of nothing else (a
/// panel's top, bottom or divider) removed, when it has any. A text with no `>` and no
/// character from U+2000 to U+2FFF is not looked at further.
pub(super) fn unframed(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    // Box-drawing characters are U+2500 to U+257F (E2 94 xx and E2 95 xx in UTF-8), and the
    // marks are between U+2000 and U+2FFF too: all start with E2.
    memchr::memchr2(b'>', 0xE2, bytes)?;
    let mut splice = Splice::new(text);
    let mut start = 0;
    while start < text.len() {
        let end = memchr::memchr(b'\n', bytes.get(start..).unwrap_or_default())
            .map_or(text.len(), |at| start + at);
        let line = text.get(start..end).unwrap_or("");
        let line = line.strip_suffix('\r').unwrap_or(line);
        let opened =
            line.trim_start_matches(|c| matches!(c, ' ' | '\t' | '>') || is_drawn(c) || is_mark(c));
        let lead = line.len() - opened.len();
        let inner = opened.trim_end_matches(|c| matches!(c, ' ' | '\t') || is_drawn(c));
        let drawn_before = line
            .get(..lead)
            .is_some_and(|before| before.contains(|c| c == '>' || is_drawn(c) || is_mark(c)));
        let drawn_after = line
            .get(lead + inner.len()..)
            .is_some_and(|after| after.contains(is_drawn));
        if inner.is_empty() && line.contains(is_drawn) {
            // A panel's edge, with its line break.
            splice.replace(start..(end + 1).min(text.len()), "");
        } else if drawn_before || drawn_after {
            splice.replace(start..start + lead, "");
            splice.replace(start + lead + inner.len()..start + line.len(), "");
        }
        start = end + 1;
    }
    splice.finish()
}

/// A box-drawing character: a panel's border or corner, a tree's branch.
fn is_drawn(c: char) -> bool {
    matches!(c, '\u{2500}'..='\u{257F}')
}

/// A mark an agent's terminal puts before the line it prints a result or an error on: Claude
/// Code's `⎿` and `⏺`, Codex's `■`, `⚠` and `•`, Gemini CLI's `✕`, a prompt library's `◆` and
/// `◇`, and the crosses and dots of others (with the emoji selector some of them carry).
fn is_mark(c: char) -> bool {
    matches!(
        c,
        '\u{2022}'
            | '\u{23BF}'
            | '\u{23FA}'
            | '\u{25A0}'
            | '\u{25C6}'
            | '\u{25C7}'
            | '\u{25CF}'
            | '\u{26A0}'
            | '\u{2715}'..='\u{2718}' | '\u{FE0F}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_markers_are_removed_from_every_line() {
        assert_eq!(
            unframed("> ERROR: stream disconnected: reached its\n> configured limit").as_deref(),
            Some("ERROR: stream disconnected: reached its\nconfigured limit")
        );
        assert_eq!(
            unframed("> > nested\r\n>> twice\n>bare").as_deref(),
            Some("nested\r\ntwice\nbare")
        );
    }

    #[test]
    fn a_panel_is_taken_apart() {
        let panel =
            "╭─ Error ──╮\n│ Rate limit reached     │\n│ try again in 8s        │\n╰──────────╯";
        assert_eq!(
            unframed(panel).as_deref(),
            Some("Error\nRate limit reached\ntry again in 8s\n")
        );
        assert_eq!(
            unframed("┃ heavy ┃\n║ double ║").as_deref(),
            Some("heavy\ndouble")
        );
    }

    #[test]
    fn an_agents_marks_are_taken_off_a_lines_start() {
        assert_eq!(
            unframed("⏺ Update(file)\n  ⎿  envoy overloaded").as_deref(),
            Some("Update(file)\nenvoy overloaded")
        );
        assert_eq!(
            unframed("■ Unexpected end of JSON input\n⚠\u{FE0F} retrying\n✕ [API Error: 500]")
                .as_deref(),
            Some("Unexpected end of JSON input\nretrying\n[API Error: 500]")
        );
        // A mark inside a line or at its end is the message's own.
        assert_eq!(unframed("status ■ 429 •"), None);
    }

    #[test]
    fn a_text_with_nothing_drawn_is_not_copied() {
        assert_eq!(unframed("a -> b, x > 3\n<html>"), None);
        assert_eq!(unframed("a │ b in the middle"), None);
        assert_eq!(unframed("plain text"), None);
    }
}
