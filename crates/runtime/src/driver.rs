//! The turn driver: one model request at a time, recovered by the one loop
//! ([`recover`](crate::recovery::recover)), with abortable waits and an honest status
//! (B1–B6, R1–R4, T5).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rebound_core::{Caller, Catalogue, Diagnostics, Phase, Policy, Safety, Turn, Wait};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::attempt::{Attempted, ErrorBody, Failed, read_error_body, response_evidence};
use crate::event::{Event, EventSink, Outcome};
use crate::foreign;
use crate::http::{HttpClient, Timeouts};
use crate::provider::{ModelResponse, Provider};
use crate::reading::{Read, read_complete, read_stream};
use crate::recovery::{Ending, Engine, Flow, Host, recover};
use crate::time::{Clock, Sleeper};

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

/// Shared by every turn: the client, the one policy object (B6), and the recovery engine
/// (catalogue, clock, jitter).
pub struct Runtime {
    client: HttpClient,
    policy: Arc<Policy>,
    engine: Engine,
}

impl Runtime {
    /// A runtime with the shipped catalogue.
    pub fn new(client: HttpClient, catalogue: Arc<Catalogue>, policy: Arc<Policy>) -> Self {
        Runtime {
            client,
            policy,
            engine: Engine::new(catalogue),
        }
    }

    /// A runtime with default timeouts, the shipped catalogue and the interactive policy,
    /// reaching providers through the proxy the environment names (`HTTPS_PROXY`, `HTTP_PROXY`,
    /// `ALL_PROXY`, `NO_PROXY`, as curl reads them); a variable that holds no usable proxy is an
    /// error naming it. [`Runtime::new`] takes any client, [`HttpClient::new`] one that reaches
    /// every provider directly.
    pub fn interactive() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let proxies = crate::http::Proxies::from_env()?;
        Ok(Self::new(
            HttpClient::configured(
                Timeouts::default(),
                &crate::http::ExtraRoots::default(),
                &proxies,
            )?,
            Arc::new(Catalogue::shipped()?),
            Arc::new(Policy::interactive()),
        ))
    }

    /// Replaces the clock and the sleeper (tests use [`VirtualTime`](crate::VirtualTime)).
    pub fn with_time(mut self, clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>) -> Self {
        self.engine = self.engine.with_time(clock, sleeper);
        self
    }

    /// Seeds the jitter draws, for reproducible waits.
    pub fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.engine = self.engine.with_jitter_seed(seed);
        self
    }

    /// Shares `health` between every turn of this runtime (S1–S3): a provider that answers
    /// one turn with `retry-after` or goes down rests for all of them, keyed by provider name.
    pub fn with_health(mut self, health: Arc<crate::SharedHealth>) -> Self {
        self.engine = self.engine.with_health(health);
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
}

static MESSAGE_IDS: AtomicU64 = AtomicU64::new(1);

/// One logical turn: owns the class counters; sends one model request at a time. The caller
/// runs tools between requests and never re-sends an earlier step, so a completed tool call
/// is never run twice (R1).
pub struct TurnDriver<'r> {
    runtime: &'r Runtime,
    route: Vec<Provider>,
    turn: Option<Turn>,
}

impl<'r> TurnDriver<'r> {
    fn new(runtime: &'r Runtime, route: Vec<Provider>, caller: Caller) -> Self {
        let policies = vec![Arc::clone(&runtime.policy); route.len().max(1)];
        TurnDriver {
            runtime,
            route,
            turn: Some(Turn::new(policies, caller)),
        }
    }

    /// The core state machine of this turn (counters, candidate).
    pub fn state(&self) -> &Turn {
        self.turn
            .as_ref()
            .unwrap_or_else(|| unreachable!("a driver's turn is made with it"))
    }

    /// Sends `body` (a protocol-native request body) and returns the complete response,
    /// replaying the failed request as the policy allows. Events go to `sink`: text and
    /// thinking as they stream, `Discard` when a failed attempt's partial output must go, `Retrying` while
    /// waiting, and exactly one `End` (preceded by exactly one `Error` when recovery stops).
    pub async fn request(
        &mut self,
        body: &Value,
        stream: bool,
        sink: &mut dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, TurnError> {
        let message_id = format!("msg_rb_{}", MESSAGE_IDS.fetch_add(1, Ordering::Relaxed));
        let (outcome, result) = if self.route.is_empty() {
            (
                Outcome::Failed,
                Err(TurnError::Invalid("the route has no candidate".into())),
            )
        } else {
            let mut host = TurnHost {
                runtime: self.runtime,
                route: &self.route,
                body,
                stream,
                message_id: &message_id,
                sink: &mut *sink,
                cancel,
                invalid: None,
            };
            match recover(&self.runtime.engine, &mut host, &mut self.turn).await {
                Ending::Succeeded(response) => (Outcome::Complete, Ok(response)),
                Ending::Stopped(diagnostics) => {
                    (Outcome::Failed, Err(TurnError::Failed(diagnostics)))
                }
                Ending::Ended => match host.invalid.take() {
                    Some(reason) => (Outcome::Failed, Err(TurnError::Invalid(reason))),
                    None => (Outcome::Aborted, Err(TurnError::Aborted)),
                },
            }
        };
        sink.emit(Event::End {
            message_id,
            outcome,
        });
        result
    }
}

/// One request of a turn, as a host of the recovery loop: attempts go to the route's
/// providers, waits are told to the caller and race its abort token.
struct TurnHost<'a> {
    runtime: &'a Runtime,
    route: &'a [Provider],
    body: &'a Value,
    stream: bool,
    message_id: &'a str,
    sink: &'a mut dyn EventSink,
    cancel: &'a CancellationToken,
    /// Why the request could not be built, when that ended it: no attempt was sent.
    invalid: Option<String>,
}

