//! Tool calls whose arguments satisfy the tool's schema, once per conversation.

use serde_json::{Value, json};

use crate::{chaos, post};

fn schema() -> Value {
    json!({"type": "object", "required": ["command", "timeout", "flags", "mode", "env"],
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "mode": {"type": "string", "enum": ["run", "check"]},
            "env": {"type": "object", "required": ["home"], "properties": {"home": {"type": "string"}}},
            "ignored": {"type": "integer"}}})
}

fn expected() -> Value {
    json!({"command": "chaos", "timeout": 1.0, "flags": [true], "mode": "run", "env": {"home": "chaos"}})
}

#[tokio::test]
async fn chat_completions_arguments_satisfy_the_schema_streamed_or_whole() {
    let chaos = chaos("ok, ok").await;
    let body = |stream: bool| {
        json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "run it"}],
            "tools": [{"type": "function", "function": {"name": "shell", "parameters": schema()}}]})
    };
    let whole = post(&chaos, "/v1/chat/completions", &body(false))
        .await
        .json();
    let call = &whole["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "shell");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        expected()
    );
    let stream = post(&chaos, "/v1/chat/completions", &body(true)).await;
    let arguments: String = stream
        .events()
        .iter()
        .filter_map(|(_, d)| {
            d["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        expected()
    );
}

#[tokio::test]
async fn anthropic_skips_server_tools_and_streams_input_json() {
    let chaos = chaos("ok, ok+tool:Other, ok+text").await;
    let body = json!({"model": "m", "max_tokens": 100, "stream": true,
        "messages": [{"role": "user", "content": "run it"}],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1},
                  {"name": "Bash", "input_schema": schema()},
                  {"name": "Other", "input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 5}}}}]});
    let stream = post(&chaos, "/v1/messages", &body).await;
    let events = stream.events();
    let start = events
        .iter()
        .find(|(_, d)| d["type"] == "content_block_start")
        .unwrap();
    assert_eq!(start.1["content_block"]["name"], "Bash");
    let input: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), expected());
    assert!(stream.body.contains(r#""stop_reason":"tool_use""#));
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let named = post(&chaos, "/v1/messages", &whole).await.json();
    assert_eq!(named["content"][0]["name"], "Other");
    assert_eq!(named["content"][0]["input"], json!({"n": 5}));
    let text = post(&chaos, "/v1/messages", &whole).await.json();
    assert_eq!(text["content"][0]["type"], "text");
}

#[tokio::test]
async fn after_a_tool_result_the_reply_is_text_so_agents_stop() {
    let chaos = chaos("").await;
    let tools = json!([{"name": "Bash", "input_schema": schema()}]);
    let mut messages = vec![json!({"role": "user", "content": "run it"})];
    let mut calls = 0;
    let text = loop {
        let body = json!({"model": "m", "max_tokens": 100, "tools": tools, "messages": messages});
        let reply = post(&chaos, "/v1/messages", &body).await.json();
        let block = reply["content"][0].clone();
        if block["type"] != "tool_use" {
            break block["text"].clone();
        }
        calls += 1;
        assert!(calls < 3, "a tool loop");
        messages.push(json!({"role": "assistant", "content": [block.clone()]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": block["id"], "content": "exit 127"}]}));
    };
    assert_eq!(calls, 1);
    assert_eq!(text, "The tool answered: exit 127. Done.");
    assert_eq!(chaos.attempts("k"), 2);
}

#[tokio::test]
async fn the_reply_mode_picks_the_tool_for_steps_without_modifiers() {
    let chaos = chaos("ok, cut-after-0, ok+text").await;
    chaos.set_reply(rebound_chaos::parse_modifiers("tool:Read").unwrap());
    let body = json!({"model": "m", "max_tokens": 100,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>context</system-reminder>"},
            {"type": "text", "text": "read the file"}]}],
        "tools": [{"name": "Agent", "input_schema": {"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}},
                  {"name": "Read", "input_schema": {"type": "object", "required": ["file_path"], "properties": {"file_path": {"type": "string"}}}}]});
    let first = post(&chaos, "/v1/messages", &body).await.json();
    assert_eq!(first["content"][0]["name"], "Read");
    assert_eq!(first["content"][0]["input"], json!({"file_path": "chaos"}));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    assert!(post(&chaos, "/v1/messages", &streamed).await.broken);
    let text = post(&chaos, "/v1/messages", &body).await.json();
    assert_eq!(
        text["content"][0]["text"],
        "Hello from rebound chaos. You said: read the file"
    );
    // Past the script's end, the reply mode still holds.
    assert_eq!(
        post(&chaos, "/v1/messages", &body).await.json()["content"][0]["name"],
        "Read"
    );
    chaos.set_reply(rebound_chaos::Modifiers::default());
    assert_eq!(
        post(&chaos, "/v1/messages", &body).await.json()["content"][0]["name"],
        "Agent"
    );
}
