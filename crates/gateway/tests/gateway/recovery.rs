//! Invisible recovery before the first byte, honest endings after it (G2–G4, G6, D2).

use std::sync::Arc;
use std::time::Duration;

use crate::{SIMPLE, anthropic_body, chaos, direct, gateway, openai_body, send};
use rebound_chaos::Chaos;
use rebound_runtime::{HeldSleeper, Wait, Waits};

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn retries_before_the_first_byte_are_invisible_and_bytes_are_relayed_untouched() {
    let expected = direct("/v1/chat/completions", &openai_body(false)).await;
    let chaos = chaos("502, 429+retry-after-ms:100, reset, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.body, expected,
        "the body must be the upstream's bytes"
    );
    assert_eq!(reply.header("x-rebound-attempts"), "4");
    assert_eq!(reply.header("x-rebound-candidate"), "oa");
    assert_eq!(reply.header("x-rebound-route-id"), "main");
    assert_eq!(chaos.attempts("default"), 4);
    let waits: Vec<u128> = g.time.waits().iter().map(Duration::as_millis).collect();
    assert_eq!(waits[..2], [1000, 100]);
}

#[tokio::test]
async fn upstream_connections_carry_answers_streams_and_errors_one_after_another() {
    // A stream's reader stops at its final event, an error's at its body's end: both leave
    // the connection ready for the next request, so one connection serves them all (B5: a
    // reused connection is never a hidden retry; this only checks reuse).
    let chaos = chaos("429+retry-after-ms:100, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let bodies = [
        openai_body(false),
        openai_body(true),
        anthropic_body(true),
        openai_body(true),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let path = if i == 2 {
            "/v1/messages"
        } else {
            "/v1/chat/completions"
        };
        let reply = g.post(path, body).await;
        assert_eq!(reply.status, 200, "{i}: {}", reply.text());
    }
    assert_eq!(chaos.attempts("default"), 5);
    assert_eq!(chaos.connections(), 1);
}

#[tokio::test]
async fn anthropic_overloaded_right_after_message_start_is_retried_invisibly() {
    let expected = direct("/v1/messages", &anthropic_body(true)).await;
    // Waits of a second or less: no keep-alive comment precedes the stream.
    let chaos = chaos("error-after-0:overloaded_error, 529+retry-after-ms:200, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(true)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.body, expected,
        "the held-back preamble of failed attempts never reached the client"
    );
    assert_eq!(reply.header("x-rebound-attempts"), "3");
    assert_eq!(chaos.attempts("default"), 3);
}

