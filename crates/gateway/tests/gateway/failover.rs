//! Failover out of the box (#16, D3, D6): a route's fallback is used before the client is
//! made to wait. Waits run in virtual time, so "within 10 s" is the sum of rebound's waits.

use std::time::Duration;

use rebound_chaos::Chaos;

use crate::{Running, chaos, gateway, openai_body};

/// A route of two OpenAI candidates with no policy configured: `primary`, then `fallback`.
fn two_candidates(primary: &Chaos, fallback: &Chaos) -> String {
    crate::primary_then_fallback(primary, fallback, "")
}

/// Sends one request through a two-candidate route whose primary follows `script`, and
/// checks it was served by the fallback within 10 s of waiting after at most 3 primary
/// attempts.
async fn served_by_the_fallback(script: &str, stream: bool) -> Running {
    let primary = chaos(script).await;
    let fallback = chaos("ok").await;
    let g = gateway(&two_candidates(&primary, &fallback), &primary).await;
    let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
    assert_eq!(reply.status, 200, "{script}: {}", reply.text());
    if !stream {
        // A stream's head went out with the countdown's first keep-alive comment, before
        // the fallback was chosen: its final figures come as a comment instead (G6).
        assert_eq!(reply.header("x-rebound-candidate"), "fallback", "{script}");
    }
    let primary_attempts = primary.attempts("default");
    // At most three, and here exactly: the attempt and two retries.
    assert_eq!(primary_attempts, 3, "{script}: primary attempts");
    assert_eq!(fallback.attempts("default"), 1, "{script}");
    let waited = g.time.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "{script}: waited {waited:?}"
    );
    g
}

const PERSISTENT_429: &str = "429, 429, 429, 429, 429, 429, 429, 429, 429, 429, 429, 429";
const PERSISTENT_503: &str = "503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503";

#[tokio::test]
async fn a_persistent_429_without_a_hint_is_served_by_the_fallback_after_three_attempts() {
    for stream in [false, true] {
        served_by_the_fallback(PERSISTENT_429, stream).await;
    }
}

#[tokio::test]
async fn a_persistent_429_with_a_hint_waits_the_hint_twice_then_falls_back() {
    let script = "429+retry-after:2, 429+retry-after:2, 429+retry-after:2, 429+retry-after:2";
    let g = served_by_the_fallback(script, false).await;
    assert_eq!(g.time.elapsed(), Duration::from_secs(4));
}

#[tokio::test]
async fn a_persistent_503_is_served_by_the_fallback_after_three_attempts() {
    for stream in [false, true] {
        let g = served_by_the_fallback(PERSISTENT_503, stream).await;
        // The transient schedule: 1 s, then 2 s.
        assert_eq!(g.time.elapsed(), Duration::from_secs(3));
    }
}

#[tokio::test]
async fn a_primary_down_for_five_seconds_is_served_by_the_fallback() {
    served_by_the_fallback("down:5000", true).await;
}

#[tokio::test]
async fn a_single_candidate_route_keeps_the_interactive_patience() {
    let only = chaos(PERSISTENT_503).await;
    let text = two_candidates(&only, &only).replace(
        r#"candidates = ["primary", "fallback"]"#,
        r#"candidates = ["primary"]"#,
    );
    let g = gateway(&text, &only).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    // The interactive preset: 10 retries, 11 attempts.
    assert_eq!(only.attempts("default"), 11);
}

/// One candidate, `primary`, alone on its route, under `deadline`.
fn alone_with_deadline(primary: &Chaos, global: &str, route: &str) -> String {
    let text = two_candidates(primary, primary).replace(
        r#"candidates = ["primary", "fallback"]"#,
        &format!("candidates = [\"primary\"]\n{route}"),
    );
    format!("{global}\n{text}")
}

