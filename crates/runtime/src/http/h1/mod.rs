//! rebound's own HTTP/1.1 client: one request at a time on a pooled connection, driven by the
//! task that sends the request, with no retries of its own (B5).
//!
//! The task that asks is the task that writes the request and reads the answer: there is no
//! connection task and no channel between them, so a request costs no hand-offs between
//! tasks. A connection keeps no read buffer while it waits: each read goes through a buffer
//! on the stack, and only bytes not yet handed out stay on the heap. An open stream therefore
//! costs its socket and a few hundred bytes of state.

mod pool;
pub mod wire;

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Request, Response};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use rebound_core::TransportKind;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tower_service::Service;

use self::pool::{Key, Pool};
use self::wire::{BodyDecoder, Decoded, ResponseHead, WireError};
use super::{TransportFailure, classify_connect, error_chain};

/// The most read from a socket at once.
const READ_SIZE: usize = 16 << 10;

/// A request body up to this size goes out in the same write as the head.
const COALESCE: usize = 64 << 10;

/// A connection's socket. TLS state is large (over 1 KiB), so it is boxed: a plain connection
/// does not carry room for it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TokioIo<MaybeHttpsStream<TokioIo<TcpStream>>>>),
}

impl Stream {
    fn new(connected: MaybeHttpsStream<TokioIo<TcpStream>>) -> Self {
        match connected {
            MaybeHttpsStream::Http(tcp) => Stream::Plain(tcp.into_inner()),
            tls => Stream::Tls(Box::new(TokioIo::new(tls))),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One connection to an upstream, plain or TLS.
pub(crate) struct Connection {
    io: Stream,
    /// Bytes read but not yet handed out. Empty (and unallocated) between responses.
    pending: BytesMut,
}

impl Connection {
    /// Reads once from the socket into `pending`: `Ok(0)` at the end of the connection.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut stack = [const { MaybeUninit::<u8>::uninit() }; READ_SIZE];
        let mut buf = ReadBuf::uninit(&mut stack);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf))?;
        self.pending.extend_from_slice(buf.filled());
        Poll::Ready(Ok(buf.filled().len()))
    }

    /// Whether an idle connection can take a request: the peer has neither closed it nor
    /// sent anything.
    fn is_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        self.pending.is_empty() && self.poll_fill(&mut cx).is_pending()
    }

    /// Writes `first`, then `rest` (a body too large to copy into `first`).
    async fn write_request(&mut self, first: &[u8], rest: &[u8]) -> io::Result<()> {
        self.io.write_all(first).await?;
        if !rest.is_empty() {
            self.io.write_all(rest).await?;
        }
        self.io.flush().await
    }

    /// Reads the final response head, skipping interim (1xx) ones.
    async fn read_head(&mut self) -> Result<ResponseHead, TransportFailure> {
        loop {
            if !self.pending.is_empty() {
                match wire::parse_response_head(&self.pending) {
                    Ok(Some((head, len))) => {
                        self.pending.advance(len);
                        if self.pending.is_empty() {
                            self.pending = BytesMut::new();
                        }
                        if head.is_interim() {
                            continue;
                        }
                        return Ok(head);
                    }
                    Ok(None) => {}
                    Err(e) => return Err(reset(format!("a malformed response: {e}"))),
                }
            }
            match std::future::poll_fn(|cx| self.poll_fill(cx)).await {
                Ok(0) if self.pending.is_empty() => {
                    return Err(reset("the connection closed before a response".into()));
                }
                Ok(0) => {
                    return Err(reset(
                        "the connection closed in the middle of the response head".into(),
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(reset(format!(
                        "reading the response head: {}",
                        error_chain(&e)
                    )));
                }
            }
        }
    }
}

fn reset(message: String) -> TransportFailure {
    TransportFailure {
        kind: TransportKind::ConnectionReset,
        message,
    }
}

/// The HTTP/1.1 side of [`super::HttpClient`].
#[derive(Clone, Debug)]
pub(crate) struct Client {
    connector: HttpsConnector<HttpConnector>,
    pool: Arc<Pool>,
}

impl Client {
    pub(crate) fn new(connector: HttpsConnector<HttpConnector>, idle_timeout: Duration) -> Self {
        Client {
            connector,
            pool: Arc::new(Pool::new(idle_timeout)),
        }
    }

    /// Connections waiting for a request.
    #[cfg(test)]
    pub(crate) fn idle_connections(&self) -> usize {
        self.pool.idle_count()
    }

    async fn connect(&self, uri: &http::Uri) -> Result<Box<Connection>, TransportFailure> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| classify_connect(&*e))?;
        let stream = connector
            .call(uri.clone())
            .await
            .map_err(|e| classify_connect(&*e))?;
        Ok(Box::new(Connection {
            io: Stream::new(stream),
            pending: BytesMut::new(),
        }))
    }

    /// Sends `request` and reads the response head. The body is read through the returned
    /// [`Body`], which gives the connection back to the pool once it is read to its end.
    pub(crate) async fn send(
        &self,
        request: Request<Bytes>,
    ) -> Result<Response<Body>, TransportFailure> {
        let (parts, body) = request.into_parts();
        let key = Key::of(&parts.uri).ok_or_else(|| TransportFailure {
            kind: TransportKind::ConnectionRefused,
            message: format!("the URL `{}` names no host", parts.uri),
        })?;
        // A body up to COALESCE goes out in the head's write, in the head's buffer.
        let coalesce = body.len() <= COALESCE;
        let room = if coalesce { body.len() } else { 0 };
        let mut head =
            wire::encode_request_head(&parts.method, &parts.uri, &parts.headers, body.len(), room);
        let rest: &[u8] = if coalesce {
            head.extend_from_slice(&body);
            &[]
        } else {
            &body
        };
        let mut conn = match self.pool.take(&key) {
            Some(conn) => conn,
            None => self.connect(&parts.uri).await?,
        };
        let written = conn.write_request(&head, rest).await;
        let response = match conn.read_head().await {
            Ok(response) => response,
            // A peer that closed before reading the whole request may still have answered
            // (a 413, say); without an answer, the write's error is the one to report.
            Err(failure) => {
                return Err(match written {
                    Err(e) => reset(format!("sending the request: {}", error_chain(&e))),
                    Ok(()) => failure,
                });
            }
        };
        let framing = response
            .framing(&parts.method)
            .map_err(|e: WireError| reset(format!("a malformed response: {e}")))?;
        let decoder = BodyDecoder::new(framing);
        let reuse = (written.is_ok() && response.keep_alive() && !decoder.is_close_delimited())
            .then(|| Checkin {
                pool: Arc::clone(&self.pool),
                key,
            });
        let mut body = Body {
            conn: Some(conn),
            decoder,
            reuse,
        };
        if body.decoder.is_done() {
            finish(&mut body.conn, &mut body.reuse);
        }
        let mut out = Response::new(body);
        *out.status_mut() = response.status;
        *out.version_mut() = response.version;
        *out.headers_mut() = response.headers;
        Ok(out)
    }
}

