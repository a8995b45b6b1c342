//! Thinking and reasoning content in Anthropic Messages and Chat Completions.

use serde_json::{Value, json};

use crate::{chaos, post};

fn anthropic(stream: bool, thinking: bool) -> Value {
    let mut body = json!({"model": "claude-chaos", "max_tokens": 1024, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]});
    if thinking {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    }
    body
}

fn chat(stream: bool) -> Value {
    json!({"model": "gpt-chaos", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn a_request_that_asks_for_thinking_gets_a_thinking_block_first() {
    let chaos = chaos("ok").await;
    let reply = post(&chaos, "/v1/messages", &anthropic(true, true)).await;
    let events = reply.events();
    let shape: Vec<String> = events
        .iter()
        .map(|(_, d)| {
            let kind = d["type"].as_str().unwrap();
            match kind {
                "content_block_start" => {
                    format!("start {} {}", d["index"], d["content_block"]["type"])
                }
                "content_block_delta" => {
                    format!("{} {}", d["index"], d["delta"]["type"].as_str().unwrap())
                }
                "content_block_stop" => format!("stop {}", d["index"]),
                "message_delta" => format!("message_delta {}", d["delta"]["stop_reason"]),
                other => other.to_owned(),
            }
        })
        .collect();
    assert_eq!(
        shape,
        [
            "message_start",
            "start 0 \"thinking\"",
            "ping",
            "0 thinking_delta",
            "0 thinking_delta",
            "0 thinking_delta",
            "0 thinking_delta",
            "0 signature_delta",
            "stop 0",
            "start 1 \"text\"",
            "1 text_delta",
            "1 text_delta",
            "1 text_delta",
            "1 text_delta",
            "stop 1",
            "message_delta \"end_turn\"",
            "message_stop"
        ]
    );
    let thinking: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(thinking, "The user said: hi. I will answer briefly.");
    let whole = post(&chaos, "/v1/messages", &anthropic(false, true))
        .await
        .json();
    assert_eq!(whole["content"][0]["type"], "thinking");
    assert_eq!(whole["content"][0]["thinking"], thinking);
    assert!(whole["content"][0]["signature"].as_str().unwrap().len() > 16);
    assert_eq!(whole["content"][1]["type"], "text");
    let unasked = post(&chaos, "/v1/messages", &anthropic(false, false))
        .await
        .json();
    assert_eq!(unasked["content"][0]["type"], "text");
}

#[tokio::test]
async fn redacted_thinking_follows_the_thinking_block() {
    let chaos = chaos("ok+redacted-thinking, ok+redacted-thinking").await;
    let whole = post(&chaos, "/v1/messages", &anthropic(false, false))
        .await
        .json();
    let types: Vec<&str> = whole["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["thinking", "redacted_thinking", "text"]);
    let stream = post(&chaos, "/v1/messages", &anthropic(true, false)).await;
    let starts: Vec<Value> = stream
        .events()
        .into_iter()
        .filter(|(_, d)| d["type"] == "content_block_start")
        .map(|(_, d)| d["content_block"]["type"].clone())
        .collect();
    assert_eq!(
        starts,
        [json!("thinking"), json!("redacted_thinking"), json!("text")]
    );
    assert!(stream.body.contains(r#""data":"EmwKAhgBEgy"#));
}

#[tokio::test]
async fn a_reply_can_end_at_the_token_limit_with_only_thinking() {
    let chaos = chaos("thinking-only, thinking-only, thinking-only").await;
    let stream = post(&chaos, "/v1/messages", &anthropic(true, true)).await;
    assert!(!stream.broken);
    assert!(!stream.body.contains("text_delta"));
    assert!(stream.body.contains("thinking_delta"));
    let stop = stream
        .events()
        .into_iter()
        .find(|(_, d)| d["type"] == "message_delta")
        .unwrap();
    assert_eq!(stop.1["delta"]["stop_reason"], "max_tokens");
    let stream = post(&chaos, "/v1/chat/completions", &chat(true)).await;
    let events = stream.events();
    assert!(events.iter().all(|(_, d)| {
        d["choices"][0]["delta"]
            .get("content")
            .is_none_or(|c| c == "")
    }));
    let reasoning: String = events
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "The user said: hi. I will answer briefly.");
    assert_eq!(
        events[events.len() - 2].1["choices"][0]["finish_reason"],
        "length"
    );
    let whole = post(&chaos, "/v1/chat/completions", &chat(false))
        .await
        .json();
    assert_eq!(whole["choices"][0]["finish_reason"], "length");
    assert_eq!(whole["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(
        whole["choices"][0]["message"]["reasoning_content"],
        reasoning
    );
}

#[tokio::test]
async fn chat_reasoning_streams_before_text_and_faults_count_its_chunks() {
    let chaos = chaos("ok+thinking, cut-after-2+thinking").await;
    let stream = post(&chaos, "/v1/chat/completions", &chat(true)).await;
    let events = stream.events();
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|(_, d)| {
            let delta = &d["choices"][0]["delta"];
            if delta.get("reasoning_content").is_some() {
                Some("reasoning")
            } else if delta.get("content").is_some_and(|c| c != "") {
                Some("text")
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        kinds,
        ["reasoning"; 4]
            .iter()
            .chain(&["text"; 4])
            .copied()
            .collect::<Vec<_>>()
    );
    let cut = post(&chaos, "/v1/chat/completions", &chat(true)).await;
    assert!(cut.broken);
    assert_eq!(cut.body.matches("reasoning_content").count(), 2);
    let asked = json!({"model": "o-chaos", "reasoning_effort": "low", "messages": [{"role": "user", "content": "hi"}]});
    let whole = post(&chaos, "/v1/chat/completions", &asked).await.json();
    assert!(whole["choices"][0]["message"]["reasoning_content"].is_string());
}
