//! HTTP/1.1 upstream connections: hyper's connection-level client
//! (`hyper::client::conn::http1`), driven by the task that sends the request, over a small pool
//! of rebound's own, with no retries (B5).
//!
//! hyper parses and frames; this module decides which connection carries a request and when
//! one is kept. There is no connection task: the future that waits for the answer polls the
//! connection itself, and so does the body while it is read, so a request costs no hand-offs
//! between tasks. While the request body is still going out, the connection reads too: an
//! upstream that answers early (a 413, say) and stops reading is heard at once.

mod pool;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, Uri, header};
use http_body::{Body as _, Frame};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::rt::TokioIo;
use rebound_core::TransportKind;
use tokio::net::TcpStream;
use tower_service::Service;

use self::pool::{Key, Pool};
use super::proxy::Proxies;
use super::{TransportFailure, body_failure, classify_connect, error_chain};

/// The largest response head (status line and headers), and the largest trailer section.
const MAX_HEAD: usize = 64 << 10;

/// The most headers a response head may have.
const MAX_HEADERS: usize = 128;

/// A connection's socket. TLS state is large (over 1 KiB), so it is boxed: a plain connection
/// does not carry room for it.
enum Stream {
    Plain(TokioIo<TcpStream>),
    Tls(Box<MaybeHttpsStream<TokioIo<TcpStream>>>),
}

impl Stream {
    fn new(connected: MaybeHttpsStream<TokioIo<TcpStream>>) -> Self {
        match connected {
            MaybeHttpsStream::Http(tcp) => Stream::Plain(tcp),
            tls => Stream::Tls(Box::new(tls)),
        }
    }
}

impl Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for Stream {
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

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
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

/// One connection to an upstream: hyper's handle to send on it and the connection itself,
/// which does its I/O only when polled.
pub(crate) struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    conn: http1::Connection<Stream, Full<Bytes>>,
    /// The connection finished (closed, or failed with this error); it is not polled again.
    ended: Option<Result<(), hyper::Error>>,
}

