//! Relaying a stream: the upstream's bytes are held back until the commit point (the first
//! content-bearing event: text, thinking or reasoning, a refusal, tool-call arguments, a
//! server tool's block; G9), then forwarded whole events at a time, untouched (G7: a
//! Responses stream's `sequence_number`s, encrypted reasoning and unknown fields included).
//! A stream that ends normally is an answer if it held content or a tool call, even one whose
//! arguments never began: it is committed then.
//!
//! A stream is judged as a client connected directly would judge it: a Chat Completions body
//! that closes cleanly after a choice's `finish_reason` is complete without `[DONE]`, and an
//! event whose data is not the protocol's JSON is relayed as sent while the stream goes on.
//! Only a stream cut before its end is truncated.
//!
//! What a chunk of upstream bytes means is decided synchronously ([`Relay::chunk`]); the relay
//! loop only waits for bytes and hands them on. An open stream's state is then the small
//! [`Relay`] and one pending read, whatever the chunk held.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use rebound_core::{Evidence, Phase, TransportKind};
use rebound_runtime::Api;
use rebound_runtime::foreign;
use rebound_runtime::form;
use rebound_runtime::http::{ResponseBody, TransportFailure};
use rebound_runtime::provider::{StreamItem, read_event};
use rebound_runtime::sse::{SseEvent, SseFramer};
use tokio::time::Instant;

use rebound_runtime::Attempted;

use super::downstream::{Downstream, Head};
use super::headers::{RETOLD, final_figures, kept_on_give_up};
use super::outcome::{Attempt, Detail, Position, failure};

/// How long a stream may stay quiet (S5).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// The longest gap between two events.
    pub(super) idle: Duration,
    /// From the response headers to the first content (time to first token).
    pub(super) first_content: Duration,
}

/// Relays one streaming attempt to the client.
pub(super) async fn relay(
    relay: &mut Relay,
    limits: Limits,
    body: &mut ResponseBody,
    down: &mut Downstream,
) -> Attempt {
    // Measured from the headers, which have just come.
    let first_content_by = Instant::now() + limits.first_content;
    // The relay state comes built: a parameter is kept for the whole stream, and building it
    // here from its parts would keep both. It is borrowed: the caller reads what it learned.
    loop {
        // Before the commit point, the first-content deadline bounds the wait too.
        let (wait, first_content) = if relay.content_seen {
            (limits.idle, false)
        } else {
            let left = first_content_by.saturating_duration_since(Instant::now());
            (limits.idle.min(left), left <= limits.idle)
        };
        let frame = tokio::select! {
            biased;
            () = down.gone() => return Attempted::Ended,
            frame = tokio::time::timeout(wait, body.frame()) => frame,
        };
        let step = match frame {
            Err(_) if first_content => {
                return relay.failed(TransportFailure {
                    kind: TransportKind::FirstContentTimeout,
                    message: format!(
                        "no content within {} s of the response headers",
                        limits.first_content.as_secs_f64()
                    ),
                });
            }
            Err(_) => {
                return relay.failed(TransportFailure {
                    kind: TransportKind::IdleTimeout,
                    message: format!("no stream event for {} s", limits.idle.as_secs_f64()),
                });
            }
            Ok(None) => relay.body_ended(),
            Ok(Some(Err(failure))) => return relay.failed(failure),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => relay.chunk(&data),
                Err(_) => continue,
            },
        };
        // Only the bytes to send stay alive across the awaits below, not the whole step.
        let Step { commit, send, end } = step;
        if let Some(headers) = commit {
            let delivered = if down.committed() {
                // The countdown committed the response while an earlier attempt waited:
                // its headers are spent, so the final figures go as a comment (G6).
                down.send(final_figures(&headers)).await
            } else {
                down.respond(Head {
                    status: relay.status,
                    headers,
                    body: None,
                })
            };
            if !delivered {
                return Attempted::Ended;
            }
            // The held-back events, the response's id among them, go out with this step.
            if let (Some(watch), Some(head)) = (&mut down.watch, relay.response.as_deref()) {
                watch.streamed(&head.id);
            }
        }
        for bytes in send.into_iter().flatten() {
            if !down.send(bytes).await {
                return Attempted::Ended;
            }
        }
        if let Some(end) = end {
            return *end;
        }
    }
}

/// A stream's relay state.
pub(super) struct Relay {
    api: Api,
    restart: bool,
    status: StatusCode,
    /// The response headers, until the commit point sends them.
    headers: Option<HeaderMap>,
    framer: SseFramer,
    /// Bytes received and not yet forwarded.
    pending: BytesMut,
    /// The stream offset of `pending`'s first byte.
    pending_base: u64,
    /// The commit point has passed.
    content_seen: bool,
    /// A tool call began: a complete stream is an answer even if its arguments never did.
    answered: bool,
    /// A Chat Completions choice said why it finished: a body that then ends cleanly is
    /// complete, `[DONE]` or not, as it is for a client connected directly.
    finished: bool,
    /// An SSE event came: the body is a stream, whatever its content type said.
    evented: bool,
    /// The last `sequence_number` of a Responses stream.
    sequence_number: Option<u64>,
    /// The response a Responses stream announced. Boxed: most streams are not Responses.
    response: Option<Box<rebound_runtime::provider::ResponseHead>>,
    /// The provider name evidence carries.
    provider: String,
    /// The request's body: a whole answer told as a stream tells usage if it asked for it.
    request: Bytes,
    /// The upstream's whole answer was told as a stream.
    retold: bool,
}

