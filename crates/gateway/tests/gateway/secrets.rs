//! Secrets by value (#17, G5, C2): a provider key of no known shape, echoed by the upstream in
//! every way it can, appears in no response, header, stream, job, stored row, log line or
//! metric; under gateway keys no client credential reaches an upstream.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use rebound_chaos::{Chaos, parse_script};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, VirtualTime};
use rebound_store::{JobStore, SqliteStore};

use crate::{Logs, anthropic_body, chaos, openai_body, send, timeouts};

/// An Azure OpenAI key is 32 hex digits: no shape pattern knows it.
const AZURE_KEY: &str = "3f9c0a7be21d4c58a6f0e1b2c3d4e5f6";
/// A gateway key of no known shape either.
const GATEWAY_KEY: &str = "gw-7f3e9a1c-door";

const JSON: (&str, &str) = ("content-type", "application/json");

/// One route per protocol, each with its own candidate holding the Azure-style key, behind a
/// gateway key.
fn config(chaos: &Chaos) -> String {
    format!(
        r#"
gateway_key_envs = ["REBOUND_GATEWAY_KEYS"]

[[candidate]]
id = "oa"
protocol = "openai"
base_url = "{}"
api_key_env = "AZURE_OPENAI_API_KEY"

[[candidate]]
id = "an"
protocol = "anthropic"
base_url = "{}"
api_key_env = "AZURE_OPENAI_API_KEY"

[[route]]
id = "claude"
models = ["claude-*"]
candidates = ["an"]

[[route]]
id = "main"
models = ["*"]
candidates = ["oa"]
"#,
        chaos.openai_base_url(),
        chaos.anthropic_base_url()
    )
}

struct Keyed {
    server: Server,
    store: Arc<SqliteStore>,
    log: Logs,
    _time: Arc<VirtualTime>,
}

async fn keyed(config: &str) -> Keyed {
    let config = load(
        "test.toml",
        config,
        &Overrides::default(),
        &[
            ("AZURE_OPENAI_API_KEY", AZURE_KEY),
            ("REBOUND_GATEWAY_KEYS", GATEWAY_KEY),
        ],
    )
    .unwrap();
    let time = VirtualTime::starting_at(UNIX_EPOCH + Duration::from_secs(1_796_050_800));
    let log = Logs::capture();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    )
    .with_time(time.clone(), time.clone())
    .with_jobs(store.clone());
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    Keyed {
        server,
        store,
        log,
        _time: time,
    }
}

