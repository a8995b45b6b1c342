//! Client request bodies at the gateway: peeking at `model`/`stream` and rewriting `model`
//! must never panic, the peeked model is the one serde_json reads, and a rewrite keeps the
//! body JSON with only its model changed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_gateway::body::{model_span, peek, rewrite_model};

fuzz_target!(|data: &[u8]| {
    // The borrowing peek reads the same model as a plain parse (escapes included).
    if let (Ok(peeked), Ok(value)) = (peek(data), serde_json::from_slice::<serde_json::Value>(data))
    {
        assert_eq!(peeked.model.as_deref(), value["model"].as_str());
    }
    if peek(data).is_ok()
        && let Some(rewritten) = rewrite_model(data, "fuzz-model")
    {
        // Syntax, not serde_json's number range: huge numbers are valid JSON the upstream
        // may take, and are forwarded untouched.
        let peeked = peek(&rewritten).expect("still JSON after the rewrite");
        assert_eq!(peeked.model.as_deref(), Some("fuzz-model"));
        let (before, after) = (model_span(data).unwrap(), model_span(&rewritten).unwrap());
        assert_eq!(data[..before.start], rewritten[..after.start]);
        assert_eq!(data[before.end..], rewritten[after.end..]);
    }
});