#[tokio::test]
async fn a_deadline_of_3_s_ends_a_request_stuck_on_a_sole_failing_candidate_at_3_s() {
    for (global, route) in [("deadline_ms = 3000", ""), ("", "deadline_ms = 3000")] {
        let only = chaos(PERSISTENT_503).await;
        let g = gateway(&alone_with_deadline(&only, global, route), &only).await;
        let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
        assert_eq!(reply.status, 503, "{}", reply.text());
        // Waits of 1 s and 2 s fit; the next, 4 s, would end after the deadline.
        let waited = g.time.elapsed();
        assert!(
            waited.abs_diff(Duration::from_secs(3)) <= Duration::from_millis(200),
            "ended after {waited:?}"
        );
        assert_eq!(only.attempts("default"), 3);
        assert_eq!(reply.header("x-should-retry"), "false");
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["rebound"]["reason"], "deadline", "{body}");
    }
}

#[tokio::test]
async fn a_deadline_never_lets_a_wait_run_past_it() {
    // A rate limit's waits (about 2 s, then about 4 s) do not fit twice in 3 s.
    let only = chaos(PERSISTENT_429).await;
    let g = gateway(&alone_with_deadline(&only, "deadline_ms = 3000", ""), &only).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    assert_eq!(reply.status, 200, "a stream committed by its countdown");
    assert!(
        reply.text().contains("\"reason\":\"deadline\""),
        "{}",
        reply.text()
    );
    assert!(g.time.elapsed() <= Duration::from_secs(3));
    assert_eq!(only.attempts("default"), 2);
}

#[test]
fn a_deadline_is_more_than_0_and_at_most_a_day() {
    for (text, key) in [
        ("deadline_ms = 0\n", "deadline_ms"),
        ("deadline_ms = 90000000\n", "deadline_ms"),
    ] {
        let config = format!(
            "{text}[[candidate]]\nid = \"a\"\nprotocol = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"a\"]\n"
        );
        let e = rebound_gateway::load("rebound.toml", &config, &Default::default(), &[("X", "y")])
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert!(
            e.to_string().starts_with("rebound.toml: `deadline_ms`"),
            "{e}"
        );
    }
    let config = "[[candidate]]\nid = \"a\"\nprotocol = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"a\"]\ndeadline_ms = 0\n";
    let e = rebound_gateway::load("rebound.toml", config, &Default::default(), &[("X", "y")])
        .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("route.r.deadline_ms"), "{e}");
}

/// `two_candidates` with a switch on context overflow to `fallback`, and context windows.
fn switching(primary: &Chaos, fallback: &Chaos, windows: (u64, u64)) -> String {
    two_candidates(primary, fallback)
        .replacen(
            "api_key_env = \"CANARY_KEY\"",
            &format!("api_key_env = \"CANARY_KEY\"\ncontext_window = {}", windows.0),
            1,
        )
        .replace(
            "id = \"fallback\"\nprotocol = \"openai\"",
            &format!(
                "id = \"fallback\"\nprotocol = \"openai\"\ncontext_window = {}",
                windows.1
            ),
        )
        .replace(
            r#"candidates = ["primary", "fallback"]"#,
            "candidates = [\"primary\", \"fallback\"]\nswitch = { context_overflow = \"fallback\" }",
        )
}

#[tokio::test]
async fn a_context_overflow_moves_to_the_declared_larger_candidate_after_one_attempt() {
    // Twice the primary's failure, so a retry of it would show.
    let primary = chaos("context, context").await;
    let fallback = chaos("ok").await;
    let g = gateway(
        &switching(&primary, &fallback, (128_000, 1_000_000)),
        &primary,
    )
    .await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-candidate"), "fallback");
    assert_eq!(primary.attempts("default"), 1);
    assert_eq!(fallback.attempts("default"), 1);
    assert_eq!(
        g.time.elapsed(),
        Duration::ZERO,
        "a switch waits for nothing"
    );
}

