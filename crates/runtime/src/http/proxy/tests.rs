use std::collections::HashMap;
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tower_service::Service;

use super::{Connector, Proxies, Route};
use crate::http::{ExtraRoots, HttpClient, Timeouts, TransportKind, classify_connect, error_chain};

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn route(proxies: &Proxies, url: &str) -> Option<Route> {
    proxies.route(&url.parse::<Uri>().unwrap())
}

#[test]
fn the_upper_case_variable_wins_an_empty_one_counts_as_unset_and_none_means_direct() {
    let proxies = Proxies::from_vars(vars(&[
        ("HTTPS_PROXY", "http://upper:3128"),
        ("https_proxy", "http://lower:3128"),
        ("HTTP_PROXY", " "),
    ]))
    .unwrap();
    assert_eq!(
        proxies.describe(),
        ["http://upper:3128 for https:// upstreams (HTTPS_PROXY)"]
    );
    let Some(Route::Tunnel { proxy, auth }) = route(&proxies, "https://api.openai.com/v1") else {
        panic!("an https upstream goes through HTTPS_PROXY");
    };
    assert_eq!(proxy.authority().unwrap().as_str(), "upper:3128");
    assert!(auth.is_none());
    assert!(
        route(&proxies, "http://models.internal:8000/v1").is_none(),
        "HTTP_PROXY is empty: an http upstream is reached directly"
    );
    assert!(Proxies::from_vars(vars(&[])).unwrap().is_empty());
    let bare = Proxies::from_vars(vars(&[("HTTPS_PROXY", "proxy.corp:3128")])).unwrap();
    assert_eq!(
        bare.describe(),
        ["http://proxy.corp:3128 for https:// upstreams (HTTPS_PROXY)"],
        "a value without a scheme is an HTTP proxy, as curl takes it"
    );
    assert!(route(&bare, "https://api.openai.com/").is_some());
    assert!(
        Proxies::from_vars(vars(&[("NO_PROXY", "example.com")]))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn loopback_and_no_proxy_hosts_are_reached_directly() {
    let proxies = Proxies::from_vars(vars(&[
        ("ALL_PROXY", "http://proxy.corp:3128"),
        ("no_proxy", "internal.corp, 10.0.0.0/8"),
    ]))
    .unwrap();
    for direct in [
        "http://127.0.0.1:11434/api/chat",
        "http://localhost:8080/v1",
        "https://[::1]:8443/v1",
        "https://llm.internal.corp/v1",
        "http://10.1.2.3:8000/v1",
    ] {
        assert!(route(&proxies, direct).is_none(), "{direct}");
    }
    assert!(route(&proxies, "https://api.anthropic.com/v1/messages").is_some());
    assert_eq!(
        proxies.describe(),
        [
            "http://proxy.corp:3128 for the other upstreams (ALL_PROXY)",
            "not for internal.corp, 10.0.0.0/8 (no_proxy)"
        ]
    );
}

#[test]
fn credentials_go_to_the_proxy_and_nowhere_else() {
    let proxies = Proxies::fixed("http://alice:s3cret-pw@proxy.corp:3128", None).unwrap();
    let shown = format!("{:?} {}", proxies, proxies.describe().join(" "));
    assert!(
        !shown.contains("s3cret-pw") && !shown.contains("alice"),
        "{shown}"
    );
    assert!(
        shown.contains("http://proxy.corp:3128 (with credentials)"),
        "{shown}"
    );
    let Some(Route::Tunnel { auth, .. }) = route(&proxies, "https://api.openai.com/") else {
        panic!("through the proxy");
    };
    assert!(auth.unwrap().is_sensitive());
    assert_eq!(proxies.secrets(), ["s3cret-pw"]);
    let escaped = Proxies::fixed("http://svc:p%40ss-word@proxy.corp:3128", None).unwrap();
    assert_eq!(escaped.secrets(), ["p%40ss-word", "p@ss-word"]);
    // Too short to redact by value without blanking ordinary words that contain it; rebound
    // never writes it anyway.
    let short = Proxies::fixed("http://svc:pw@proxy.corp:3128", None).unwrap();
    assert!(short.secrets().is_empty());
    let socks = Proxies::fixed("socks5h://bob:pw@127.0.0.1:1080", None).unwrap();
    let Some(Route::Socks {
        auth, remote_dns, ..
    }) = route(&socks, "https://api.openai.com/")
    else {
        panic!("through the SOCKS proxy");
    };
    assert_eq!(auth, Some(("bob".to_owned(), "pw".to_owned())));
    assert!(remote_dns, "socks5h: the proxy resolves the name");
}

#[test]
fn a_value_that_is_no_usable_proxy_is_an_error_naming_the_variable() {
    for (value, says) in [
        (
            "https://proxy.corp:3128",
            "over TLS (https://) is not supported",
        ),
        ("ftp://proxy.corp:21", "the scheme ftp:// is not supported"),
        (
            "socks4://proxy.corp:1080",
            "the scheme socks4:// is not supported",
        ),
        ("http://", "is not a URL"),
        ("not a url at all", "is not a URL"),
    ] {
        let e = Proxies::from_vars(vars(&[("https_proxy", value)])).unwrap_err();
        assert!(e.starts_with("https_proxy: "), "{e}");
        assert!(e.contains(says), "{value}: {e}");
    }
    let e = Proxies::fixed("https://user:hunter2@proxy.corp", None).unwrap_err();
    assert!(!e.contains("hunter2"), "{e}");
}

/// A proxy on loopback that answers the first `CONNECT` (or request handed to it) with
/// `answer`; when that opens a tunnel it then echoes what it reads. Returns its port and the
/// head it was sent.
async fn proxy(answer: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(socket.read(&mut byte).await.unwrap(), 1);
            head.push(byte[0]);
        }
        socket.write_all(answer.as_bytes()).await.unwrap();
        if answer.starts_with("HTTP/1.1 200 Connection established") {
            let mut buf = [0u8; 4];
            socket.read_exact(&mut buf).await.unwrap();
            socket.write_all(&buf).await.unwrap();
        }
        String::from_utf8(head).unwrap()
    });
    (port, served)
}

