//! The driver speaking the Responses API: answers, streams, recovery before and after
//! content, tool calls and reasoning read from its events (G7, G9).

use rebound_core::Policy;
use rebound_runtime::{Api, Event, Protocol, Provider};
use serde_json::json;

use crate::{chaos, ends, errors, provider, run, runtime, timeouts, visible_text};

const FULL: &str = "Hello from rebound chaos. You said: hi";

fn responses(chaos: &rebound_chaos::Chaos) -> Provider {
    Provider {
        api: Api::Responses,
        ..provider(chaos, Protocol::OpenAi)
    }
}

#[tokio::test]
async fn answers_and_streams_recover_like_chat_completions() {
    for (script, stream, attempts) in [
        ("500, ok", false, 2),
        (
            "error-after-0:server_error, error-event-after-0:rate_limit_error, ok",
            true,
            3,
        ),
        ("cut-after-2-chunks, ok", true, 2),
    ] {
        let chaos = chaos(script).await;
        let (runtime, _) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![responses(&chaos)]);
        let (result, events) = run(&mut turn, &json!({"input": "hi"}), stream).await;
        let response = result.unwrap_or_else(|e| panic!("{script}: {e}"));
        assert_eq!(response.text, FULL, "{script}");
        assert_eq!(response.stop_reason.as_deref(), Some("completed"));
        if stream {
            assert_eq!(visible_text(&events), FULL, "{script}");
        }
        assert_eq!(chaos.attempts("default"), attempts, "{script}");
        assert_eq!((errors(&events), ends(&events)), (0, 1), "{script}");
    }
}

#[tokio::test]
async fn tool_calls_and_reasoning_are_read_from_the_events() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"]});
    let request = json!({"input": "weather?", "reasoning": {"summary": "auto"},
        "tools": [{"type": "function", "name": "get_weather", "parameters": schema}]});
    for stream in [true, false] {
        let chaos = chaos("ok+thinking+tool").await;
        let (runtime, _) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![responses(&chaos)]);
        let (result, events) = run(&mut turn, &request, stream).await;
        let response = result.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.tool_calls.len(), 1, "{response:?}");
        let call = &response.tool_calls[0];
        assert_eq!(call.name, "get_weather");
        assert!(call.id.starts_with("call_"), "{call:?}");
        let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert!(arguments["city"].is_string(), "{arguments}");
        assert!(!response.reasoning.is_empty(), "stream: {stream}");
        if stream {
            assert!(events.iter().any(|e| matches!(e, Event::Reasoning { .. })));
        }
    }
}

#[tokio::test]
async fn an_incomplete_response_of_only_reasoning_is_an_answer() {
    let chaos = chaos("thinking-only, ok").await;
    let (runtime, _) = runtime(Policy::interactive(), timeouts());
    let mut turn = runtime.session(vec![responses(&chaos)]);
    let (result, _) = run(&mut turn, &json!({"input": "hi"}), true).await;
    let response = result.unwrap_or_else(|e| panic!("{e}"));
    assert!(response.text.is_empty());
    assert!(!response.reasoning.is_empty());
    assert_eq!(response.stop_reason.as_deref(), Some("max_output_tokens"));
    assert_eq!(chaos.attempts("default"), 1);
}