#[tokio::test]
async fn a_context_overflow_stays_terminal_without_a_larger_candidate_or_a_switch() {
    // The declared candidate is no larger: the overflow is the answer.
    let primary = chaos("context").await;
    let fallback = chaos("ok").await;
    let g = gateway(
        &switching(&primary, &fallback, (200_000, 128_000)),
        &primary,
    )
    .await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        (primary.attempts("default"), fallback.attempts("default")),
        (1, 0)
    );
    // No switch configured: the default short pipeline does not skip a terminal failure.
    let primary = chaos("context").await;
    let g = gateway(&two_candidates(&primary, &fallback), &primary).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        (primary.attempts("default"), fallback.attempts("default")),
        (1, 0)
    );
}

#[tokio::test]
async fn a_malformed_request_is_never_switched() {
    let primary = chaos("400").await;
    let fallback = chaos("ok").await;
    let g = gateway(
        &switching(&primary, &fallback, (128_000, 1_000_000)),
        &primary,
    )
    .await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        (primary.attempts("default"), fallback.attempts("default")),
        (1, 0)
    );
}

/// A candidate's lines in the log, one per attempt outcome.
pub(crate) fn attempt_lines(g: &Running, candidate: &str) -> Vec<String> {
    let needle = format!(" candidate={candidate} ");
    g.log
        .lines()
        .into_iter()
        .filter(|l| l.contains(" rebound::attempt: ") && l.contains(&needle))
        .collect()
}