/// Connects to `url` through the proxy at `proxy_url`, whose far end echoes four bytes, and
/// checks the echo.
async fn echoes(proxy_url: &str, url: &str) {
    let stream = connector(proxy_url)
        .call(url.parse().unwrap())
        .await
        .unwrap();
    let mut stream = stream.into_inner();
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"ping");
}

fn connector(proxy_url: &str) -> Connector {
    Connector::new(
        HttpConnector::new(),
        Proxies::fixed(proxy_url, None).unwrap(),
        Duration::from_secs(10),
        true,
    )
}

#[tokio::test]
async fn a_tunnel_carries_the_connection_and_the_proxy_sees_host_port_and_credentials_only() {
    let (port, served) = proxy("HTTP/1.1 200 Connection established\r\n\r\n").await;
    echoes(
        &format!("http://alice:pw@127.0.0.1:{port}"),
        "https://api.openai.com/v1/chat/completions",
    )
    .await;
    let head = served.await.unwrap();
    assert_eq!(
        head,
        "CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\
         Proxy-Authorization: Basic YWxpY2U6cHc=\r\n\r\n"
    );
}

#[tokio::test]
async fn a_refused_tunnel_keeps_the_proxys_status_and_says_what_to_do() {
    for (answer, says) in [
        (
            "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n",
            "CONNECT answered 407 Proxy Authentication Required (the proxy wants credentials, or other ones",
        ),
        (
            "HTTP/1.0 401 Unauthorized\r\nProxy-agent: tinyproxy\r\n\r\n",
            "CONNECT answered 401 Unauthorized (the proxy wants credentials, or other ones",
        ),
        (
            "HTTP/1.1 403 Forbidden\r\n\r\n",
            "CONNECT answered 403 Forbidden (the proxy's policy does not allow this host or port)",
        ),
        (
            "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
            "CONNECT answered 502 Bad Gateway",
        ),
    ] {
        let (port, served) = proxy(answer).await;
        let e = connector(&format!("http://127.0.0.1:{port}"))
            .call("https://api.openai.com/".parse().unwrap())
            .await
            .unwrap_err();
        let message = error_chain(&*e);
        assert!(
            message.starts_with(&format!(
                "the proxy http://127.0.0.1:{port} refused the tunnel to api.openai.com:443: "
            )),
            "{message}"
        );
        assert!(message.contains(says), "{message}");
        served.await.unwrap();
    }
}

#[tokio::test]
async fn a_proxy_that_is_not_there_is_a_refused_connection_naming_the_proxy() {
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = connector(&format!("http://user:pw@127.0.0.1:{port}"))
        .call("https://api.openai.com/".parse().unwrap())
        .await
        .unwrap_err();
    let failure = classify_connect(&*e);
    assert_eq!(failure.kind, TransportKind::ConnectionRefused, "{failure}");
    assert!(
        failure
            .message
            .starts_with(&format!("through the proxy http://127.0.0.1:{port}: ")),
        "{failure}"
    );
    assert!(!failure.message.contains("pw"), "{failure}");
}

