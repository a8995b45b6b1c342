//! The control endpoints under `/chaos/`: attempt counters, scripts, recorded requests.
//! They are neither counted nor recorded.

use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::script::parse_script;
use crate::state::State;
use crate::stream::{Body, json_response};

/// Header values `GET /chaos/requests` does not show.
const SECRET_HEADERS: [&str; 4] = [
    "authorization",
    "x-api-key",
    "cookie",
    "proxy-authorization",
];

/// Answers a control request, or `None` when `path` is not one.
pub(crate) fn answer(
    state: &State,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Option<Response<Body>> {
    let lock = || {
        state
            .counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    Some(match (method, path) {
        (&Method::GET, "/chaos/attempts") => json_response(StatusCode::OK, &json!(lock().attempts)),
        (&Method::POST, "/chaos/reset") => {
            let mut counters = lock();
            counters.attempts.clear();
            counters.outages.clear();
            counters.scripts = state.config.scripts.clone();
            state
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
            json_response(StatusCode::OK, &json!({"reset": true}))
        }
        (&Method::POST, "/chaos/scripts") => set_scripts(state, body),
        (&Method::GET, "/chaos/requests") => {
            let requests = state
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let shown: Vec<Value> = requests
                .iter()
                .map(|r| {
                    let headers: Vec<Value> = r
                        .headers
                        .iter()
                        .map(|(n, v)| {
                            let v = if SECRET_HEADERS.contains(&n.as_str()) { "[redacted]" } else { v };
                            json!([n, v])
                        })
                        .collect();
                    json!({"method": r.method, "path": r.path, "headers": headers, "body_len": r.body_len()})
                })
                .collect();
            json_response(StatusCode::OK, &json!(shown))
        }
        _ => return None,
    })
}

fn set_scripts(state: &State, body: &[u8]) -> Response<Body> {
    let bad = |message: String| {
        json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": message}}),
        )
    };
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return bad("expected a JSON object of key: \"step, step, …\"".into());
    };
    let mut parsed = Vec::new();
    for (key, script) in map {
        let Some(script) = script.as_str() else {
            return bad(format!("script of `{key}` is not a string"));
        };
        match parse_script(script) {
            Ok(steps) => parsed.push((key, steps)),
            Err(e) => return bad(format!("script of `{key}`: {e}")),
        }
    }
    let mut counters = state
        .counters
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (key, steps) in parsed {
        counters.restart(&key);
        counters.scripts.insert(key, steps);
    }
    json_response(StatusCode::OK, &json!({"scripts": counters.scripts.len()}))
}