impl Connection {
    /// Does the connection's pending I/O: reads what came, writes what waits.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if self.ended.is_none()
            && let Poll::Ready(result) = Pin::new(&mut self.conn).poll(cx)
        {
            self.ended = Some(result);
        }
    }

    /// Whether an idle connection can take a request: the peer has neither closed it nor sent
    /// anything (either ends the connection when it is polled).
    fn is_open(&mut self, cx: &mut Context<'_>) -> bool {
        self.drive(cx);
        self.ended.is_none() && self.sender.is_ready()
    }

    /// Whether the connection may carry another request: its exchange ended cleanly, both ways
    /// (hyper then asks for the next request).
    fn is_reusable(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.sender.is_ready() {
            self.drive(cx);
        }
        self.ended.is_none() && self.sender.is_ready()
    }

    /// Sends `request` and waits for the response head, driving the connection meanwhile.
    async fn exchange(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, TransportFailure> {
        std::future::poll_fn(|cx| {
            if self.sender.poll_ready(cx).is_pending() {
                self.drive(cx);
            }
            match self.sender.poll_ready(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(request_failure(&e, &self.ended))),
                Poll::Pending if self.ended.is_some() => Poll::Ready(Err(self.closed())),
                Poll::Pending => Poll::Pending,
            }
        })
        .await?;
        let mut response = std::pin::pin!(self.sender.send_request(request));
        std::future::poll_fn(|cx| {
            self.drive(cx);
            match response.as_mut().poll(cx) {
                Poll::Ready(Ok(response)) => Poll::Ready(Ok(response)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(request_failure(&e, &self.ended))),
                Poll::Pending if self.ended.is_some() => Poll::Ready(Err(self.closed())),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// The failure of a connection that ended without answering.
    fn closed(&self) -> TransportFailure {
        match &self.ended {
            Some(Err(e)) => request_failure(e, &None),
            _ => reset("the connection closed before a response".into()),
        }
    }
}

/// The kind of a failure before the response head: the request's own error, or the
/// connection's when it says more (hyper hands the request "connection closed" when the
/// connection broke).
fn request_failure(e: &hyper::Error, ended: &Option<Result<(), hyper::Error>>) -> TransportFailure {
    let e = match ended {
        Some(Err(conn)) if e.is_canceled() => conn,
        _ => e,
    };
    let mut message = error_chain(e);
    if e.is_parse() && message.contains(NO_HTTP_VERSION) {
        message = format!("{NOT_HTTP} ({message})");
    }
    let kind = if e.is_timeout() {
        TransportKind::Timeout
    } else {
        // Closed before a response, resets, broken pipes, malformed heads.
        TransportKind::ConnectionReset
    };
    TransportFailure { kind, message }
}

/// hyper's words for an answer whose first bytes are no `HTTP/1.x` status line.
const NO_HTTP_VERSION: &str = "invalid HTTP version parsed";

/// What a person reads for it: most often a TLS server's alert to a plain request (the base
/// URL says http:// for a port that speaks TLS), or an HTTP/2-only server's first frame. hyper's
/// own words stay in the message, which the catalogue reads (`rust.hyper_not_http_answer`).
const NOT_HTTP: &str = "the upstream did not answer in HTTP/1.1: its base URL says http:// for a port that speaks TLS, or HTTP/2 only?";

fn reset(message: String) -> TransportFailure {
    TransportFailure {
        kind: TransportKind::ConnectionReset,
        message,
    }
}

/// The HTTP/1.1 side of [`super::HttpClient`].
#[derive(Clone, Debug)]
pub(crate) struct Client {
    connector: HttpsConnector<super::proxy::Connector>,
    builder: http1::Builder,
    pool: Arc<Pool>,
    /// The connector's proxies: a plain `http://` request it hands to an HTTP proxy goes in
    /// absolute form, with the proxy's credentials.
    proxies: Proxies,
}

impl Client {
    pub(crate) fn new(
        connector: HttpsConnector<super::proxy::Connector>,
        idle_timeout: Duration,
        proxies: Proxies,
    ) -> Self {
        let mut builder = http1::Builder::new();
        builder
            .max_buf_size(MAX_HEAD)
            .max_header_size(MAX_HEAD)
            .max_headers(MAX_HEADERS)
            .writev(true);
        Client {
            connector,
            builder,
            pool: Arc::new(Pool::new(idle_timeout)),
            proxies,
        }
    }

    /// Connections waiting for a request.
    #[cfg(test)]
    pub(crate) fn idle_connections(&self) -> usize {
        self.pool.idle_count()
    }

    /// Waits until `n` connections in all have gone back to the pool.
    #[cfg(test)]
    pub(crate) async fn put_back(&self, n: usize) {
        self.pool.put_back(n).await;
    }

    async fn connect(&self, uri: &Uri) -> Result<Box<Connection>, TransportFailure> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| classify_connect(&*e))?;
        let stream = connector
            .call(uri.clone())
            .await
            .map_err(|e| classify_connect(&*e))?;
        let (sender, conn) = self
            .builder
            .handshake(Stream::new(stream))
            .await
            .map_err(|e| reset(error_chain(&e)))?;
        Ok(Box::new(Connection {
            sender,
            conn,
            ended: None,
        }))
    }

    /// The newest idle connection for `key` that is still open.
    async fn checkout(&self, key: &Key) -> Option<Box<Connection>> {
        loop {
            let mut conn = self.pool.take(key)?;
            if std::future::poll_fn(|cx| Poll::Ready(conn.is_open(cx))).await {
                return Some(conn);
            }
        }
    }

    /// Sends `request` and reads the response head. The body is read through the returned
    /// [`Body`], which gives the connection back to the pool once it is read to its end.
    pub(crate) async fn send(
        &self,
        request: Request<Bytes>,
    ) -> Result<Response<Body>, TransportFailure> {
        let (mut parts, body) = request.into_parts();
        let key = Key::of(&parts.uri).ok_or_else(|| TransportFailure {
            kind: TransportKind::ConnectionRefused,
            message: format!("the URL `{}` names no host", parts.uri),
        })?;
        let uri = std::mem::replace(&mut parts.uri, Uri::from_static("/"));
        for name in [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONNECTION,
        ] {
            parts.headers.remove(name);
        }
        if !parts.headers.contains_key(header::HOST)
            && let Some(host) = host_header(&uri)
        {
            parts.headers.insert(header::HOST, host);
        }
        if body.is_empty() && !(parts.method == Method::GET || parts.method == Method::HEAD) {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        }
        // hyper writes the target as given: origin form, or absolute form to a proxy.
        let forward = self.proxies.forward(&uri);
        match &forward {
            Some(forward) => {
                parts.uri = uri.clone();
                if let Some(auth) = &forward.auth {
                    parts
                        .headers
                        .insert(header::PROXY_AUTHORIZATION, auth.clone());
                }
            }
            None => {
                if let Some(target) = uri.path_and_query() {
                    parts.uri = Uri::from(target.clone());
                }
            }
        }
        let mut conn = match self.checkout(&key).await {
            Some(conn) => conn,
            None => self.connect(&uri).await?,
        };
        let response = conn
            .exchange(Request::from_parts(parts, Full::new(body)))
            .await?;
        if let Some(message) =
            forward.and_then(|f| f.refused(&uri, response.status(), response.headers()))
        {
            return Err(TransportFailure {
                kind: TransportKind::ConnectionRefused,
                message,
            });
        }
        let (parts, incoming) = response.into_parts();
        let body = Body {
            open: Some(Open {
                incoming,
                conn,
                checkin: Checkin {
                    pool: Arc::clone(&self.pool),
                    key,
                },
            }),
            ended: false,
        };
        Ok(Response::from_parts(parts, body))
    }
}

/// The `host` header for `uri`: its host, and its port unless the scheme's default.
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
        443
    } else {
        80
    };
    match uri.port_u16().filter(|&p| p != default_port) {
        Some(port) => HeaderValue::try_from(format!("{host}:{port}")).ok(),
        None => HeaderValue::from_str(host).ok(),
    }
}

