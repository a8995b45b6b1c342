//! The one HTTP client under rebound: rustls, connection pooling, timeouts, and no retries of
//! its own (B5).
//!
//! HTTP/1.1 goes through hyper's connection-level client ([`h1`]), driven by the task that
//! sends the request, on a pooled connection; a failed exchange is reported, never re-sent. A
//! reused connection that the peer closed just before the request fails the attempt like any
//! other reset; the runtime decides what follows.
//!
//! Requests that ask for HTTP/2 (`Version::HTTP_2`) go through hyper's pooled client, with
//! its re-sending of requests on closed connections (`retry_canceled_requests`) switched off.
//! Over TLS the connection negotiates `h2` by ALPN, and over plain `http://` it speaks HTTP/2
//! from the first byte (prior knowledge). One HTTP/2 connection per upstream carries every
//! concurrent request, so open streams cost a stream each rather than a connection each.

mod body;
mod h1;
mod proxy;
mod roots;

use std::error::Error as StdError;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rebound_core::TransportKind;

pub use body::ResponseBody;
pub use proxy::Proxies;
pub use roots::ExtraRoots;

/// Timeouts of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the response headers. Non-streaming completions send
    /// their headers only when the whole answer is ready, so this is generous.
    pub first_byte: Duration,
    /// From sending a streaming request to its response headers: a stream's headers come
    /// before its content, so a silent provider is found sooner (S5).
    pub stream_first_byte: Duration,
    /// The longest quiet gap between two pieces of a response body (stream events).
    pub idle: Duration,
    /// From a stream's response headers to its first content (text, thinking, a tool call):
    /// time to first token (S5).
    pub first_content: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(600),
            stream_first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            first_content: Duration::from_secs(120),
        }
    }
}

/// A failure below HTTP, as evidence needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportFailure {
    /// What kind.
    pub kind: TransportKind,
    /// The client's message (may be redacted before it is shown).
    pub message: String,
}

impl std::fmt::Display for TransportFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.as_str())
    }
}

impl StdError for TransportFailure {}

/// The shared client.
#[derive(Clone, Debug)]
pub struct HttpClient {
    http1: h1::Client,
    http2: Client<HttpsConnector<proxy::Connector>, Full<Bytes>>,
    timeouts: Timeouts,
}

/// How long an idle connection is kept for the next request.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How often an idle HTTP/2 connection is pinged, and how long a ping may go unanswered
/// before the connection (and every request on it) counts as broken.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(20);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(10);

impl HttpClient {
    /// A client with these timeouts, trusting the webpki root certificates, reaching every
    /// upstream directly.
    pub fn new(timeouts: Timeouts) -> Result<Self, rustls::Error> {
        Self::configured(timeouts, &ExtraRoots::default(), &Proxies::none())
    }

    /// A client with these timeouts, trusting the webpki root certificates and `extra`, and
    /// reaching upstreams through `proxies`.
    pub fn configured(
        timeouts: Timeouts,
        extra: &ExtraRoots,
        proxies: &Proxies,
    ) -> Result<Self, rustls::Error> {
        let tcp = |forwards| {
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_nodelay(true);
            http.set_connect_timeout(Some(timeouts.connect));
            proxy::Connector::new(http, proxies.clone(), timeouts.connect, forwards)
        };
        let roots = extra.with_public_roots();
        let tls = || {
            let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
            Ok::<_, rustls::Error>(
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(config)
                    .https_or_http(),
            )
        };
        let http1 = h1::Client::new(
            tls()?.enable_http1().wrap_connector(tcp(true)),
            POOL_IDLE_TIMEOUT,
            proxies.clone(),
        );
        let http2 = Client::builder(TokioExecutor::new())
            .retry_canceled_requests(false)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .http2_only(true)
            .http2_keep_alive_interval(HTTP2_PING_INTERVAL)
            .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(tls()?.enable_http2().wrap_connector(tcp(false)));
        Ok(HttpClient {
            http1,
            http2,
            timeouts,
        })
    }

