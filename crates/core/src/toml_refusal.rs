//! How a refused TOML file is told: on one line, naming the line or the field at fault. The
//! catalogue's rule files and the gateway's configuration both refuse through here, so a user
//! meets the same words from either.

/// `text` on one line: every run of whitespace, line breaks included, becomes one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The field a serde message names, as in "unknown field `bdy`, expected …" or "missing field
/// `code`".
pub fn named_field(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

/// A refusal of `text` by the TOML parser as "line N: message", or the message alone when the
/// parser gave no place.
pub fn syntax(text: &str, error: &toml::de::Error) -> String {
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", one_line(error.message()))
        }
        None => one_line(error.message()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_names_its_line() {
        let text = "[[rule]]\nid = \"x\"\n\nbody_regex = \"foo\n";
        let error = text.parse::<toml::Table>().unwrap_err();
        let told = syntax(text, &error);
        assert!(told.starts_with("line 4: "), "{told}");
        assert!(!told.contains('\n'), "{told}");
    }

    #[test]
    fn a_serde_message_names_its_field() {
        assert_eq!(
            named_field("unknown field `bdy`, expected one of `body`, `code`").as_deref(),
            Some("bdy")
        );
        assert_eq!(named_field("missing field `code`").as_deref(), Some("code"));
        assert_eq!(named_field("invalid type: integer"), None);
    }

    #[test]
    fn one_line_folds_every_run_of_whitespace() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }
}
