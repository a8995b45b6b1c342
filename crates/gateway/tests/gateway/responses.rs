//! The Responses API (G7): `POST /v1/responses` recovered like Chat Completions, and stored
//! responses read, cancelled and continued at the provider that holds them.

use serde_json::Value;

use crate::{chaos, gateway, send};

const JSON: (&str, &str) = ("content-type", "application/json");

pub(crate) fn request(extra: &str) -> String {
    format!(r#"{{"model":"gpt-test","input":"hi"{extra}}}"#)
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

const ONE: &str = r#"
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

/// Two OpenAI providers: `a` first, `b` its fallback after one retry.
fn two(a: &rebound_chaos::Chaos, b: &rebound_chaos::Chaos) -> String {
    format!(
        r#"
[[candidate]]
id = "a"
protocol = "openai"
base_url = "{}"
policy = {{ transient = {{ retries = 1, exhausted = "skip" }} }}

[[candidate]]
id = "b"
protocol = "openai"
base_url = "{}"
policy = {{ transient = {{ retries = 1, exhausted = "skip" }} }}

[[route]]
id = "main"
models = ["*"]
candidates = ["a", "b"]
"#,
        a.openai_base_url(),
        b.openai_base_url()
    )
}

#[tokio::test]
async fn a_responses_request_is_recovered_like_chat_completions() {
    let chaos = chaos("429, 502, ok").await;
    let g = gateway(ONE, &chaos).await;
    let reply = g.post("/v1/responses", &request("")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-attempts"), "3");
    assert_eq!(reply.header("x-rebound-route-id"), "main");
    assert_eq!(chaos.attempts("default"), 3);
    let body = json(&reply.body);
    assert_eq!(body["object"], "response", "{body}");
    let recorded = chaos.requests();
    assert!(
        recorded.iter().all(|r| r.path == "/v1/responses"),
        "{recorded:?}"
    );
}

#[tokio::test]
async fn a_streaming_responses_request_is_recovered_and_relayed() {
    let chaos = chaos("503, ok").await;
    let g = gateway(ONE, &chaos).await;
    let reply = g.post("/v1/responses", &request(r#","stream":true"#)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(reply.header("x-rebound-route-id"), "main");
    let text = reply.text();
    assert!(text.contains("event: response.created"), "{text}");
    assert!(text.contains("event: response.completed"), "{text}");
}

#[tokio::test]
async fn a_stored_response_is_read_where_it_was_made() {
    let a = chaos("500, 500").await;
    let b = chaos("ok").await;
    let g = gateway(&two(&a, &b), &a).await;
    let addr = g.server.addr();
    // `a` fails twice: `b` makes the response.
    let made = g
        .post("/v1/responses", &request(r#","background":true"#))
        .await;
    assert_eq!(made.status, 200, "{}", made.text());
    assert_eq!(made.header("x-rebound-candidate"), "b");
    let made = json(&made.body);
    assert_eq!(made["status"], "queued", "{made}");
    let id = made["id"].as_str().unwrap().to_owned();

    // Polled through rebound, it completes: every read goes to `b`, which holds it, though
    // `a` is the configuration's first OpenAI provider.
    let path = format!("/v1/responses/{id}");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let polled = send(addr, "GET", &path, &[], "").await;
        assert_eq!(polled.status, 200, "{}", polled.text());
        statuses.push(json(&polled.body)["status"].as_str().unwrap().to_owned());
    }
    assert_eq!(statuses, ["in_progress", "completed", "completed"]);
    let items = send(
        addr,
        "GET",
        &format!("{path}/input_items?order=asc"),
        &[],
        "",
    )
    .await;
    assert_eq!(items.status, 200, "{}", items.text());
    assert_eq!(json(&items.body)["object"], "list");
    assert_eq!(
        a.attempts("default"),
        2,
        "only the two failed creations went to `a`"
    );
    let paths: Vec<String> = b.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [
            "/v1/responses".to_owned(),
            path.clone(),
            path.clone(),
            path.clone(),
            format!("{path}/input_items?order=asc"),
        ]
    );

    // An id rebound never saw: the configuration's first OpenAI provider.
    let unknown = send(addr, "GET", "/v1/responses/resp_elsewhere", &[], "").await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let last = a.requests().pop().unwrap();
    assert_eq!(last.path, "/v1/responses/resp_elsewhere");
}

#[tokio::test]
async fn a_background_response_is_cancelled_where_it_was_made() {
    let a = chaos("500, 500").await;
    let b = chaos("ok").await;
    let g = gateway(&two(&a, &b), &a).await;
    let made = json(
        &g.post("/v1/responses", &request(r#","background":true"#))
            .await
            .body,
    );
    let id = made["id"].as_str().unwrap();
    let cancelled = send(
        g.server.addr(),
        "POST",
        &format!("/v1/responses/{id}/cancel"),
        &[],
        "",
    )
    .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    assert_eq!(json(&cancelled.body)["status"], "cancelled");
}

#[tokio::test]
async fn a_streamed_responses_id_is_remembered_too() {
    let a = chaos("500, 500").await;
    let b = chaos("ok").await;
    let g = gateway(&two(&a, &b), &a).await;
    let made = g.post("/v1/responses", &request(r#","stream":true"#)).await;
    assert_eq!(made.header("x-rebound-candidate"), "b", "{}", made.text());
    let text = made.text();
    let at = text.find("\"id\":\"resp_").unwrap() + 6;
    let id = &text[at..at + text[at..].find('"').unwrap()];
    let read = send(
        g.server.addr(),
        "GET",
        &format!("/v1/responses/{id}"),
        &[],
        "",
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(json(&read.body)["id"], id);
}

#[tokio::test]
async fn a_continued_response_never_moves_to_another_provider() {
    let a = chaos("500, 500").await;
    let b = chaos("ok").await;
    let g = gateway(&two(&a, &b), &a).await;
    let made = json(&g.post("/v1/responses", &request("")).await.body);
    let id = made["id"].as_str().unwrap().to_owned();

    // `b` now fails: the continuation is retried on `b` and never falls back to `a`, which
    // does not hold the conversation.
    b.set_script("next", rebound_chaos::parse_script("503, 503").unwrap());
    let next = send(
        g.server.addr(),
        "POST",
        "/v1/responses",
        &[JSON, (rebound_chaos::KEY_HEADER, "next")],
        &request(&format!(r#","previous_response_id":"{id}""#)),
    )
    .await;
    assert_eq!(next.status, 503, "{}", next.text());
    assert_eq!(b.attempts("next"), 2);
    assert_eq!(a.attempts("next"), 0);

    // Healthy again, it continues at `b`.
    let next = send(
        g.server.addr(),
        "POST",
        "/v1/responses",
        &[JSON, (rebound_chaos::KEY_HEADER, "again")],
        &request(&format!(r#","previous_response_id":"{id}""#)),
    )
    .await;
    assert_eq!(next.status, 200, "{}", next.text());
    assert_eq!(next.header("x-rebound-candidate"), "b");
    assert_eq!(a.attempts("again"), 0);
}

#[tokio::test]
async fn a_conversation_stays_at_the_provider_that_made_it() {
    // Conversations are made through the first OpenAI provider (`a`, passed through): a
    // response in one is retried there and never falls back to `b`, which does not know it.
    let a = chaos("503, 503").await;
    let b = chaos("ok").await;
    let g = gateway(&two(&a, &b), &a).await;
    let reply = g
        .post("/v1/responses", &request(r#","conversation":"conv_1""#))
        .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(a.attempts("default"), 2);
    assert_eq!(b.attempts("default"), 0);
}
