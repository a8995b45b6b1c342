//! A text rewritten in places: the reading's steps (`reading.rs`, `log_line.rs`) each replace
//! some ranges of a text, and a text none of them touches is never copied.

use std::ops::Range;

/// A text being rewritten: the part before the last replaced range is copied, with the
/// replacements, into a string made at the first replacement.
pub(super) struct Splice<'a> {
    text: &'a str,
    out: Option<String>,
    copied: usize,
}

impl<'a> Splice<'a> {
    pub(super) fn new(text: &'a str) -> Splice<'a> {
        Splice {
            text,
            out: None,
            copied: 0,
        }
    }

    /// Replaces `range` of the text with `with`. Ranges come in order and do not overlap.
    pub(super) fn replace(&mut self, range: Range<usize>, with: &str) {
        let text = self.text;
        let out = self
            .out
            .get_or_insert_with(|| String::with_capacity(text.len()));
        out.push_str(text.get(self.copied..range.start).unwrap_or(""));
        out.push_str(with);
        self.copied = range.end;
    }

    /// The text rewritten, or `None` when nothing was replaced.
    pub(super) fn finish(self) -> Option<String> {
        let mut out = self.out?;
        out.push_str(self.text.get(self.copied..).unwrap_or(""));
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_replaced_in_order_and_an_untouched_text_is_not_copied() {
        let mut splice = Splice::new("a\nb\r\nc");
        splice.replace(1..2, " ");
        splice.replace(3..5, "");
        assert_eq!(splice.finish().as_deref(), Some("a bc"));
        assert_eq!(Splice::new("a").finish(), None);
    }
}
