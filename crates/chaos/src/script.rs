//! Fault scripts: what the upstream does to the n-th request of a key.
//!
//! A script is a comma-separated list of steps, one per request, e.g.
//! `502, 429+retry-after-ms:300, cut-after-3-chunks, ok`. Requests past the end of the script
//! are answered normally.

use std::fmt;
use std::time::Duration;

/// The longest stall a step may ask for.
pub const MAX_STALL: Duration = Duration::from_secs(600);

/// How long `stall` waits when the step names no duration.
pub const DEFAULT_STALL: Duration = Duration::from_secs(30);

/// One request's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A normal answer.
    Ok,
    /// An error status with a body shaped like the protocol's own, plus extra headers.
    /// `context` is the protocol's context-overflow 400.
    Status {
        /// The HTTP status.
        status: u16,
        /// `context`: the context-length 400 instead of the generic body for 400.
        context: bool,
        /// Extra response headers (`retry-after`, `retry-after-ms`, `x-should-retry` …).
        headers: Vec<(String, String)>,
    },
    /// Close the connection before any response byte.
    Reset,
    /// Answer 200 with a web page (`text/html`, a network's sign-in page) in place of the
    /// API's answer: a base URL that names a website, or a captive portal.
    Page,
    /// Answer a stream request with the whole answer as one JSON body
    /// (`application/json`), as a server that does not stream does, after this long (the
    /// generation it sends nothing during); a request that does not stream is answered as
    /// usual: `unstreamed[:MS]`.
    Unstreamed(Duration),
    /// Answer a request that does not stream with an event stream, as a server that streams
    /// whatever it is asked does; a stream request is answered as usual.
    Streamed,
    /// Wait this long before the response headers.
    Stall(Duration),
    /// An outage: this request and every request of its key that arrives within this long
    /// after it are reset before any response byte; the script goes on after the outage as
    /// if they had not come: `down:MS`.
    Down(Duration),
    /// Stream this many content chunks, then cut the connection.
    CutAfter(usize),
    /// Stream this many content chunks, then go quiet for this long.
    StallAfter(usize, Duration),
    /// Stream this many content chunks, then send the protocol's in-stream error event with
    /// this error type (`overloaded_error`, `api_error`, `server_error`, `rate_limit_error` …).
    ErrorAfter(usize, String),
    /// Stream this many content chunks, then bytes that are not SSE.
    MalformedAfter(usize),
    /// Stream this many content chunks, then one event whose data is not JSON, then the rest
    /// of the stream as usual: `malformed-event-at-N`.
    MalformedEventAt(usize),
    /// A whole stream whose body closes cleanly without its `data: [DONE]` line (Chat
    /// Completions; the other APIs' streams end with their own final events, sent as usual):
    /// `no-done`.
    NoDone,
    /// Responses API: stream this many content chunks, then a bare `error` event (instead of
    /// `response.failed`) with this code. The other APIs treat it as [`Step::ErrorAfter`].
    ErrorEventAfter(usize, String),
    /// A reply that ends normally at the token limit with only thinking, no text:
    /// `stop_reason: max_tokens`, `finish_reason: length`, `response.incomplete`.
    ThinkingOnly,
    /// A reply step with modifiers: what the reply holds (thinking, a tool call, text only).
    With(Box<Step>, Modifiers),
}

/// What a reply holds, whatever its fault: `+thinking`, `+redacted-thinking`, `+text`,
/// `+tool`, `+tool:NAME` after a reply step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Modifiers {
    /// `+thinking`: start with thinking even when the request did not ask for it.
    pub thinking: bool,
    /// `+redacted-thinking`: thinking plus an Anthropic `redacted_thinking` block.
    pub redacted_thinking: bool,
    /// `+text`, `+tool`, `+tool:NAME`: whether the reply calls a tool.
    pub tool: ToolChoice,
    /// `+echo-key`, after a reply step or a status: the error it ends with (the status's
    /// body, the in-stream error event) echoes the key the request presented, as a careless
    /// upstream or proxy does: a test of whether keys leak.
    pub echo_key: bool,
    /// `+message:TEXT`, after a status: the error body's message is TEXT instead of the
    /// protocol's stock one (a usage limit with its reset, as a provider words it). TEXT
    /// holds neither `+` nor `,`.
    pub message: Option<String>,
}