    /// The timeouts.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Sends one request and waits for the response headers, at most `first_byte`. A request
    /// whose version is `HTTP_2` goes over HTTP/2; any other over HTTP/1.1.
    pub async fn send(
        &self,
        request: Request<Bytes>,
    ) -> Result<Response<ResponseBody>, TransportFailure> {
        self.send_within(request, self.timeouts.first_byte).await
    }

    /// [`HttpClient::send`], waiting at most `first_byte` for the response headers (a
    /// candidate's own timeout, S5).
    pub async fn send_within(
        &self,
        request: Request<Bytes>,
        first_byte: Duration,
    ) -> Result<Response<ResponseBody>, TransportFailure> {
        let exchange = async {
            if request.version() == Version::HTTP_2 {
                match self.http2.request(request.map(Full::new)).await {
                    Ok(response) => Ok(response.map(ResponseBody::h2)),
                    Err(e) => Err(classify_client_error(&e)),
                }
            } else {
                self.http1
                    .send(request)
                    .await
                    .map(|response| response.map(ResponseBody::h1))
            }
        };
        match tokio::time::timeout(first_byte, exchange).await {
            Ok(result) => result,
            Err(_) => Err(TransportFailure {
                kind: TransportKind::Timeout,
                message: format!("no response within {} s", first_byte.as_secs_f64()),
            }),
        }
    }
}

/// The error and its sources, joined.
pub fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    for cause in causes(e).skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// The next error down a chain. An I/O error that wraps another hides it from `source()`
/// (TLS errors come as an I/O error wrapping an I/O error wrapping rustls's), so it is opened.
fn next_cause<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    match e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        Some(inner) => Some(inner),
        None => e.source(),
    }
}

/// Whether the TLS layer failed.
fn is_tls(e: &(dyn StdError + 'static)) -> bool {
    causes(e).any(|c| c.is::<rustls::Error>())
}

/// The error and everything under it.
fn causes<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(e), |&c| next_cause(c))
}

fn io_kind(e: &(dyn StdError + 'static)) -> Option<std::io::ErrorKind> {
    causes(e).find_map(|c| c.downcast_ref::<std::io::Error>().map(std::io::Error::kind))
}

/// What a person reads for a TLS record that is no TLS: the URL's `https://` names a port
/// that answers in plain HTTP. rustls's own words stay in the message, which the catalogue
/// reads (`rust.rustls_plain_http_port`).
const NOT_TLS: &str = "the upstream did not answer in TLS: its base URL says https:// for a port that speaks plain HTTP?";

/// Whether rustls read the peer's first bytes as no TLS record at all.
fn answered_in_plain_http(e: &(dyn StdError + 'static)) -> bool {
    causes(e).any(|c| {
        matches!(
            c.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType
            ))
        )
    })
}

