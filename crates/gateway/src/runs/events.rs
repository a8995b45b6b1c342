//! What an agent CLI's structured output says, line by line: the session it runs, whether it
//! acted (a tool call may edit files, run commands, commit), its error events and how it
//! finished. The formats are protocols, as the gateway's provider adapters are: Claude Code's
//! `stream-json` and Codex's `exec --json`. Failure text is never interpreted here: it goes to
//! the catalogue as evidence (C8).

use serde_json::Value;

use crate::config::AgentOutput;

/// One thing a line of output said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AgentEvent {
    /// The session id the CLI runs (Claude Code `session_id`, Codex `thread_id`).
    Session(String),
    /// Model output reached the run (text, reasoning).
    Content,
    /// A tool call: the agent may have acted (D4). Any tool counts, read-only ones too: the
    /// name alone cannot prove a tool harmless.
    Effect(String),
    /// An error event's message.
    Error(String),
    /// The CLI's final event: whether it reports an error, and its result text.
    Finished {
        /// The run ended in an error.
        is_error: bool,
        /// The final answer, or the error text.
        text: Option<String>,
    },
}

/// The events of one line of `output`.
pub(crate) fn parse_line(output: AgentOutput, line: &str) -> Vec<AgentEvent> {
    let line = line.trim();
    if output == AgentOutput::Text || !line.starts_with('{') {
        return Vec::new();
    }
    let Ok(event) = serde_json::from_str::<Value>(line) else {
        return Vec::new();
    };
    match output {
        AgentOutput::ClaudeStreamJson => claude(&event),
        AgentOutput::CodexJson => codex(&event),
        AgentOutput::Text => Vec::new(),
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

/// Claude Code `-p --output-format stream-json --verbose`.
fn claude(event: &Value) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "system"
        && let Some(id) = text(event.get("session_id"))
    {
        out.push(AgentEvent::Session(id));
    }
    match kind {
        "assistant" | "user" => {
            let content = event
                .pointer("/message/content")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            // An API error Claude Code gave up on arrives as a synthetic assistant message
            // (`error`, `is_api_error_message`) whose text is the error line: evidence, not
            // model output.
            let api_error = event.get("error").is_some()
                || event
                    .get("is_api_error_message")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
            for block in content {
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use" | "server_tool_use") => out.push(AgentEvent::Effect(
                        text(block.get("name")).unwrap_or_else(|| "tool".into()),
                    )),
                    Some("text") if api_error => {
                        out.extend(text(block.get("text")).map(AgentEvent::Error));
                    }
                    Some("text" | "thinking") if kind == "assistant" => {
                        out.push(AgentEvent::Content);
                    }
                    _ => {}
                }
            }
        }
        "result" => {
            let is_error = event
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                || event
                    .get("subtype")
                    .and_then(Value::as_str)
                    .is_some_and(|s| s != "success");
            let mut result = text(event.get("result"));
            if let Some(errors) = event.get("errors").and_then(Value::as_array) {
                let joined: Vec<&str> = errors.iter().filter_map(Value::as_str).collect();
                if !joined.is_empty() && result.is_none() {
                    result = Some(joined.join("\n"));
                }
            }
            if let Some(id) = text(event.get("session_id")) {
                out.push(AgentEvent::Session(id));
            }
            out.push(AgentEvent::Finished {
                is_error,
                text: result,
            });
        }
        _ => {}
    }
    out
}

