//! Upstreams reached through an outbound proxy (`upstream_proxy`, or the environment's
//! `HTTPS_PROXY` and its kin), a real proxy on loopback: an `https://` upstream through a
//! `CONNECT` tunnel, a plain `http://` one by handing the proxy the request in absolute form,
//! and what a proxy's refusal does to recovery (C4, D3). The primary's base URL names a host
//! that only the proxy resolves (and the test certificate names), so a request that reaches it
//! went through the proxy; the fallback is on loopback, which is never proxied.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rebound_chaos::Chaos;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::failover::{Handshake, attempt_lines, fallback_at_once, tls_front};
use crate::{Running, chaos, gateway, openai_body, primary_then_fallback};

/// The proxy's credentials in the tests' configuration, and what it expects to be sent.
const USER: &str = "svc";
const PASSWORD: &str = "proxy-secret-7f3a";
const BASIC: &str = "Basic c3ZjOnByb3h5LXNlY3JldC03ZjNh";

/// A proxy on loopback. `answer` is its status line for every `CONNECT` and every request it
/// is handed, or `None` to serve them (on loopback, whatever the host: a tunnel to the port
/// asked for, a request passed on as it came) when the credentials are right, and to answer 407
/// when they are not. It keeps the head of each `CONNECT` and request it was sent.
struct Proxy {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    async fn start(answer: Option<&'static str>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&heads);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let _ = serve(client, answer, kept).await;
                });
            }
        });
        Proxy { addr, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn serve(
    mut client: TcpStream,
    answer: Option<&'static str>,
    heads: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if client.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    heads.lock().unwrap().push(head.clone());
    let authorized = head.to_ascii_lowercase().contains(&format!(
        "\r\nproxy-authorization: {}\r\n",
        BASIC.to_ascii_lowercase()
    ));
    let tunnel = head.starts_with("CONNECT ");
    let refusal = match answer {
        Some(status) => Some(status),
        None if !authorized => Some("407 Proxy Authentication Required"),
        None => None,
    };
    if let Some(status) = refusal {
        client
            .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
            .await?;
        return Ok(());
    }
    // `CONNECT host:port`, or `POST http://host:port/path`.
    let port = head
        .split_whitespace()
        .nth(1)
        .map(|target| target.trim_start_matches("http://"))
        .and_then(|target| target.split('/').next())
        .and_then(|authority| authority.rsplit_once(':'))
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .unwrap_or(0);
    let mut upstream = TcpStream::connect(("127.0.0.1", port)).await?;
    if tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
    } else {
        upstream.write_all(head.as_bytes()).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// How the primary is reached through the proxy.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// `https://provider.test:…`, a TLS server in front of the primary: a `CONNECT` tunnel.
    Tunnel,
    /// `http://provider.test:…`: the request itself, in absolute form.
    Forward,
}

/// A route whose primary is `primary` under the name `provider.test` (which only the proxy
/// resolves), reached through `proxy` `via` a tunnel or by forwarding, and whose fallback is
/// `fallback` on loopback.
async fn through(proxy: &Proxy, via: Via, primary: &Chaos, fallback: &Chaos) -> String {
    let (base, trust) = match via {
        Via::Tunnel => {
            let front = tls_front(primary.addr(), Handshake::Accepted).await;
            let ca = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../runtime/src/http/h1/testdata/ca.crt"
            );
            (
                format!("https://provider.test:{}/v1", front.port()),
                format!("upstream_ca_file = \"{ca}\"\n"),
            )
        }
        Via::Forward => (
            format!("http://provider.test:{}/v1", primary.addr().port()),
            String::new(),
        ),
    };
    let route =
        primary_then_fallback(primary, fallback, "").replacen(&primary.openai_base_url(), &base, 1);
    format!(
        "{trust}upstream_proxy = \"http://{USER}:{PASSWORD}@{}\"\n{route}",
        proxy.addr
    )
}

/// Everything a client or an operator reads of `g`: its log.
fn never_shows_the_password(g: &Running) {
    let log = g.log.lines().join("\n");
    assert!(!log.contains(PASSWORD), "{log}");
}

/// Two requests, one streaming, through a route whose primary is reached through a proxy
/// `via` a tunnel or by forwarding: both served by the primary, the password shown nowhere.
/// Returns the primary's port and what the proxy was sent.
async fn served_through(via: Via) -> (u16, Vec<String>) {
    let primary = chaos("ok, ok").await;
    let fallback = chaos("ok").await;
    let proxy = Proxy::start(None).await;
    let g = gateway(&through(&proxy, via, &primary, &fallback).await, &primary).await;
    for stream in [false, true] {
        let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), "primary");
    }
    assert_eq!(primary.attempts("default"), 2);
    assert_eq!(fallback.attempts("default"), 0);
    never_shows_the_password(&g);
    let heads = proxy.heads();
    assert!(!heads.is_empty(), "{via:?}: the proxy carried the requests");
    (primary.addr().port(), heads)
}

