//! Token counting, with the script's faults.

use serde_json::json;

use crate::{chaos, post, send};

#[tokio::test]
async fn anthropic_count_tokens_follows_the_script() {
    let chaos = chaos("529, 429+retry-after:2, cut-after-0, ok").await;
    let body = json!({"model": "claude-chaos", "messages": [{"role": "user", "content": "hello"}]});
    let path = "/v1/messages/count_tokens?beta=true";
    let overloaded = post(&chaos, path, &body).await;
    assert_eq!(overloaded.status, 529);
    assert_eq!(
        overloaded.json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let limited = post(&chaos, path, &body).await;
    assert_eq!(
        (limited.status, &limited.headers["retry-after"]),
        (429, &"2".parse().unwrap())
    );
    assert!(post(&chaos, path, &body).await.broken);
    let counted = post(&chaos, path, &body).await;
    assert_eq!(counted.status, 200);
    let expected = body.to_string().len().div_ceil(4);
    assert_eq!(counted.json(), json!({"input_tokens": expected}));
    assert_eq!(chaos.attempts("k"), 4);
}

#[tokio::test]
async fn responses_input_tokens_has_its_object_and_counts_under_the_key() {
    let chaos = chaos("502, ok").await;
    let body = json!({"model": "gpt-chaos", "input": "hello"});
    let failed = post(&chaos, "/v1/responses/input_tokens", &body).await;
    assert_eq!(failed.status, 502);
    assert_eq!(failed.json()["error"]["code"], "upstream_error");
    let counted = post(&chaos, "/v1/responses/input_tokens", &body)
        .await
        .json();
    assert_eq!(counted["object"], "response.input_tokens");
    assert_eq!(counted["input_tokens"], body.to_string().len().div_ceil(4));
    assert_eq!(chaos.attempts("k"), 2);
    let bad = send(
        &chaos,
        "POST",
        "/v1/responses/input_tokens",
        &[],
        "{not json",
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        chaos.attempts("k"),
        2,
        "a body that is not JSON is refused before the script"
    );
}
