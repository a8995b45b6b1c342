//! An answer in the other form than asked for (a server that does not stream, one that
//! streams whatever it is asked) reaches the client in the form it asked for, on the first
//! attempt, in each API: the answer was generated once, and is not thrown away.

use rebound_runtime::Api;
use rebound_runtime::form::{Gathered, as_whole};
use serde_json::Value;

use crate::{SIMPLE, anthropic_body, chaos, direct, gateway};

/// Each API's path and a request body of it, streaming or not.
fn requests(stream: bool) -> [(Api, &'static str, String); 3] {
    let responses =
        format!(r#"{{"model":"gpt-test","stream":{stream},"input":"hi","store":false}}"#);
    // A stream request asks for usage, which a whole answer holds.
    let chat = crate::openai_body(stream).replacen(
        r#""stream":true"#,
        r#""stream":true,"stream_options":{"include_usage":true}"#,
        1,
    );
    [
        (Api::ChatCompletions, "/v1/chat/completions", chat),
        (Api::Messages, "/v1/messages", anthropic_body(stream)),
        (Api::Responses, "/v1/responses", responses),
    ]
}

/// `answer` without what differs from one answer to the next (its time).
fn timeless(answer: Value) -> Value {
    without(answer, &["created", "created_at", "completed_at"])
}

/// `answer` without `keys`.
fn without(mut answer: Value, keys: &[&str]) -> Value {
    for key in keys {
        if let Some(map) = answer.as_object_mut() {
            map.remove(*key);
        }
    }
    answer
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"))
}

/// The whole answer a stream holds.
fn gathered(api: Api, stream: &[u8]) -> Value {
    match as_whole(api, stream) {
        Some(Gathered::Answer(answer)) => json(&answer),
        other => panic!(
            "{api:?}: {other:?} from {}",
            String::from_utf8_lossy(stream)
        ),
    }
}

/// One request of `api` to a gateway whose upstream answers it so (`script`): served on the
/// upstream's one attempt, in `content_type`, labelled as told in `form` (stream, whole), and
/// counted so in `/metrics`. The answer's body.
async fn told(api: Api, path: &str, body: &str, script: &str, form: &str) -> Vec<u8> {
    let content_type = match form {
        "stream" => "text/event-stream",
        _ => "application/json",
    };
    let upstream = chaos(script).await;
    let g = gateway(SIMPLE, &upstream).await;
    let reply = g.post(path, body).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    assert_eq!(reply.header("content-type"), content_type, "{path}");
    assert_eq!(reply.header("x-rebound-retold"), form, "{path}");
    assert_eq!(reply.header("x-rebound-attempts"), "1", "{path}");
    assert_eq!(upstream.attempts("default"), 1, "{path}");
    let candidate = if api == Api::Messages { "an" } else { "oa" };
    let line = format!("rebound_retold_total{{candidate=\"{candidate}\",form=\"{form}\"}} 1");
    let metrics = g.metrics().await;
    assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    reply.body.to_vec()
}

/// A stream request answered with the whole answer: the client gets the stream the API
/// would have sent, holding the same answer as the upstream's, labelled `x-rebound-retold:
/// stream`, after one attempt.
#[tokio::test]
async fn a_whole_answer_to_a_stream_request_is_told_as_its_stream() {
    for ((api, path, body), (_, _, whole)) in requests(true).into_iter().zip(requests(false)) {
        // Each API its own upstream: a Responses id counts the attempts of its key.
        let stream = told(api, path, &body, "unstreamed", "stream").await;
        let whole = direct(path, &whole).await;
        assert_eq!(
            timeless(gathered(api, &stream)),
            timeless(json(&whole)),
            "{path}"
        );
    }
}

/// A request that does not stream answered with an event stream: the client gets the whole
/// answer the API would have sent, the same as the stream held, labelled `x-rebound-retold:
/// whole`, after one attempt.
#[tokio::test]
async fn a_stream_to_a_whole_request_is_gathered_into_its_answer() {
    for ((api, path, body), (_, _, streaming)) in requests(false).into_iter().zip(requests(true)) {
        let answer = json(&told(api, path, &body, "streamed", "whole").await);
        let stream = direct(path, &streaming).await;
        assert_eq!(
            timeless(answer.clone()),
            timeless(gathered(api, &stream)),
            "{path}"
        );
        // And it is what the upstream answers whole when it does not stream, but for a Chat
        // Completions answer's usage, which a stream holds only when the request asked.
        let whole = json(&direct(path, &body).await);
        let usage = if api == Api::ChatCompletions {
            &["usage"][..]
        } else {
            &[]
        };
        assert_eq!(
            without(timeless(answer), usage),
            without(timeless(whole), usage),
            "{path}"
        );
    }
}

/// `primary`, whose stream headers must come within 200 ms, then `fallback`.
fn impatient(primary: &rebound_chaos::Chaos, fallback: &rebound_chaos::Chaos) -> String {
    crate::primary_then_fallback(
        primary,
        fallback,
        "timeouts = { stream_first_byte_ms = 200 }",
    )
}

/// A server that does not stream sends its headers only with the whole answer. Once a
/// candidate has answered a stream request whole, its stream requests wait for headers as long
/// as a whole request does (`first_byte_ms`): a 1 s generation is its answer, where it had been
/// abandoned at the stream's 200 ms for the fallback (as it still is on a gateway that has not
/// learned it).
#[tokio::test]
async fn a_candidate_that_answered_a_stream_whole_is_waited_for_as_a_whole_answer() {
    let body = crate::openai_body(true);
    let primary = chaos("unstreamed, unstreamed:1000").await;
    let fallback = chaos("ok").await;
    let g = gateway(&impatient(&primary, &fallback), &primary).await;
    for _ in 0..2 {
        let reply = g.post("/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), "primary");
        assert_eq!(reply.header("x-rebound-retold"), "stream");
    }
    assert_eq!(
        (primary.attempts("default"), fallback.attempts("default")),
        (2, 0)
    );
    assert!(
        g.log
            .lines()
            .iter()
            .any(|l| l.contains("candidate_answers_streams_whole") && l.contains("primary")),
        "{:?}",
        g.log.lines()
    );

    // Not yet learned: the stream's own timeout abandons the generation.
    let primary = chaos("unstreamed:1000").await;
    let fallback = chaos("ok").await;
    let g = gateway(&impatient(&primary, &fallback), &primary).await;
    let reply = g.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        (primary.attempts("default"), fallback.attempts("default")),
        (1, 1)
    );
}

/// A candidate that streams again is waited for as a stream again.
#[tokio::test]
async fn a_candidate_that_streams_again_is_waited_for_as_a_stream_again() {
    let body = crate::openai_body(true);
    let primary = chaos("unstreamed, ok, unstreamed:1000").await;
    let fallback = chaos("ok").await;
    let g = gateway(&impatient(&primary, &fallback), &primary).await;
    for candidate in ["primary", "primary", "fallback"] {
        let reply = g.post("/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), candidate);
    }
    assert_eq!(
        (primary.attempts("default"), fallback.attempts("default")),
        (3, 1)
    );
    assert!(
        g.log
            .lines()
            .iter()
            .any(|l| l.contains("candidate_streams_again")),
        "{:?}",
        g.log.lines()
    );
}
