//! Reading a successful answer into one [`ModelResponse`]: a whole body, or a stream whose
//! text goes to the caller as it comes (the commit point is its first content event).

use bytes::Bytes;
use http::StatusCode;
use http::response::Parts;
use http_body_util::BodyExt;
use rebound_core::{Evidence, Phase, TransportKind};
use tokio_util::sync::CancellationToken;

use crate::attempt::{RESPONSE_LIMIT, transport_evidence};
use crate::event::{Event, EventSink};
use crate::foreign;
use crate::form::{self, Gathered};
use crate::http::{ResponseBody, TransportFailure, read_whole};
use crate::provider::{AnswerError, ModelResponse, Provider, StreamItem, ToolCall, stream_items};
use crate::sse::SseFramer;

/// How reading an answer ended.
pub(crate) enum Read {
    /// A complete, non-empty response.
    Response(ModelResponse),
    /// A broken, empty or failed answer; `delivered` when its text or reasoning already
    /// reached the caller.
    Failed {
        /// What it left behind.
        evidence: Evidence,
        /// Text of it reached the caller.
        delivered: bool,
    },
    /// The caller aborted.
    Cancelled,
}

fn broken(provider: &Provider, kind: TransportKind, message: String, phase: Phase) -> Evidence {
    transport_evidence(&provider.name, TransportFailure { kind, message }, phase)
}

/// Reads a non-streaming answer.
pub(crate) async fn read_complete(
    provider: &Provider,
    parts: &Parts,
    body: &mut ResponseBody,
    idle: std::time::Duration,
    message_id: &str,
    cancel: &CancellationToken,
) -> Read {
    let bytes = match read_whole(body, RESPONSE_LIMIT, idle, cancel.cancelled()).await {
        Ok(bytes) => bytes,
        Err(None) => return Read::Cancelled,
        Err(Some(failure)) => {
            return Read::Failed {
                evidence: transport_evidence(&provider.name, failure, Phase::Setup),
                delivered: false,
            };
        }
    };
    let bytes = match gathered(provider, parts, bytes) {
        Ok(bytes) => bytes,
        Err(evidence) => {
            return Read::Failed {
                evidence: *evidence,
                delivered: false,
            };
        }
    };
    match provider.parse_complete(&bytes) {
        Ok(mut response) if !response.is_empty() => {
            response.message_id = message_id.to_owned();
            Read::Response(response)
        }
        // An empty answer is evidence with an empty body (`empty_response`).
        Ok(_) => Read::Failed {
            evidence: crate::attempt::response_evidence(
                &provider.name,
                parts.status,
                &parts.headers,
                b"",
            ),
            delivered: false,
        },
        // A Responses answer that says it failed: classified by its error code, as the
        // stream's `response.failed` is.
        Err(AnswerError::Failed { kind }) => Read::Failed {
            evidence: Evidence {
                sse_event: Some(kind),
                ..crate::attempt::response_evidence(
                    &provider.name,
                    parts.status,
                    &parts.headers,
                    &bytes,
                )
            },
            delivered: false,
        },
        // A body that is not the protocol's JSON is a broken answer; a web page or an event
        // stream says so.
        Err(_) => Read::Failed {
            evidence: broken(
                provider,
                TransportKind::BodyDecode,
                foreign::not_json_message(
                    parts.status,
                    &parts.headers,
                    &bytes,
                    "the protocol's JSON",
                ),
                Phase::Setup,
            ),
            delivered: false,
        },
    }
}

/// A whole stream where one body was due (the upstream streams whatever it is asked): the
/// answer the API would have sent whole, gathered from it; or the evidence the attempt ends
/// with, for the stream's own error or a stream cut short. A body that starts as JSON, or is no stream of the
/// API, is kept as it came.
fn gathered(provider: &Provider, parts: &Parts, bytes: Bytes) -> Result<Bytes, Box<Evidence>> {
    let start = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if matches!(start, Some(b'{' | b'[')) {
        return Ok(bytes);
    }
    let evidence = match form::as_whole(provider.api, &bytes) {
        None => return Ok(bytes),
        Some(Gathered::Answer(answer)) => return Ok(answer),
        Some(Gathered::Error { kind, data }) => Evidence {
            sse_event: Some(kind),
            body: Some(data),
            ..crate::attempt::response_evidence(&provider.name, parts.status, &parts.headers, b"")
        },
        Some(Gathered::Cut) => broken(
            provider,
            TransportKind::Truncated,
            form::CUT.into(),
            Phase::Setup,
        ),
    };
    Err(Box::new(evidence))
}

