//! Pass-through (G8): a path rebound does not serve goes byte for byte to the caller's provider,
//! with `rate_limit` and `transient` failures retried before the first response byte.

use rebound_chaos::KEY_HEADER;
use serde_json::Value;

use crate::{CANARY, chaos, direct, gateway, openai_body, send};

const JSON: (&str, &str) = ("content-type", "application/json");

/// An OpenAI provider whose base URL makes `/v1/completions` land on chaos's scripted
/// `/v1/chat/completions`: a path rebound does not serve, answered with a stream.
const SCRIPTED: &str = r#"
[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{openai}/chat"
api_key_env = "CANARY_KEY"
policy = { transient = { retries = 2 } }

[[route]]
id = "main"
models = ["*"]
candidates = ["oa"]
"#;

/// Both providers at one chaos, with two retries of `transient` failures.
const ECHOED: &str = r#"
[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{openai}"
api_key_env = "CANARY_KEY"
policy = { transient = { retries = 2 } }

[[candidate]]
id = "an"
protocol = "anthropic"
base_url = "{anthropic}"
api_key_env = "CANARY_KEY"

[[route]]
id = "main"
models = ["*"]
candidates = ["oa", "an"]
"#;

#[tokio::test]
async fn a_429_is_retried_before_the_first_byte_and_the_answer_relayed_byte_for_byte() {
    let chaos = chaos("429, ok").await;
    let g = gateway(ECHOED, &chaos).await;
    let body = "{\"purpose\": \"batch\",  \"bytes\": [1, 2]}";
    let reply = send(
        g.server.addr(),
        "PUT",
        "/chaos/echo/files?limit=2&order=asc",
        &[JSON],
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), body);
    assert_eq!(reply.header("x-chaos-echo-method"), "PUT");
    assert_eq!(
        reply.header("x-chaos-echo-path"),
        "/chaos/echo/files?limit=2&order=asc"
    );
    assert_eq!(reply.header("x-rebound-attempts"), "2");
    assert_eq!(reply.header("x-rebound-route-id"), "passthrough");
    assert_eq!(chaos.attempts("default"), 2);
}

#[tokio::test]
async fn headers_query_and_body_reach_the_provider_as_sent() {
    let chaos = chaos("ok").await;
    let g = gateway(ECHOED, &chaos).await;
    let body = b"\x00\x01 not json \xff";
    let headers = [
        ("anthropic-version", "2023-06-01"),
        (
            "anthropic-beta",
            "files-api-2025-04-14,interleaved-thinking-2025-05-14",
        ),
        ("x-claude-code-session-id", "5f0e4c1e-session"),
        ("content-type", "application/octet-stream"),
        ("x-rebound-replay", "restart"),
    ];
    let client = rebound_runtime::HttpClient::new(crate::timeouts()).unwrap();
    let mut request = http::Request::post(format!(
        "http://{}/v1/files/upload?purpose=batch&x=%20y",
        g.server.addr()
    ));
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = client
        .send(request.body(bytes::Bytes::from_static(body)).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "chaos has no /v1/files");
    let recorded = chaos.requests();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let recorded = &recorded[0];
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/v1/files/upload?purpose=batch&x=%20y");
    assert_eq!(&recorded.body[..], body);
    for (name, value) in &headers[..4] {
        assert_eq!(recorded.header(name), Some(*value), "{name}");
    }
    // rebound's own headers stay with rebound; the configured key replaces the client's.
    assert_eq!(recorded.header("x-rebound-replay"), None);
    assert_eq!(recorded.header("x-api-key"), Some(CANARY));
}

#[tokio::test]
async fn an_openai_callers_headers_go_to_the_openai_provider() {
    let chaos = chaos("ok").await;
    let g = gateway(ECHOED, &chaos).await;
    let reply = send(
        g.server.addr(),
        "DELETE",
        "/v1/files/file-abc",
        &[
            ("openai-organization", "org-rebound"),
            ("openai-project", "proj_1"),
            ("authorization", "Bearer sk-client"),
        ],
        "",
    )
    .await;
    assert_eq!(reply.status, 404);
    let recorded = &chaos.requests()[0];
    assert_eq!(recorded.method, "DELETE");
    assert_eq!(recorded.path, "/v1/files/file-abc");
    assert_eq!(recorded.header("openai-organization"), Some("org-rebound"));
    assert_eq!(recorded.header("openai-project"), Some("proj_1"));
    assert_eq!(
        recorded.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert_eq!(recorded.header("anthropic-version"), None);
}

#[tokio::test]
async fn any_other_error_is_the_providers_answer_at_once() {
    let chaos = chaos("400, ok").await;
    let g = gateway(ECHOED, &chaos).await;
    let reply = send(g.server.addr(), "POST", "/chaos/echo", &[JSON], "{}").await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 1);
    assert_eq!(reply.header("x-should-retry"), "false");
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert!(
        body["error"].is_object(),
        "the provider's own error: {body}"
    );
    assert_eq!(body["rebound"]["reason"], "terminal", "{body}");
}

#[tokio::test]
async fn spent_retries_end_with_the_last_error_and_x_should_retry_false() {
    let chaos = chaos("503, 503, 503, ok").await;
    let g = gateway(ECHOED, &chaos).await;
    let reply = send(g.server.addr(), "POST", "/chaos/echo", &[JSON], "{}").await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    // The policy's two retries: three attempts, then the upstream's error.
    assert_eq!(chaos.attempts("default"), 3);
    assert_eq!(reply.header("x-rebound-attempts"), "3");
    assert_eq!(reply.header("x-should-retry"), "false");
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["rebound"]["reason"], "exhausted", "{body}");
}

