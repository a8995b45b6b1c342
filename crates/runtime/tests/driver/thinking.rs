//! Thinking is content (G9): it reaches the caller live, a reply of only thinking is an
//! answer, and tool calls are still read whole.

use rebound_core::Policy;
use rebound_runtime::{Event, Protocol};
use serde_json::json;

use crate::{body, chaos, count, ends, errors, provider, run, runtime, timeouts, visible_text};

fn reasoning(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Reasoning { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_reply_of_only_thinking_is_an_answer() {
    for protocol in [Protocol::Anthropic, Protocol::OpenAi] {
        let chaos = chaos("thinking-only, ok").await;
        let (runtime, _) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![provider(&chaos, protocol)]);
        let (result, events) = run(&mut turn, &body("hi"), true).await;
        let response = result.unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        assert!(response.text.is_empty(), "{protocol:?}");
        assert!(!response.reasoning.is_empty(), "{protocol:?}");
        assert_eq!(reasoning(&events), response.reasoning, "{protocol:?}: live");
        assert_eq!(chaos.attempts("default"), 1, "{protocol:?}: not retried");
        assert_eq!((errors(&events), ends(&events)), (0, 1));
    }
}

#[tokio::test]
async fn thinking_flows_live_and_a_replay_discards_it() {
    for protocol in [Protocol::Anthropic, Protocol::OpenAi] {
        let chaos = chaos("cut-after-1-chunks+thinking, ok+thinking").await;
        let (runtime, _) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![provider(&chaos, protocol)]);
        let (result, events) = run(&mut turn, &body("hi"), true).await;
        let response = result.unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        let first_reasoning = events
            .iter()
            .position(|e| matches!(e, Event::Reasoning { .. }))
            .expect("thinking reached the caller");
        let discard = events
            .iter()
            .position(|e| matches!(e, Event::Discard { .. }))
            .expect("the broken attempt's thinking is discarded");
        assert!(first_reasoning < discard, "{protocol:?}: {events:?}");
        assert!(!response.reasoning.is_empty());
        assert_eq!(visible_text(&events), response.text);
        assert_eq!(chaos.attempts("default"), 2, "{protocol:?}");
    }
}

#[tokio::test]
async fn tool_calls_are_read_with_their_names_and_arguments() {
    for protocol in [Protocol::Anthropic, Protocol::OpenAi] {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]});
        let mut request = body("weather?");
        request["tools"] = match protocol {
            Protocol::OpenAi => json!([{"type": "function",
                "function": {"name": "get_weather", "parameters": schema}}]),
            Protocol::Anthropic => json!([{"name": "get_weather", "input_schema": schema}]),
        };
        let chaos = chaos("ok+thinking+tool").await;
        let (runtime, _) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![provider(&chaos, protocol)]);
        let (result, events) = run(&mut turn, &request, true).await;
        let response = result.unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        assert_eq!(response.tool_calls.len(), 1, "{protocol:?}: {response:?}");
        let call = &response.tool_calls[0];
        assert_eq!(call.name, "get_weather");
        assert!(!call.id.is_empty());
        let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert!(arguments["city"].is_string(), "{protocol:?}: {arguments}");
        assert!(count(&events, |e| matches!(e, Event::Reasoning { .. })) > 0);
    }
}
