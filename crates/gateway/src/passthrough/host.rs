//! A passed-through request as a host of the recovery loop: an attempt is the request sent to
//! one candidate; a success's head goes to the client with its body relayed as it arrives; an
//! error answer is evidence, and when recovery stops it is the client's answer.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use rebound_core::policy::{ClassPolicy, Exhausted};
use rebound_core::{Caller, Diagnostics, Phase, TransportKind, Turn, Wait};
use rebound_runtime::attempt::{ErrorBody, read_error_body, response_evidence, transport_evidence};
use rebound_runtime::http::TransportFailure;
use rebound_runtime::{Attempted, Failed, Flow, Host, Report};

use super::{Forwarded, upstream_uri};
use crate::config::{Candidate, Route};
use crate::forward::{forwarded_headers, rebound_headers, relayable};
use crate::reply::{Body, Relayed, full};
use crate::shape;
use crate::state::Gateway;

/// An upstream's error answer, kept to end the request with.
pub(super) struct UpstreamError {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

type Attempt = Attempted<Response<Body>, Option<UpstreamError>>;

/// One passed-through request.
pub(super) struct PassHost {
    gateway: Arc<Gateway>,
    route: Arc<Route>,
    request: Forwarded,
    /// The route position of the latest attempt.
    candidate: usize,
}

impl PassHost {
    pub(super) fn new(gateway: Arc<Gateway>, route: Arc<Route>, request: Forwarded) -> Self {
        PassHost {
            gateway,
            route,
            request,
            candidate: 0,
        }
    }

    fn upstream_request(&self, candidate: &Candidate) -> Result<Request<Bytes>, http::Error> {
        let uri = upstream_uri(candidate, &self.request.target)?;
        let body = if self.request.routed {
            candidate.body_for(&self.request.body)
        } else {
            self.request.body.clone()
        };
        let mut upstream = Request::builder()
            .method(self.request.method.clone())
            .uri(uri)
            .version(candidate.version())
            .body(body)?;
        forwarded_headers(
            upstream.headers_mut(),
            &self.request.headers,
            candidate,
            0,
            &self.gateway,
        );
        Ok(upstream)
    }

    fn transport_failure(candidate: &Candidate, failure: TransportFailure) -> Attempt {
        Attempted::Failed(Failed {
            evidence: transport_evidence(&candidate.provider, failure, Phase::Setup),
            delivered: false,
            safety: rebound_core::Safety::Replayable,
            detail: None,
        })
    }

    fn headed(&self, response: &mut Response<Body>, candidate: &Candidate, attempts: u32) {
        rebound_headers(response.headers_mut(), attempts, candidate, &self.route);
    }
}

impl Host for PassHost {
    type Success = Response<Body>;
    type Detail = Option<UpstreamError>;
    type Stopped = Response<Body>;

    fn route_id(&self) -> &str {
        &self.route.id
    }

    fn candidate_id(&self, candidate: usize) -> &str {
        self.route
            .candidates
            .get(candidate)
            .map_or("-", |c| c.id.as_str())
    }

    /// A failed attempt is kept for the status page; nothing else is on record.
    async fn commit(
        &mut self,
        failed: &Failed<Self::Detail>,
        decision: &rebound_runtime::Decision,
        _turn: &Turn,
    ) -> Flow {
        self.gateway.status.failed(
            self.gateway.clock().now(),
            &self.route.id,
            self.candidate_id(decision.candidate),
            &failed.evidence,
            decision,
        );
        Flow::Continue
    }

    /// The candidates' policies for `rate_limit` and `transient`; any other failure is the
    /// upstream's answer to the request, ended with at once.
    fn new_turn(&self) -> Turn {
        let policies = self
            .route
            .policies()
            .into_iter()
            .map(|policy| {
                Arc::new(rebound_core::Policy {
                    hard: ClassPolicy::immediate(Exhausted::Stop),
                    ..*policy
                })
            })
            .collect();
        Turn::new(policies, Caller::Session)
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        self.route.deadline.or(self.gateway.config.deadline)
    }