/// The kind of a failure to connect (TCP, then TLS).
fn classify_connect(e: &(dyn StdError + 'static)) -> TransportFailure {
    let mut message = error_chain(e);
    if answered_in_plain_http(e) {
        message = format!("{NOT_TLS} ({message})");
    }
    let lower = message.to_ascii_lowercase();
    let kind = match io_kind(e) {
        _ if is_tls(e) => TransportKind::Tls,
        Some(std::io::ErrorKind::ConnectionRefused) => TransportKind::ConnectionRefused,
        Some(std::io::ErrorKind::TimedOut) => TransportKind::ConnectTimeout,
        _ if lower.contains("dns error") || lower.contains("failed to lookup") => {
            TransportKind::Dns
        }
        _ if lower.contains("tls")
            || lower.contains("certificate")
            || lower.contains("handshake") =>
        {
            TransportKind::Tls
        }
        _ if lower.contains("timed out") => TransportKind::ConnectTimeout,
        _ => TransportKind::ConnectionRefused,
    };
    TransportFailure { kind, message }
}

fn classify_client_error(e: &hyper_util::client::legacy::Error) -> TransportFailure {
    if e.is_connect() {
        return classify_connect(e);
    }
    let message = error_chain(e);
    let kind = if message.to_ascii_lowercase().contains("timed out") {
        TransportKind::Timeout
    } else {
        // "connection closed before message completed", resets, broken pipes.
        TransportKind::ConnectionReset
    };
    TransportFailure { kind, message }
}

/// The kind of a failure while reading a response body: a body that broke off is
/// `truncated`, one whose framing is broken (a bad chunk) is `body_decode`.
fn body_failure(e: &hyper::Error) -> TransportFailure {
    use std::io::ErrorKind;
    let message = error_chain(e);
    let kind = match io_kind(e) {
        // TLS failures come as I/O errors of these kinds too: the connection broke.
        Some(ErrorKind::InvalidData | ErrorKind::InvalidInput) if !is_tls(e) => {
            TransportKind::BodyDecode
        }
        Some(_) => TransportKind::Truncated,
        None if e.is_incomplete_message() || e.is_body_write_aborted() => TransportKind::Truncated,
        None if e.is_timeout() => TransportKind::IdleTimeout,
        None if e.is_parse() => TransportKind::BodyDecode,
        None => TransportKind::Truncated,
    };
    TransportFailure { kind, message }
}

/// Reads a response body, at most `limit` bytes (the rest is dropped), with at most `idle`
/// between two pieces. `Err(None)` when `cancelled` completes first; `Err(Some(_))` for a
/// body that broke off or went quiet. For evidence, where a prefix is enough.
pub async fn read_body<F: std::future::Future<Output = ()>>(
    body: &mut ResponseBody,
    limit: usize,
    idle: Duration,
    cancelled: F,
) -> Result<Bytes, Option<TransportFailure>> {
    read(body, limit, idle, cancelled, Overflow::Cut).await
}

/// Reads a whole response body, as [`read_body`] does, but one larger than `limit` bytes is a
/// failure (`truncated`, naming the limit) rather than a prefix: for answers that are used,
/// not just shown.
pub async fn read_whole<F: std::future::Future<Output = ()>>(
    body: &mut ResponseBody,
    limit: usize,
    idle: Duration,
    cancelled: F,
) -> Result<Bytes, Option<TransportFailure>> {
    read(body, limit, idle, cancelled, Overflow::Fail).await
}

/// What a body longer than the limit gives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Cut,
    Fail,
}

async fn read<F: std::future::Future<Output = ()>>(
    body: &mut ResponseBody,
    limit: usize,
    idle: Duration,
    cancelled: F,
    overflow: Overflow,
) -> Result<Bytes, Option<TransportFailure>> {
    use http_body_util::BodyExt;
    let mut out = bytes::BytesMut::new();
    let mut cancelled = std::pin::pin!(cancelled);
    loop {
        let frame = tokio::select! {
            biased;
            () = &mut cancelled => return Err(None),
            frame = tokio::time::timeout(idle, body.frame()) => frame,
        };
        match frame {
            Err(_) => {
                return Err(Some(TransportFailure {
                    kind: TransportKind::IdleTimeout,
                    message: format!("no body bytes for {} s", idle.as_secs_f64()),
                }));
            }
            Ok(None) => return Ok(out.freeze()),
            Ok(Some(Err(failure))) => return Err(Some(failure)),
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let room = limit.saturating_sub(out.len());
                if data.len() > room && overflow == Overflow::Fail {
                    return Err(Some(TransportFailure {
                        kind: TransportKind::Truncated,
                        message: format!(
                            "the response is larger than {}, the most read",
                            size_text(limit)
                        ),
                    }));
                }
                out.extend_from_slice(&data[..data.len().min(room)]);
                if out.len() >= limit && overflow == Overflow::Cut {
                    return Ok(out.freeze());
                }
            }
        }
    }
}

/// A byte count in the unit it is written in.
fn size_text(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}
