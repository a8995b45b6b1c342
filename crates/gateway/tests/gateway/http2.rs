//! Candidates with `http2 = true`: one HTTP/2 connection carries every concurrent request,
//! and stream-level failures (a reset stream, a cut body) are recovered like their HTTP/1.1
//! counterparts.

use rebound_chaos::parse_script;

use crate::{SIMPLE, chaos, direct, gateway, openai_body, send};

fn http2_config() -> String {
    SIMPLE.replace(
        "api_key_env = \"CANARY_KEY\"\n",
        "api_key_env = \"CANARY_KEY\"\nhttp2 = true\n",
    )
}

/// The stream's events after any keep-alive comments.
fn after_comments(text: &str) -> String {
    text.split_inclusive("\n\n")
        .skip_while(|event| event.starts_with(':'))
        .collect()
}

#[tokio::test]
async fn one_connection_carries_concurrent_streams_through_faults() {
    let expected = String::from_utf8(
        direct("/v1/chat/completions", &openai_body(true))
            .await
            .to_vec(),
    )
    .unwrap();
    let chaos = chaos("ok").await;
    let g = gateway(&http2_config(), &chaos).await;
    let warm = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(warm.status, 200, "{}", warm.text());

    let scripts = [
        "ok",
        "429+retry-after-ms:100, ok",
        "reset, ok",
        "cut-after-0-chunks, 503, ok",
        "error-after-0:server_error, ok",
        "malformed-after-0, ok",
    ];
    let mut requests = Vec::new();
    for i in 0..24 {
        let script = scripts[i % scripts.len()];
        let key = format!("h2-{i}");
        chaos.set_script(&key, parse_script(script).unwrap());
        let addr = g.server.addr();
        requests.push(tokio::spawn(async move {
            let reply = send(
                addr,
                "POST",
                "/v1/chat/completions",
                &[
                    ("content-type", "application/json"),
                    ("x-chaos-key", key.as_str()),
                ],
                &openai_body(true),
            )
            .await;
            (key, script, reply)
        }));
    }
    for request in requests {
        let (key, script, reply) = request.await.unwrap();
        assert_eq!(reply.status, 200, "{script}: {}", reply.text());
        // chaos names its completions after the request's key.
        assert_eq!(
            after_comments(&reply.text()),
            expected.replace("chaos-default", &format!("chaos-{key}")),
            "{script}: the upstream's bytes, once"
        );
        let steps = script.split(", ").count() as u64;
        assert_eq!(chaos.attempts(&key), steps, "{script}");
        if !reply.text().starts_with(':') {
            // (A countdown commits the headers before the last attempt: docs/gateway.md.)
            assert_eq!(reply.header("x-rebound-attempts"), steps.to_string());
        }
    }
    assert_eq!(
        chaos.connections(),
        1,
        "every request, retries included, went over one HTTP/2 connection"
    );
}

#[tokio::test]
async fn a_stream_cut_after_content_over_http2_ends_with_the_error_event() {
    let chaos = chaos("cut-after-2-chunks, ok").await;
    let g = gateway(&http2_config(), &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    let text = reply.text();
    assert!(!text.contains("[DONE]"), "{text}");
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("data: {\"error\""), "{text}");
    assert_eq!(chaos.attempts("default"), 1);
}
