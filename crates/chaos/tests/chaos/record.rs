//! Recorded requests, unknown paths, the model list and the echo.

use serde_json::json;

use crate::{chaos, send};

#[tokio::test]
async fn every_request_is_recorded_with_its_query_headers_and_body() {
    let chaos = chaos("").await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    send(
        &chaos,
        "POST",
        "/v1/messages/count_tokens?beta=true",
        &[
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "token-counting-2024-11-01"),
            ("x-api-key", "sk-ant-secret"),
        ],
        body,
    )
    .await;
    send(
        &chaos,
        "GET",
        "/v1/files?limit=2",
        &[("openai-organization", "org-1")],
        "",
    )
    .await;
    let requests = chaos.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("POST", "/v1/messages/count_tokens?beta=true")
    );
    assert_eq!(
        requests[0].header("Anthropic-Beta"),
        Some("token-counting-2024-11-01")
    );
    assert_eq!(requests[0].body_len(), body.len());
    assert_eq!(requests[0].body, body.as_bytes());
    assert_eq!(
        (
            requests[1].path.as_str(),
            requests[1].header("openai-organization")
        ),
        ("/v1/files?limit=2", Some("org-1"))
    );
    let shown = send(&chaos, "GET", "/chaos/requests", &[], "").await.json();
    assert_eq!(
        shown.as_array().unwrap().len(),
        2,
        "control requests are not recorded"
    );
    assert!(!shown.to_string().contains("sk-ant-secret"));
    assert_eq!(shown[0]["body_len"], body.len());
    chaos.clear_requests();
    assert!(chaos.requests().is_empty());
}

#[tokio::test]
async fn an_unknown_path_gets_a_404_in_the_callers_shape_and_is_not_counted() {
    let chaos = chaos("502").await;
    let anthropic = send(
        &chaos,
        "GET",
        "/v1/unknown",
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    assert_eq!(anthropic.status, 404);
    assert_eq!(anthropic.json()["type"], "error");
    assert_eq!(anthropic.json()["error"]["type"], "not_found_error");
    let openai = send(&chaos, "POST", "/v1/unknown", &[], "{}").await;
    assert_eq!(openai.status, 404);
    assert_eq!(openai.json()["error"]["type"], "invalid_request_error");
    assert_eq!(chaos.attempts("k"), 0);
    assert_eq!(chaos.requests().len(), 2);
    assert_eq!(send(&chaos, "HEAD", "/", &[], "").await.status, 200);
}

#[tokio::test]
async fn the_model_list_comes_in_both_shapes() {
    let chaos = chaos("502").await;
    let openai = send(&chaos, "GET", "/v1/models", &[], "").await.json();
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["data"][0]["object"], "model");
    let anthropic = send(&chaos, "GET", "/v1/models", &[("x-api-key", "k")], "")
        .await
        .json();
    assert_eq!(anthropic["data"][0]["type"], "model");
    assert_eq!(anthropic["has_more"], false);
    assert_eq!(
        chaos.attempts("k"),
        0,
        "the model list is never counted nor faulted"
    );
}

#[tokio::test]
async fn the_echo_follows_the_script_and_sends_the_body_back() {
    let chaos = chaos("503+retry-after:1, ok").await;
    let body = r#"{"any": "bytes", "n": [1, 2]}"#;
    let failed = send(&chaos, "PUT", "/chaos/echo/a/b?x=1", &[], body).await;
    assert_eq!(failed.status, 503);
    assert_eq!(failed.headers["retry-after"], "1");
    let echoed = send(&chaos, "PUT", "/chaos/echo/a/b?x=1", &[], body).await;
    assert_eq!(echoed.status, 200);
    assert_eq!(echoed.body, body);
    assert_eq!(echoed.headers["x-chaos-echo-method"], "PUT");
    assert_eq!(echoed.headers["x-chaos-echo-path"], "/chaos/echo/a/b?x=1");
    assert_eq!(chaos.attempts("k"), 2);
    assert_eq!(json!(chaos.requests().len()), json!(2));
}