#[tokio::test]
async fn openai_stream_recovers_before_content() {
    let expected = direct("/v1/chat/completions", &openai_body(true)).await;
    let chaos = chaos("error-after-0:server_error, cut-after-0-chunks, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    // The second wait (2 s) is long enough for keep-alive comments; after them, the
    // upstream's bytes exactly.
    let text = reply.text();
    let after_comments = text
        .split_inclusive("\n\n")
        .skip_while(|event| event.starts_with(':'))
        .collect::<String>();
    assert!(text.starts_with(": Retrying in 1s"), "{text}");
    assert_eq!(after_comments.as_bytes(), &expected[..]);
    assert_eq!(chaos.attempts("default"), 3);
}

#[tokio::test]
async fn a_mid_stream_failure_ends_with_the_providers_error_event_never_silently() {
    let chaos = chaos("cut-after-2-chunks, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(true)).await;
    let text = reply.text();
    assert_eq!(reply.status, 200);
    assert!(text.contains("event: message_start"), "{text}");
    assert!(text.contains("event: content_block_delta"), "{text}");
    assert!(
        !text.contains("message_stop"),
        "a cut stream must not look complete: {text}"
    );
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: "), "{last}");
    assert!(last.contains("\"rebound\""), "{last}");
    assert_eq!(
        chaos.attempts("default"),
        1,
        "content reached the client: no replay without restart"
    );

    // OpenAI: the in-stream error object.
    let chaos = crate::chaos("cut-after-2-chunks, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    let text = reply.text();
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(
        text.trim_end()
            .rsplit("\n\n")
            .next()
            .unwrap()
            .starts_with("data: {\"error\""),
        "{text}"
    );
}

#[tokio::test]
async fn the_providers_own_error_event_is_relayed_once() {
    let chaos = chaos("error-after-2:overloaded_error, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(true)).await;
    let text = reply.text();
    assert_eq!(text.matches("event: error").count(), 1, "{text}");
    assert_eq!(chaos.attempts("default"), 1);
}

#[tokio::test]
async fn restart_clients_get_a_marker_then_the_replayed_stream() {
    let chaos = chaos("cut-after-2-chunks, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = send(
        g.server.addr(),
        "POST",
        "/v1/messages",
        &[JSON, ("x-rebound-replay", "restart")],
        &anthropic_body(true),
    )
    .await;
    let text = reply.text();
    let (before, after) = text
        .split_once("event: rebound_restart\n")
        .expect("a restart marker");
    assert!(before.contains("content_block_delta"), "{text}");
    assert!(
        after.contains("event: message_start"),
        "the replay starts the message again: {text}"
    );
    // The headers counted one attempt; the replay's figures come before it (G6).
    assert_eq!(reply.header("x-rebound-attempts"), "1");
    assert!(
        comes_before(
            after,
            "attempts=2 candidate=an route=main",
            "event: message_start"
        ),
        "{text}"
    );
    assert!(after.contains("event: message_stop"), "{text}");
    assert!(!text.contains("event: error"), "{text}");
    assert_eq!(chaos.attempts("default"), 2);
}

#[tokio::test]
async fn a_streaming_client_hears_the_countdown_while_waiting() {
    let chaos = chaos("503+retry-after:3, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    let text = reply.text();
    assert_eq!(reply.status, 200);
    assert!(
        text.starts_with(": Retrying in 2s · attempt 1/10\n\n: Retrying in 1s · attempt 1/10\n\n"),
        "{text}"
    );
    assert!(text.contains("data: [DONE]"), "{text}");
    assert_eq!(reply.header("content-type"), "text/event-stream");
    // The headers went with the countdown, after one attempt; the attempt that reached
    // content tells its own figures in a comment before it (G6).
    assert_eq!(reply.header("x-rebound-attempts"), "1");
    assert!(
        comes_before(&text, "attempts=2 candidate=oa route=main", "data:"),
        "{text}"
    );
}

/// `text` has the comment `: rebound {figures}` before the first `marker`.
fn comes_before(text: &str, figures: &str, marker: &str) -> bool {
    let comment = format!(": rebound {figures}\n\n");
    match (text.find(&comment), text.find(marker)) {
        (Some(at), Some(first)) => at < first,
        _ => false,
    }
}

#[tokio::test]
async fn after_the_countdown_a_fallback_names_the_candidate_that_served() {
    // The first candidate asks for a 3 s wait (the countdown commits the headers, naming it),
    // then rate-limits with a long reset, which its policy skips.
    let first = chaos("503+retry-after:3, 429+retry-after:120").await;
    let second = chaos("ok").await;
    let g = gateway(&skip_on_rate_limit(&first, &second), &first).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    let text = reply.text();
    assert_eq!(reply.status, 200, "{text}");
    assert_eq!(reply.header("x-rebound-candidate"), "first");
    assert_eq!(reply.header("x-rebound-attempts"), "1");
    assert!(text.starts_with(": Retrying in 2s"), "{text}");
    assert!(
        comes_before(&text, "attempts=3 candidate=second route=fallback", "data:"),
        "{text}"
    );
    assert!(text.contains("data: [DONE]"), "{text}");
    assert_eq!(
        (first.attempts("default"), second.attempts("default")),
        (2, 1)
    );
}

#[tokio::test]
async fn exhaustion_is_one_provider_shaped_error_with_diagnostics() {
    let chaos = chaos(&["502"; 12].join(", ")).await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 502);
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(
        body["error"]["code"], "upstream_error",
        "the upstream's own error body: {body}"
    );
    assert_eq!(body["rebound"]["retryAttempt"], 10);
    assert_eq!(body["rebound"]["class"], "transient");
    assert_eq!(body["rebound"]["ruleId"], "relay.upstream_failed");
    assert_eq!(body["rebound"]["attempts"], 11);
    assert_eq!(reply.header("x-rebound-attempts"), "11");
    assert_eq!(chaos.attempts("default"), 11);
}

#[tokio::test]
async fn an_exhausted_overload_is_the_providers_own_status_and_shape() {
    let chaos = chaos(&["error-after-0:overloaded_error"; 12].join(", ")).await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/messages", &anthropic_body(false)).await;
    assert_eq!(reply.status, 529, "{}", reply.text());
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");
    assert_eq!(body["rebound"]["retryAttempt"], 10);
}

/// Route `fallback`: candidate `first` (at `first`), whose policy skips a rate limit at once,
/// then `second`.
fn skip_on_rate_limit(first: &Chaos, second: &Chaos) -> String {
    format!(
        r#"
[[candidate]]
id = "first"
protocol = "openai"
base_url = "{}"
policy = {{ rate_limit = {{ retries = 0, exhausted = "skip" }} }}

[[candidate]]
id = "second"
protocol = "openai"
base_url = "{}"

[[route]]
id = "fallback"
models = ["gpt-*"]
candidates = ["first", "second"]
"#,
        first.openai_base_url(),
        second.openai_base_url()
    )
}

#[tokio::test]
async fn a_429_with_a_long_reset_skips_to_the_next_candidate() {
    let limited = chaos("429+retry-after:120").await;
    let healthy = chaos("ok").await;
    let g = gateway(&skip_on_rate_limit(&limited, &healthy), &limited).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-candidate"), "second");
    assert_eq!(reply.header("x-rebound-attempts"), "2");
    assert_eq!(reply.header("x-rebound-route-id"), "fallback");
    assert_eq!(
        (limited.attempts("default"), healthy.attempts("default")),
        (1, 1)
    );
    assert!(g.time.waits().is_empty(), "skip means no hidden wait");
    let metrics = g.server.gateway().metrics_text();
    assert!(
        metrics.contains("rebound_fallbacks_total{class=\"rate_limit\",code=\"rate_limited\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn terminal_failures_are_relayed_at_once() {
    let chaos = chaos("context, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    assert_eq!(reply.status, 400);
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["rebound"]["class"], "terminal");
    assert_eq!(chaos.attempts("default"), 1);
}

/// How long a test waits for what a working gateway does at once, before it fails.
const LIMIT: Duration = Duration::from_secs(10);

/// The simple config on the wall clock, its waits held open (they never end by themselves),
/// with `idle` as the upstream idle timeout.
async fn held_gateway(chaos: &Chaos, idle: Duration) -> (rebound_gateway::Server, Waits) {
    let text = SIMPLE
        .replace("{openai}", &chaos.openai_base_url())
        .replace("{anthropic}", &chaos.anthropic_base_url());
    let config = rebound_gateway::load(
        "test.toml",
        &text,
        &rebound_gateway::Overrides::default(),
        &[("CANARY_KEY", crate::CANARY)],
    )
    .unwrap();
    let (held, waits) = HeldSleeper::new();
    let gateway = rebound_gateway::Gateway::new(
        config,
        rebound_runtime::HttpClient::new(rebound_runtime::Timeouts {
            idle,
            ..crate::timeouts()
        })
        .unwrap(),
        Arc::new(rebound_core::Catalogue::shipped().unwrap()),
    )
    .with_time(Arc::new(rebound_runtime::SystemClock), held);
    let server = rebound_gateway::Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    (server, waits)
}

/// Connects to `addr` and sends one POST of `body` to `path`, reading nothing.
async fn post_raw(addr: std::net::SocketAddr, path: &str, body: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// Returns once the metrics show `wanted`; fails after [`LIMIT`]. That the gateway noticed a
/// client leaving mid-stream shows nowhere else (no wait ends, nothing is logged), so this
/// looks again every few milliseconds: how long that takes changes no outcome, only how soon
/// a broken build fails.
async fn until_metrics_show(server: &rebound_gateway::Server, wanted: &str) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let metrics = server.gateway().metrics_text();
        if metrics.contains(wanted) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no `{wanted}` within {LIMIT:?}:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_client_that_leaves_during_a_wait_stops_the_retries() {
    let chaos = chaos("503+retry-after:2, ok").await;
    let (server, mut waits) = held_gateway(&chaos, crate::timeouts().idle).await;
    let client = post_raw(
        server.addr(),
        "/v1/chat/completions",
        &crate::openai_body(false),
    )
    .await;
    // The first attempt failed and rebound waits out the retry-after: the client gives up.
    let Wait::Started(step) = waits
        .next(LIMIT)
        .await
        .expect("nothing happened to any wait in time")
    else {
        panic!("a wait ended before it started")
    };
    drop(client);
    assert_eq!(
        waits
            .next(LIMIT)
            .await
            .expect("nothing happened to any wait in time"),
        Wait::Abandoned(step),
        "the wait went on for a client that had left"
    );
    // The loop counts the request as ended in the same step that dropped the wait, and the
    // gateway runs on this test's thread: the count is there now.
    let metrics = server.gateway().metrics_text();
    assert!(metrics.contains("outcome=\"client_gone\"} 1"), "{metrics}");
    // The wait never ended, and a retry only follows a wait.
    assert_eq!(
        chaos.attempts("default"),
        1,
        "a retry went out for a client that had left"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_is_not_retried_for() {
    use tokio::io::AsyncReadExt;
    // The upstream goes quiet after two chunks for longer than any test runs, and the idle
    // timeout is as long: only the client leaving can end this request in time.
    let chaos = chaos("stall-after-2:60000, ok").await;
    let (server, _waits) = held_gateway(&chaos, Duration::from_secs(60)).await;
    let mut client = post_raw(server.addr(), "/v1/messages", &anthropic_body(true)).await;
    let mut first = [0u8; 512];
    let n = client.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).contains("200 OK"));
    // The client leaves while the upstream is quiet.
    drop(client);
    until_metrics_show(&server, "outcome=\"client_gone\"} 1").await;
    assert_eq!(
        chaos.attempts("default"),
        1,
        "a retry went out for a client that had left"
    );
}
