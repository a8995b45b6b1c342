//! The turn driver: one model request, replayed on failure, with abortable waits and an
//! honest status (B1–B6, R1–R4, T5).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use rebound_core::backoff::Jitter;
use rebound_core::{
    Action, Caller, Catalogue, Diagnostics, Evidence, Failure, Headers, Phase, Policy, Safety,
    TransportKind, Turn,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink, Outcome};
use crate::http::{HttpClient, Timeouts, TransportFailure, read_body, read_whole};
use crate::provider::{ModelResponse, Provider, StreamItem, ToolCall, stream_items};
use crate::sse::SseFramer;

/// The most of an error response body that is read as evidence.
const ERROR_BODY_LIMIT: usize = 64 << 10;

/// The largest complete response body accepted.
const RESPONSE_LIMIT: usize = 32 << 20;

/// Where "now" comes from (T6).
pub trait Clock: Send + Sync {
    /// The current wall-clock time.
    fn now(&self) -> SystemTime;
}

/// The one place the runtime waits (T5): the driver races it against the abort token.
pub trait Sleeper: Send + Sync {
    /// A future that completes after `delay`.
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// tokio's timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(tokio::time::sleep(delay))
    }
}

/// Virtual time for tests: sleeping returns at once and moves the clock forward by the
/// delay, so a schedule of minutes runs in microseconds while the sockets stay real. Every
/// wait is recorded.
#[derive(Debug)]
pub struct VirtualTime {
    origin: SystemTime,
    state: Mutex<(Duration, Vec<Duration>)>,
}

impl VirtualTime {
    /// Virtual time starting at `origin`.
    pub fn starting_at(origin: SystemTime) -> Arc<Self> {
        Arc::new(VirtualTime {
            origin,
            state: Mutex::new((Duration::ZERO, Vec::new())),
        })
    }

    /// Every wait so far, in order.
    pub fn waits(&self) -> Vec<Duration> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }

    /// Total virtual time elapsed.
    pub fn elapsed(&self) -> Duration {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0
    }
}

impl Clock for VirtualTime {
    fn now(&self) -> SystemTime {
        self.origin + self.elapsed()
    }
}

impl Sleeper for VirtualTime {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += delay;
        state.1.push(delay);
        Box::pin(tokio::task::yield_now())
    }
}

/// Why a request ended without a response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// Recovery stopped; the diagnostics were emitted as the one terminal error.
    #[error("the request failed: {} ({})", .0.code.as_ref().map_or("unclassified", |c| c.as_str()), .0.class)]
    Failed(Box<Diagnostics>),
    /// The caller aborted.
    #[error("the request was aborted")]
    Aborted,
    /// The request could not be built (an invalid header value, say).
    #[error("the request could not be built: {0}")]
    Invalid(String),
}

/// Shared by every turn: the client, the catalogue, the one policy object (B6), the clock
/// and the jitter source.
pub struct Runtime {
    client: HttpClient,
    catalogue: Arc<Catalogue>,
    policy: Arc<Policy>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    rng: Mutex<fastrand::Rng>,
}

impl Runtime {
    /// A runtime with the shipped catalogue.
    pub fn new(client: HttpClient, catalogue: Arc<Catalogue>, policy: Arc<Policy>) -> Self {
        Runtime {
            client,
            catalogue,
            policy,
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            rng: Mutex::new(fastrand::Rng::new()),
        }
    }

    /// A runtime with default timeouts, the shipped catalogue and the interactive policy.
    pub fn interactive() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self::new(
            HttpClient::new(Timeouts::default())?,
            Arc::new(Catalogue::shipped()?),
            Arc::new(Policy::interactive()),
        ))
    }

    /// Replaces the clock and the sleeper (tests use [`VirtualTime`] for both).
    pub fn with_time(mut self, clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>) -> Self {
        self.clock = clock;
        self.sleeper = sleeper;
        self
    }

    /// Seeds the jitter draws, for reproducible waits.
    pub fn with_jitter_seed(self, seed: u64) -> Self {
        *self.rng.lock().unwrap_or_else(PoisonError::into_inner) = fastrand::Rng::with_seed(seed);
        self
    }

    /// The policy every turn uses.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// A turn of the main session over `route` (one or more candidates, tried in order).
    pub fn session(&self, route: Vec<Provider>) -> TurnDriver<'_> {
        TurnDriver::new(self, route, Caller::Session)
    }

    /// A turn of a subagent: the same codes, budgets and delays as the session (B6).
    pub fn subagent(&self, route: Vec<Provider>) -> TurnDriver<'_> {
        TurnDriver::new(self, route, Caller::Subagent)
    }

    /// A one-shot completion: the same policy, but `infinite` stays bounded (B4).
    pub fn one_shot(&self, route: Vec<Provider>) -> TurnDriver<'_> {
        TurnDriver::new(self, route, Caller::OneShot)
    }

    fn draw(&self) -> Jitter {
        Jitter::new(
            self.rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .f64(),
        )
    }
}

static MESSAGE_IDS: AtomicU64 = AtomicU64::new(1);