#[tokio::test]
async fn a_stream_is_relayed_as_it_arrives_after_a_reset_connection() {
    let chaos = chaos("reset, ok").await;
    let g = gateway(SCRIPTED, &chaos).await;
    let reply = g.post("/v1/completions", &openai_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(
        reply.body,
        direct("/v1/chat/completions", &openai_body(true)).await
    );
}

#[tokio::test]
async fn the_caller_picks_the_provider_and_its_headers_go_along() {
    // Two upstreams: the OpenAI provider and the Anthropic one. Each counts the requests
    // made to it under the `x-chaos-key` header's value.
    let openai = chaos("ok").await;
    let anthropic = chaos("ok").await;
    let config = format!(
        r#"
[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{}"

[[candidate]]
id = "an"
protocol = "anthropic"
base_url = "{}"

[[route]]
id = "main"
models = ["*"]
candidates = ["oa", "an"]
"#,
        openai.openai_base_url(),
        anthropic.anthropic_base_url()
    );
    let g = gateway(&config, &openai).await;
    let addr = g.server.addr();
    let to_anthropic = send(
        addr,
        "POST",
        "/v1/messages?beta=true",
        &[
            JSON,
            ("anthropic-version", "2023-06-01"),
            (KEY_HEADER, "claude-code"),
        ],
        &crate::anthropic_body(false),
    )
    .await;
    assert_eq!(to_anthropic.status, 200, "{}", to_anthropic.text());
    let to_openai = send(
        addr,
        "POST",
        "/v1/chat/completions?trace=1",
        &[JSON, (KEY_HEADER, "codex")],
        &openai_body(false),
    )
    .await;
    assert_eq!(to_openai.status, 200, "{}", to_openai.text());
    assert_eq!(anthropic.attempts("claude-code"), 1);
    assert_eq!(openai.attempts("codex"), 1);
    // Served paths keep their query strings too (Claude Code sends `?beta=true`).
    assert_eq!(anthropic.requests()[0].path, "/v1/messages?beta=true");
    assert_eq!(openai.requests()[0].path, "/v1/chat/completions?trace=1");

    // A path outside `/v1`, passed through: each caller reads its own provider's counters.
    let anthropic_counts = send(
        addr,
        "GET",
        "/chaos/attempts",
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    assert_eq!(anthropic_counts.status, 200);
    let counts: Value = serde_json::from_slice(&anthropic_counts.body).unwrap();
    assert_eq!(counts["claude-code"], 1, "{counts}");
    assert!(counts.get("codex").is_none(), "{counts}");
    let openai_counts = send(addr, "GET", "/chaos/attempts", &[], "").await;
    let counts: Value = serde_json::from_slice(&openai_counts.body).unwrap();
    assert_eq!(counts["codex"], 1, "{counts}");
    assert!(counts.get("claude-code").is_none(), "{counts}");
}

#[tokio::test]
async fn keys_never_leak_from_a_passed_through_request() {
    let chaos = chaos("ok").await;
    let g = gateway(crate::SIMPLE, &chaos).await;
    let client_key = "sk-proj-ClientCanary0123456789abcdef";
    let mut everything = String::new();
    for path in [
        format!("/v1/files/{client_key}"),
        format!("/v1/files/{CANARY}?key={CANARY}"),
    ] {
        let reply = send(
            g.server.addr(),
            "GET",
            &path,
            &[("authorization", &format!("Bearer {client_key}"))],
            "",
        )
        .await;
        // chaos's 404 names the path it was asked for: rebound redacts it.
        assert_eq!(reply.status, 404, "{}", reply.text());
        everything.push_str(&reply.text());
        for (name, value) in &reply.headers {
            everything.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or_default()));
        }
    }
    everything.push_str(&g.server.gateway().metrics_text());
    everything.push_str(&g.log.lines().join("\n"));
    assert!(everything.contains("rebound::request"), "{everything}");
    for canary in ["GatewayCanary", "ClientCanary"] {
        assert!(
            !everything.contains(canary),
            "{canary} leaked:\n{everything}"
        );
    }
}

#[tokio::test]
async fn a_provider_gone_quiet_mid_body_aborts_the_response() {
    use http_body_util::BodyExt;
    // One chunk, then five seconds of silence: ten times the idle timeout.
    let chaos = chaos("stall-after-1:5000").await;
    let g = gateway(SCRIPTED, &chaos).await;
    let client = rebound_runtime::HttpClient::new(crate::timeouts()).unwrap();
    let request = http::Request::post(format!("http://{}/v1/completions", g.server.addr()))
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(openai_body(true)))
        .unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let started = std::time::Instant::now();
    let body = response.into_body().collect().await;
    assert!(body.is_err(), "the body ended cleanly");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
}