/// Where a connection goes back once its response is read.
struct Checkin {
    pool: Arc<Pool>,
    key: Key,
}

/// A response body read straight from its connection.
pub(crate) struct Body {
    conn: Option<Box<Connection>>,
    decoder: BodyDecoder,
    reuse: Option<Checkin>,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("open", &self.conn.is_some())
            .field("decoder", &self.decoder)
            .finish()
    }
}

/// Gives a connection whose response was read to the end back to the pool, when it may carry
/// another request and nothing follows the response; else closes it.
fn finish(conn: &mut Option<Box<Connection>>, reuse: &mut Option<Checkin>) {
    if let (Some(conn), Some(checkin)) = (conn.take(), reuse.take())
        && conn.pending.is_empty()
    {
        checkin.pool.put(checkin.key, conn);
    }
}

impl Drop for Body {
    /// A reader that stops at a stream's final event leaves the end of the body (the last
    /// chunk, its trailers) unread. When that end has already arrived, the connection still
    /// goes back to the pool: what is pending and what the socket holds are decoded, without
    /// waiting. Body bytes nobody read, or an end still on its way, close the connection.
    fn drop(&mut self) {
        if self.conn.is_some() && self.reuse.is_some() {
            let _ = self.poll_data(&mut Context::from_waker(Waker::noop()));
        }
    }
}

impl Body {
    /// Whether the whole body was read.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.conn.is_none() && self.decoder.is_done()
    }

    /// The next piece of the body; `None` at its end.
    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, TransportFailure>>> {
        let Body {
            conn: slot,
            decoder,
            reuse,
        } = self;
        loop {
            let Some(conn) = slot.as_deref_mut() else {
                return Poll::Ready(None);
            };
            match decoder.decode(&mut conn.pending) {
                Ok(Decoded::Data(data)) => {
                    if decoder.is_done() {
                        finish(slot, reuse);
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                Ok(Decoded::End) => {
                    finish(slot, reuse);
                    return Poll::Ready(None);
                }
                Ok(Decoded::NeedMore) => {
                    // Framing consumed to the last byte: let go of the buffer while waiting.
                    if conn.pending.is_empty() {
                        conn.pending = BytesMut::new();
                    }
                }
                Err(e) => {
                    *slot = None;
                    return Poll::Ready(Some(Err(TransportFailure {
                        kind: TransportKind::BodyDecode,
                        message: e.to_string(),
                    })));
                }
            }
            let read = ready!(conn.poll_fill(cx));
            match read {
                Ok(0) => {
                    *slot = None;
                    return Poll::Ready(decoder.at_eof().err().map(|e| {
                        Err(TransportFailure {
                            kind: TransportKind::Truncated,
                            message: e.to_string(),
                        })
                    }));
                }
                Ok(_) => {}
                Err(e) => {
                    *slot = None;
                    return Poll::Ready(Some(Err(TransportFailure {
                        kind: TransportKind::Truncated,
                        message: format!("reading the response body: {}", error_chain(&e)),
                    })));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
