//! A live request as a host of the recovery loop: attempts go upstream and a success straight
//! to the client; a wait is a countdown a streaming client can see (G3); a replay after content
//! first tells a restart client to discard it (G4); the terminal error is shaped like the
//! provider's own (G2).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use rebound_core::{Action, Caller, Diagnostics, RetryStatus, Turn, Wait};
use rebound_runtime::{Attempted, Decision, Flow, Host, Report};

use super::downstream::{Downstream, Head};
use super::headers::{give_up, rebound_headers, skip, skipped_header};
use super::outcome::{Attempt, Detail, FailedAttempt};
use super::terminal::terminal;
use super::{LiveRequest, RESTART_EVENT, upstream};
use crate::config::Candidate;

/// One live request and its client.
pub(super) struct LiveHost {
    request: LiveRequest,
    down: Downstream,
    /// The route position of the latest attempt.
    candidate: usize,
    /// The latest decision was taken at a candidate resting in the shared health ledger (S2),
    /// with no attempt sent: a stop then answers like the failure that set the rest.
    rested: bool,
}

impl LiveHost {
    pub(super) fn new(request: LiveRequest, down: Downstream) -> Self {
        LiveHost {
            request,
            down,
            candidate: 0,
            rested: false,
        }
    }

    fn candidate(&self, position: usize) -> Option<&Arc<Candidate>> {
        self.request.route.candidates.get(position)
    }

    /// Tells a restart client to discard the partial message; `false` when it went away.
    async fn restart_marker(&mut self, attempt: u32, reason: &str) -> bool {
        let data =
            serde_json::json!({"type": RESTART_EVENT, "reason": reason, "attempt": attempt + 1});
        let event = format!("event: {RESTART_EVENT}\ndata: {data}\n\n");
        self.down.send(Bytes::from(event)).await
    }

    /// Commits a streaming response with rebound's own headers (a keep-alive before content).
    /// It says `x-should-retry: false` (G10): its head goes before the outcome is known, and an
    /// error that ends it comes after rebound's retries, which the client must not start over.
    fn commit_stream(&mut self, attempts: u32) -> bool {
        let Some(candidate) = self.candidate(self.candidate).cloned() else {
            return false;
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        give_up(&mut headers);
        rebound_headers(&mut headers, attempts, &candidate, &self.request.route);
        skipped_header(&mut headers, self.request.skipped.as_ref());
        self.down.respond(Head {
            status: StatusCode::OK,
            headers,
            body: None,
        })
    }

    /// Waits `delay`; a streaming client hears `: Retrying in 4s · attempt 2/10` each second
    /// once the wait passes a second (G3). `false` when the client went away.
    async fn countdown(&mut self, delay: Duration, status: &RetryStatus, attempts: u32) -> bool {
        let gateway = Arc::clone(&self.request.gateway);
        // Listed on the status page while it lasts.
        let _listed = gateway.status.wait(
            &self.request.route.id,
            self.candidate_id(self.candidate),
            status,
            attempts + 1,
        );
        let mut remaining = delay;
        while !remaining.is_zero() {
            let step = remaining.min(Duration::from_secs(1));
            tokio::select! {
                biased;
                _ = self.down.gone() => return false,
                _ = gateway.sleeper().sleep(step) => {}
            }
            remaining -= step;
            if self.request.stream && !remaining.is_zero() {
                if !self.down.committed() && !self.commit_stream(attempts) {
                    return false;
                }
                let comment = format!(": {}\n\n", status.text(gateway.clock().now()));
                if !self.down.send(Bytes::from(comment)).await {
                    return false;
                }
            }
        }
        true
    }
}

impl Host for LiveHost {
    type Success = ();
    type Detail = Detail;
    type Stopped = ();

    fn route_id(&self) -> &str {
        &self.request.route.id
    }

    fn candidate_id(&self, candidate: usize) -> &str {
        self.candidate(candidate).map_or("-", |c| c.id.as_str())
    }

    fn new_turn(&self) -> Turn {
        Turn::new(self.request.route.policies(), Caller::Session)
            .with_switches(self.request.route.switches())
    }

    fn keys(&self, candidate: usize) -> usize {
        self.candidate(candidate).map_or(1, |c| c.keys())
    }

    fn use_key(&mut self, _candidate: usize, key: usize) {
        self.request.key = key;
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        self.request
            .route
            .deadline
            .or(self.request.gateway.config.deadline)
    }

    async fn attempt(&mut self, candidate: usize, attempt: u32) -> Attempt {
        let Some(chosen) = self.candidate(candidate).cloned() else {
            return Attempted::Ended;
        };
        self.candidate = candidate;
        let attempted = upstream::attempt(&self.request, &chosen, &mut self.down, attempt).await;
        // A response the client has seen the id of lives at this candidate, whatever became
        // of the attempt afterwards.
        if let Some(id) = self.down.watch.as_mut().and_then(|w| w.take()) {
            self.request.gateway.responses.remember(&id, &chosen);
        }
        attempted
    }

    /// A candidate passed over as resting (S2) is named in `x-rebound-skipped`.
    async fn commit(&mut self, failed: &FailedAttempt, decision: &Decision, _turn: &Turn) -> Flow {
        self.rested = decision.rested;
        let gateway = &self.request.gateway;
        gateway.status.failed(
            gateway.clock().now(),
            &self.request.route.id,
            self.candidate_id(decision.candidate),
            &failed.evidence,
            decision,
        );
        if decision.rested
            && matches!(decision.action, Action::Fallback { .. })
            && let Some(candidate) = self.candidate(decision.candidate).cloned()
        {
            self.request.skipped = skip(self.request.skipped.take(), &candidate.id);
        }
        Flow::Continue
    }

    async fn wait(&mut self, failed: &FailedAttempt, wait: &Wait, attempt: u32) -> Flow {
        if failed.delivered && !self.restart_marker(attempt, "retry").await {
            return Flow::End;
        }
        if self.countdown(wait.delay, &wait.status, attempt).await {
            Flow::Continue
        } else {
            Flow::End
        }
    }

    async fn fall_back(&mut self, failed: &FailedAttempt, _next: usize, attempt: u32) -> Flow {
        if failed.delivered && !self.restart_marker(attempt, "fallback").await {
            return Flow::End;
        }
        Flow::Continue
    }

    async fn stop(&mut self, failed: FailedAttempt, diagnostics: Box<Diagnostics>, attempt: u32) {
        let Some(candidate) = self.candidate(self.candidate).cloned() else {
            return;
        };
        terminal(
            &self.request,
            &mut self.down,
            failed,
            &diagnostics,
            &candidate,
            attempt,
            self.rested,
        )
        .await;
    }

    fn report(&self, report: Report<'_>) {
        crate::observe::count(
            &self.request.gateway,
            self.request.api.protocol().as_str(),
            |c| self.candidate_id(c),
            &report,
        );
    }
}