/// Codex `exec --json`.
fn codex(event: &Value) -> Vec<AgentEvent> {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "thread.started" => text(event.get("thread_id"))
            .map(AgentEvent::Session)
            .into_iter()
            .collect(),
        "item.started" | "item.updated" | "item.completed" => {
            let item = event.get("item").unwrap_or(&Value::Null);
            match item.get("type").and_then(Value::as_str) {
                Some(
                    kind @ ("command_execution" | "file_change" | "mcp_tool_call" | "web_search"),
                ) => vec![AgentEvent::Effect(kind.to_owned())],
                Some("agent_message" | "reasoning") => vec![AgentEvent::Content],
                Some("error") => text(item.get("message"))
                    .map(AgentEvent::Error)
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            }
        }
        "error" => text(event.get("message"))
            .map(AgentEvent::Error)
            .into_iter()
            .collect(),
        "turn.failed" => {
            let message = text(event.pointer("/error/message"));
            let mut out: Vec<AgentEvent> =
                message.clone().map(AgentEvent::Error).into_iter().collect();
            out.push(AgentEvent::Finished {
                is_error: true,
                text: message,
            });
            out
        }
        "turn.completed" => vec![AgentEvent::Finished {
            is_error: false,
            text: None,
        }],
        _ => Vec::new(),
    }
}

/// Codex reports its answer as its last agent message; the text of an `agent_message` item.
pub(crate) fn codex_message(line: &str) -> Option<String> {
    let event: Value = serde_json::from_str(line.trim()).ok()?;
    (event.get("type")?.as_str()? == "item.completed"
        && event.pointer("/item/type")?.as_str()? == "agent_message")
        .then(|| text(event.pointer("/item/text")))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_reports_its_session_tools_and_result() {
        let out = AgentOutput::ClaudeStreamJson;
        assert_eq!(
            parse_line(
                out,
                r#"{"type":"system","subtype":"init","session_id":"s-1","tools":[]}"#
            ),
            vec![AgentEvent::Session("s-1".into())]
        );
        assert_eq!(
            parse_line(
                out,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t","name":"Bash","input":{}}]},"session_id":"s-1"}"#
            ),
            vec![AgentEvent::Content, AgentEvent::Effect("Bash".into())]
        );
        assert_eq!(
            parse_line(
                out,
                r#"{"type":"result","subtype":"success","is_error":true,"result":"Claude AI usage limit reached|1796054400","session_id":"s-1"}"#
            ),
            vec![
                AgentEvent::Session("s-1".into()),
                AgentEvent::Finished {
                    is_error: true,
                    text: Some("Claude AI usage limit reached|1796054400".into())
                }
            ]
        );
        // Claude Code 2.1.332 after a 429 it gives up on (measured against `rebound chaos`).
        assert_eq!(
            parse_line(
                out,
                r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: Request rejected (429) · Claude AI usage limit reached|1796155227"}]},"session_id":"s-1","error":"rate_limit","is_api_error_message":true,"api_error_status":429}"#
            ),
            vec![AgentEvent::Error(
                "API Error: Request rejected (429) · Claude AI usage limit reached|1796155227"
                    .into()
            )]
        );
        assert!(parse_line(out, "not json").is_empty());
        assert!(parse_line(AgentOutput::Text, r#"{"type":"system","session_id":"x"}"#).is_empty());
    }

    #[test]
    fn codex_reports_its_thread_effects_and_failures() {
        let out = AgentOutput::CodexJson;
        assert_eq!(
            parse_line(out, r#"{"type":"thread.started","thread_id":"th-9"}"#),
            vec![AgentEvent::Session("th-9".into())]
        );
        assert_eq!(
            parse_line(
                out,
                r#"{"type":"item.started","item":{"id":"i","type":"command_execution","command":"ls","status":"in_progress"}}"#
            ),
            vec![AgentEvent::Effect("command_execution".into())]
        );
        assert_eq!(
            parse_line(
                out,
                r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#
            ),
            vec![
                AgentEvent::Error(
                    "exceeded retry limit, last status: 429 Too Many Requests".into()
                ),
                AgentEvent::Finished {
                    is_error: true,
                    text: Some("exceeded retry limit, last status: 429 Too Many Requests".into())
                }
            ]
        );
        assert_eq!(
            codex_message(
                r#"{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"done"}}"#
            ),
            Some("done".into())
        );
    }
}
