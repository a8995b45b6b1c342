//! Jobs API bodies: submissions and manual actions. Never a panic; an accepted submission is
//! an object with a string `model` that does not stream, and stays accepted once re-encoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_gateway::jobs::{parse_manual_action, parse_submission};
use rebound_runtime::Protocol;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    if let Ok(submission) = parse_submission(data) {
        let request = &submission.request;
        assert!(request.is_object());
        assert_eq!(
            request.get("model").and_then(Value::as_str),
            Some(submission.model.as_str())
        );
        assert_ne!(request.get("stream").and_then(Value::as_bool), Some(true));
        let protocol = match submission.protocol {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
        };
        let again = json!({"protocol": protocol, "route": submission.route, "request": request});
        let again = parse_submission(again.to_string().as_bytes()).expect("re-encoded, accepted");
        assert_eq!(again.model, submission.model);
        assert_eq!(&again.request, request);
    }
    let _ = parse_manual_action(data);
});
