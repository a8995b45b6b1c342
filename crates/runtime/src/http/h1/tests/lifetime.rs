//! A connection's life: early answers while the body goes out, bodies dropped before or at
//! their end, the idle reaper, and a kept connection the peer drops.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rebound_core::TransportKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Answer, OK, Server, answer, body_of, client, closing, exchange};
use crate::http::read_whole;

/// Reads the first piece of `first`'s body and drops the body, then waits until its
/// connection went back to the pool (`kept`) or closed, and sends another request: how many
/// connections waited in between, and how many the server accepted in all.
async fn drop_after_the_first_piece(first: Answer, kept: bool) -> (usize, usize) {
    let server = Server::start(vec![first, answer(&[OK])]).await;
    let client = client();
    let mut body = body_of(&client, &server.url).await;
    let piece = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(piece, "hello");
    drop(body);
    if kept {
        let waited = tokio::time::timeout(Duration::from_secs(5), client.put_back(1)).await;
        assert!(waited.is_ok(), "the connection went back to the pool");
    } else {
        server.ended(1).await;
    }
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
    assert_eq!(drop_after_the_first_piece(first, false).await, (0, 2));
}

#[tokio::test]
async fn a_body_dropped_after_its_last_piece_keeps_its_connection() {
    // A stream reader stops at the final event; the last chunk came with it.
    let first =
        answer(&[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]);
    assert_eq!(drop_after_the_first_piece(first, true).await, (1, 1));
}

#[tokio::test]
async fn dropping_a_body_reads_nothing_and_an_end_that_came_meanwhile_keeps_the_connection() {
    // A stream reader stops at the final event; the last chunk reaches the socket after the
    // reader's last read and before it lets go. Dropping the body must not read it (no socket
    // I/O in `drop`); a task does, and gives the connection back.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let (read_tx, read_rx) = tokio::sync::oneshot::channel::<()>();
    let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        count.fetch_add(1, Ordering::SeqCst);
        // Further connections are counted, not served.
        tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        let mut buf = Vec::new();
        let mut read_request = async |stream: &mut tokio::net::TcpStream| {
            while !buf.ends_with(b"\r\n\r\n{}") {
                let mut chunk = [0u8; 1024];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.clear();
        };
        read_request(&mut stream).await;
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
        stream.write_all(head).await.unwrap();
        read_rx.await.unwrap();
        stream.write_all(b"0\r\n\r\n").await.unwrap();
        // On loopback the bytes are in the client's socket once the write returns.
        sent_tx.send(()).unwrap();
        read_request(&mut stream).await;
        stream.write_all(OK).await.unwrap();
        let _ = stream.read(&mut [0u8; 1]).await;
    });
    let client = client();
    let mut body = body_of(&client, &url).await;
    let piece = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(piece, "hello");
    read_tx.send(()).unwrap();
    sent_rx.await.unwrap();
    drop(body);
    assert_eq!(
        client.idle_connections(),
        0,
        "the end waiting in the socket was not read in drop"
    );
    let waited = tokio::time::timeout(Duration::from_secs(5), client.put_back(1)).await;
    assert!(waited.is_ok(), "the connection went back to the pool");
    assert_eq!(exchange(&client, &url).await.unwrap().1, b"hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_early_answer_is_read_while_the_request_body_is_still_going_out() {
    // RFC 9112 9.5: the upstream reads the head, answers 413 at once and stops reading. The
    // body is far larger than the socket buffers hold, so it cannot all go out first.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (hold_tx, hold_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut chunk = [0u8; 1024];
            let n = stream.read(&mut chunk).await.unwrap();
            seen.extend_from_slice(&chunk[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 9\r\n\r\ntoo large")
            .await
            .unwrap();
        // Reads nothing more; holds the connection until the test ends.
        let _ = hold_rx.await;
        drop(stream);
    });
    let client = crate::http::HttpClient::new(crate::http::Timeouts {
        first_byte: Duration::from_secs(60),
        ..crate::http::Timeouts::default()
    })
    .unwrap();
    let body = Bytes::from(vec![b'x'; 32 << 20]);
    let request = Request::post(format!("{url}/v1/chat/completions"))
        .body(body)
        .unwrap();
    let started = std::time::Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(10), client.send(request))
        .await
        .expect("the early answer comes before the body has gone out")
        .unwrap();
    assert_eq!(response.status(), 413);
    let mut body = response.into_body();
    let text = read_whole(
        &mut body,
        1 << 10,
        Duration::from_secs(5),
        std::future::pending(),
    );
    assert_eq!(text.await.unwrap(), "too large");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        client.http1.idle_connections(),
        0,
        "a half-sent request's connection is closed"
    );
    drop(hold_tx);
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    let server = Server::start(vec![answer(&[OK]), answer(&[OK])]).await;
    let client = client();
    exchange(&client, &server.url).await.unwrap();
    assert_eq!(client.idle_connections(), 1);
    // The clock moves only when told to while the connection waits.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(89)).await;
    assert_eq!(client.idle_connections(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    tokio::time::resume();
    // Nothing but the reaper closes it: the server sees the close.
    server.ended(1).await;
    assert_eq!(client.idle_connections(), 0);
    // The reaper ended with the pool empty; the next connection starts it again.
    exchange(&client, &server.url).await.unwrap();
    assert_eq!((client.idle_connections(), server.accepted()), (1, 2));
}

#[tokio::test]
async fn a_reused_connection_the_peer_drops_fails_the_attempt_and_is_not_retried() {
    // The second request reaches the server on the kept connection, which then closes without
    // an answer: the attempt fails, and nothing is sent again.
    let server = Server::start(vec![answer(&[OK]), closing(&[])]).await;
    let client = client();
    exchange(&client, &server.url).await.unwrap();
    let failure = exchange(&client, &server.url).await.unwrap_err();
    assert_eq!(failure.kind, TransportKind::ConnectionReset);
    assert_eq!(server.accepted(), 1);
    assert_eq!(server.requests.lock().unwrap().len(), 2);
}