impl TurnHost<'_> {
    /// The failed attempt's partial output goes before the replay (R1).
    fn discard_partial(&mut self, failed: &Failed<()>) {
        if failed.delivered {
            self.sink.emit(Event::Discard {
                message_id: self.message_id.to_owned(),
            });
        }
    }
}

impl Host for TurnHost<'_> {
    type Success = ModelResponse;
    type Detail = ();
    type Stopped = Box<Diagnostics>;

    fn route_id(&self) -> &str {
        "turn"
    }

    fn candidate_id(&self, candidate: usize) -> &str {
        self.route.get(candidate).map_or("-", |p| p.name.as_str())
    }

    fn new_turn(&self) -> Turn {
        let policies = vec![Arc::clone(&self.runtime.policy); self.route.len().max(1)];
        Turn::new(policies, Caller::Session)
    }

    async fn attempt(&mut self, candidate: usize, _attempt: u32) -> Attempted<ModelResponse, ()> {
        let Some(provider) = self.route.get(candidate) else {
            self.invalid = Some(format!("the route has no candidate {candidate}"));
            return Attempted::Ended;
        };
        let request = match provider.request(self.body, self.stream) {
            Ok(request) => request,
            Err(e) => {
                self.invalid = Some(e.to_string());
                return Attempted::Ended;
            }
        };
        let client = &self.runtime.client;
        let sent = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Attempted::Ended,
            sent = client.send(request) => sent,
        };
        let response = match sent {
            Ok(response) => response,
            Err(failure) => return failed(provider, failure, Phase::Setup, false),
        };
        let (parts, mut body) = response.into_parts();
        let idle = client.timeouts().idle;
        if !parts.status.is_success() {
            let bytes = match read_error_body(&mut body, idle, self.cancel.cancelled()).await {
                ErrorBody::Read(bytes) => bytes,
                ErrorBody::Cancelled => return Attempted::Ended,
            };
            return Attempted::Failed(Failed {
                evidence: response_evidence(&provider.name, parts.status, &parts.headers, &bytes),
                delivered: false,
                safety: Safety::Replayable,
                detail: (),
            });
        }
        // A stream request answered with a web page: no stream to read.
        if self.stream && foreign::page_head(&parts.headers) {
            let bytes = match read_error_body(&mut body, idle, self.cancel.cancelled()).await {
                ErrorBody::Read(bytes) => bytes,
                ErrorBody::Cancelled => return Attempted::Ended,
            };
            return Attempted::Failed(Failed {
                evidence: foreign::page_evidence(&provider.name, parts.status, &bytes),
                delivered: false,
                safety: Safety::Replayable,
                detail: (),
            });
        }
        let read = if self.stream {
            read_stream(
                provider,
                &parts,
                &mut body,
                idle,
                self.message_id,
                &mut *self.sink,
                self.cancel,
            )
            .await
        } else {
            read_complete(
                provider,
                &parts,
                &mut body,
                idle,
                self.message_id,
                self.cancel,
            )
            .await
        };
        match read {
            Read::Response(response) => Attempted::Succeeded(response),
            Read::Failed {
                evidence,
                delivered,
            } => Attempted::Failed(Failed {
                evidence,
                delivered,
                // The caller receives `Discard` and drops partial output itself, and tool
                // calls only leave the driver in a complete response.
                safety: Safety::Replayable,
                detail: (),
            }),
            Read::Cancelled => Attempted::Ended,
        }
    }

    async fn wait(&mut self, failed: &Failed<()>, wait: &Wait, _attempt: u32) -> Flow {
        self.discard_partial(failed);
        self.sink.emit(Event::Retrying {
            message_id: self.message_id.to_owned(),
            status: wait.status.clone(),
        });
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Flow::End,
            _ = self.runtime.engine.sleeper().sleep(wait.delay) => Flow::Continue,
        }
    }

    async fn fall_back(&mut self, failed: &Failed<()>, next: usize, _attempt: u32) -> Flow {
        self.discard_partial(failed);
        self.sink.emit(Event::Fallback {
            message_id: self.message_id.to_owned(),
            candidate: next,
        });
        Flow::Continue
    }

    async fn stop(
        &mut self,
        _failed: Failed<()>,
        diagnostics: Box<Diagnostics>,
        _attempt: u32,
    ) -> Box<Diagnostics> {
        self.sink.emit(Event::Error {
            message_id: self.message_id.to_owned(),
            diagnostics: diagnostics.clone(),
        });
        diagnostics
    }
}

fn failed(
    provider: &Provider,
    failure: crate::http::TransportFailure,
    phase: Phase,
    delivered: bool,
) -> Attempted<ModelResponse, ()> {
    Attempted::Failed(Failed {
        evidence: crate::attempt::transport_evidence(&provider.name, failure, phase),
        delivered,
        safety: Safety::Replayable,
        detail: (),
    })
}
