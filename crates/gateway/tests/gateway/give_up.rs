//! Give-up signalling (G10, B5): the error rebound ends with tells the client's SDK not to run
//! rebound's loop again, and keeps what the upstream said about when to come back.

use crate::{Running, SIMPLE, anthropic_body, chaos, gateway, openai_body};
use rebound_chaos::Chaos;

/// The simple two-protocol config with one retry per class and no announced-reset waits: an
/// always-failing upstream is asked exactly twice.
fn one_retry() -> String {
    format!(
        r#"
[policy]
rate_limit = {{ retries = 1, reset_wait_max_ms = 0 }}
transient = {{ retries = 1, reset_wait_max_ms = 0 }}
{SIMPLE}"#
    )
}

async fn one_retry_gateway(chaos: &Chaos) -> Running {
    gateway(&one_retry(), chaos).await
}

#[tokio::test]
async fn an_exhausted_request_says_do_not_retry_and_keeps_the_last_attempts_hints() {
    let chaos = chaos(
        "503+retry-after:1+x-request-id:req_first+x-ratelimit-remaining-requests:7, \
         503+retry-after:2+retry-after-ms:1500+x-request-id:req_last+x-ratelimit-remaining-requests:0\
         +anthropic-ratelimit-requests-remaining:0+x-should-retry:true+x-upstream-private:1, ok",
    )
    .await;
    let g = one_retry_gateway(&chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.headers.get_all("x-should-retry").iter().count(), 1);
    // The last attempt's hints, not the first one's.
    assert_eq!(reply.header("retry-after"), "2");
    assert_eq!(reply.header("retry-after-ms"), "1500");
    assert_eq!(reply.header("x-request-id"), "req_last");
    assert_eq!(reply.header("x-ratelimit-remaining-requests"), "0");
    assert_eq!(reply.header("anthropic-ratelimit-requests-remaining"), "0");
    assert_eq!(
        reply.header("x-upstream-private"),
        "",
        "only the hints are kept"
    );
    assert_eq!(reply.header("content-type"), "application/json");
    assert_eq!(reply.header("x-rebound-attempts"), "2");
}

#[tokio::test]
async fn an_anthropic_rate_limit_keeps_its_request_id_and_rate_limit_headers() {
    let chaos = chaos(
        "429+request-id:req_011+anthropic-ratelimit-tokens-remaining:0, \
         429+retry-after:40+request-id:req_012+anthropic-ratelimit-tokens-remaining:0\
         +anthropic-ratelimit-tokens-reset:2026-12-01T07:00:00Z, ok",
    )
    .await;
    let g = one_retry_gateway(&chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(false)).await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.header("retry-after"), "40");
    assert_eq!(reply.header("request-id"), "req_012");
    assert_eq!(reply.header("anthropic-ratelimit-tokens-remaining"), "0");
    assert_eq!(
        reply.header("anthropic-ratelimit-tokens-reset"),
        "2026-12-01T07:00:00Z"
    );
}

#[tokio::test]
async fn a_quota_wall_whose_reset_is_only_in_its_words_says_it_as_retry_after() {
    // C9: the reset is a hint; a reset this far off is saturated at the longest hint (T2).
    let chaos = chaos(
        "400+message:You have reached your specified API usage limits. You will regain access \
         on 2030-01-01 at 00:00 UTC., ok",
    )
    .await;
    let g = one_retry_gateway(&chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(false)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 1);
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.header("retry-after"), "604800");
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["rebound"]["code"], "quota_exhausted");
}

#[tokio::test]
async fn a_provider_that_says_do_not_retry_is_not_retried_and_its_word_is_passed_on() {
    let chaos = chaos("500+x-should-retry:false+x-request-id:req_1, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 1);
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.header("x-request-id"), "req_1");
}

#[tokio::test]
async fn a_stream_that_fails_before_content_ends_with_a_give_up_too() {
    let chaos = chaos(
        "error-after-0:overloaded_error, error-after-0:overloaded_error, error-after-0:overloaded_error",
    )
    .await;
    let g = one_retry_gateway(&chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(true)).await;
    assert_eq!(reply.status, 529, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(reply.header("x-should-retry"), "false");
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn a_stream_committed_by_the_countdown_already_says_do_not_retry() {
    // Its head goes before the outcome is known: if the stream then ends in an error, that
    // error comes after rebound's retries, so the client must not start them over.
    let chaos = chaos("503+retry-after:3, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.text().starts_with(": Retrying in 2s"),
        "{}",
        reply.text()
    );
    assert_eq!(reply.header("x-should-retry"), "false");
}

#[tokio::test]
async fn a_success_says_nothing_about_retries() {
    let chaos = chaos("503, ok").await;
    let g = one_retry_gateway(&chaos).await;
    for (path, body) in [
        ("/v1/chat/completions", openai_body(false)),
        ("/v1/chat/completions", openai_body(true)),
        ("/v1/messages", anthropic_body(true)),
    ] {
        let reply = g.post(path, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.headers.get("x-should-retry").is_none(), "{path}");
    }
}

#[tokio::test]
async fn a_give_up_below_http_says_do_not_retry_too() {
    // No upstream answer to keep: rebound's own 502, still a give-up.
    let chaos = chaos("reset, reset, ok").await;
    let g = one_retry_gateway(&chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(reply.header("x-should-retry"), "false");
}

#[tokio::test]
async fn a_responses_stream_that_never_started_gives_up_with_the_last_attempts_hints() {
    let chaos = chaos(
        "503+x-request-id:req_r1, 503+x-request-id:req_r2+x-ratelimit-remaining-tokens:0, ok",
    )
    .await;
    let g = one_retry_gateway(&chaos).await;
    let reply = g
        .post(
            "/v1/responses",
            r#"{"model":"gpt-test","input":"hi","stream":true}"#,
        )
        .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 2);
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.header("x-request-id"), "req_r2");
    assert_eq!(reply.header("x-ratelimit-remaining-tokens"), "0");
}