/// Whether a reply calls one of the request's tools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The first function tool, on the conversation's first turn (no tool results yet).
    #[default]
    Auto,
    /// Text, even when the request offers tools.
    Text,
    /// This tool, on the conversation's first turn; text when the request does not offer it.
    Named(String),
}

impl Step {
    /// The step without its modifiers, and the modifiers.
    pub fn parts(&self) -> (&Step, Modifiers) {
        match self {
            Step::With(step, modifiers) => (step, modifiers.clone()),
            step => (step, Modifiers::default()),
        }
    }
}

/// A step that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chaos step {index} `{step}`: {reason}")]
pub struct ScriptError {
    /// 1-based position in the script.
    pub index: usize,
    /// The step's text.
    pub step: String,
    /// What is wrong.
    pub reason: String,
}

/// Parses a whole script.
pub fn parse_script(script: &str) -> Result<Vec<Step>, ScriptError> {
    script
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .enumerate()
        .map(|(i, step)| {
            parse_step(step).map_err(|reason| ScriptError {
                index: i + 1,
                step: step.to_owned(),
                reason,
            })
        })
        .collect()
}

fn parse_count(text: &str) -> Result<usize, String> {
    let digits = text.strip_suffix("-chunks").unwrap_or(text);
    let digits = digits.strip_suffix("-chunk").unwrap_or(digits);
    digits
        .parse()
        .map_err(|_| format!("`{text}` is not a chunk count"))
}

fn parse_ms(text: &str) -> Result<Duration, String> {
    let ms: u64 = text
        .trim_end_matches("ms")
        .parse()
        .map_err(|_| format!("`{text}` is not a duration in milliseconds"))?;
    let d = Duration::from_millis(ms);
    if d > MAX_STALL {
        return Err(format!("stalls are at most {} s", MAX_STALL.as_secs()));
    }
    Ok(d)
}

/// Parses one step.
pub fn parse_step(step: &str) -> Result<Step, String> {
    let step = step.trim();
    let head = step.split('+').next().unwrap_or_default();
    if head == "context" || head.parse::<u16>().is_ok() {
        return parse_status(step);
    }
    let Some((head, modifiers)) = step.split_once('+') else {
        return parse_reply(step);
    };
    Ok(Step::With(
        Box::new(parse_reply(head)?),
        parse_modifiers(modifiers)?,
    ))
}

/// Parses modifiers without their step: `thinking+tool:Read`, `text`.
pub fn parse_modifiers(modifiers: &str) -> Result<Modifiers, String> {
    let mut parsed = Modifiers::default();
    for modifier in modifiers
        .split('+')
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        match modifier {
            "thinking" => parsed.thinking = true,
            "redacted-thinking" => {
                parsed.thinking = true;
                parsed.redacted_thinking = true;
            }
            "text" => parsed.tool = ToolChoice::Text,
            "echo-key" => parsed.echo_key = true,
            "tool" => parsed.tool = ToolChoice::Auto,
            other => match other.strip_prefix("tool:") {
                Some(name) if !name.trim().is_empty() => {
                    parsed.tool = ToolChoice::Named(name.trim().to_owned());
                }
                _ => {
                    return Err(format!(
                        "`+{other}` is not a modifier (thinking, redacted-thinking, text, tool, tool:NAME, echo-key)"
                    ));
                }
            },
        }
    }
    Ok(parsed)
}

fn parse_kind(rest: &str) -> Result<(usize, String), String> {
    let (count, kind) = match rest.split_once(':') {
        Some((count, kind)) => (count, kind),
        None => (rest, "overloaded_error"),
    };
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!("`{kind}` is not an error type"));
    }
    Ok((parse_count(count)?, kind.to_owned()))
}

