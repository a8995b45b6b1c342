//! Attempt timeouts (#18, S5) on real sockets: a candidate that accepts a request and stays
//! silent — no headers, or headers and no content — is abandoned before the commit point,
//! invisibly, and the route's next candidate answers at once; a sole candidate is retried on
//! its schedule. Each expiry has its own code.

use rebound_chaos::Chaos;

use crate::{chaos, gateway, openai_body};

/// `primary` (with `timeouts`), then `fallback`.
fn pair(primary: &Chaos, fallback: &Chaos, timeouts: &str) -> String {
    crate::primary_then_fallback(primary, fallback, &format!("timeouts = {{ {timeouts} }}"))
}

/// One request through a pair whose primary follows `script`: served by the fallback after
/// exactly one primary attempt, and `/metrics` names the fallback's code.
async fn handed_over(script: &str, timeouts: &str, stream: bool, code: &str) {
    let primary = chaos(script).await;
    let fallback = chaos("ok").await;
    let g = gateway(&pair(&primary, &fallback, timeouts), &primary).await;
    let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
    assert_eq!(reply.status, 200, "{script}: {}", reply.text());
    assert_eq!(primary.attempts("default"), 1, "{script}: no second wait");
    assert_eq!(fallback.attempts("default"), 1, "{script}");
    assert!(g.time.waits().is_empty(), "{script}: handed over at once");
    let metrics = g.metrics().await;
    let line = format!("rebound_fallbacks_total{{class=\"transient\",code=\"{code}\"}} 1");
    assert!(metrics.contains(&line), "{script}: {metrics}");
}

#[tokio::test]
async fn no_stream_headers_within_the_first_byte_timeout_hands_over_to_the_next_candidate() {
    handed_over(
        "stall:3000",
        "stream_first_byte_ms = 200",
        true,
        "response_timeout",
    )
    .await;
}

#[tokio::test]
async fn no_answer_within_the_first_byte_timeout_hands_over_to_the_next_candidate() {
    handed_over(
        "stall:3000",
        "first_byte_ms = 200",
        false,
        "response_timeout",
    )
    .await;
}

#[tokio::test]
async fn headers_without_content_within_the_first_content_timeout_hand_over() {
    handed_over(
        "stall-after-0:3000",
        "first_content_ms = 200",
        true,
        "first_content_timeout",
    )
    .await;
}

#[tokio::test]
async fn a_sole_silent_candidate_is_retried_on_its_schedule() {
    let upstream = chaos("stall-after-0:3000, ok").await;
    let config = format!(
        r#"
[timeouts]
first_content_ms = 200

[[candidate]]
id = "sole"
protocol = "openai"
base_url = "{}"
api_key_env = "CANARY_KEY"

[[route]]
id = "main"
models = ["*"]
candidates = ["sole"]
"#,
        upstream.openai_base_url()
    );
    let g = gateway(&config, &upstream).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(upstream.attempts("default"), 2);
    assert_eq!(
        g.time.waits().len(),
        1,
        "one transient wait before the retry"
    );
}

#[tokio::test]
async fn a_timeout_on_the_connect_of_a_candidate_is_refused_with_its_key() {
    let upstream = chaos("ok").await;
    let config = pair(&upstream, &upstream, "connect_ms = 100");
    let error = rebound_gateway::load(
        "test.toml",
        &config,
        &rebound_gateway::Overrides::default(),
        &[("CANARY_KEY", crate::CANARY)],
    )
    .unwrap_err();
    assert_eq!(
        error.key.as_deref(),
        Some("candidate.primary.timeouts.connect_ms")
    );
}
