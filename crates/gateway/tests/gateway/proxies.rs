//! Upstreams reached through an outbound proxy (`upstream_proxy`, or the environment's
//! `HTTPS_PROXY` and its kin): a `CONNECT` tunnel through a real proxy on loopback, and what a
//! proxy's refusal does to recovery (C4, D3). The primary's base URL names a host that only
//! the proxy resolves, so a request that reaches it went through the proxy; the fallback is
//! on loopback, which is never proxied.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rebound_chaos::Chaos;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::failover::{attempt_lines, fallback_at_once};
use crate::{Running, chaos, gateway, openai_body, primary_then_fallback};

/// The proxy's credentials in the tests' configuration, and what it expects to be sent.
const USER: &str = "svc";
const PASSWORD: &str = "proxy-secret-7f3a";
const BASIC: &str = "Basic c3ZjOnByb3h5LXNlY3JldC03ZjNh";

/// A proxy on loopback. `answer` is its status line for every `CONNECT`, or `None` to open the
/// tunnel (to loopback, whatever the host) when the credentials are right, and to answer 407
/// when they are not. It keeps the head of each `CONNECT` it was sent.
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
    let authorized = head.contains(&format!("\r\nProxy-Authorization: {BASIC}\r\n"));
    let status = match answer {
        Some(status) => status,
        None if !authorized => "407 Proxy Authentication Required",
        None => "200 Connection established",
    };
    client
        .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
        .await?;
    if !status.starts_with("200") {
        return Ok(());
    }
    let port = head
        .split_whitespace()
        .nth(1)
        .and_then(|target| target.rsplit_once(':'))
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .unwrap_or(0);
    let mut upstream = TcpStream::connect(("127.0.0.1", port)).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// A route whose primary is `primary` under the name `provider.test` (which only the proxy
/// resolves) and whose fallback is `fallback` on loopback, reached through `proxy`.
fn through(proxy: &Proxy, primary: &Chaos, fallback: &Chaos) -> String {
    let route = primary_then_fallback(primary, fallback, "").replacen(
        &primary.openai_base_url(),
        &format!("http://provider.test:{}/v1", primary.addr().port()),
        1,
    );
    format!(
        "upstream_proxy = \"http://{USER}:{PASSWORD}@{}\"\n{route}",
        proxy.addr
    )
}

/// Everything a client or an operator reads of `g`: its log.
fn never_shows_the_password(g: &Running) {
    let log = g.log.lines().join("\n");
    assert!(!log.contains(PASSWORD), "{log}");
}

#[tokio::test]
async fn an_upstream_is_reached_through_the_proxy_with_its_credentials() {
    let primary = chaos("ok, ok").await;
    let fallback = chaos("ok").await;
    let proxy = Proxy::start(None).await;
    let g = gateway(&through(&proxy, &primary, &fallback), &primary).await;
    for stream in [false, true] {
        let reply = g.post("/v1/chat/completions", &openai_body(stream)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), "primary");
    }
    assert_eq!(primary.attempts("default"), 2);
    assert_eq!(fallback.attempts("default"), 0);
    let target = format!("provider.test:{}", primary.addr().port());
    let heads = proxy.heads();
    assert!(!heads.is_empty(), "the proxy carried the requests");
    for head in &heads {
        assert_eq!(
            *head,
            format!(
                "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\
                 Proxy-Authorization: {BASIC}\r\n\r\n"
            ),
            "the proxy learns the host and port, and nothing of the request"
        );
    }
    never_shows_the_password(&g);
}

/// A proxy that wants other credentials (407, or 401 as tinyproxy answers), or whose policy
/// forbids the host (403): a retry
/// meets the same answer, so the fallback serves at once, with no wait; the fallback, on
/// loopback, is reached directly.
#[tokio::test]
async fn a_proxy_that_refuses_for_credentials_or_policy_sends_the_request_to_the_fallback_at_once()
{
    for (answer, says) in [
        (
            "407 Proxy Authentication Required",
            " code=provider_config class=hard rule=transport.proxy_wants_credentials ",
        ),
        (
            "401 Unauthorized",
            " code=provider_config class=hard rule=transport.proxy_wants_credentials ",
        ),
        (
            "403 Forbidden",
            " code=permission_denied class=hard rule=transport.proxy_forbids_host ",
        ),
    ] {
        let primary = chaos("ok").await;
        let fallback = chaos("ok").await;
        let proxy = Proxy::start(Some(answer)).await;
        let g = gateway(&through(&proxy, &primary, &fallback), &primary).await;
        fallback_at_once(&g, says).await;
        assert_eq!(primary.attempts("default"), 0);
        assert_eq!(proxy.heads().len(), 1, "{answer}: the fallback went direct");
        never_shows_the_password(&g);
    }
}

/// A proxy that could not reach the host (its 502 to `CONNECT`) is the proxy's outage, not
/// the provider's answer: retried as a connection that could not be made, then the fallback.
#[tokio::test]
async fn a_proxy_that_cannot_reach_the_host_is_retried_as_a_refused_connection() {
    let primary = chaos("ok").await;
    let fallback = chaos("ok").await;
    let proxy = Proxy::start(Some("502 Bad Gateway")).await;
    let g = gateway(&through(&proxy, &primary, &fallback), &primary).await;
    let reply = g.post("/v1/chat/completions", &openai_body(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-candidate"), "fallback");
    let lines = attempt_lines(&g, "primary");
    assert!(lines.len() > 1, "retried: {lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" code=connection_refused class=transient ")),
        "{lines:?}"
    );
    assert_eq!(proxy.heads().len(), lines.len());
}