/// One logical turn: owns the class counters; sends one model request at a time. The caller
/// runs tools between requests and never re-sends an earlier step, so a completed tool call
/// is never run twice (R1).
pub struct TurnDriver<'r> {
    runtime: &'r Runtime,
    route: Vec<Provider>,
    turn: Turn,
}

enum AttemptError {
    Aborted,
    Failed { evidence: Evidence, delivered: bool },
}

impl<'r> TurnDriver<'r> {
    fn new(runtime: &'r Runtime, route: Vec<Provider>, caller: Caller) -> Self {
        let policies = vec![Arc::clone(&runtime.policy); route.len().max(1)];
        TurnDriver {
            runtime,
            route,
            turn: Turn::new(policies, caller),
        }
    }

    /// The core state machine of this turn (counters, candidate).
    pub fn state(&self) -> &Turn {
        &self.turn
    }

    /// Sends `body` (a protocol-native request body) and returns the complete response,
    /// replaying the failed request as the policy allows. Events go to `sink`: text as it
    /// streams, `Discard` when a failed attempt's partial output must go, `Retrying` while
    /// waiting, and exactly one `End` (preceded by exactly one `Error` when recovery stops).
    pub async fn request(
        &mut self,
        body: &Value,
        stream: bool,
        sink: &mut dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, TurnError> {
        let message_id = format!("msg_rb_{}", MESSAGE_IDS.fetch_add(1, Ordering::Relaxed));
        let end = |sink: &mut dyn EventSink, outcome| {
            sink.emit(Event::End {
                message_id: message_id.clone(),
                outcome,
            });
        };
        loop {
            let Some(provider) = self.route.get(self.turn.candidate()).cloned() else {
                end(sink, Outcome::Failed);
                return Err(TurnError::Invalid("the route has no candidate".into()));
            };
            let result = self
                .attempt(&provider, body, stream, &message_id, sink, cancel)
                .await;
            let (evidence, delivered) = match result {
                Ok(response) => {
                    self.turn.on_success();
                    end(sink, Outcome::Complete);
                    return Ok(response);
                }
                Err(Err(invalid)) => {
                    end(sink, Outcome::Failed);
                    return Err(invalid);
                }
                Err(Ok(AttemptError::Aborted)) => {
                    end(sink, Outcome::Aborted);
                    return Err(TurnError::Aborted);
                }
                Err(Ok(AttemptError::Failed {
                    evidence,
                    delivered,
                })) => (evidence, delivered),
            };
            let now = self.runtime.clock.now();
            let classification = self.runtime.catalogue.classify(&evidence, now);
            let action = self.turn.on_failure(
                Failure {
                    evidence: &evidence,
                    classification: &classification,
                    // The caller receives `Discard` and drops partial output itself, and
                    // tool calls only leave the driver in a complete response.
                    safety: Safety::Replayable,
                },
                now,
                self.runtime.draw(),
            );
            match action {
                Action::Retry(wait) => {
                    if delivered {
                        sink.emit(Event::Discard {
                            message_id: message_id.clone(),
                        });
                    }
                    sink.emit(Event::Retrying {
                        message_id: message_id.clone(),
                        status: wait.status,
                    });
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => {
                            end(sink, Outcome::Aborted);
                            return Err(TurnError::Aborted);
                        }
                        _ = self.runtime.sleeper.sleep(wait.delay) => {}
                    }
                }
                Action::Fallback { candidate, .. } => {
                    if delivered {
                        sink.emit(Event::Discard {
                            message_id: message_id.clone(),
                        });
                    }
                    sink.emit(Event::Fallback {
                        message_id: message_id.clone(),
                        candidate,
                    });
                }
                Action::Stop(diagnostics) => {
                    sink.emit(Event::Error {
                        message_id: message_id.clone(),
                        diagnostics: diagnostics.clone(),
                    });
                    end(sink, Outcome::Failed);
                    return Err(TurnError::Failed(diagnostics));
                }
            }
        }
    }

