//! `rebound serve` against `rebound chaos` over real loopback sockets. Waits run in virtual
//! time: the gateway's sleeper returns at once and records each wait. A test that acts during
//! a wait holds it open (`held`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod caller;
mod failover;
mod front;
mod give_up;
mod health;
mod http2;
mod jobs;
mod leases;
mod other_form;
mod passthrough;
mod proxies;
mod recovery;
mod responses;
mod runs;
mod secrets;
mod silence;
mod soak;
mod status;
mod streams;
mod tokens;

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, Timeouts, VirtualTime};

pub(crate) const CANARY: &str = "sk-proj-GatewayCanary0123456789abcdef";

pub(crate) fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(5),
        stream_first_byte: Duration::from_secs(5),
        idle: Duration::from_millis(500),
        first_content: Duration::from_secs(5),
    }
}

pub(crate) async fn chaos(script: &str) -> Chaos {
    let chaos = Chaos::start("127.0.0.1:0".parse().unwrap(), ChaosConfig::default())
        .await
        .unwrap();
    chaos.set_script("default", parse_script(script).unwrap());
    chaos
}

pub(crate) struct Running {
    pub(crate) server: Server,
    pub(crate) time: Arc<VirtualTime>,
    pub(crate) log: Logs,
}

/// The log lines rebound's events make on this test's thread, formatted as `rebound serve`
/// writes them in text mode but without its redaction: a key in an event's fields fails the
/// canary tests, though the binary would have redacted it.
///
/// The subscriber is this thread's default while the capture lives: a `#[tokio::test]`
/// runtime runs the gateway's tasks on the test's own thread.
pub(crate) struct Logs {
    lines: Arc<Mutex<Vec<u8>>>,
    _default: tracing::subscriber::DefaultGuard,
}

impl Logs {
    pub(crate) fn capture() -> Logs {
        use tracing_subscriber::layer::SubscriberExt;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let layer = tracing_subscriber::fmt::layer()
            .without_time()
            .with_writer(move || Sink(Arc::clone(&sink)));
        let subscriber = tracing_subscriber::registry().with(layer).with(
            tracing_subscriber::filter::Targets::new().with_target("rebound", tracing::Level::INFO),
        );
        Logs {
            lines,
            _default: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Every line so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        String::from_utf8(self.lines.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// What `/metrics` and the log say of one request that met a 502 on `candidate` of `route`
/// and then succeeded there: the same for a live request and a job (G6).
pub(crate) fn assert_told_a_502_then_ok(metrics: &str, log: &Logs, route: &str, candidate: &str) {
    for line in [
        format!("rebound_attempts_total{{candidate=\"{candidate}\"}} 2"),
        "rebound_retries_total{class=\"transient\",code=\"upstream_error\"} 1".to_owned(),
        "rebound_recoveries_total{class=\"transient\"} 1".to_owned(),
        "rebound_requests_total{protocol=\"openai\",outcome=\"recovered\"} 1".to_owned(),
        "rebound_wait_seconds_count 1".to_owned(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line}:\n{metrics}"
        );
    }
    let lines: Vec<_> = log
        .lines()
        .into_iter()
        .filter(|l| l.contains(" rebound::attempt: "))
        .collect();
    assert_eq!(lines.len(), 2, "one line per attempt outcome: {lines:?}");
    let head = format!(" INFO rebound::attempt: route={route} candidate={candidate}");
    assert!(
        lines[0].starts_with(&format!("{head} attempt=1 outcome=failed phase="))
            && lines[0].contains(" status=502 ")
            && lines[0].contains(" code=upstream_error class=transient ")
            && lines[0].contains(" action=retry delay_ms="),
        "{lines:?}"
    );
    assert_eq!(lines[1], format!("{head} attempt=2 outcome=ok"));
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A gateway from a config text; `{openai}` and `{anthropic}` stand for chaos's base URLs.
pub(crate) async fn gateway(config: &str, chaos: &Chaos) -> Running {
    let text = config
        .replace("{openai}", &chaos.openai_base_url())
        .replace("{anthropic}", &chaos.anthropic_base_url());
    let config = load(
        "test.toml",
        &text,
        &Overrides::default(),
        &[("CANARY_KEY", CANARY)],
    )
    .unwrap();
    let time = VirtualTime::starting_at(UNIX_EPOCH + Duration::from_secs(1_796_050_800));
    let log = Logs::capture();
    let client =
        HttpClient::configured(timeouts(), &config.upstream_roots, &config.upstream_proxies)
            .unwrap();
    let gateway = Gateway::new(config, client, Arc::new(Catalogue::shipped().unwrap()))
        .with_time(time.clone(), time.clone())
        .with_jitter_seed(3);
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    Running { server, time, log }
}

/// A route of two OpenAI candidates: `primary` (with `primary_extra`, e.g. its own policy or
/// timeouts), then `fallback`.
pub(crate) fn primary_then_fallback(
    primary: &Chaos,
    fallback: &Chaos,
    primary_extra: &str,
) -> String {
    format!(
        r#"
[[candidate]]
id = "primary"
protocol = "openai"
base_url = "{}"
api_key_env = "CANARY_KEY"
{primary_extra}

[[candidate]]
id = "fallback"
protocol = "openai"
base_url = "{}"
api_key_env = "CANARY_KEY"

[[route]]
id = "main"
models = ["*"]
candidates = ["primary", "fallback"]
"#,
        primary.openai_base_url(),
        fallback.openai_base_url()
    )
}

/// The default two-protocol config against one chaos upstream.
pub(crate) const SIMPLE: &str = r#"
[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{openai}"
api_key_env = "CANARY_KEY"

[[candidate]]
id = "an"
protocol = "anthropic"
base_url = "{anthropic}"
api_key_env = "CANARY_KEY"

[[route]]
id = "main"
models = ["*"]
candidates = ["oa", "an"]
"#;

impl Running {
    /// `GET /metrics`, as text.
    pub(crate) async fn metrics(&self) -> String {
        send(self.server.addr(), "GET", "/metrics", &[], "")
            .await
            .text()
    }

    /// A JSON POST to this gateway.
    pub(crate) async fn post(&self, path: &str, body: &str) -> Reply {
        send(
            self.server.addr(),
            "POST",
            path,
            &[("content-type", "application/json")],
            body,
        )
        .await
    }
}

pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// One request with a plain client (no retries), the whole body read.
pub(crate) async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let client = HttpClient::new(timeouts()).unwrap();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Bytes::from(body.to_owned())).unwrap();
    let response = client.send(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub(crate) fn openai_body(stream: bool) -> String {
    format!(
        r#"{{"model":"gpt-test","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

pub(crate) fn anthropic_body(stream: bool) -> String {
    format!(
        r#"{{"model":"claude-test","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

/// What chaos answers directly to a clean request: the bytes the gateway must relay.
pub(crate) async fn direct(path: &str, body: &str) -> Bytes {
    let chaos = chaos("ok").await;
    send(
        chaos.addr(),
        "POST",
        path,
        &[("content-type", "application/json")],
        body,
    )
    .await
    .body
}