/// A SOCKS5 proxy on loopback that wants `svc:pw` and, when `accept`, answers the connect with
/// success and echoes four bytes; otherwise it rejects the credentials. Returns its port and
/// the destination it was asked for (the host as a name, so `socks5h` left resolving to it).
async fn socks5(accept: bool) -> (u16, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 2];
        s.read_exact(&mut head).await.unwrap();
        let mut methods = vec![0u8; usize::from(head[1])];
        s.read_exact(&mut methods).await.unwrap();
        assert!(methods.contains(&2), "user/password offered: {methods:?}");
        s.write_all(&[5, 2]).await.unwrap();
        let mut version_and_len = [0u8; 2];
        s.read_exact(&mut version_and_len).await.unwrap();
        let mut user = vec![0u8; usize::from(version_and_len[1])];
        s.read_exact(&mut user).await.unwrap();
        let mut len = [0u8; 1];
        s.read_exact(&mut len).await.unwrap();
        let mut pass = vec![0u8; usize::from(len[0])];
        s.read_exact(&mut pass).await.unwrap();
        let right = user == b"svc" && pass == b"pw";
        s.write_all(&[1, if right && accept { 0 } else { 1 }])
            .await
            .unwrap();
        if !(right && accept) {
            // Held open until the client gives up, as a proxy does: a close with unread bytes
            // would reset the connection before the answer is read.
            let mut rest = [0u8; 64];
            while s.read(&mut rest).await.is_ok_and(|n| n > 0) {}
            return String::new();
        }
        let mut request = [0u8; 4];
        s.read_exact(&mut request).await.unwrap();
        assert_eq!(request[..2], [5, 1], "CONNECT");
        assert_eq!(request[3], 3, "a domain name, for the proxy to resolve");
        s.read_exact(&mut len).await.unwrap();
        let mut host = vec![0u8; usize::from(len[0])];
        s.read_exact(&mut host).await.unwrap();
        let mut port = [0u8; 2];
        s.read_exact(&mut port).await.unwrap();
        s.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0])
            .await
            .unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&buf).await.unwrap();
        format!(
            "{}:{}",
            String::from_utf8(host).unwrap(),
            u16::from_be_bytes(port)
        )
    });
    (port, served)
}

#[tokio::test]
async fn a_socks5h_proxy_carries_the_connection_and_resolves_the_name() {
    let (port, served) = socks5(true).await;
    echoes(
        &format!("socks5h://svc:pw@127.0.0.1:{port}"),
        "https://api.anthropic.com/v1/messages",
    )
    .await;
    assert_eq!(served.await.unwrap(), "api.anthropic.com:443");
}

#[tokio::test]
async fn a_socks5_proxy_that_rejects_the_credentials_says_so_naming_the_proxy() {
    let (port, served) = socks5(false).await;
    let e = connector(&format!("socks5h://svc:wrong@127.0.0.1:{port}"))
        .call("https://api.anthropic.com/".parse().unwrap())
        .await
        .unwrap_err();
    let failure = classify_connect(&*e);
    assert_eq!(
        failure.message,
        format!(
            "through the proxy socks5h://127.0.0.1:{port}: SOCKS error: credentials not accepted"
        ),
    );
    assert_eq!(failure.kind, TransportKind::ConnectionRefused);
    served.await.unwrap();
}

#[tokio::test]
async fn a_proxy_that_never_answers_is_a_connect_timeout_naming_the_proxy() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    for scheme in ["http", "socks5h"] {
        let connecting = Connector::new(
            HttpConnector::new(),
            Proxies::fixed(&format!("{scheme}://127.0.0.1:{port}"), None).unwrap(),
            Duration::from_millis(200),
            false,
        )
        .call("https://api.openai.com/".parse().unwrap());
        // Without the bound the call never ends: the test fails here instead of hanging.
        let e = tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .expect("the proxy's silence ends the attempt")
            .unwrap_err();
        let failure = classify_connect(&*e);
        assert_eq!(failure.kind, TransportKind::ConnectTimeout, "{failure}");
        assert_eq!(
            failure.message,
            format!(
                "through the proxy {scheme}://127.0.0.1:{port}: the proxy did not open the way within 0.2 s"
            )
        );
    }
    held.abort();
}