/// A step that answers 200 (or faults within the answer).
fn parse_reply(step: &str) -> Result<Step, String> {
    match step {
        "ok" => return Ok(Step::Ok),
        "reset" => return Ok(Step::Reset),
        "stall" => return Ok(Step::Stall(DEFAULT_STALL)),
        "thinking-only" => return Ok(Step::ThinkingOnly),
        "no-done" => return Ok(Step::NoDone),
        "page" => return Ok(Step::Page),
        "unstreamed" => return Ok(Step::Unstreamed(Duration::ZERO)),
        "streamed" => return Ok(Step::Streamed),
        _ => {}
    }
    if let Some(ms) = step.strip_prefix("stall:") {
        return parse_ms(ms).map(Step::Stall);
    }
    if let Some(ms) = step.strip_prefix("unstreamed:") {
        return parse_ms(ms).map(Step::Unstreamed);
    }
    if let Some(ms) = step.strip_prefix("down:") {
        return parse_ms(ms).map(Step::Down);
    }
    if let Some(rest) = step.strip_prefix("cut-after-") {
        return parse_count(rest).map(Step::CutAfter);
    }
    if let Some(rest) = step.strip_prefix("stall-after-") {
        let (count, ms) = match rest.split_once(':') {
            Some((count, ms)) => (count, Some(ms)),
            None => (rest, None),
        };
        let stall = ms.map_or(Ok(DEFAULT_STALL), parse_ms)?;
        return Ok(Step::StallAfter(parse_count(count)?, stall));
    }
    if let Some(rest) = step.strip_prefix("error-after-") {
        return parse_kind(rest).map(|(n, kind)| Step::ErrorAfter(n, kind));
    }
    if let Some(rest) = step.strip_prefix("error-event-after-") {
        return parse_kind(rest).map(|(n, kind)| Step::ErrorEventAfter(n, kind));
    }
    if let Some(rest) = step.strip_prefix("malformed-after-") {
        return parse_count(rest).map(Step::MalformedAfter);
    }
    if let Some(rest) = step.strip_prefix("malformed-event-at-") {
        return parse_count(rest).map(Step::MalformedEventAt);
    }
    Err(
        "expected ok, reset, stall[:MS], down:MS, a 4xx/5xx status, context, cut-after-N, stall-after-N[:MS], error-after-N[:TYPE], error-event-after-N[:TYPE], malformed-after-N, malformed-event-at-N, no-done, thinking-only, page, unstreamed[:MS] or streamed"
            .to_owned(),
    )
}