/// An https:// base URL on a plain-HTTP port (a local server's address written with the wrong
/// scheme): rebound's client reads the HTTP answer as a broken TLS record. A retry meets the
/// same port, so the fallback serves at once (C4, D3), with no wait.
#[tokio::test]
async fn an_https_url_on_a_plain_http_port_goes_to_the_fallback_at_once() {
    let primary = chaos("ok, ok, ok, ok").await;
    let fallback = chaos("ok, ok").await;
    let text = two_candidates(&primary, &fallback).replacen("http://", "https://", 1);
    assert!(text.contains(&primary.openai_base_url().replace("http://", "https://")));
    let g = gateway(&text, &primary).await;
    for stream in [false, true] {
        let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let lines = attempt_lines(&g, "primary");
    assert_eq!(lines.len(), 2, "one attempt per request: {lines:?}");
    for line in &lines {
        assert!(line.contains(" code=provider_config class=hard "), "{line}");
    }
    // The chaos server answered the TLS hello as a malformed request: no model call reached it.
    assert_eq!(primary.attempts("default"), 0);
    assert_eq!(fallback.attempts("default"), 2);
    assert_eq!(g.time.elapsed(), Duration::ZERO, "nothing was waited for");
}

/// A base URL whose host does not exist (`.invalid` never resolves, RFC 6761): a retry looks
/// the same name up again, so the fallback serves at once, with no wait.
#[tokio::test]
async fn a_host_that_does_not_exist_goes_to_the_fallback_at_once() {
    let fallback = chaos("ok").await;
    let text = two_candidates(&fallback, &fallback).replacen(
        &fallback.openai_base_url(),
        "http://no-such-host.invalid:8000/v1",
        1,
    );
    let g = gateway(&text, &fallback).await;
    fallback_at_once(
        &g,
        " code=provider_config class=hard rule=transport.dns_not_found ",
    )
    .await;
}

/// The reverse: an http:// base URL on a TLS port. The TLS server answers the plain request
/// with an alert, which hyper reads as no HTTP version; a retry meets the same port, so the
/// fallback serves at once, with no wait, where it had been retried as a reset connection.
#[tokio::test]
async fn an_http_url_on_a_tls_port_goes_to_the_fallback_at_once() {
    let fallback = chaos("ok").await;
    let front = tls_front(fallback.addr(), Handshake::Accepted).await;
    let text = two_candidates(&fallback, &fallback).replacen(
        &fallback.openai_base_url(),
        &format!("http://{front}/v1"),
        1,
    );
    let g = gateway(&text, &fallback).await;
    fallback_at_once(
        &g,
        " code=provider_config class=hard rule=rust.hyper_not_http_answer ",
    )
    .await;
    assert_eq!(fallback.attempts("default"), 1, "only the fallback's");
}

/// Sends a request that streams or not through a two-candidate route whose primary follows
/// `script`, and checks the fallback served it after one attempt of the primary whose log line
/// `says` this, with nothing waited.
async fn fallback_at_once_for(script: &str, stream: bool, says: &str) {
    let primary = chaos(script).await;
    let fallback = chaos("ok").await;
    let g = gateway(&two_candidates(&primary, &fallback), &primary).await;
    fallback_at_once_as(&g, stream, says).await;
}

/// A web page in place of the API's answer (a base URL that names a website or a web app's
/// front end, a network's sign-in page) answers every retry the same: one attempt, then the
/// fallback at once, for a stream as for a whole answer. It had been retried as a cut body,
/// and a stream as a cut stream.
#[tokio::test]
async fn a_web_page_in_place_of_the_api_goes_to_the_fallback_at_once() {
    for stream in [false, true] {
        fallback_at_once_for(
            "page",
            stream,
            " code=provider_config class=hard rule=transport.html_page_answer ",
        )
        .await;
    }
}

/// Alone on its route, the page fails the request at once with rebound's own 502, whose
/// message names the page, never the upstream's 200.
#[tokio::test]
async fn a_web_page_alone_fails_at_once_and_says_what_came() {
    let only = chaos("page, page").await;
    let text = two_candidates(&only, &only).replace(
        r#"candidates = ["primary", "fallback"]"#,
        r#"candidates = ["primary"]"#,
    );
    let g = gateway(&text, &only).await;
    for stream in [false, true] {
        let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
        assert!(
            reply
                .text()
                .contains("a 200 answer that is an HTML page titled 'Sign in to continue', not"),
            "{}",
            reply.text()
        );
        if !stream {
            assert_eq!(reply.status, 502, "{}", reply.text());
        }
    }
    assert_eq!(only.attempts("default"), 2, "one attempt each");
}

/// Alone on its route, the same candidate fails the request at once, with an error that says
/// what to fix, instead of ten retries of a handshake that cannot succeed.
#[tokio::test]
async fn an_https_url_on_a_plain_http_port_alone_fails_at_once_and_says_why() {
    let only = chaos("ok").await;
    let text = two_candidates(&only, &only)
        .replace(
            r#"candidates = ["primary", "fallback"]"#,
            r#"candidates = ["primary"]"#,
        )
        .replace("http://", "https://");
    let g = gateway(&text, &only).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    let body: serde_json::Value = serde_json::from_str(&reply.text()).unwrap();
    let told = &body["rebound"];
    assert_eq!(
        (
            &told["class"],
            &told["code"],
            &told["ruleId"],
            &told["attempts"]
        ),
        (
            &serde_json::json!("hard"),
            &serde_json::json!("provider_config"),
            &serde_json::json!("rust.rustls_plain_http_port"),
            &serde_json::json!(1)
        ),
        "{body}"
    );
    assert!(
        body["error"]["message"].as_str().is_some_and(
            |m| m.contains("did not answer in TLS") && m.contains("InvalidContentType")
        ),
        "{body}"
    );
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(attempt_lines(&g, "primary").len(), 1);
    assert_eq!(g.time.elapsed(), Duration::ZERO);
}

/// How a test TLS server takes a client's handshake.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Handshake {
    /// With the test certificate, as any server would.
    Accepted,
    /// Refused with the `handshake_failure` alert: the server offers only TLS 1.2 suites for
    /// an RSA key while its key is ECDSA, so no suite suits both ends.
    Refused,
}

