//! The deterministic fake model: what it answers to a conversation, in any of the three APIs.
//!
//! It answers with text that names the last user message. When the request offers tools and
//! the conversation holds no tool result yet, it calls one tool, with arguments that satisfy
//! the tool's JSON schema ([`crate::schema`]); once a tool result is in the conversation it
//! answers with text, so an agent never loops on tool calls. When the request asks for
//! thinking (Anthropic `thinking`, Responses `reasoning`, Chat Completions `reasoning_effort`)
//! or the step says `+thinking`, the reply starts with thinking. The same request always gets
//! the same answer, so tests can compare bytes.

use serde_json::{Value, json};

use crate::schema;
use crate::script::{Modifiers, ToolChoice};

/// Which protocol family a request speaks: it picks error shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI (Chat Completions and Responses).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// Which API a model request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    ChatCompletions,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses,
    /// Anthropic Messages, `POST /v1/messages`.
    Messages,
}

impl Api {
    /// The protocol family of the API.
    pub fn protocol(self) -> Protocol {
        match self {
            Api::ChatCompletions | Api::Responses => Protocol::OpenAi,
            Api::Messages => Protocol::Anthropic,
        }
    }
}

/// The thinking a reply starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thinking {
    /// The thinking text, streamed in these chunks (empty when a Responses request asked for
    /// reasoning without a summary).
    pub chunks: Vec<String>,
    /// The Anthropic `signature` / Responses `encrypted_content` of the thinking.
    pub signature: String,
    /// Whether an Anthropic `redacted_thinking` block follows the thinking block.
    pub redacted: bool,
}

/// What follows the thinking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Text, streamed in these chunks.
    Text(Vec<String>),
    /// A call of a tool with these JSON arguments.
    ToolCall {
        /// The tool's name.
        name: String,
        /// The arguments, as JSON text.
        arguments: String,
    },
    /// Nothing: the reply ran out of tokens while thinking.
    Truncated,
}

/// What the model says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Thinking first, when asked for.
    pub thinking: Option<Thinking>,
    /// Then the answer.
    pub answer: Answer,
}

impl Reply {
    /// A text-only reply (used for tests and plain endpoints).
    pub fn text(text: &str) -> Reply {
        Reply {
            thinking: None,
            answer: Answer::Text(chunks(text)),
        }
    }

    /// The text of the answer, when it is text.
    pub fn answer_text(&self) -> Option<String> {
        match &self.answer {
            Answer::Text(chunks) => Some(chunks.concat()),
            _ => None,
        }
    }

    /// The thinking text.
    pub fn thinking_text(&self) -> Option<String> {
        self.thinking.as_ref().map(|t| t.chunks.concat())
    }
}

/// The text of a message's content: a string, or the text of its parts.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| {
                p.get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| p.get("content").map(text_of))
                    .or_else(|| p.get("output").map(text_of))
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// What a user said in a message: its last text part. Agents put reminders and context in
/// earlier parts (Claude Code's `<system-reminder>`s) and the prompt last.
fn said_in(content: &Value) -> String {
    match content {
        Value::Array(parts) => parts
            .iter()
            .rev()
            .find_map(|p| p.get("text").and_then(Value::as_str))
            .map(str::to_owned)
            .unwrap_or_default(),
        other => text_of(other),
    }
}

/// A tool the request offers: its name and its JSON schema.
#[derive(Clone, Debug, PartialEq)]
struct Tool {
    name: String,
    schema: Value,
}

/// What the model reads of a request.
#[derive(Debug, Default)]
struct Conversation {
    last_user_text: String,
    last_tool_result: Option<String>,
    /// Whether the conversation ends with a tool result (not a user message after it).
    ends_with_tool_result: bool,
    tools: Vec<Tool>,
    wants_thinking: bool,
    /// Responses: whether reasoning comes with a summary (streamed text).
    summary: bool,
}

fn is_user(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("user")
}

