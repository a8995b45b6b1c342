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
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Server {
    async fn start(answers: Vec<Answer>) -> Server {
        Server::start_with(answers, None).await
    }

    /// The same server behind TLS, with the test certificate for 127.0.0.1.
    async fn start_tls(answers: Vec<Answer>) -> Server {
        let certs = CertificateDer::pem_slice_iter(include_bytes!("testdata/localhost.crt"))
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("testdata/localhost.key")).unwrap();
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
        let requests = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        let (count, log) = (Arc::clone(&accepted), Arc::clone(&requests));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let (answers, log) = (Arc::clone(&answers), Arc::clone(&log));
                match tls.clone() {
                    None => drop(tokio::spawn(serve(stream, answers, log))),
                    Some(tls) => drop(tokio::spawn(async move {
                        if let Ok(stream) = tls.accept(stream).await {
                            serve(stream, answers, log).await;
                        }
                    })),
                }
            }
        });
        Server {
            url,
            accepted,
            requests,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
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

fn client() -> Client {
    client_with_idle_timeout(Duration::from_secs(90))
}

fn client_with_idle_timeout(idle: Duration) -> Client {
    // The test CA stands in for the webpki roots.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(include_bytes!("testdata/ca.crt")).unwrap())
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
        .wrap_connector(tcp);
    Client::new(connector, idle)
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
    let request = String::from_utf8(server.requests.lock().unwrap()[0].clone()).unwrap();
    let host = server.url.trim_start_matches("http://");
    assert_eq!(
        request,
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n\
             authorization: Bearer k\r\ncontent-length: 2\r\n\r\n{{}}"
        )
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

/// Reads the first piece of `first`'s body and drops the body, then sends another request:
/// how many connections waited in between, and how many the server accepted in all.
async fn drop_after_the_first_piece(first: Answer) -> (usize, usize) {
    let server = Server::start(vec![first, answer(&[OK])]).await;
    let client = client();
    let mut body = body_of(&client, &server.url).await;
    let piece = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(piece, "hello");
    drop(body);
    let idle = client.idle_connections();
    assert_eq!(exchange(&client, &server.url).await.unwrap().1, b"hello");
    (idle, server.accepted())
}

#[tokio::test]
async fn a_body_dropped_before_its_end_closes_its_connection() {
    let first = answer(&[
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello",
        b"world",
    ]);
    assert_eq!(drop_after_the_first_piece(first).await, (0, 2));
}

#[tokio::test]
async fn a_body_dropped_after_its_last_piece_keeps_its_connection() {
    // A stream reader stops at the final event; the last chunk came with it.
    let first =
        answer(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]);
    assert_eq!(drop_after_the_first_piece(first).await, (1, 1));
}

#[tokio::test]
async fn broken_answers_fail_with_their_kind() {
    let cases: [(Answer, TransportKind, &str); 5] = [
        (
            closing(&[]),
            TransportKind::ConnectionReset,
            "the connection closed before a response",
        ),
        (
            closing(&[b"HTTP/1.1 200 OK\r\ncontent-le"]),
            TransportKind::ConnectionReset,
            "the connection closed in the middle of the response head",
        ),
        (
            closing(&[b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhello"]),
            TransportKind::Truncated,
            "the connection closed 4 bytes before the end of the body",
        ),
        (
            closing(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"]),
            TransportKind::Truncated,
            "the connection closed before the chunked body's last chunk",
        ),
        (
            answer(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nxyz\r\n"]),
            TransportKind::BodyDecode,
            "invalid chunked body: bad chunk-size line `xyz`",
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
async fn idle_connections_expire() {
    let server = Server::start(vec![answer(&[OK]), answer(&[OK])]).await;
    let client = client_with_idle_timeout(Duration::from_millis(30));
    exchange(&client, &server.url).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    exchange(&client, &server.url).await.unwrap();
    assert_eq!(server.accepted(), 2);
}

#[tokio::test]
async fn a_waiting_stream_holds_no_read_buffer() {
    let server = Server::start(vec![answer(&[
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
        b"6\r\ndata: \r\n",
    ])])
    .await;
    let client = client();
    let response = client.send(post(&server.url, b"{}")).await.unwrap();
    let mut body = response.into_body();
    let first = std::future::poll_fn(|cx| body.poll_data(cx)).await;
    assert_eq!(first.unwrap().unwrap(), "data: ");
    // The next piece has not come: the poll finds nothing, and keeps no buffer for it.
    let waker = std::task::Waker::noop();
    let pending = body.poll_data(&mut std::task::Context::from_waker(waker));
    assert!(pending.is_pending());
    let conn = body.conn.as_ref().unwrap();
    assert_eq!(conn.pending.capacity(), 0);
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
    assert!(std::mem::size_of::<super::Connection>() <= 128);
}