/// A TLS server on loopback whose certificate no public root vouches for (the runtime's test
/// certificate, signed by its own test CA), in front of `behind` (a TLS-inspecting proxy, a
/// company's gateway).
pub(crate) async fn tls_front(
    behind: std::net::SocketAddr,
    handshake: Handshake,
) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(include_bytes!(
        "../../../runtime/src/http/h1/testdata/localhost.crt"
    ))
    .collect::<Result<Vec<_>, _>>()
    .unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!(
        "../../../runtime/src/http/h1/testdata/localhost.key"
    ))
    .unwrap();
    let config = match handshake {
        Handshake::Accepted => rustls::ServerConfig::builder(),
        Handshake::Refused => {
            let mut provider = rustls::crypto::ring::default_provider();
            provider.cipher_suites =
                vec![rustls::crypto::ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256];
            rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
        }
    }
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                if let Ok(mut plain) = tokio::net::TcpStream::connect(behind).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    addr
}

/// A route whose primary is `upstream` behind a test TLS server that takes the handshake so,
/// and whose fallback is `upstream` itself; `upstream_ca_file` names the test CA when
/// `trusted`.
async fn behind_tls(upstream: &Chaos, handshake: Handshake, trusted: bool) -> String {
    let front = tls_front(upstream.addr(), handshake).await;
    let route = two_candidates(upstream, upstream).replacen(
        &upstream.openai_base_url(),
        &format!("https://{front}/v1"),
        1,
    );
    if trusted {
        let ca = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../runtime/src/http/h1/testdata/ca.crt"
        );
        format!("upstream_ca_file = \"{ca}\"\n{route}")
    } else {
        route
    }
}

/// Sends one request and checks that the fallback answered it after one attempt of the
/// primary whose log line `says` this (its code, class or rule), with nothing waited.
pub(crate) async fn fallback_at_once(g: &Running, says: &str) {
    fallback_at_once_as(g, false, says).await;
}

/// [`fallback_at_once`] for a request that streams, or not.
async fn fallback_at_once_as(g: &Running, stream: bool, says: &str) {
    let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-candidate"), "fallback");
    let lines = attempt_lines(g, "primary");
    assert_eq!(lines.len(), 1, "stream {stream}: {lines:?}");
    assert!(lines[0].contains(says), "{lines:?}");
    assert_eq!(g.time.elapsed(), Duration::ZERO, "nothing was waited for");
}

/// A certificate rebound does not accept (a self-signed one, a TLS-inspecting proxy's): a
/// retry meets the same certificate, so the fallback serves at once, with no wait.
#[tokio::test]
async fn a_certificate_that_is_not_accepted_goes_to_the_fallback_at_once() {
    let fallback = chaos("ok").await;
    let text = behind_tls(&fallback, Handshake::Accepted, false).await;
    let g = gateway(&text, &fallback).await;
    fallback_at_once(&g, " code=tls_certificate class=hard ").await;
    assert_eq!(fallback.attempts("default"), 1);
}

/// The same server, its CA named in `upstream_ca_file`: rebound trusts it, and the request is
/// served through it on the first attempt.
#[tokio::test]
async fn an_upstream_signed_by_a_configured_ca_is_served() {
    let upstream = chaos("ok, ok").await;
    let text = behind_tls(&upstream, Handshake::Accepted, true).await;
    let g = gateway(&text, &upstream).await;
    for stream in [false, true] {
        let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), "primary");
    }
    assert_eq!(upstream.attempts("default"), 2);
    let lines = attempt_lines(&g, "primary");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains(" attempt=1 outcome=ok")),
        "{lines:?}"
    );
}

/// A server that refuses the handshake (no protocol version or cipher suite both ends accept):
/// a retry meets the same refusal, so the fallback serves at once, with no wait, even with the
/// server's CA trusted.
#[tokio::test]
async fn a_refused_handshake_goes_to_the_fallback_at_once() {
    let fallback = chaos("ok").await;
    let text = behind_tls(&fallback, Handshake::Refused, true).await;
    let g = gateway(&text, &fallback).await;
    fallback_at_once(
        &g,
        " code=provider_config class=hard rule=text.tls_handshake_refused ",
    )
    .await;
}
