//! The HTTP/1.1 client against a scripted server on loopback: real sockets, canned bytes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rebound_core::TransportKind;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::Client;
use crate::http::{ResponseBody, TransportFailure, read_body, read_whole};

/// One canned answer: pieces written with a short pause between them, then maybe a close.
#[derive(Clone)]
struct Answer {
    pieces: Vec<&'static [u8]>,
    close: bool,
}

fn answer(pieces: &[&'static [u8]]) -> Answer {
    Answer {
        pieces: pieces.to_vec(),
        close: false,
    }
}

fn closing(pieces: &[&'static [u8]]) -> Answer {
    Answer {
        pieces: pieces.to_vec(),
        close: true,
    }
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";

/// A server that answers each request it reads with the next canned answer, and records the
/// requests and how many connections it accepted.
struct Server {
    url: String,
    accepted: Arc<AtomicUsize>,
    /// How many connections ended (the client closed them, or the answers ran out).
    ended: tokio::sync::watch::Sender<usize>,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Server {
    async fn start(answers: Vec<Answer>) -> Server {
        Server::start_with(answers, None).await
    }

    /// The same server behind TLS, with the test certificate for 127.0.0.1.
    async fn start_tls(answers: Vec<Answer>) -> Server {
        let certs = CertificateDer::pem_slice_iter(include_bytes!("../testdata/localhost.crt"))
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key =
            PrivateKeyDer::from_pem_slice(include_bytes!("../testdata/localhost.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        Server::start_with(answers, Some(TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn start_with(answers: Vec<Answer>, tls: Option<TlsAcceptor>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let ended = tokio::sync::watch::Sender::new(0);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        let (count, done, log) = (Arc::clone(&accepted), ended.clone(), Arc::clone(&requests));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let (answers, done, log) = (Arc::clone(&answers), done.clone(), Arc::clone(&log));
                let tls = tls.clone();
                drop(tokio::spawn(async move {
                    match tls {
                        None => serve(stream, answers, log).await,
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                serve(stream, answers, log).await;
                            }
                        }
                    }
                    done.send_modify(|n| *n += 1);
                }));
            }
        });
        Server {
            url,
            accepted,
            ended,
            requests,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits until `n` connections in all have ended; fails the test after five seconds.
    async fn ended(&self, n: usize) {
        let mut ended = self.ended.subscribe();
        let wait = ended.wait_for(|&ended| ended >= n);
        let waited = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert!(waited.is_ok(), "{n} connection(s) ended");
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    answers: Arc<Mutex<VecDeque<Answer>>>,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
) {
    let mut buf = Vec::new();
    loop {
        // A request: its head, then as many body bytes as its content-length says.
        let request = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if buf.len() >= end + 4 + length {
                    break buf.drain(..end + 4 + length).collect::<Vec<u8>>();
                }
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        log.lock().unwrap().push(request);
        let Some(answer) = answers.lock().unwrap().pop_front() else {
            return;
        };
        for (i, piece) in answer.pieces.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if stream.write_all(piece).await.is_err() {
                return;
            }
        }
        if answer.close {
            return;
        }
    }
}

/// A client that trusts the test CA, keeping idle connections 90 s.
fn client() -> Client {
    // The test CA stands in for the webpki roots.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(include_bytes!("../testdata/ca.crt")).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(crate::http::proxy::Connector::new(
            tcp,
            crate::http::Proxies::none(),
            Duration::from_secs(10),
            true,
        ));
    Client::new(
        connector,
        Duration::from_secs(90),
        crate::http::Proxies::none(),
    )
}

fn post(url: &str, body: &'static [u8]) -> Request<Bytes> {
    Request::post(format!("{url}/v1/chat/completions"))
        .header("authorization", "Bearer k")
        .body(Bytes::from_static(body))
        .unwrap()
}

/// Sends one request and reads its whole body.
async fn exchange(client: &Client, url: &str) -> Result<(u16, Vec<u8>), TransportFailure> {
    let response = client.send(post(url, b"{}")).await?;
    let status = response.status().as_u16();
    let body = ResponseBody::h1(response.into_body());
    let bytes = body.collect().await?.to_bytes();
    Ok((status, bytes.to_vec()))
}

/// The request's head lines after the request line, sorted, and its body.
fn head_and_body(request: &[u8]) -> (String, Vec<String>, Vec<u8>) {
    let end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(request[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n").map(str::to_owned);
    let first = lines.next().unwrap();
    let mut headers: Vec<String> = lines.collect();
    headers.sort();
    (first, headers, request[end + 4..].to_vec())
}

#[tokio::test]
async fn requests_go_out_as_written_and_connections_are_reused() {
    let server = Server::start(vec![answer(&[OK]), answer(&[OK])]).await;
    let client = client();
    assert_eq!(
        exchange(&client, &server.url).await.unwrap(),
        (200, b"hello".to_vec())
    );
    assert_eq!(client.idle_connections(), 1);
    assert_eq!(
        exchange(&client, &server.url).await.unwrap(),
        (200, b"hello".to_vec())
    );
    assert_eq!(server.accepted(), 1);
    let request = server.requests.lock().unwrap()[0].clone();
    let host = server.url.trim_start_matches("http://");
    assert_eq!(
        head_and_body(&request),
        (
            "POST /v1/chat/completions HTTP/1.1".to_owned(),
            vec![
                "authorization: Bearer k".to_owned(),
                "content-length: 2".to_owned(),
                format!("host: {host}"),
            ],
            b"{}".to_vec()
        )
    );
}

#[tokio::test]
async fn framing_headers_are_the_clients_own_and_empty_bodies_say_so() {
    let server = Server::start(vec![answer(&[OK]), answer(&[OK])]).await;
    let client = client();
    let request = Request::post(format!("{}/v1/x?a=1", server.url))
        .header("content-length", "999")
        .header("transfer-encoding", "chunked")
        .header("connection", "close")
        .body(Bytes::from_static(b"abc"))
        .unwrap();
    let response = client.send(request).await.unwrap();
    drop(
        ResponseBody::h1(response.into_body())
            .collect()
            .await
            .unwrap(),
    );
    let request = Request::post(format!("{}/empty", server.url))
        .body(Bytes::new())
        .unwrap();
    let response = client.send(request).await.unwrap();
    drop(
        ResponseBody::h1(response.into_body())
            .collect()
            .await
            .unwrap(),
    );
    let requests = server.requests.lock().unwrap().clone();
    let host = server.url.trim_start_matches("http://");
    assert_eq!(
        head_and_body(&requests[0]),
        (
            "POST /v1/x?a=1 HTTP/1.1".to_owned(),
            vec!["content-length: 3".to_owned(), format!("host: {host}")],
            b"abc".to_vec()
        )
    );
    assert_eq!(
        head_and_body(&requests[1]).1,
        vec!["content-length: 0".to_owned(), format!("host: {host}")]
    );
    assert_eq!(
        server.accepted(),
        1,
        "the caller's `connection: close` is not sent"
    );
}

#[tokio::test]
async fn a_chunked_body_arrives_piece_by_piece_and_interim_heads_are_skipped() {
    let server = Server::start(vec![
        answer(&[
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"6\r\ndata: \r\n",
            b"3\r\n",
            b"one\r\n",
            b"0\r\n\r\n",
        ]),
        answer(&[OK]),
    ])
    .await;
    let client = client();
    let response = client.send(post(&server.url, b"{}")).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = ResponseBody::h1(response.into_body());
    let mut pieces = Vec::new();
    while let Some(frame) = body.frame().await {
        pieces.push(frame.unwrap().into_data().unwrap());
    }
    assert_eq!(pieces, [&b"data: "[..], b"one"]);
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn a_connection_the_peer_closed_while_idle_is_not_used() {
    // The first answer closes the connection after a complete response: the pooled
    // connection is dead when the second request comes, and must not be the one it uses.
    let server = Server::start(vec![closing(&[OK]), answer(&[OK])]).await;
    let client = client();
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    assert_eq!(server.accepted(), 2);
}

#[tokio::test]
async fn connections_that_cannot_carry_another_request_are_closed() {
    let server = Server::start(vec![
        answer(&[b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 5\r\n\r\nhello"]),
        answer(&[b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nhello"]),
        closing(&[b"HTTP/1.1 200 OK\r\n\r\nuntil ", b"the end"]),
        answer(&[OK]),
    ])
    .await;
    let client = client();
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    assert_eq!(
        exchange(&client, &server.url).await.unwrap().1,
        b"until the end"
    );
    assert_eq!(client.idle_connections(), 0);
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    assert_eq!(server.accepted(), 4);
}

#[tokio::test]
async fn broken_answers_fail_with_their_kind() {
    let cases: [(Answer, TransportKind, &str); 6] = [
        (
            closing(&[]),
            TransportKind::ConnectionReset,
            "connection closed before message completed",
        ),
        (
            closing(&[b"HTTP/1.1 200 OK\r\ncontent-le"]),
            TransportKind::ConnectionReset,
            "connection closed before message completed",
        ),
        (
            answer(&[b"HTTP/1.1 abc\r\n\r\n"]),
            TransportKind::ConnectionReset,
            "invalid HTTP status-code parsed",
        ),
        (
            closing(&[b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhello"]),
            TransportKind::Truncated,
            "error reading a body from connection: end of file before message length reached",
        ),
        (
            closing(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"]),
            TransportKind::Truncated,
            "error reading a body from connection: unexpected EOF during chunk size line",
        ),
        (
            answer(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nxyz\r\n"]),
            TransportKind::BodyDecode,
            "error reading a body from connection: Invalid chunk size line: missing size digit",
        ),
    ];
    for (answer, kind, message) in cases {
        let server = Server::start(vec![answer]).await;
        let failure = exchange(&client(), &server.url).await.unwrap_err();
        assert_eq!((failure.kind, failure.message.as_str()), (kind, message));
    }
    let failure = exchange(&client(), "http://127.0.0.1:1").await.unwrap_err();
    assert_eq!(failure.kind, TransportKind::ConnectionRefused);
}

#[tokio::test]
async fn a_head_over_the_limit_is_refused() {
    let huge: &'static [u8] = format!(
        "HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 0\r\n\r\n",
        "a".repeat(super::MAX_HEAD)
    )
    .leak()
    .as_bytes();
    let server = Server::start(vec![answer(&[huge])]).await;
    let failure = exchange(&client(), &server.url).await.unwrap_err();
    assert_eq!(failure.kind, TransportKind::ConnectionReset);
    assert_eq!(failure.message, "message head is too large");
}

#[tokio::test]
async fn a_large_request_body_goes_out_whole() {
    static BIG: [u8; 200_000] = [b'x'; 200_000];
    let server = Server::start(vec![answer(&[OK])]).await;
    let client = client();
    let response = client.send(post(&server.url, &BIG)).await.unwrap();
    assert_eq!(response.status(), 200);
    let request = server.requests.lock().unwrap()[0].clone();
    assert!(request.ends_with(&BIG));
    assert!(request.starts_with(b"POST /v1/chat/completions HTTP/1.1\r\n"));
}

#[tokio::test]
async fn an_upstream_that_does_not_speak_tls_fails_as_tls() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        }
    });
    let failure = exchange(&client(), &format!("https://{addr}"))
        .await
        .unwrap_err();
    assert_eq!(failure.kind, TransportKind::Tls, "{}", failure.message);
    assert_eq!(
        failure.message,
        "the upstream did not answer in TLS: its base URL says https:// for a port that speaks \
         plain HTTP? (received corrupt message of type InvalidContentType)"
    );
}

#[tokio::test]
async fn tls_connections_carry_answers_and_streams_and_are_reused() {
    let server = Server::start_tls(vec![
        answer(&[OK]),
        answer(&[
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"5\r\nhello\r\n",
            b"0\r\n\r\n",
        ]),
    ])
    .await;
    let client = client();
    assert_eq!(
        exchange(&client, &server.url).await.unwrap(),
        (200, b"hello".to_vec())
    );
    assert_eq!(
        exchange(&client, &server.url).await.unwrap(),
        (200, b"hello".to_vec())
    );
    assert_eq!(server.accepted(), 1);
}

/// Sends one request and hands over its body unread.
async fn body_of(client: &Client, url: &str) -> ResponseBody {
    let response = client.send(post(url, b"{}")).await.unwrap();
    ResponseBody::h1(response.into_body())
}

#[tokio::test]
async fn a_whole_read_refuses_a_body_over_its_limit_where_a_prefix_read_cuts_it() {
    let server = Server::start(vec![answer(&[OK]), answer(&[OK]), answer(&[OK])]).await;
    let client = client();
    let (idle, never) = (Duration::from_secs(5), std::future::pending);
    let mut exact = body_of(&client, &server.url).await;
    let whole = read_whole(&mut exact, 5, idle, never()).await;
    assert_eq!(whole.unwrap(), "hello");
    let mut over = body_of(&client, &server.url).await;
    let failure = read_whole(&mut over, 4, idle, never())
        .await
        .unwrap_err()
        .unwrap();
    assert_eq!(failure.kind, TransportKind::Truncated);
    assert_eq!(
        failure.message,
        "the response is larger than 4 bytes, the most read"
    );
    let mut cut = body_of(&client, &server.url).await;
    let prefix = read_body(&mut cut, 4, idle, never()).await;
    assert_eq!(prefix.unwrap(), "hell");
}

#[test]
fn a_plain_connection_carries_no_room_for_tls_state() {
    // TLS state is over 1 KiB; boxed, it costs a plain connection a pointer.
    let plain = std::mem::size_of::<tokio::net::TcpStream>();
    assert!(std::mem::size_of::<super::Stream>() <= plain + std::mem::size_of::<usize>());
}

mod lifetime;
