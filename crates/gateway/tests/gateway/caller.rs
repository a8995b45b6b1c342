//! The caller's shape (#14 item 6, G10): rebound's own answers come in the caller's protocol,
//! and every request is logged once and counted by the surface that answered it.

use serde_json::Value;

use crate::{SIMPLE, chaos, gateway, openai_body, send};

const JSON: (&str, &str) = ("content-type", "application/json");
const ANTHROPIC: (&str, &str) = ("anthropic-version", "2023-06-01");

/// Only an OpenAI candidate: an Anthropic caller's unknown path has nowhere to go.
const OPENAI_ONLY: &str = r#"
[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{openai}"
api_key_env = "CANARY_KEY"

[[route]]
id = "main"
models = ["*"]
candidates = ["oa"]
"#;

/// A loopback port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

#[tokio::test]
async fn the_root_answers_200_to_head_and_get() {
    let chaos = chaos("ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    for method in ["HEAD", "GET"] {
        let reply = send(g.server.addr(), method, "/", &[], "").await;
        assert_eq!(reply.status, 200, "{method} /");
    }
    assert_eq!(chaos.attempts("default"), 0);
}

#[tokio::test]
async fn rebound_404s_come_in_the_callers_shape() {
    let chaos = chaos("ok").await;
    let g = gateway(OPENAI_ONLY, &chaos).await;
    let addr = g.server.addr();

    // An Anthropic caller's path with no Anthropic provider to pass it to.
    let reply = send(addr, "GET", "/v1/messages/batches", &[ANTHROPIC], "").await;
    assert_eq!(reply.status, 404);
    let body = json(&reply.body);
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "not_found_error", "{body}");

    // rebound's own namespace is never passed through: the shape follows the caller.
    let anthropic = send(addr, "GET", "/v1/rebound/nothing", &[ANTHROPIC], "").await;
    assert_eq!(anthropic.status, 404);
    assert_eq!(json(&anthropic.body)["type"], "error");
    let openai = send(addr, "GET", "/v1/rebound/nothing", &[], "").await;
    assert_eq!(openai.status, 404);
    let body = json(&openai.body);
    assert_eq!(body["error"]["type"], "not_found_error", "{body}");
    assert!(body.get("type").is_none(), "{body}");
    assert_eq!(chaos.attempts("default"), 0);
}

#[tokio::test]
async fn an_unknown_gateway_key_is_refused_in_the_callers_shape() {
    let chaos = chaos("ok").await;
    let config = format!("gateway_key_envs = [\"CANARY_KEY\"]\n{SIMPLE}");
    let g = gateway(&config, &chaos).await;
    let reply = send(
        g.server.addr(),
        "POST",
        "/v1/files",
        &[JSON, ("x-api-key", "not-the-key")],
        "{}",
    )
    .await;
    assert_eq!(reply.status, 401);
    let body = json(&reply.body);
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
}

#[tokio::test]
async fn an_anthropic_caller_lists_models_in_anthropics_shape() {
    let chaos = chaos("ok").await;
    // The Anthropic provider is down: the configured names answer, in Anthropic's shape.
    let config = format!(
        r#"
[[candidate]]
id = "an"
protocol = "anthropic"
base_url = "http://127.0.0.1:{}"

[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{{openai}}"

[[route]]
id = "claude"
models = ["claude-b", "claude-a", "claude-*"]
candidates = ["an"]

[[route]]
id = "gpt"
models = ["*"]
candidates = ["oa"]
"#,
        dead_port()
    );
    let g = gateway(&config, &chaos).await;
    let reply = send(g.server.addr(), "GET", "/v1/models", &[ANTHROPIC], "").await;
    assert_eq!(reply.status, 200);
    let body = json(&reply.body);
    assert_eq!(body["has_more"], false, "{body}");
    assert_eq!(body["first_id"], "claude-a", "{body}");
    assert_eq!(body["last_id"], "claude-b", "{body}");
    assert_eq!(body["data"][0]["type"], "model", "{body}");
    assert_eq!(body["data"][0]["id"], "claude-a", "{body}");
    assert_eq!(body["data"][0]["display_name"], "claude-a", "{body}");
    assert!(body["data"][0]["created_at"].is_string(), "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 2, "{body}");

    // An OpenAI caller still gets its provider's list.
    let openai = send(g.server.addr(), "GET", "/v1/models", &[], "").await;
    assert!(openai.text().contains("chaos-1"), "{}", openai.text());
}

#[tokio::test]
async fn every_request_is_logged_once_and_counted_by_its_surface() {
    let chaos = chaos("502, ok").await;
    let g = gateway(OPENAI_ONLY, &chaos).await;
    let addr = g.server.addr();
    g.post("/v1/chat/completions?trace=1", &openai_body(false))
        .await;
    send(addr, "POST", "/v1/completions", &[JSON], "{}").await;
    send(addr, "GET", "/v1/messages/batches", &[ANTHROPIC], "").await;
    let requests: Vec<String> = g
        .log
        .lines()
        .into_iter()
        .filter(|l| l.contains(" rebound::request: "))
        .collect();
    assert_eq!(
        requests,
        [
            " INFO rebound::request: method=POST path=/v1/chat/completions surface=chat_completions model=gpt-test status=200 attempts=2",
            " INFO rebound::request: method=POST path=/v1/completions surface=passthrough status=404 attempts=1",
            " INFO rebound::request: method=GET path=/v1/messages/batches surface=unserved status=404 attempts=0",
        ]
    );
    let metrics = g.server.gateway().metrics_text();
    for line in [
        "rebound_http_requests_total{surface=\"chat_completions\",status=\"2xx\"} 1",
        "rebound_http_requests_total{surface=\"passthrough\",status=\"4xx\"} 1",
        "rebound_http_requests_total{surface=\"unserved\",status=\"4xx\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line}:\n{metrics}"
        );
    }
}