/// What one chunk asks for, in order: commit the response, send bytes, end the attempt.
#[derive(Default)]
struct Step {
    commit: Option<HeaderMap>,
    send: [Option<Bytes>; 2],
    /// Boxed: it is rare, and it stays alive while the bytes before it are sent.
    end: Option<Box<Attempt>>,
}

impl Relay {
    pub(super) fn new(
        api: Api,
        restart: bool,
        status: StatusCode,
        mut headers: HeaderMap,
        provider: String,
        request: Bytes,
    ) -> Self {
        headers.remove(http::header::CONTENT_LENGTH);
        Relay {
            api,
            restart,
            status,
            headers: Some(headers),
            framer: SseFramer::new(),
            pending: BytesMut::new(),
            pending_base: 0,
            content_seen: false,
            answered: false,
            finished: false,
            evented: false,
            sequence_number: None,
            response: None,
            provider,
            request,
            retold: false,
        }
    }

    /// Whether the upstream streamed: an SSE event of its own came.
    pub(super) fn streamed(&self) -> bool {
        self.evented && !self.retold
    }

    /// Whether the upstream's whole answer was told as a stream.
    pub(super) fn retold(&self) -> bool {
        self.retold
    }

    fn phase(&self) -> Phase {
        if self.content_seen {
            Phase::Stream
        } else {
            Phase::Setup
        }
    }

    /// Evidence of this stream, to be completed.
    fn evidence(&self) -> Evidence {
        Evidence {
            provider: Some(self.provider.clone()),
            phase: self.phase(),
            ..Evidence::default()
        }
    }

    /// A failure below the protocol, in the stream's current phase.
    fn failed(&self, broken: TransportFailure) -> Attempt {
        let evidence = Evidence {
            transport: Some(broken.kind),
            body: Some(broken.message),
            ..self.evidence()
        };
        failure(
            evidence,
            self.content_seen,
            self.restart,
            self.detail(false, false),
        )
    }

    /// What the terminal error needs of this stream: whether its own end already reached the
    /// client and, for a committed Responses stream, where it stood.
    fn detail(&self, error_forwarded: bool, error_event_sent: bool) -> Detail {
        let position = (self.api == Api::Responses && self.content_seen).then(|| {
            Box::new(Position {
                sequence_number: self.sequence_number,
                response: self.response.as_deref().cloned(),
                error_event_sent,
            })
        });
        Detail {
            error_forwarded,
            upstream_error: None,
            // Before the commit point the stream's head is still held: its hints are kept.
            kept_headers: self
                .headers
                .as_ref()
                .map(kept_on_give_up)
                .unwrap_or_default(),
            position,
        }
    }

    /// `pending` up to the stream offset `upto`, taken for the client.
    fn take_pending(&mut self, upto: u64) -> Bytes {
        let upto = usize::try_from(upto - self.pending_base)
            .unwrap_or(0)
            .min(self.pending.len());
        self.pending_base += upto as u64;
        self.pending.split_to(upto).freeze()
    }

    /// What a chunk of upstream bytes means for the client.
    fn chunk(&mut self, data: &[u8]) -> Step {
        let mut step = Step::default();
        self.pending.extend_from_slice(data);
        let events = match self.framer.push(data) {
            Ok(events) => events,
            Err(e) => {
                step.end = Some(Box::new(self.failed(TransportFailure {
                    kind: TransportKind::BodyDecode,
                    message: e.to_string(),
                })));
                return step;
            }
        };
        self.evented |= !events.is_empty();
        // Whole events after the commit point are forwarded; earlier ones are held back.
        let mut forward_to: Option<u64> = None;
        let mut done = false;
        for event in events {
            let reading = read_event(self.api, &event.event, &event.data);
            if reading.sequence_number.is_some() {
                self.sequence_number = reading.sequence_number;
            }
            // `response.created` names it; a later `response.in_progress` may say less.
            if let Some(head) = reading.response
                && self.response.is_none()
            {
                self.response = Some(Box::new(head));
            }
            for item in reading.items {
                if item.is_content() && !self.content_seen {
                    self.content_seen = true;
                    step.commit = self.headers.take();
                }
                match item {
                    StreamItem::Error { kind, ends_stream } => {
                        self.on_error(&mut step, forward_to, &event, kind, ends_stream);
                        return step;
                    }
                    // An event rebound cannot read is the upstream's to send: it goes on
                    // as it came, and so does the stream, as on a direct connection.
                    StreamItem::Malformed => {}
                    StreamItem::Done => done = true,
                    StreamItem::Stop(_) if self.api == Api::ChatCompletions => {
                        self.finished = true;
                    }
                    StreamItem::ToolCallStart { .. } => self.answered = true,
                    _ => {}
                }
            }
            if self.content_seen {
                forward_to = Some(event.end);
            }
        }
        if done {
            self.complete(&mut step);
            return step;
        }
        if let Some(upto) = forward_to {
            step.send[0] = Some(self.take_pending(upto));
        }
        step
    }