fn conversation(api: Api, request: &Value) -> Conversation {
    let empty = Vec::new();
    let array = |name: &str| {
        request
            .get(name)
            .and_then(Value::as_array)
            .unwrap_or(&empty)
    };
    let mut conversation = Conversation::default();
    match api {
        Api::ChatCompletions => {
            for message in array("messages") {
                match message.get("role").and_then(Value::as_str) {
                    Some("tool") => {
                        conversation.ends_with_tool_result = true;
                        conversation.last_tool_result =
                            Some(message.get("content").map(text_of).unwrap_or_default());
                    }
                    Some("user") => {
                        conversation.ends_with_tool_result = false;
                        conversation.last_user_text =
                            message.get("content").map(said_in).unwrap_or_default();
                    }
                    _ => {}
                }
            }
            conversation.tools = array("tools")
                .iter()
                .filter(|t| {
                    t.get("type").and_then(Value::as_str).unwrap_or("function") == "function"
                })
                .filter_map(|t| tool(t.get("function")?, "parameters"))
                .collect();
            conversation.wants_thinking = request.get("reasoning_effort").is_some();
        }
        Api::Messages => {
            for message in array("messages").iter().filter(|m| is_user(m)) {
                let results: Vec<&Value> = message
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .filter(|p| {
                                p.get("type").and_then(Value::as_str) == Some("tool_result")
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(last) = results.last() {
                    conversation.ends_with_tool_result = true;
                    conversation.last_tool_result =
                        Some(last.get("content").map(text_of).unwrap_or_default());
                } else {
                    conversation.ends_with_tool_result = false;
                    conversation.last_user_text =
                        message.get("content").map(said_in).unwrap_or_default();
                }
            }
            // Server tools (`web_search_…`, `bash_…`) have a type of their own and no schema.
            conversation.tools = array("tools")
                .iter()
                .filter(|t| t.get("type").and_then(Value::as_str).unwrap_or("custom") == "custom")
                .filter_map(|t| tool(t, "input_schema"))
                .collect();
            conversation.wants_thinking = matches!(
                request.pointer("/thinking/type").and_then(Value::as_str),
                Some("enabled" | "adaptive")
            );
        }
        Api::Responses => {
            match request.get("input") {
                Some(Value::String(text)) => conversation.last_user_text = text.clone(),
                Some(Value::Array(items)) => {
                    for item in items {
                        match item.get("type").and_then(Value::as_str) {
                            Some("function_call_output" | "custom_tool_call_output") => {
                                conversation.ends_with_tool_result = true;
                                conversation.last_tool_result =
                                    Some(item.get("output").map(text_of).unwrap_or_default());
                            }
                            Some("message") | None if is_user(item) => {
                                conversation.ends_with_tool_result = false;
                                conversation.last_user_text =
                                    item.get("content").map(said_in).unwrap_or_default();
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            conversation.tools = array("tools")
                .iter()
                .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
                .filter_map(|t| tool(t, "parameters"))
                .collect();
            let reasoning = request.get("reasoning").filter(|r| !r.is_null());
            conversation.wants_thinking = reasoning.is_some();
            conversation.summary = reasoning
                .and_then(|r| r.get("summary"))
                .is_some_and(|s| !s.is_null());
        }
    }
    conversation
}

fn tool(definition: &Value, schema_field: &str) -> Option<Tool> {
    Some(Tool {
        name: definition.get("name")?.as_str()?.to_owned(),
        // `parameters` is optional in OpenAI's APIs: a tool without it takes no arguments.
        schema: definition
            .get(schema_field)
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
    })
}

/// Splits text into chunks of at least 8 bytes, at spaces.
pub fn chunks(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    for word in text.split_inclusive(' ') {
        current.push_str(word);
        if current.len() >= 8 {
            chunks.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// The model's reply to a request body. `thinking_only` is the `thinking-only` step.
pub fn reply(api: Api, request: &Value, modifiers: &Modifiers, thinking_only: bool) -> Reply {
    let conversation = conversation(api, request);
    let said: String = conversation.last_user_text.chars().take(200).collect();
    let thinking =
        (conversation.wants_thinking || modifiers.thinking || thinking_only).then(|| {
            let text = format!(
                "The user said: {}. I will answer briefly.",
                said.trim_end_matches('.')
            );
            // A Responses request that asks for reasoning without a summary sees no reasoning text.
            let streamed = api != Api::Responses
                || conversation.summary
                || modifiers.thinking
                || thinking_only;
            Thinking {
                signature: signature(&text),
                chunks: if streamed { chunks(&text) } else { Vec::new() },
                redacted: modifiers.redacted_thinking && api == Api::Messages,
            }
        });
    if thinking_only {
        return Reply {
            thinking,
            answer: Answer::Truncated,
        };
    }
    let tool = match (&modifiers.tool, &conversation.last_tool_result) {
        (_, Some(_)) | (ToolChoice::Text, _) => None,
        (ToolChoice::Auto, None) => conversation.tools.first(),
        (ToolChoice::Named(name), None) => conversation.tools.iter().find(|t| &t.name == name),
    };
    let answer = if let Some(tool) = tool {
        Answer::ToolCall {
            name: tool.name.clone(),
            arguments: schema::example(&tool.schema).to_string(),
        }
    } else if let (true, Some(result)) = (
        conversation.ends_with_tool_result,
        &conversation.last_tool_result,
    ) {
        let result: String = result.chars().take(200).collect();
        Answer::Text(chunks(&format!(
            "The tool answered: {}. Done.",
            result.trim_end_matches('.')
        )))
    } else {
        Answer::Text(chunks(&format!(
            "Hello from rebound chaos. You said: {said}"
        )))
    };
    Reply { thinking, answer }
}

/// A deterministic opaque string standing for a thinking signature or encrypted reasoning.
fn signature(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("Q2hhb3M{hash:016x}c2lnbmF0dXJl")
}

/// Usage figures a reply reports: `(input, output)` tokens.
pub fn usage(reply: &Reply) -> (usize, usize) {
    let thinking = reply.thinking.as_ref().map_or(0, |t| t.chunks.len());
    let answer = match &reply.answer {
        Answer::Text(chunks) => chunks.len(),
        Answer::ToolCall { .. } => 2,
        Answer::Truncated => 0,
    };
    (12, thinking + answer)
}

/// A token count for a counting request: one token per four bytes of the body, at least one.
pub fn count_tokens(body: &[u8]) -> usize {
    body.len().div_ceil(4).max(1)
}

/// The `created` timestamp every answer carries.
pub const CREATED: u64 = 1_796_050_800;

/// The model list, in the caller's protocol shape.
pub fn models(protocol: Protocol) -> Value {
    match protocol {
        Protocol::OpenAi => json!({"object": "list", "data": [
            {"id": "chaos-1", "object": "model", "created": 0, "owned_by": "rebound-chaos"}]}),
        Protocol::Anthropic => json!({"data": [
            {"type": "model", "id": "chaos-1", "display_name": "Chaos 1", "created_at": "2026-01-01T00:00:00Z"}],
            "has_more": false, "first_id": "chaos-1", "last_id": "chaos-1"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(api: Api, request: &Value) -> Reply {
        reply(api, request, &Modifiers::default(), false)
    }

    #[test]
    fn the_same_request_gets_the_same_reply() {
        let req = json!({"model": "m", "messages": [{"role": "user", "content": "hi there"}]});
        assert_eq!(
            plain(Api::ChatCompletions, &req),
            plain(Api::ChatCompletions, &req)
        );
        let Answer::Text(chunks) = plain(Api::ChatCompletions, &req).answer else {
            panic!()
        };
        assert_eq!(
            chunks.concat(),
            "Hello from rebound chaos. You said: hi there"
        );
        assert!(chunks.len() >= 3);
    }

    #[test]
    fn tools_are_called_once_then_answered() {
        let req = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "clock"}}],
            "messages": [{"role": "user", "content": "what time"}]});
        assert!(
            matches!(plain(Api::ChatCompletions, &req).answer, Answer::ToolCall { ref name, .. } if name == "clock")
        );
        let after = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "clock", "parameters": {}}}],
            "messages": [{"role": "user", "content": "what time"}, {"role": "tool", "tool_call_id": "c", "content": "noon"},
                         {"role": "user", "content": "and now?"}]});
        assert_eq!(
            plain(Api::ChatCompletions, &after).answer_text().as_deref(),
            Some("Hello from rebound chaos. You said: and now?")
        );
        let anthropic = json!({"model": "m", "tools": [{"name": "clock", "input_schema": {}}],
            "messages": [{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "noon"}]}]});
        assert_eq!(
            plain(Api::Messages, &anthropic).answer_text().as_deref(),
            Some("The tool answered: noon. Done.")
        );
        let responses = json!({"model": "m", "tools": [{"type": "function", "name": "clock", "parameters": {}}],
            "input": [{"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c", "output": "noon"}]});
        assert_eq!(
            plain(Api::Responses, &responses).answer_text().as_deref(),
            Some("The tool answered: noon. Done.")
        );
    }

    #[test]
    fn thinking_when_asked() {
        let req = json!({"model": "m", "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "hi"}]});
        let r = plain(Api::Messages, &req);
        assert_eq!(
            r.thinking_text().as_deref(),
            Some("The user said: hi. I will answer briefly.")
        );
        let no = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert!(plain(Api::Messages, &no).thinking.is_none());
        let only = reply(Api::ChatCompletions, &no, &Modifiers::default(), true);
        assert!(only.thinking.is_some() && only.answer == Answer::Truncated);
        let silent = json!({"model": "m", "reasoning": {"effort": "low"}, "input": "hi"});
        let r = plain(Api::Responses, &silent);
        assert!(r.thinking.as_ref().is_some_and(|t| t.chunks.is_empty()));
    }
}
