//! Response bodies, streamed or whole, and the faults that break them mid-body.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::script::Step;

/// A response body as the server sends it.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// What every answer to one request carries: its id, model and the request itself.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    /// The response id (`chatcmpl-…`, `msg_…`, `resp_…`).
    pub id: &'a str,
    /// The model name the request asked for.
    pub model: &'a str,
    /// The request body.
    pub request: &'a Value,
}

/// A stream as SSE frames. Faults cut between content frames: a content frame holds one delta
/// (text, thinking, tool arguments) with the structural events that lead to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frames {
    /// Before any content: held back by a gateway until the commit point.
    pub preamble: Vec<String>,
    /// One delta each.
    pub content: Vec<String>,
    /// After the content: closing events.
    pub end: Vec<String>,
    /// The next event's `sequence_number` after the preamble and after each content frame
    /// (Responses; zeros elsewhere). `content.len() + 1` entries.
    pub sequence: Vec<usize>,
}

impl Frames {
    /// Frames without sequence numbers.
    pub fn new(preamble: Vec<String>, content: Vec<String>, end: Vec<String>) -> Frames {
        let sequence = vec![0; content.len() + 1];
        Frames {
            preamble,
            content,
            end,
            sequence,
        }
    }

    /// Sets the sequence numbers.
    pub fn with_sequence(mut self, sequence: Vec<usize>) -> Frames {
        self.sequence = sequence;
        self
    }

    /// The next sequence number once `sent` content frames have gone.
    pub fn sequence_after(&self, sent: usize) -> usize {
        self.sequence
            .get(sent.min(self.content.len()))
            .copied()
            .unwrap_or(0)
    }

    /// Every frame of a clean stream, joined.
    pub fn text(&self) -> String {
        self.preamble
            .iter()
            .chain(&self.content)
            .chain(&self.end)
            .map(String::as_str)
            .collect()
    }
}

/// An SSE frame with only data.
pub fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// An SSE frame with an event name.
pub fn event(name: &str, value: &Value) -> String {
    format!("event: {name}\ndata: {value}\n\n")
}

/// A whole body.
pub fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A whole JSON body.
pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    full(status, "application/json", value.to_string())
}

/// Chat Completions' last line.
const DONE: &str = "data: [DONE]\n\n";

/// A whole SSE event whose data breaks off mid-JSON: what `malformed-event-at-N` sends, and
/// `malformed-after-N` before its bytes that are not SSE.
pub const MALFORMED_EVENT: &str = "data: {\"choices\": [{\"delta\": {\"content\": \"tru\n\n";

type Sender = mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>;

/// A whole answer broken by a stream fault: `cut-after-N` sends half the body and cuts the
/// connection, `malformed-after-N` sends JSON that breaks off. Other faults (and none) send
/// the body.
pub fn whole(body: Bytes, content_type: &'static str, fault: Option<&Step>) -> Response<Body> {
    match fault {
        Some(Step::MalformedAfter(_)) => full(
            StatusCode::OK,
            "application/json",
            "{\"id\": \"chaos\", \"choi",
        ),
        Some(Step::CutAfter(_)) => {
            let first = body.slice(..body.len() / 2);
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(first))).await;
                abort(&tx, std::io::ErrorKind::ConnectionReset, "chaos: cut").await;
            });
            let mut response = Response::new(BodyExt::boxed(ChannelBody(rx)));
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            response
        }
        _ => full(StatusCode::OK, content_type, body),
    }
}

/// A streamed answer with an optional mid-stream fault; `error_frame` is the in-stream error
/// an `error-after` fault sends.
pub fn streamed(
    frames: Frames,
    fault: Option<Step>,
    error_frame: Option<String>,
    delay: Duration,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let send = |text: String| {
            let tx = tx.clone();
            async move { tx.send(Ok(Frame::data(Bytes::from(text)))).await.is_ok() }
        };
        for frame in frames.preamble {
            if !send(frame).await {
                return;
            }
        }
        let cut_at = match &fault {
            Some(
                Step::CutAfter(n)
                | Step::StallAfter(n, _)
                | Step::ErrorAfter(n, _)
                | Step::ErrorEventAfter(n, _)
                | Step::MalformedAfter(n),
            ) => *n,
            _ => usize::MAX,
        };
        for (i, frame) in frames.content.into_iter().enumerate() {
            if i == cut_at {
                break;
            }
            if fault == Some(Step::MalformedEventAt(i)) && !send(MALFORMED_EVENT.to_owned()).await {
                return;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if !send(frame).await {
                return;
            }
        }
        match fault {
            Some(Step::CutAfter(_)) => {
                abort(&tx, std::io::ErrorKind::ConnectionReset, "chaos: cut").await;
                return;
            }
            Some(Step::StallAfter(_, d)) => {
                tokio::time::sleep(d).await;
                return;
            }
            Some(Step::ErrorAfter(..) | Step::ErrorEventAfter(..)) => {
                if let Some(frame) = error_frame {
                    let _ = send(frame).await;
                }
                return;
            }
            Some(Step::MalformedAfter(_)) => {
                let _ = send(format!("{MALFORMED_EVENT}not sse at all\n\n")).await;
                abort(&tx, std::io::ErrorKind::InvalidData, "chaos: malformed").await;
                return;
            }
            _ => {}
        }
        for frame in frames.end {
            if fault == Some(Step::NoDone) && frame == DONE {
                continue;
            }
            if !send(frame).await {
                return;
            }
        }
    });
    let mut response = Response::new(BodyExt::boxed(ChannelBody(rx)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Aborts a response mid-body, after the chunks sent so far have left.
async fn abort(tx: &Sender, kind: std::io::ErrorKind, message: &'static str) {
    flush_pause().await;
    let _ = tx.send(Err(std::io::Error::new(kind, message))).await;
}

/// hyper writes what the body produced when the body next waits; a cut that follows its
/// chunks at once could abort the connection before they left. This pause lets them go.
async fn flush_pause() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// A response body fed by a channel; an `Err` aborts the response mid-body.
struct ChannelBody(mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx)
    }
}