    /// One attempt. `Err(Err(_))` is a request that cannot be built: no attempt was sent.
    async fn attempt(
        &self,
        provider: &Provider,
        body: &Value,
        stream: bool,
        message_id: &str,
        sink: &mut dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, Result<AttemptError, TurnError>> {
        let request = provider
            .request(body, stream)
            .map_err(|e| Err(TurnError::Invalid(e.to_string())))?;
        let base = Evidence {
            provider: Some(provider.name.clone()),
            ..Evidence::default()
        };
        let fail = |failure: TransportFailure, phase: Phase, delivered: bool| {
            Ok(AttemptError::Failed {
                evidence: Evidence {
                    transport: Some(failure.kind),
                    body: Some(failure.message),
                    phase,
                    ..base.clone()
                },
                delivered,
            })
        };
        let sent = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Ok(AttemptError::Aborted)),
            sent = self.runtime.client.send(request) => sent,
        };
        let response = sent.map_err(|failure| fail(failure, Phase::Setup, false))?;
        let status = response.status();
        let headers: Headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let idle = self.runtime.client.timeouts().idle;
        let mut body_in = response.into_body();
        if !status.is_success() {
            let bytes =
                match read_body(&mut body_in, ERROR_BODY_LIMIT, idle, cancel.cancelled()).await {
                    Ok(bytes) => bytes,
                    Err(None) => return Err(Ok(AttemptError::Aborted)),
                    // A broken error body: the status and headers alone are evidence (C5).
                    Err(Some(_)) => Bytes::new(),
                };
            return Err(Ok(AttemptError::Failed {
                evidence: Evidence {
                    status: Some(status.as_u16()),
                    headers,
                    body: Some(String::from_utf8_lossy(&bytes).into_owned()),
                    ..base
                },
                delivered: false,
            }));
        }
        if !stream {
            let bytes =
                match read_whole(&mut body_in, RESPONSE_LIMIT, idle, cancel.cancelled()).await {
                    Ok(bytes) => bytes,
                    Err(None) => return Err(Ok(AttemptError::Aborted)),
                    Err(Some(failure)) => return Err(fail(failure, Phase::Setup, false)),
                };
            return match provider.parse_complete(&bytes) {
                Some(mut response) if !response.is_empty() => {
                    response.message_id = message_id.to_owned();
                    Ok(response)
                }
                // An empty answer is evidence with an empty body (`empty_response`).
                Some(_) => Err(Ok(AttemptError::Failed {
                    evidence: Evidence {
                        status: Some(status.as_u16()),
                        headers,
                        body: Some(String::new()),
                        ..base
                    },
                    delivered: false,
                })),
                // A body that is not the protocol's JSON is a broken answer.
                None => {
                    let failure = TransportFailure {
                        kind: TransportKind::BodyDecode,
                        message: format!(
                            "a {} answer whose body is not the protocol's JSON ({} bytes)",
                            status.as_u16(),
                            bytes.len()
                        ),
                    };
                    Err(fail(failure, Phase::Setup, false))
                }
            };
        }
        let mut framer = SseFramer::new();
        let mut phase = Phase::Setup;
        let mut delivered = false;
        let mut response = ModelResponse {
            message_id: message_id.to_owned(),
            ..ModelResponse::default()
        };
        loop {
            let frame = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(Ok(AttemptError::Aborted)),
                frame = tokio::time::timeout(idle, body_in.frame()) => frame,
            };
            let data = match frame {
                Err(_) => {
                    let failure = TransportFailure {
                        kind: TransportKind::IdleTimeout,
                        message: format!("no stream event for {} s", idle.as_secs_f64()),
                    };
                    return Err(fail(failure, phase, delivered));
                }
                Ok(None) => {
                    let failure = TransportFailure {
                        kind: TransportKind::Truncated,
                        message: "the stream ended before its final event".into(),
                    };
                    return Err(fail(failure, phase, delivered));
                }
                Ok(Some(Err(failure))) => return Err(fail(failure, phase, delivered)),
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
            };
            let events = framer.push(&data).map_err(|e| {
                let failure = TransportFailure {
                    kind: TransportKind::BodyDecode,
                    message: e.to_string(),
                };
                fail(failure, phase, delivered)
            })?;
            for event in events {
                for item in stream_items(provider.protocol, &event.event, &event.data) {
                    if item.is_content() {
                        phase = Phase::Stream;
                    }
                    match item {
                        StreamItem::Text(text) => {
                            if !text.is_empty() {
                                delivered = true;
                                response.text.push_str(&text);
                                sink.emit(Event::Text {
                                    message_id: message_id.to_owned(),
                                    text,
                                });
                            }
                        }
                        StreamItem::ToolCallStart { index, id, name } => {
                            let call = tool_call(&mut response.tool_calls, index);
                            call.id = id;
                            call.name = name;
                        }
                        StreamItem::ToolArguments { index, fragment } => {
                            tool_call(&mut response.tool_calls, index)
                                .arguments
                                .push_str(&fragment);
                        }
                        StreamItem::Stop(reason) => response.stop_reason = Some(reason),
                        StreamItem::Error { kind } => {
                            return Err(Ok(AttemptError::Failed {
                                evidence: Evidence {
                                    status: Some(status.as_u16()),
                                    sse_event: Some(kind),
                                    body: Some(event.data.clone()),
                                    phase,
                                    ..base
                                },
                                delivered,
                            }));
                        }
                        StreamItem::Malformed => {
                            let failure = TransportFailure {
                                kind: TransportKind::BodyDecode,
                                message: "an SSE event's data is not the protocol's JSON".into(),
                            };
                            return Err(fail(failure, phase, delivered));
                        }
                        StreamItem::Done => {
                            if response.is_empty() {
                                return Err(Ok(AttemptError::Failed {
                                    evidence: Evidence {
                                        status: Some(status.as_u16()),
                                        body: Some(String::new()),
                                        phase,
                                        ..base
                                    },
                                    delivered,
                                }));
                            }
                            return Ok(response);
                        }
                        StreamItem::Preamble => {}
                    }
                }
            }
        }
    }
}

fn tool_call(calls: &mut Vec<ToolCall>, index: usize) -> &mut ToolCall {
    let index = index.min(63);
    if calls.len() <= index {
        calls.resize_with(index + 1, ToolCall::default);
    }
    &mut calls[index]
}