/// An error status with headers: `429+retry-after:3`.
fn parse_status(step: &str) -> Result<Step, String> {
    let mut parts = step.split('+');
    let head = parts.next().unwrap_or_default();
    let (status, context) = match head {
        "context" => (400, true),
        _ => match head.parse::<u16>() {
            Ok(s) if (400..=599).contains(&s) => (s, false),
            _ => return Err(format!("`{head}` is not a 4xx or 5xx status")),
        },
    };
    let mut echo_key = false;
    let mut message = None;
    let headers = parts
        .filter(|h| {
            let echo = h.trim() == "echo-key";
            echo_key |= echo;
            if let Some(text) = h.trim().strip_prefix("message:") {
                message = Some(text.trim().to_owned());
                return false;
            }
            !echo
        })
        .map(|h| {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("`+{h}` is not `+name:value`"))?;
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(format!("`{name}` is not a header name"));
            }
            Ok((name, value.trim().to_owned()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let status = Step::Status {
        status,
        context,
        headers,
    };
    if message.as_deref().is_some_and(str::is_empty) {
        return Err("`+message:` needs a text".to_owned());
    }
    if echo_key || message.is_some() {
        let modifiers = Modifiers {
            echo_key,
            message,
            ..Modifiers::default()
        };
        return Ok(Step::With(Box::new(status), modifiers));
    }
    Ok(status)
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Ok => f.write_str("ok"),
            Step::Status {
                status,
                context,
                headers,
            } => {
                if *context {
                    f.write_str("context")?;
                } else {
                    write!(f, "{status}")?;
                }
                headers.iter().try_for_each(|(n, v)| write!(f, "+{n}:{v}"))
            }
            Step::Reset => f.write_str("reset"),
            Step::Page => f.write_str("page"),
            Step::Unstreamed(d) if d.is_zero() => f.write_str("unstreamed"),
            Step::Unstreamed(d) => write!(f, "unstreamed:{}", d.as_millis()),
            Step::Streamed => f.write_str("streamed"),
            Step::Stall(d) => write!(f, "stall:{}", d.as_millis()),
            Step::Down(d) => write!(f, "down:{}", d.as_millis()),
            Step::CutAfter(n) => write!(f, "cut-after-{n}-chunks"),
            Step::StallAfter(n, d) => write!(f, "stall-after-{n}:{}", d.as_millis()),
            Step::ErrorAfter(n, kind) => write!(f, "error-after-{n}:{kind}"),
            Step::MalformedAfter(n) => write!(f, "malformed-after-{n}"),
            Step::MalformedEventAt(n) => write!(f, "malformed-event-at-{n}"),
            Step::NoDone => f.write_str("no-done"),
            Step::ErrorEventAfter(n, kind) => write!(f, "error-event-after-{n}:{kind}"),
            Step::ThinkingOnly => f.write_str("thinking-only"),
            Step::With(step, modifiers) => {
                write!(f, "{step}")?;
                if modifiers.redacted_thinking {
                    f.write_str("+redacted-thinking")?;
                } else if modifiers.thinking {
                    f.write_str("+thinking")?;
                }
                match &modifiers.tool {
                    ToolChoice::Auto => {}
                    ToolChoice::Text => f.write_str("+text")?,
                    ToolChoice::Named(name) => write!(f, "+tool:{name}")?,
                }
                if modifiers.echo_key {
                    f.write_str("+echo-key")?;
                }
                if let Some(message) = &modifiers.message {
                    write!(f, "+message:{message}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let steps = parse_script("502, 429+retry-after-ms:300, cut-after-3-chunks, ok").unwrap();
        assert_eq!(
            steps,
            vec![
                Step::Status {
                    status: 502,
                    context: false,
                    headers: vec![]
                },
                Step::Status {
                    status: 429,
                    context: false,
                    headers: vec![("retry-after-ms".into(), "300".into())]
                },
                Step::CutAfter(3),
                Step::Ok,
            ]
        );
        let text: Vec<String> = steps.iter().map(ToString::to_string).collect();
        assert_eq!(
            text.join(", "),
            "502, 429+retry-after-ms:300, cut-after-3-chunks, ok"
        );
    }

    #[test]
    fn every_step_kind() {
        assert_eq!(parse_step("reset"), Ok(Step::Reset));
        assert_eq!(
            parse_step("stall:250"),
            Ok(Step::Stall(Duration::from_millis(250)))
        );
        assert_eq!(
            parse_step("stall-after-2:100"),
            Ok(Step::StallAfter(2, Duration::from_millis(100)))
        );
        assert_eq!(
            parse_step("error-after-0"),
            Ok(Step::ErrorAfter(0, "overloaded_error".into()))
        );
        assert_eq!(
            parse_step("error-after-3:server_error"),
            Ok(Step::ErrorAfter(3, "server_error".into()))
        );
        assert_eq!(parse_step("malformed-after-1"), Ok(Step::MalformedAfter(1)));
        assert_eq!(
            parse_step("malformed-event-at-2"),
            Ok(Step::MalformedEventAt(2))
        );
        assert_eq!(parse_step("no-done"), Ok(Step::NoDone));
        assert_eq!(parse_step("page"), Ok(Step::Page));
        assert_eq!(
            parse_step("unstreamed"),
            Ok(Step::Unstreamed(Duration::ZERO))
        );
        assert_eq!(
            parse_step("unstreamed:1500"),
            Ok(Step::Unstreamed(Duration::from_millis(1500)))
        );
        for step in ["unstreamed", "unstreamed:1500"] {
            assert_eq!(parse_step(step).unwrap().to_string(), step);
        }
        assert_eq!(parse_step("streamed"), Ok(Step::Streamed));
        assert_eq!(
            parse_step("down:5000"),
            Ok(Step::Down(Duration::from_secs(5)))
        );
        assert_eq!(Step::Down(Duration::from_secs(5)).to_string(), "down:5000");
        assert!(matches!(
            parse_step("context"),
            Ok(Step::Status {
                status: 400,
                context: true,
                ..
            })
        ));
    }

    #[test]
    fn bad_steps_name_their_position() {
        let e = parse_script("ok, 200, ok").unwrap_err();
        assert_eq!((e.index, e.step.as_str()), (2, "200"));
        assert!(parse_step("429+retry-after").is_err());
        assert!(parse_step("cut-after-x").is_err());
        assert!(parse_step("stall:99999999").is_err());
        assert!(parse_step("error-after-1:bad type").is_err());
        assert!(parse_step("ok+sparkles").is_err());
        assert!(parse_step("200").is_err());
        assert!(parse_modifiers("tool:").is_err());
        assert_eq!(
            parse_modifiers("thinking+tool:Read"),
            Ok(Modifiers {
                thinking: true,
                redacted_thinking: false,
                tool: ToolChoice::Named("Read".into()),
                echo_key: false,
                message: None,
            })
        );
    }

    #[test]
    fn a_status_can_carry_its_own_message() {
        let steps = parse_script(
            "429+message:Claude AI usage limit reached|1796054400+x-should-retry:false, ok",
        )
        .unwrap();
        let (base, modifiers) = steps[0].parts();
        assert!(
            matches!(base, Step::Status { status: 429, headers, .. } if headers == &[("x-should-retry".to_owned(), "false".to_owned())])
        );
        assert_eq!(
            modifiers.message.as_deref(),
            Some("Claude AI usage limit reached|1796054400")
        );
        assert_eq!(
            steps[0].to_string(),
            "429+x-should-retry:false+message:Claude AI usage limit reached|1796054400"
        );
        assert!(parse_step("429+message:").is_err());
    }

    #[test]
    fn reply_steps_take_modifiers_and_print_back() {
        let steps = parse_script(
            "ok+thinking, cut-after-2+tool:Read, ok+text, thinking-only, error-event-after-1:server_error, ok+redacted-thinking+text",
        )
        .unwrap();
        assert_eq!(
            steps[0],
            Step::With(
                Box::new(Step::Ok),
                Modifiers {
                    thinking: true,
                    ..Modifiers::default()
                }
            )
        );
        let (base, modifiers) = steps[1].parts();
        assert_eq!(base, &Step::CutAfter(2));
        assert_eq!(modifiers.tool, ToolChoice::Named("Read".into()));
        assert_eq!(steps[3], Step::ThinkingOnly);
        assert_eq!(steps[4], Step::ErrorEventAfter(1, "server_error".into()));
        let text: Vec<String> = steps.iter().map(ToString::to_string).collect();
        assert_eq!(
            text.join(", "),
            "ok+thinking, cut-after-2-chunks+tool:Read, ok+text, thinking-only, error-event-after-1:server_error, ok+redacted-thinking+text"
        );
    }

    #[test]
    fn errors_can_echo_the_presented_key() {
        let steps = parse_script(
            "401+echo-key, 500+retry-after:1+echo-key, error-after-1:server_error+echo-key",
        )
        .unwrap();
        for step in &steps {
            assert!(step.parts().1.echo_key, "{step}");
        }
        assert!(
            matches!(steps[1].parts().0, Step::Status { status: 500, headers, .. } if headers.len() == 1)
        );
        let text: Vec<String> = steps.iter().map(ToString::to_string).collect();
        assert_eq!(
            text.join(", "),
            "401+echo-key, 500+retry-after:1+echo-key, error-after-1:server_error+echo-key"
        );
    }
}