    /// The upstream's body ended cleanly at the HTTP level: complete after its final event or
    /// a choice's finish reason, every byte it sent forwarded; otherwise cut short.
    fn body_ended(&mut self) -> Step {
        let mut step = Step::default();
        // No event at all, every byte held: one JSON body or a page, told by its content rather
        // than its content type, which some servers get wrong for a stream. The API's whole
        // answer (a server that does not stream) is told as its stream; any other body is read
        // for what it is (an error written as a body, a page).
        let whole = !self.evented && self.pending_base == 0 && self.headers.is_some();
        if self.finished {
            self.complete(&mut step);
        } else if let Some(stream) = whole.then(|| self.as_stream()).flatten() {
            return self.tell_as_stream(&stream);
        } else if let Some(evidence) = whole
            .then(|| {
                let headers = self.headers.as_ref()?;
                foreign::unframed(&self.provider, self.status, headers, &self.pending)
            })
            .flatten()
        {
            step.end = Some(Box::new(failure(
                evidence,
                false,
                self.restart,
                Detail::default(),
            )));
        } else {
            step.end = Some(Box::new(self.failed(TransportFailure {
                kind: TransportKind::Truncated,
                message: "the stream ended before its final event".into(),
            })));
        }
        step
    }

    /// The whole answer held back, told as the stream the API would have sent, if it is one.
    fn as_stream(&self) -> Option<Bytes> {
        let usage_asked = self.api == Api::ChatCompletions && form::usage_asked(&self.request);
        form::as_stream(self.api, &self.pending, usage_asked)
    }

    /// A whole answer told as a stream (`stream`) goes to the client as if the upstream had
    /// streamed it, labelled an event stream and said to be retold.
    fn tell_as_stream(&mut self, stream: &Bytes) -> Step {
        self.retold = true;
        if let Some(headers) = self.headers.as_mut() {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(RETOLD, HeaderValue::from_static("stream"));
        }
        self.pending.clear();
        self.framer = SseFramer::new();
        let mut step = self.chunk(stream);
        if step.end.is_none() {
            // Not reached: a told stream ends as its API's stream ends.
            step.end = Some(Box::new(self.failed(TransportFailure {
                kind: TransportKind::Truncated,
                message: "the answer told as a stream had no end".into(),
            })));
        }
        step
    }

    /// The stream is complete: an answer if it held content or a tool call, whose last bytes
    /// go to the client; otherwise an empty answer, shown to no one yet.
    fn complete(&mut self, step: &mut Step) {
        if !self.content_seen && self.answered {
            // A tool call without arguments: the whole stream is its answer.
            self.content_seen = true;
            step.commit = self.headers.take();
        }
        step.end = Some(Box::new(if self.content_seen {
            step.send[0] = Some(self.pending.split().freeze());
            Attempted::Succeeded(())
        } else {
            let evidence = Evidence {
                status: Some(self.status.as_u16()),
                body: Some(String::new()),
                ..self.evidence()
            };
            failure(evidence, false, self.restart, self.detail(false, false))
        }));
    }

    /// The provider's own error event: earlier whole events of the chunk go as they came, and
    /// after the commit point (unless the client asked for a restart) the error event itself,
    /// as sent unless it holds a secret to redact (it may echo a key).
    fn on_error(
        &mut self,
        step: &mut Step,
        forward_to: Option<u64>,
        event: &SseEvent,
        kind: String,
        ends_stream: bool,
    ) {
        let forwarded = self.content_seen && !self.restart;
        if let Some(upto) = forward_to {
            step.send[0] = Some(self.take_pending(upto));
        }
        if forwarded {
            step.send[1] = Some(match rebound_core::redact::redact(&event.data) {
                std::borrow::Cow::Borrowed(_) => self.take_pending(event.end),
                std::borrow::Cow::Owned(_) => redacted_event(event),
            });
        }
        let evidence = Evidence {
            status: Some(self.status.as_u16()),
            sse_event: Some(kind),
            body: Some(event.data.clone()),
            ..self.evidence()
        };
        // A Responses stream's `error` event is not its end: `response.failed` is still owed.
        let detail = self.detail(forwarded && ends_stream, forwarded);
        step.end = Some(Box::new(failure(
            evidence,
            self.content_seen,
            self.restart,
            detail,
        )));
    }
}

/// An SSE event re-written with every string of its JSON data redacted.
fn redacted_event(event: &SseEvent) -> Bytes {
    let data = match serde_json::from_str::<serde_json::Value>(&event.data) {
        Ok(mut value) => {
            crate::shape::redact_json(&mut value);
            value.to_string()
        }
        Err(_) => rebound_core::redact::redact(&event.data).into_owned(),
    };
    Bytes::from(if event.event.is_empty() {
        format!("data: {data}\n\n")
    } else {
        format!("event: {}\ndata: {data}\n\n", event.event)
    })
}

#[cfg(test)]
mod tests;
