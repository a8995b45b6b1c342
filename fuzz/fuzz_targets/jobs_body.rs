//! Jobs API bodies: submissions and manual actions. Never a panic; an accepted submission is
//! an object with a string `model` that does not stream, kept byte for byte, and stays
//! accepted (with the same bytes) once embedded in a new submission.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_gateway::body::peek;
use rebound_gateway::jobs::{parse_manual_action, parse_submission};
use rebound_runtime::Protocol;

fuzz_target!(|data: &[u8]| {
    if let Ok(submission) = parse_submission(data) {
        let request = submission.request.as_str();
        assert!(request.starts_with('{'));
        let peeked = peek(request.as_bytes()).expect("the kept request is JSON");
        assert_eq!(peeked.model.as_deref(), Some(submission.model.as_str()));
        assert_ne!(peeked.stream, Some(true));
        let protocol = match submission.protocol {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
        };
        let route = serde_json::to_string(&submission.route).expect("a string or null");
        let again =
            format!(r#"{{"protocol":"{protocol}","route":{route},"request":{request}}}"#);
        let again = parse_submission(again.as_bytes()).expect("re-embedded, accepted");
        assert_eq!(again.request, submission.request);
        assert_eq!(again.model, submission.model);
    }
    let _ = parse_manual_action(data);
});