/// A reply as text: status, headers and body.
fn shown(reply: &crate::Reply) -> String {
    let mut text = format!("{}\n", reply.status);
    for (name, value) in &reply.headers {
        text.push_str(&format!(
            "{name}: {}\n",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    text.push_str(&reply.text());
    text.push('\n');
    text
}

#[tokio::test]
async fn a_key_of_unknown_shape_echoed_by_the_upstream_never_leaves() {
    let chaos = chaos("ok").await;
    let g = keyed(&config(&chaos)).await;
    let addr = g.server.addr();
    let auth = format!("Bearer {GATEWAY_KEY}");
    let headers = [JSON, ("authorization", auth.as_str())];
    let many = |step: &str| [step; 12].join(", ");
    let responses_stream = crate::responses::request(r#","stream":true"#);
    let in_header = format!("429+x-ratelimit-note:{AZURE_KEY}+echo-key");
    let cases: Vec<(String, &str, String, &str)> = vec![
        // A header that echoes it: kept on a give-up (G10), relayed by pass-through.
        (
            many(&in_header),
            "/v1/chat/completions",
            openai_body(false),
            "x-ratelimit-note: [redacted]",
        ),
        (
            many(&in_header),
            "/v1/messages/count_tokens",
            anthropic_body(false),
            "x-ratelimit-note: [redacted]",
        ),
        // A pass-through error body.
        (
            "401+echo-key".into(),
            "/v1/messages/count_tokens",
            anthropic_body(false),
            "(request key: [redacted])",
        ),
        // A 401 that echoes the key, as OpenAI's own does.
        (
            "401+echo-key".into(),
            "/v1/chat/completions",
            openai_body(false),
            "Incorrect API key provided: [redacted]",
        ),
        // A 500 page that echoes it, however often it is retried.
        (
            many("500+echo-key"),
            "/v1/messages",
            anthropic_body(false),
            "(request key: [redacted])",
        ),
        (
            many("500+echo-key"),
            "/v1/chat/completions",
            openai_body(true),
            "(request key: [redacted])",
        ),
        // In-stream errors after content, in each API's own event.
        (
            "error-after-1:server_error+echo-key".into(),
            "/v1/chat/completions",
            openai_body(true),
            "(request key: [redacted])",
        ),
        (
            "error-after-1:overloaded_error+echo-key".into(),
            "/v1/messages",
            anthropic_body(true),
            "(request key: [redacted])",
        ),
        (
            "error-after-1:server_error+echo-key".into(),
            "/v1/responses",
            responses_stream.clone(),
            "(request key: [redacted])",
        ),
        (
            "error-event-after-1:server_error+echo-key".into(),
            "/v1/responses",
            responses_stream,
            "(request key: [redacted])",
        ),
    ];
    let mut everything = String::new();
    for (script, path, body, echoed) in cases {
        chaos.set_script("default", parse_script(&script).unwrap());
        let reply = send(addr, "POST", path, &headers, &body).await;
        let text = shown(&reply);
        assert!(
            text.contains(echoed),
            "{script} at {path}: the echo is not there:\n{text}"
        );
        everything.push_str(&text);
    }
    // A job whose upstream echoes the key: its record, events, list and stored rows.
    chaos.set_script("default", parse_script("401+echo-key").unwrap());
    let job = r#"{"protocol": "openai", "request": {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}}"#;
    let submitted = send(addr, "POST", "/v1/rebound/jobs", &headers, job).await;
    assert_eq!(submitted.status, 202, "{}", submitted.text());
    let id = serde_json::from_slice::<serde_json::Value>(&submitted.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The events stream ends with the job.
    let events = shown(
        &send(
            addr,
            "GET",
            &format!("/v1/rebound/jobs/{id}/events"),
            &headers,
            "",
        )
        .await,
    );
    assert!(events.contains("\"failed\""), "{events}");
    everything.push_str(&events);
    for path in [
        format!("/v1/rebound/jobs/{id}"),
        "/v1/rebound/jobs".into(),
        "/metrics".into(),
    ] {
        everything.push_str(&shown(&send(addr, "GET", &path, &headers, "").await));
    }
    everything.push_str(&format!("{:?}", g.store.get(&id).unwrap()));
    everything.push_str(&format!("{:?}", g.store.attempts(&id).unwrap()));
    everything.push_str(&g.server.gateway().metrics_text());
    let lines = g.log.lines();
    assert!(!lines.is_empty());
    everything.push_str(&lines.join("\n"));
    // Chaos did see the key: it was sent, and echoed.
    assert!(
        chaos
            .requests()
            .iter()
            .any(|r| r.header("authorization") == Some(&format!("Bearer {AZURE_KEY}")))
    );
    for secret in [AZURE_KEY, &AZURE_KEY[4..28], GATEWAY_KEY] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked:\n{everything}"
        );
    }
}

#[tokio::test]
async fn under_gateway_keys_no_client_credential_reaches_an_upstream() {
    let chaos = chaos("ok").await;
    let config = format!("strip_headers = [\"X-Tenant-Token\"]\n{}", config(&chaos));
    let g = keyed(&config).await;
    let addr = g.server.addr();
    let client = "ClientCredential-0123456789";
    let bearer = format!("Bearer {GATEWAY_KEY}");
    let sent = [
        JSON,
        ("authorization", bearer.as_str()),
        ("proxy-authorization", client),
        ("x-api-key", client),
        ("api-key", client),
        ("x-goog-api-key", client),
        ("cookie", client),
        ("x-tenant-token", client),
        ("x-kept", "kept"),
    ];
    for (method, path, body) in [
        ("POST", "/v1/chat/completions", openai_body(false)),
        ("POST", "/v1/messages", anthropic_body(false)),
        ("POST", "/v1/messages/count_tokens", anthropic_body(false)),
        ("GET", "/v1/files?limit=1", String::new()),
    ] {
        let reply = send(addr, method, path, &sent, &body).await;
        assert_ne!(reply.status, 401, "{path}: {}", reply.text());
    }
    let requests = chaos.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    for request in &requests {
        assert_eq!(request.header("x-kept"), Some("kept"), "{}", request.path);
        for (name, value) in &request.headers {
            assert!(
                !value.contains(client) && !value.contains(GATEWAY_KEY),
                "{name} reached the upstream at {}",
                request.path
            );
        }
        for name in [
            "proxy-authorization",
            "api-key",
            "x-goog-api-key",
            "cookie",
            "x-tenant-token",
        ] {
            assert_eq!(request.header(name), None, "{name} at {}", request.path);
        }
        let own = [request.header("authorization"), request.header("x-api-key")];
        assert!(
            own.iter().flatten().all(|v| v.contains(AZURE_KEY)),
            "{}: {:?}",
            request.path,
            request.headers
        );
    }
}

/// A configuration, its environment, the key its error names and what the error says.
type BadSetting<'a> = (&'a str, [(&'a str, &'a str); 2], &'a str, &'a str);

#[test]
fn bad_key_settings_refuse_to_start_naming_the_variable() {
    let base = "[[candidate]]\nid = \"oa\"\nprotocol = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"PROVIDER_KEY\"\n[[route]]\nid = \"main\"\nmodels = [\"*\"]\ncandidates = [\"oa\"]\n";
    let gated = format!("gateway_key_envs = [\"GW\"]\n{base}");
    let cases: [BadSetting<'_>; 4] = [
        (
            &gated,
            [("GW", ","), ("PROVIDER_KEY", AZURE_KEY)],
            "gateway_key_envs[0]",
            "`GW` holds no key",
        ),
        (
            &gated,
            [("GW", " , "), ("PROVIDER_KEY", AZURE_KEY)],
            "gateway_key_envs[0]",
            "`GW` holds no key",
        ),
        (
            &gated,
            [("GW", "short"), ("PROVIDER_KEY", AZURE_KEY)],
            "gateway_key_envs[0]",
            "`GW` holds a key of 5 characters",
        ),
        (
            &gated,
            [("GW", GATEWAY_KEY), ("PROVIDER_KEY", "abc1234")],
            "candidate.oa.api_key_env",
            "`PROVIDER_KEY` holds a key of 7 characters",
        ),
    ];
    for (text, env, key, message) in cases {
        for listen in ["127.0.0.1:8080", "0.0.0.0:8080"] {
            let text = format!("listen = \"{listen}\"\n{text}");
            let e = load("test.toml", &text, &Overrides::default(), &env).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{e}");
            assert!(e.to_string().contains(message), "{e}");
        }
    }
    // Without gateway keys too, a provider key too short to redact is refused.
    let e = load(
        "test.toml",
        base,
        &Overrides::default(),
        &[("PROVIDER_KEY", "abc1234")],
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("candidate.oa.api_key_env"), "{e}");
    assert!(
        e.to_string()
            .contains("`PROVIDER_KEY` holds a key of 7 characters"),
        "{e}"
    );
}

/// The first response head the gateway writes for a request head that announces `length`
/// bytes and waits for `100 Continue` before sending them.
async fn first_head(addr: std::net::SocketAddr, path: &str, length: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let mut buf = [0u8; 1024];
    while !read.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.unwrap();
        assert_ne!(n, 0, "closed after {:?}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&read).into_owned()
}

#[tokio::test]
async fn an_announced_body_over_the_limit_gets_413_without_100_continue() {
    let chaos = chaos("ok").await;
    let g = crate::gateway(
        &format!("body_limit_bytes = 1024\n{}", crate::SIMPLE),
        &chaos,
    )
    .await;
    for path in [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/files",
        "/v1/rebound/jobs",
    ] {
        let head = first_head(g.server.addr(), path, 4096).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{path}: {head}");
    }
    assert!(chaos.requests().is_empty());
}
