//! Token counting (G8): forwarded to the route of the body's `model`, with `rate_limit` and
//! `transient` failures retried.

use serde_json::Value;

use crate::{SIMPLE, anthropic_body, chaos, gateway, send};

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn count_tokens_is_retried_and_keeps_its_query_string() {
    let chaos = chaos("429, 529, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = send(
        g.server.addr(),
        "POST",
        "/v1/messages/count_tokens?beta=true",
        &[
            JSON,
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "token-counting-2024-11-01"),
        ],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-attempts"), "3");
    assert_eq!(reply.header("x-rebound-candidate"), "an");
    assert_eq!(reply.header("x-rebound-route-id"), "main");
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert!(body["input_tokens"].as_u64().unwrap() > 0, "{body}");
    let recorded = chaos.requests();
    assert_eq!(recorded.len(), 3);
    for r in &recorded {
        assert_eq!(r.path, "/v1/messages/count_tokens?beta=true");
        assert_eq!(
            r.header("anthropic-beta"),
            Some("token-counting-2024-11-01")
        );
    }
}

#[tokio::test]
async fn input_tokens_go_to_the_models_route_with_its_model() {
    let chaos = chaos("503, ok").await;
    let config = r#"
[[candidate]]
id = "mini"
protocol = "openai"
base_url = "{openai}"
model = "gpt-mini-2"

[[route]]
id = "minis"
models = ["mini"]
candidates = ["mini"]
"#;
    let g = gateway(config, &chaos).await;
    let reply = g
        .post(
            "/v1/responses/input_tokens",
            r#"{"model":"mini","input":"count me"}"#,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-route-id"), "minis");
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["object"], "response.input_tokens", "{body}");
    let recorded = chaos.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1].path, "/v1/responses/input_tokens");
    assert_eq!(
        &recorded[1].body[..],
        br#"{"model":"gpt-mini-2","input":"count me"}"#
    );

    // A model no route serves: a 404 in the caller's shape, nothing sent.
    let unrouted = g
        .post("/v1/responses/input_tokens", r#"{"model":"other"}"#)
        .await;
    assert_eq!(unrouted.status, 404);
    assert_eq!(chaos.requests().len(), 2);
}

#[tokio::test]
async fn an_exhausted_count_ends_with_the_providers_error() {
    let chaos = chaos("400").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = send(
        g.server.addr(),
        "POST",
        "/v1/messages/count_tokens",
        &[JSON],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(chaos.attempts("default"), 1);
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["type"], "error", "Anthropic's own shape: {body}");
    assert_eq!(body["rebound"]["reason"], "terminal", "{body}");
    assert_eq!(reply.header("x-should-retry"), "false");
}