#[tokio::test]
async fn an_https_upstream_is_reached_through_a_tunnel_that_learns_host_and_port_only() {
    let (_, heads) = served_through(Via::Tunnel).await;
    for head in &heads {
        let target = head.split_whitespace().nth(1).unwrap_or("");
        assert!(target.starts_with("provider.test:"), "{head}");
        assert_eq!(
            *head,
            format!(
                "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\
                 Proxy-Authorization: {BASIC}\r\n\r\n"
            ),
            "the proxy learns the host and port, and nothing of the request"
        );
    }
}

/// A plain `http://` upstream: the proxy is handed each request in absolute form with its
/// credentials, as curl does (squid and tinyproxy allow `CONNECT` to port 443 only by
/// default, so a tunnel to a model server's own port would be refused).
#[tokio::test]
async fn an_http_upstream_is_reached_by_handing_the_proxy_the_request() {
    let (port, heads) = served_through(Via::Forward).await;
    let target = format!("POST http://provider.test:{port}/v1/chat/completions HTTP/1.1\r\n");
    for head in &heads {
        assert!(head.starts_with(&target), "{head}");
        assert!(
            head.to_ascii_lowercase().contains(&format!(
                "\r\nproxy-authorization: {}\r\n",
                BASIC.to_ascii_lowercase()
            )),
            "{head}"
        );
    }
}

/// A proxy that wants other credentials (407, or 401 as tinyproxy answers to `CONNECT`), or
/// whose policy forbids the host (403): a retry meets the same answer, so the fallback serves
/// at once, with no wait; the fallback, on loopback, is reached directly. Handed a plain
/// request, the proxy's 407 is read as its refusal (only a proxy answers 407); its 403 may be
/// the provider's own and is read as an answer, which also sends the request on at once.
#[tokio::test]
async fn a_proxy_that_refuses_for_credentials_or_policy_sends_the_request_to_the_fallback_at_once()
{
    for (via, answer, says) in [
        (
            Via::Tunnel,
            "407 Proxy Authentication Required",
            " code=provider_config class=hard rule=transport.proxy_wants_credentials ",
        ),
        (
            Via::Tunnel,
            "401 Unauthorized",
            " code=provider_config class=hard rule=transport.proxy_wants_credentials ",
        ),
        (
            Via::Tunnel,
            "403 Forbidden",
            " code=permission_denied class=hard rule=transport.proxy_forbids_host ",
        ),
        (
            Via::Forward,
            "407 Proxy Authentication Required",
            " code=provider_config class=hard rule=transport.proxy_wants_credentials ",
        ),
        (
            Via::Forward,
            "403 Forbidden",
            " code=permission_denied class=hard ",
        ),
    ] {
        let primary = chaos("ok").await;
        let fallback = chaos("ok").await;
        let proxy = Proxy::start(Some(answer)).await;
        let g = gateway(&through(&proxy, via, &primary, &fallback).await, &primary).await;
        fallback_at_once(&g, says).await;
        assert_eq!(primary.attempts("default"), 0);
        assert_eq!(
            proxy.heads().len(),
            1,
            "{via:?} {answer}: the fallback went direct"
        );
        never_shows_the_password(&g);
    }
}

/// A proxy that could not reach the host (its 502) is retried, then the fallback: to
/// `CONNECT` it is the proxy's outage, read as a connection that could not be made; to a
/// request it was handed it may be the provider's 502, read as one.
#[tokio::test]
async fn a_proxy_that_cannot_reach_the_host_is_retried() {
    for (via, says) in [
        (Via::Tunnel, " code=connection_refused class=transient "),
        (Via::Forward, " code=bad_gateway class=transient "),
    ] {
        let primary = chaos("ok").await;
        let fallback = chaos("ok").await;
        let proxy = Proxy::start(Some("502 Bad Gateway")).await;
        let g = gateway(&through(&proxy, via, &primary, &fallback).await, &primary).await;
        let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), "fallback");
        let lines = attempt_lines(&g, "primary");
        assert!(lines.len() > 1, "{via:?} retried: {lines:?}");
        assert!(lines.iter().all(|l| l.contains(says)), "{via:?} {lines:?}");
        assert_eq!(proxy.heads().len(), lines.len());
    }
}