/// Where a connection goes back once its response is read.
struct Checkin {
    pool: Arc<Pool>,
    key: Key,
}

/// How long a body dropped before its end may still take to end, when nothing but its end
/// is left to come (a stream whose reader stopped at its final event).
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// A response body, read while its connection is driven.
pub(crate) struct Body {
    /// hyper's body and the connection it comes on, until the body ends or fails.
    open: Option<Open>,
    /// The body was read to its end.
    ended: bool,
}

struct Open {
    incoming: Incoming,
    conn: Box<Connection>,
    checkin: Checkin,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("open", &self.open.is_some())
            .field("ended", &self.ended)
            .finish()
    }
}

impl Open {
    /// One frame of the body; `None` at the end. The body is asked first: hyper reads body
    /// bytes from the socket only once its reader wants them, so the connection is driven
    /// after the ask and the body asked again, without a wake-up in between.
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportFailure>>> {
        let mut frame = Pin::new(&mut self.incoming).poll_frame(cx);
        if frame.is_pending() {
            self.conn.drive(cx);
            frame = Pin::new(&mut self.incoming).poll_frame(cx);
        }
        Poll::Ready(match std::task::ready!(frame) {
            Some(Ok(frame)) => Some(Ok(frame)),
            // hyper tells the body only that its connection failed; the connection's own
            // error says how.
            Some(Err(e)) => Some(Err(match &self.conn.ended {
                Some(Err(conn)) => body_failure(conn),
                _ => body_failure(&e),
            })),
            None => None,
        })
    }

    /// The body was read to its end: the connection goes back to the pool when it can carry
    /// another request, and is closed otherwise.
    fn finish(mut self, cx: &mut Context<'_>) {
        if self.conn.is_reusable(cx) {
            self.checkin.pool.put(self.checkin.key, self.conn);
        }
    }

    /// Waits a little for the end of a body nobody reads any more, and gives its connection
    /// back to the pool if the end comes; data, a failure or the wait running out close it.
    async fn drain(self) {
        let mut open = Some(self);
        let drained = std::future::poll_fn(|cx| {
            loop {
                let Some(body) = open.as_mut() else {
                    return Poll::Ready(());
                };
                match std::task::ready!(body.poll_frame(cx)) {
                    Some(Ok(frame)) if frame.is_trailers() => {}
                    Some(_) => open = None,
                    None => {
                        if let Some(body) = open.take() {
                            body.finish(cx);
                        }
                    }
                }
            }
        });
        let _ = tokio::time::timeout(DRAIN_WAIT, drained).await;
    }
}

impl Body {
    /// Whether the whole body was read.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.ended
    }

    /// The next frame of the body; `None` at its end.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportFailure>>> {
        let Some(open) = self.open.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = std::task::ready!(open.poll_frame(cx));
        match &frame {
            Some(Ok(_)) => {}
            Some(Err(_)) => self.open = None,
            None => {
                self.ended = true;
                if let Some(open) = self.open.take() {
                    open.finish(cx);
                }
            }
        }
        Poll::Ready(frame)
    }
}

impl Drop for Body {
    /// A reader that stops at a stream's final event leaves the end of the body (the last
    /// chunk) unread, and it may not even have arrived. Nothing is read here: a body whose end
    /// hyper has already taken gives its connection back at once, and any other goes to a
    /// task that waits briefly for the end ([`DRAIN_WAIT`]). Body bytes nobody read close the
    /// connection.
    fn drop(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        if open.conn.ended.is_some() {
            return;
        }
        if open.incoming.is_end_stream() && open.conn.sender.is_ready() {
            open.checkin.pool.put(open.checkin.key, open.conn);
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(open.drain()));
        }
    }
}

#[cfg(test)]
mod tests;