    async fn attempt(&mut self, position: usize, attempt: u32) -> Attempt {
        let Some(candidate) = self.route.candidates.get(position).cloned() else {
            return Attempted::Ended;
        };
        self.candidate = position;
        let upstream = match self.upstream_request(&candidate) {
            Ok(upstream) => upstream,
            Err(e) => {
                let failure = TransportFailure {
                    kind: TransportKind::ConnectionRefused,
                    message: format!("the upstream request could not be built: {e}"),
                };
                return Self::transport_failure(&candidate, failure);
            }
        };
        let response = match self.gateway.client.send(upstream).await {
            Ok(response) => response,
            Err(failure) => return Self::transport_failure(&candidate, failure),
        };
        let (parts, mut body) = response.into_parts();
        if parts.status.is_client_error() || parts.status.is_server_error() {
            let idle = self.gateway.client.timeouts().idle;
            let bytes = match read_error_body(&mut body, idle, std::future::pending()).await {
                ErrorBody::Read(bytes) => bytes,
                ErrorBody::Cancelled => return Attempted::Ended,
            };
            let evidence =
                response_evidence(&candidate.provider, parts.status, &parts.headers, &bytes);
            return Attempted::Failed(Failed {
                evidence,
                delivered: false,
                safety: rebound_core::Safety::Replayable,
                detail: Some(UpstreamError {
                    status: parts.status,
                    headers: parts.headers,
                    body: bytes,
                }),
            });
        }
        let idle = self.gateway.client.timeouts().idle;
        let mut response = Response::new(Body::Upstream(Box::new(Relayed::new(body, idle))));
        *response.status_mut() = parts.status;
        *response.headers_mut() = relayable(&parts.headers, false);
        self.headed(&mut response, &candidate, attempt);
        Attempted::Succeeded(response)
    }

    async fn wait(&mut self, _failed: &Failed<Self::Detail>, wait: &Wait, _attempt: u32) -> Flow {
        self.gateway.sleeper().sleep(wait.delay).await;
        Flow::Continue
    }

    async fn stop(
        &mut self,
        failed: Failed<Self::Detail>,
        diagnostics: Box<Diagnostics>,
        attempt: u32,
    ) -> Response<Body> {
        let caller = self.request.caller;
        let mut response = match failed.detail {
            Some(upstream) => {
                let body = shape::with_diagnostics(caller, &upstream.body, &diagnostics);
                let mut response = full(upstream.status, "application/json", body);
                let mut headers = relayable(&upstream.headers, false);
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                *response.headers_mut() = headers;
                response
            }
            None => {
                let status = match failed.evidence.transport {
                    Some(
                        TransportKind::Timeout
                        | TransportKind::IdleTimeout
                        | TransportKind::ConnectTimeout,
                    ) => StatusCode::GATEWAY_TIMEOUT,
                    _ => StatusCode::BAD_GATEWAY,
                };
                let kind = shape::kind_for(caller, diagnostics.class, Some(status.as_u16()));
                let message = diagnostics
                    .error
                    .clone()
                    .unwrap_or_else(|| "rebound: the upstream failed".to_owned());
                full(
                    status,
                    "application/json",
                    shape::error_body(caller, kind, &message, Some(&diagnostics)).to_string(),
                )
            }
        };
        // rebound has spent what the policy allows: a client that retried would start the
        // loop over (G10).
        response
            .headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
        if let Some(candidate) = self.route.candidates.get(self.candidate).cloned() {
            self.headed(&mut response, &candidate, attempt);
        }
        response
    }

    fn report(&self, report: Report<'_>) {
        crate::observe::count(
            &self.gateway,
            self.request.caller.as_str(),
            |c| self.candidate_id(c),
            &report,
        );
    }
}