/// Reads a stream, sending its text to `sink` as it comes.
pub(crate) async fn read_stream(
    provider: &Provider,
    parts: &Parts,
    body: &mut ResponseBody,
    idle: std::time::Duration,
    message_id: &str,
    sink: &mut dyn EventSink,
    cancel: &CancellationToken,
) -> Read {
    let mut stream = Stream {
        provider,
        status: parts.status,
        phase: Phase::Setup,
        delivered: false,
        finished: false,
        response: ModelResponse {
            message_id: message_id.to_owned(),
            ..ModelResponse::default()
        },
    };
    let mut framer = SseFramer::new();
    // The body while no event has come: one that ends so is told by its content.
    let mut unframed: Option<Vec<u8>> = Some(Vec::new());
    loop {
        let frame = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Read::Cancelled,
            frame = tokio::time::timeout(idle, body.frame()) => frame,
        };
        let data = match frame {
            Err(_) => {
                let message = format!("no stream event for {} s", idle.as_secs_f64());
                return stream.broken(TransportKind::IdleTimeout, message);
            }
            // A Chat Completions choice that said why it finished, then a clean close: complete,
            // `[DONE]` or not, as for a client connected directly.
            Ok(None) if stream.finished => return stream.done(),
            Ok(None) => {
                // A whole answer where a stream was due (a server that does not stream): read
                // as the stream the API would have sent.
                let told = unframed
                    .as_deref()
                    .and_then(|body| form::as_stream(provider.api, body, false));
                if let Some(told) = told {
                    for event in SseFramer::new().push(&told).unwrap_or_default() {
                        for item in stream_items(provider.api, &event.event, &event.data) {
                            if let Some(read) = stream.item(item, &event.data, sink) {
                                return read;
                            }
                        }
                    }
                }
                if let Some(evidence) = unframed.as_deref().and_then(|body| {
                    foreign::unframed(&provider.name, parts.status, &parts.headers, body)
                }) {
                    return Read::Failed {
                        evidence,
                        delivered: false,
                    };
                }
                let message = "the stream ended before its final event".to_owned();
                return stream.broken(TransportKind::Truncated, message);
            }
            Ok(Some(Err(failure))) => return stream.broken(failure.kind, failure.message),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        let events = match framer.push(&data) {
            Ok(events) => events,
            Err(e) => return stream.broken(TransportKind::BodyDecode, e.to_string()),
        };
        if !events.is_empty() {
            unframed = None;
        } else if let Some(body) = unframed.as_mut().filter(|b| b.len() < RESPONSE_LIMIT) {
            body.extend_from_slice(&data);
        }
        for event in events {
            for item in stream_items(provider.api, &event.event, &event.data) {
                if let Some(read) = stream.item(item, &event.data, sink) {
                    return read;
                }
            }
        }
    }
}

/// A stream being read.
struct Stream<'a> {
    provider: &'a Provider,
    status: StatusCode,
    phase: Phase,
    delivered: bool,
    /// A Chat Completions choice said why it finished.
    finished: bool,
    response: ModelResponse,
}

impl Stream<'_> {
    fn broken(&self, kind: TransportKind, message: String) -> Read {
        Read::Failed {
            evidence: broken(self.provider, kind, message, self.phase),
            delivered: self.delivered,
        }
    }

    /// One stream item; `Some` when it ends the attempt.
    fn item(&mut self, item: StreamItem, data: &str, sink: &mut dyn EventSink) -> Option<Read> {
        if item.is_content() {
            self.phase = Phase::Stream;
        }
        match item {
            // A refusal is the model's visible answer, read like text.
            StreamItem::Text(text) | StreamItem::Refusal(text) => {
                if !text.is_empty() {
                    self.delivered = true;
                    self.response.text.push_str(&text);
                    sink.emit(Event::Text {
                        message_id: self.response.message_id.clone(),
                        text,
                    });
                }
            }
            StreamItem::Reasoning(text) => {
                if !text.is_empty() {
                    self.delivered = true;
                    self.response.reasoning.push_str(&text);
                    sink.emit(Event::Reasoning {
                        message_id: self.response.message_id.clone(),
                        text,
                    });
                }
            }
            StreamItem::ToolCallStart { index, id, name } => {
                let call = tool_call(&mut self.response.tool_calls, index);
                call.id = id;
                call.name = name;
            }
            StreamItem::ToolArguments { index, fragment } => {
                tool_call(&mut self.response.tool_calls, index)
                    .arguments
                    .push_str(&fragment);
            }
            StreamItem::Stop(reason) => {
                self.finished = self.provider.api == crate::provider::Api::ChatCompletions;
                self.response.stop_reason = Some(reason);
            }
            StreamItem::Error { kind, .. } => {
                return Some(Read::Failed {
                    evidence: Evidence {
                        provider: Some(self.provider.name.clone()),
                        status: Some(self.status.as_u16()),
                        sse_event: Some(kind),
                        body: Some(data.to_owned()),
                        phase: self.phase,
                        ..Evidence::default()
                    },
                    delivered: self.delivered,
                });
            }
            StreamItem::Done => return Some(self.done()),
            // An event rebound cannot read does not end a stream a direct connection would
            // go on reading.
            StreamItem::Preamble | StreamItem::Opaque | StreamItem::Malformed => {}
        }
        None
    }

    /// The stream is complete: its response, or an empty answer's evidence.
    fn done(&mut self) -> Read {
        // Argument fragments of a block that is no tool call of the caller's (an
        // Anthropic server tool's input) and the Responses API's output positions
        // of other items leave calls without a name.
        self.response
            .tool_calls
            .retain(|call| !call.name.is_empty());
        if self.response.is_empty() {
            return Read::Failed {
                evidence: Evidence {
                    provider: Some(self.provider.name.clone()),
                    status: Some(self.status.as_u16()),
                    body: Some(String::new()),
                    phase: self.phase,
                    ..Evidence::default()
                },
                delivered: self.delivered,
            };
        }
        Read::Response(std::mem::take(&mut self.response))
    }
}

fn tool_call(calls: &mut Vec<ToolCall>, index: usize) -> &mut ToolCall {
    let index = index.min(63);
    if calls.len() <= index {
        calls.resize_with(index + 1, ToolCall::default);
    }
    &mut calls[index]
}
