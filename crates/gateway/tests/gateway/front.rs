//! The front door: limits, malformed input, gateway keys, metrics, logs and secrets (G5, G6).

use std::sync::Arc;
use std::time::Duration;

use rebound_chaos::Chaos;
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::HttpClient;

use crate::{CANARY, SIMPLE, anthropic_body, chaos, gateway, openai_body, send, timeouts};

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn malformed_json_is_a_400_in_the_protocols_shape() {
    let chaos = chaos("ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let cases = [
        ("/v1/messages", "{\"model\": ", "not valid JSON"),
        (
            "/v1/chat/completions",
            "{\"messages\": []}",
            "`model` is required",
        ),
        // Found by fuzzing: serde reads a struct from an array, so this passed as a request.
        (
            "/v1/chat/completions",
            "[\"gpt-4o\", false]",
            "must be a JSON object",
        ),
    ];
    for (path, sent, said) in cases {
        let reply = send(g.server.addr(), "POST", path, &[JSON], sent).await;
        assert_eq!(reply.status, 400, "{sent}");
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{sent}: {message}");
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "invalid_request_error");
        }
    }
    assert_eq!(
        chaos.attempts("default"),
        0,
        "nothing malformed goes upstream"
    );
}

#[tokio::test]
async fn deeply_nested_json_is_scanned_without_recursion_and_the_gateway_keeps_serving() {
    // A candidate that rewrites `model`, which comes after 1 MiB of nesting: the gateway must
    // walk past it (a parser that recursed per level would overflow its stack).
    let chaos = chaos("ok").await;
    let config = SIMPLE.replace("id = \"oa\"\n", "id = \"oa\"\nmodel = \"rewritten\"\n");
    let g = gateway(&config, &chaos).await;
    let depth = 500_000;
    let open = "[".repeat(depth);
    let close = "]".repeat(depth);

    // Unbalanced: not JSON, refused here in the protocol's shape.
    let reply = g
        .post(
            "/v1/chat/completions",
            &format!(r#"{{"tools":{open},"model":"gpt-x","messages":[]}}"#),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error.get("rebound").is_none(), "refused before any attempt");
    assert_eq!(chaos.attempts("default"), 0);

    // Balanced: valid JSON, forwarded (the rewrite past the nesting is a unit test in
    // body.rs); the upstream's own 400 (chaos refuses such depth) comes back once, not retried.
    let reply = g
        .post(
            "/v1/chat/completions",
            &format!(r#"{{"tools":{open}{close},"model":"gpt-x","messages":[]}}"#),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(error["rebound"]["code"], "invalid_request");
    assert_eq!(error["rebound"]["attempts"], 1);

    let reply = g
        .post("/v1/chat/completions", &crate::openai_body(false))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.text().contains("\"model\":\"rewritten\""),
        "{}",
        reply.text()
    );
}

#[tokio::test]
async fn bodies_over_the_limit_are_a_413() {
    let chaos = chaos("ok").await;
    let g = gateway(&format!("body_limit_bytes = 1024\n{SIMPLE}"), &chaos).await;
    let big = format!(
        r#"{{"model":"gpt-x","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "a".repeat(2000)
    );
    let reply = g.post("/v1/chat/completions", &big).await;
    assert_eq!(reply.status, 413);
    assert_eq!(chaos.attempts("default"), 0);
}

#[tokio::test]
async fn unknown_paths_get_the_providers_own_404() {
    let chaos = chaos("ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = send(g.server.addr(), "POST", "/v1/completions", &[JSON], "{}").await;
    assert_eq!(reply.status, 404);
    assert!(
        reply
            .text()
            .contains("rebound chaos has no POST /v1/completions"),
        "{}",
        reply.text()
    );
}

#[tokio::test]
async fn models_are_relayed_from_the_openai_candidate() {
    let chaos = chaos("ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = send(g.server.addr(), "GET", "/v1/models", &[], "").await;
    assert_eq!(reply.status, 200);
    assert!(reply.text().contains("chaos-1"), "{}", reply.text());
}

#[tokio::test]
async fn gateway_keys_guard_every_endpoint_and_never_travel_upstream() {
    let chaos = chaos("ok").await;
    let text = format!(
        "gateway_key_envs = [\"GW\"]\n{}",
        SIMPLE
            .replace("{openai}", &chaos.openai_base_url())
            .replace("{anthropic}", &chaos.anthropic_base_url())
    );
    let config = load(
        "test.toml",
        &text,
        &Overrides::default(),
        &[("GW", "gw-secret-1"), ("CANARY_KEY", CANARY)],
    )
    .unwrap();
    let gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    );
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let addr = server.addr();
    for (method, path, body) in [
        ("POST", "/v1/chat/completions", openai_body(false)),
        ("POST", "/v1/messages", anthropic_body(false)),
        ("GET", "/v1/models", String::new()),
        ("GET", "/metrics", String::new()),
    ] {
        let none = send(addr, method, path, &[JSON], &body).await;
        assert_eq!(none.status, 401, "{path} without a key");
        let wrong = send(
            addr,
            method,
            path,
            &[JSON, ("authorization", "Bearer gw-secret-2")],
            &body,
        )
        .await;
        assert_eq!(wrong.status, 401, "{path} with a wrong key");
        let right = send(
            addr,
            method,
            path,
            &[JSON, ("authorization", "Bearer gw-secret-1")],
            &body,
        )
        .await;
        assert_eq!(right.status, 200, "{path}: {}", right.text());
        let x_api_key = send(
            addr,
            method,
            path,
            &[JSON, ("x-api-key", "gw-secret-1")],
            &body,
        )
        .await;
        assert_eq!(x_api_key.status, 200, "{path} with x-api-key");
    }
}

#[tokio::test]
async fn non_loopback_without_gateway_keys_refuses_to_start() {
    let e = load(
        "test.toml",
        &format!("listen = \"0.0.0.0:8080\"\n{SIMPLE}"),
        &Overrides::default(),
        &[("CANARY_KEY", CANARY)],
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("listen"));
}

#[tokio::test]
async fn keys_never_reach_logs_metrics_or_error_bodies() {
    // The upstream fails every way it can; the configured key and a client key are canaries.
    let chaos = Chaos::start("127.0.0.1:0".parse().unwrap(), Default::default())
        .await
        .unwrap();
    chaos.set_script(
        "default",
        rebound_chaos::parse_script("401, 429+retry-after-ms:10, 502, reset, context, cut-after-1-chunks, error-after-1:api_error, ok").unwrap(),
    );
    let g = gateway(SIMPLE, &chaos).await;
    let client_key = "sk-ant-api03-ClientCanary0123456789abcdefghij";
    let mut everything = String::new();
    for i in 0..8 {
        let (path, body) = if i % 2 == 0 {
            ("/v1/chat/completions", openai_body(i % 4 == 0))
        } else {
            ("/v1/messages", anthropic_body(i % 3 == 0))
        };
        let reply = send(
            g.server.addr(),
            "POST",
            path,
            &[
                JSON,
                ("x-api-key", client_key),
                ("authorization", &format!("Bearer {client_key}")),
            ],
            &body,
        )
        .await;
        everything.push_str(&reply.text());
        for (name, value) in &reply.headers {
            everything.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or_default()));
        }
    }
    everything.push_str(&g.server.gateway().metrics_text());
    everything.push_str(&g.log.lines().join("\n"));
    assert!(!g.log.lines().is_empty());
    for canary in ["GatewayCanary", "ClientCanary"] {
        assert!(
            !everything.contains(canary),
            "{canary} leaked:\n{everything}"
        );
    }
}

#[tokio::test]
async fn metrics_count_attempts_retries_and_recoveries() {
    let chaos = chaos("502, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    g.post("/v1/chat/completions", &openai_body(false)).await;
    let reply = send(g.server.addr(), "GET", "/metrics", &[], "").await;
    assert_eq!(
        reply.headers[http::header::CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    crate::assert_told_a_502_then_ok(&reply.text(), &g.log, "main", "oa");
}

#[tokio::test]
async fn a_slow_client_cannot_hold_a_connection_and_huge_heads_are_refused() {
    use std::io::{Read, Write};
    let chaos = chaos("ok").await;
    let g = gateway(&format!("header_read_timeout_ms = 300\n{SIMPLE}"), &chaos).await;
    let addr = g.server.addr();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ")
            .unwrap();
        slow.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let started = std::time::Instant::now();
        let mut buf = Vec::new();
        let _ = slow.read_to_end(&mut buf);
        let closed_after = started.elapsed();

        let mut huge = std::net::TcpStream::connect(addr).unwrap();
        let head = format!(
            "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
            "a".repeat(100 << 10)
        );
        let _ = huge.write_all(head.as_bytes());
        let mut answer = Vec::new();
        huge.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = huge.read_to_end(&mut answer);
        (closed_after, String::from_utf8_lossy(&answer).into_owned())
    })
    .await
    .unwrap();
    assert!(
        outcome.0 < std::time::Duration::from_secs(3),
        "the slow client was kept {:?}",
        outcome.0
    );
    assert!(
        outcome.1.is_empty() || outcome.1.starts_with("HTTP/1.1 431"),
        "{}",
        outcome.1
    );
    // Everyone else is still served.
    let reply = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[JSON],
        &openai_body(false),
    )
    .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_key_the_upstream_echoes_never_reaches_the_client() {
    // rebound sends its configured key; the upstream's 401 echoes it back, as OpenAI's own
    // message and some proxies do. The relayed error must not carry it.
    let chaos = chaos("401").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 401);
    let text = reply.text();
    assert!(
        !text.contains("GatewayCanary"),
        "the provider key leaked: {text}"
    );
    assert!(
        text.contains("Incorrect API key provided: [redacted]"),
        "{text}"
    );
    assert!(!g.log.lines().join("\n").contains("GatewayCanary"));
}

#[tokio::test]
async fn at_the_connection_cap_new_clients_wait_and_open_ones_keep_being_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let chaos = chaos("ok").await;
    let g = gateway(&format!("max_connections = 2\n{SIMPLE}"), &chaos).await;
    let addr = g.server.addr();
    let body = openai_body(false);
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    async fn answer(stream: &mut tokio::net::TcpStream, request: &str) -> String {
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut buffer = vec![0u8; 64 << 10];
        let n = stream.read(&mut buffer).await.unwrap();
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    }
    let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(
        answer(&mut first, &request)
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        answer(&mut second, &request)
            .await
            .starts_with("HTTP/1.1 200")
    );

    // A third client is not served while two connections are open …
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    third.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 64 << 10];
    let waited = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
    assert!(waited.is_err(), "served beyond the cap");
    // … the open ones still are …
    assert!(
        answer(&mut second, &request)
            .await
            .starts_with("HTTP/1.1 200")
    );
    // … and it is, once one closes.
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buffer))
        .await
        .expect("served after a slot freed")
        .unwrap();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"));
}