#[tokio::test]
async fn an_ipv6_upstream_is_asked_for_in_brackets() {
    let (port, served) = proxy("HTTP/1.1 200 Connection established\r\n\r\n").await;
    echoes(
        &format!("http://127.0.0.1:{port}"),
        "https://[2001:db8::7]:8443/v1/chat/completions",
    )
    .await;
    let head = served.await.unwrap();
    assert!(
        head.starts_with("CONNECT [2001:db8::7]:8443 HTTP/1.1\r\nHost: [2001:db8::7]:8443\r\n"),
        "{head}"
    );
}

/// One GET of `url` by the shared client, reaching every upstream through a proxy on
/// loopback (with credentials) that answers `answer`: the proxy's port, the client's result
/// and the head the proxy was sent.
async fn get_through(
    answer: &'static str,
    url: &str,
) -> (
    u16,
    Result<http::Response<crate::http::ResponseBody>, crate::http::TransportFailure>,
    String,
) {
    let (port, served) = proxy(answer).await;
    let timeouts = Timeouts {
        connect: Duration::from_secs(10),
        ..Timeouts::default()
    };
    let proxies = Proxies::fixed(&format!("http://alice:pw@127.0.0.1:{port}"), None).unwrap();
    let client = HttpClient::configured(timeouts, &ExtraRoots::default(), &proxies).unwrap();
    let request = http::Request::get(url).body(bytes::Bytes::new()).unwrap();
    let result = client.send(request).await;
    (port, result, served.await.unwrap())
}

/// A plain `http://` upstream's request is handed to the proxy in absolute form, with the
/// proxy's credentials, as curl does: squid and tinyproxy allow `CONNECT` to port 443 only by
/// default, so a tunnel to a local model server's port 8000 would be refused.
#[tokio::test]
async fn a_plain_http_request_goes_to_the_proxy_in_absolute_form_with_its_credentials() {
    let (_, result, head) = get_through(
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        "http://models.internal:8000/v1/models?x=1",
    )
    .await;
    assert_eq!(result.unwrap().status(), 200);
    let head = head.to_ascii_lowercase();
    assert!(
        head.starts_with("get http://models.internal:8000/v1/models?x=1 http/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nproxy-authorization: basic ywxpy2u6chc=\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nhost: models.internal:8000\r\n"),
        "{head}"
    );
}

/// Only a proxy answers 407: to a request it was handed, it is the proxy's refusal (read as
/// its refusal of a tunnel is, by the proxy rules), never the provider's answer; so is a 401
/// whose server names a proxy (tinyproxy's for wrong credentials). Its other answers (a 401
/// without that name, a 403) may be the provider's, relayed, and come back as answers.
#[tokio::test]
async fn a_proxys_407_to_a_plain_request_is_its_refusal_and_other_answers_are_answers() {
    const URL: &str = "http://models.internal:8000/v1/models";
    let (port, result, _) = get_through(
        "HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic\r\n\
         content-length: 0\r\n\r\n",
        URL,
    )
    .await;
    let e = result.unwrap_err();
    assert_eq!(e.kind, TransportKind::ConnectionRefused);
    assert_eq!(
        e.message,
        format!(
            "the proxy http://127.0.0.1:{port} refused the request to models.internal:8000: \
             answered 407 Proxy Authentication Required (the proxy wants credentials, or other \
             ones: put them in its URL, http://user:password@host:port)"
        )
    );
    let (_, result, _) = get_through(
        "HTTP/1.0 401 Unauthorized\r\nServer: tinyproxy/1.11.1\r\n\
         WWW-Authenticate: Basic realm=\"Tinyproxy\"\r\nConnection: close\r\n\r\n",
        URL,
    )
    .await;
    let e = result.unwrap_err();
    assert!(
        e.message.contains(
            "refused the request to models.internal:8000: answered 401 Unauthorized (the proxy \
             wants credentials"
        ),
        "{}",
        e.message
    );
    for (answer, status) in [
        (
            "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n",
            401,
        ),
        ("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n", 403),
    ] {
        let (_, result, _) = get_through(answer, URL).await;
        assert_eq!(result.unwrap().status().as_u16(), status);
    }
}

/// An `https://` upstream is still reached through a tunnel by the same client: the proxy
/// learns its host and port and nothing of the request.
#[tokio::test]
async fn an_https_request_through_the_same_client_still_tunnels() {
    let (_, result, head) = get_through(
        "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n",
        "https://api.openai.com/v1/models",
    )
    .await;
    let e = result.unwrap_err();
    assert!(
        e.message.contains("CONNECT answered 403 Forbidden"),
        "{}",
        e.message
    );
    assert!(
        head.starts_with("CONNECT api.openai.com:443 HTTP/1.1\r\n"),
        "{head}"
    );
}
