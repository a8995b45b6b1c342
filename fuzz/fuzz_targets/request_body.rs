//! Client request bodies at the gateway: peeking at `model`/`stream` and rewriting `model`
//! must never panic, and a rewrite keeps the body valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_gateway::body::{peek, rewrite_model};

fuzz_target!(|data: &[u8]| {
    if peek(data).is_ok()
        && let Some(rewritten) = rewrite_model(data, "fuzz-model")
    {
        let value: serde_json::Value = serde_json::from_slice(&rewritten).expect("still JSON");
        assert_eq!(value["model"], "fuzz-model");
    }
});
