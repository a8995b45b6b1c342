//! The recovery loop, written once (B6): attempt → evidence → classification → the turn's
//! decision → wait, fall back or stop.
//!
//! Every host runs its requests through [`recover`]: the runtime's
//! [`TurnDriver`](crate::TurnDriver), the gateway's live requests and its durable jobs. What
//! differs between them is a small [`Host`]: how an attempt is sent and delivered, how a wait
//! is spent (a countdown to a client, an event to a caller, a persisted deadline), what a
//! decision leaves on record, and how the one terminal error reaches its consumer.
//!
//! This module is the only caller of [`Turn::on_failure`] (a clippy `disallowed-methods` rule
//! keeps it so), and the only place that logs a decision: every host reports the same
//! `tracing` events with the same fields, and observes the same [`Decision`] for its metrics.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

mod rest;

use rebound_core::backoff::Jitter;
use rebound_core::{Action, Catalogue, Classification, Diagnostics, Failure, Turn, Wait};

use crate::attempt::{Attempted, Failed};
use crate::health::SharedHealth;
use crate::time::{Clock, Sleeper, SystemClock, TokioSleeper};

/// What every recovery shares: the catalogue, the clock, the sleeper and the jitter source
/// (T6: time and randomness are injected).
pub struct Engine {
    catalogue: Arc<Catalogue>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    rng: Mutex<fastrand::Rng>,
    health: Option<Arc<SharedHealth>>,
}

impl Engine {
    /// An engine over `catalogue` on the wall clock and tokio's timer.
    pub fn new(catalogue: Arc<Catalogue>) -> Self {
        Engine {
            catalogue,
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            rng: Mutex::new(fastrand::Rng::new()),
            health: None,
        }
    }

    /// Shares `health` between every recovery of this engine (S1): attempts consult it
    /// first, and every outcome is reported to it.
    pub fn with_health(mut self, health: Arc<SharedHealth>) -> Self {
        self.health = Some(health);
        self
    }

    /// The shared health ledger, if there is one.
    pub fn health(&self) -> Option<&Arc<SharedHealth>> {
        self.health.as_ref()
    }

    /// Replaces the clock and the sleeper (tests use [`VirtualTime`](crate::VirtualTime)).
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

    /// The catalogue failures are classified with.
    pub fn catalogue(&self) -> &Arc<Catalogue> {
        &self.catalogue
    }

    /// The clock.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// The clock, for a thread of its own.
    pub fn shared_clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// The one way to wait.
    pub fn sleeper(&self) -> &dyn Sleeper {
        self.sleeper.as_ref()
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

/// The target of the loop's log events: one per attempt outcome.
pub const LOG_TARGET: &str = "rebound::attempt";

/// Whether the loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop here: whoever waited went away, or another owner took over.
    End,
}

/// One failure, decided.
#[derive(Debug)]
pub struct Decision {
    /// The route position of the candidate that failed.
    pub candidate: usize,
    /// The number of the attempt that failed, 1-based.
    pub attempt: u32,
    /// What the catalogue made of the evidence (C7: kept with the attempt).
    pub classification: Classification,
    /// What the turn decided.
    pub action: Action,
    /// The candidate rested in the shared health ledger and no attempt was sent (S2): the
    /// classification is the ledger's, the failure another request's.
    pub rested: bool,
}

impl Decision {
    /// The class label (`rate_limit`, `transient` … or `unclassified`).
    pub fn class(&self) -> &'static str {
        self.classification.verdict.label()
    }

    /// The semantic code, or `-`.
    pub fn code(&self) -> &str {
        self.classification
            .code
            .as_ref()
            .map_or("-", |c| c.as_str())
    }
}

/// What a host is told after each step, for its metrics.
#[derive(Debug)]
pub enum Report<'a> {
    /// Attempt `attempt` goes to route position `candidate`.
    Attempting {
        /// The route position.
        candidate: usize,
        /// The attempt's number, 1-based.
        attempt: u32,
    },
    /// Attempt `attempt` to `candidate` succeeded; `recovered_from` is the class of the last
    /// failure before it, if any.
    Succeeded {
        /// The route position that answered.
        candidate: usize,
        /// The attempt's number.
        attempt: u32,
        /// The class of the failure this success recovered from.
        recovered_from: Option<&'static str>,
    },
    /// A failure was decided.
    Decided(&'a Decision),
    /// A candidate resting in the shared health ledger was passed over, waited for or
    /// stopped at, without an attempt (S2).
    Rested(&'a Decision),
    /// A wait (a retry's or a rest's) ended after this long: what was waited, not what was
    /// planned (a rest may end early when a probe reports).
    Waited(Duration),
    /// Whoever waited went away.
    Ended,
}

/// How a recovery ended.
#[derive(Debug)]
pub enum Ending<S, R> {
    /// The first success.
    Succeeded(S),
    /// Recovery stopped; the host delivered the one terminal error and answered `R`.
    Stopped(R),
    /// Whoever waited went away, or another owner took over.
    Ended,
}

/// What differs between the hosts of the loop.
#[expect(
    async_fn_in_trait,
    reason = "hosts are used by concrete type, so their futures keep their auto traits"
)]
pub trait Host {
    /// A success.
    type Success;
    /// The host's own record of a failure (see [`Failed::detail`]); its default is the
    /// record of a rest, which sent nothing.
    type Detail: Default;
    /// What ending with the terminal error answers.
    type Stopped;

    /// The route's id, for the log.
    fn route_id(&self) -> &str;

    /// Route position `candidate`'s id, for the log.
    fn candidate_id(&self, candidate: usize) -> &str;

    /// The turn for the first failure of a request that had none (made late: most requests
    /// succeed at once and never need one).
    fn new_turn(&self) -> Turn;

    /// Whether this host's candidates are in the engine's shared health ledger (S1): gated
    /// before each attempt, and told each outcome. Yes by default.
    fn shares_health(&self) -> bool {
        true
    }

    /// How many keys route position `candidate` holds (S4): each rests on its own in the
    /// shared health ledger. One by default.
    fn keys(&self, candidate: usize) -> usize {
        let _ = candidate;
        1
    }

    /// The key of its pool the next attempt to `candidate` uses (S4): the first that the
    /// ledger lets serve.
    fn use_key(&mut self, candidate: usize, key: usize) {
        let _ = (candidate, key);
    }

    /// How long the request may take from the start of [`recover`] (D6): no attempt starts
    /// after it, and the one terminal error answers instead, whatever budgets remain. `None`
    /// (the default): budgets alone bound it. Durable jobs keep their own deadlines.
    fn deadline(&self) -> Option<Duration> {
        None
    }

    /// Before each attempt: a host whose state lives elsewhere (a durable job) reloads it into
    /// `turn` and records the attempt as possibly sent (P1). Live hosts have nothing to do.
    async fn prepare(&mut self, turn: &mut Option<Turn>) -> Flow {
        let _ = turn;
        Flow::Continue
    }

    /// Sends attempt number `attempt` to route position `candidate` and delivers a success.
    async fn attempt(
        &mut self,
        candidate: usize,
        attempt: u32,
    ) -> Attempted<Self::Success, Self::Detail>;

    /// Puts a decision on record before it is carried out (P1). Live hosts have nothing to do.
    async fn commit(
        &mut self,
        failed: &Failed<Self::Detail>,
        decision: &Decision,
        turn: &Turn,
    ) -> Flow {
        let _ = (failed, decision, turn);
        Flow::Continue
    }

    /// Spends a wait before retrying the same candidate after the failed attempt number
    /// `attempt` (T5: abortable).
    async fn wait(&mut self, failed: &Failed<Self::Detail>, wait: &Wait, attempt: u32) -> Flow;

    /// Before route position `next` takes over from the failed attempt number `attempt`.
    async fn fall_back(
        &mut self,
        failed: &Failed<Self::Detail>,
        next: usize,
        attempt: u32,
    ) -> Flow {
        let _ = (failed, next, attempt);
        Flow::Continue
    }

    /// Delivers the one terminal error (R4, G2, G4).
    async fn stop(
        &mut self,
        failed: Failed<Self::Detail>,
        diagnostics: Box<Diagnostics>,
        attempt: u32,
    ) -> Self::Stopped;

    /// Observes each step, for metrics.
    fn report(&self, report: Report<'_>) {
        let _ = report;
    }
}

/// Runs a request through its route until the first success, the one terminal error, or the
/// end of whoever waited. `turn` holds the counters between requests of one logical turn
/// (B3); `None` makes one at the first failure.
pub async fn recover<H: Host>(
    engine: &Engine,
    host: &mut H,
    turn: &mut Option<Turn>,
) -> Ending<H::Success, H::Stopped> {
    let mut recovered_from: Option<&'static str> = None;
    // Measured on the engine's clock, so virtual time decides it as it decides waits.
    let deadline = host.deadline().map(|budget| engine.clock().now() + budget);
    loop {
        if Box::pin(host.prepare(turn)).await == Flow::End {
            host.report(Report::Ended);
            return Ending::Ended;
        }
        let candidate = turn.as_ref().map_or(0, Turn::candidate);
        let attempt = turn.as_ref().map_or(1, Turn::attempt);
        // Boxed: the ledger's step costs nothing on the task of a request that passes it.
        let consulted = rest::consult(engine, host, turn, deadline, candidate, attempt);
        let slot = match Box::pin(consulted).await {
            rest::Consulted::Go(slot) => slot,
            rest::Consulted::Again => continue,
            rest::Consulted::Stopped(stopped) => return Ending::Stopped(stopped),
            rest::Consulted::Ended => return Ending::Ended,
        };
        host.report(Report::Attempting { candidate, attempt });
        // Boxed, like every step below: a long stream's task then holds only the step it is
        // in, not room for the largest one.
        let failed = match Box::pin(host.attempt(candidate, attempt)).await {
            Attempted::Succeeded(success) => {
                if let Some(health) = ledger(engine, host) {
                    slot.succeeded(health, host.candidate_id(candidate));
                }
                if let Some(turn) = turn {
                    turn.on_success();
                }
                succeeded(host, candidate, attempt, recovered_from);
                return Ending::Succeeded(success);
            }
            Attempted::Ended => {
                if let Some(health) = ledger(engine, host) {
                    let now = engine.clock().now();
                    slot.abandoned(health, host.candidate_id(candidate), now);
                }
                host.report(Report::Ended);
                return Ending::Ended;
            }
            Attempted::Failed(failed) => failed,
        };
        let turn = turn.get_or_insert_with(|| host.new_turn());
        turn.set_deadline(deadline);
        // Boxed: a failure's evidence and decision stay off the task of a request that never
        // fails, and of a long stream while it streams.
        match Box::pin(after_failure(
            engine, host, turn, failed, &slot, candidate, attempt,
        ))
        .await
        {
            Next::Attempt(class) => recovered_from = Some(class),
            Next::Stopped(stopped) => return Ending::Stopped(stopped),
            Next::Ended => return Ending::Ended,
        }
    }
}

/// The shared health ledger, when `host` takes part in it.
fn ledger<'a, H: Host>(engine: &'a Engine, host: &H) -> Option<&'a Arc<SharedHealth>> {
    engine.health().filter(|_| host.shares_health())
}

/// What follows a decided failure.
enum Next<R> {
    /// Another attempt, after a failure of this class.
    Attempt(&'static str),
    /// The terminal error was delivered.
    Stopped(R),
    /// Whoever waited went away.
    Ended,
}

/// Decides a failure, puts the decision on record, and carries it out.
async fn after_failure<H: Host>(
    engine: &Engine,
    host: &mut H,
    turn: &mut Turn,
    failed: Failed<H::Detail>,
    slot: &rest::Slot,
    candidate: usize,
    attempt: u32,
) -> Next<H::Stopped> {
    let mut decision = decide(engine, turn, &failed, candidate, attempt);
    let mut next_key = false;
    let health = ledger(engine, host);
    if let Some(health) = health {
        let now = engine.clock().now();
        let classification = &decision.classification;
        let id = host.candidate_id(candidate);
        health.failed(
            slot.failed_id(id, classification.scope),
            classification,
            now,
        );
        // A rate-limited or exhausted key rests while the others serve (S4): a retry goes to
        // the next key at once.
        next_key = matches!(decision.action, Action::Retry(_))
            && slot.another_key_serves(health, id, host.keys(candidate), classification.scope, now);
    }
    // The retry needs no wait: on record (a durable job's deadline) and in the log alike.
    if next_key && let Action::Retry(wait) = &mut decision.action {
        wait.delay = Duration::ZERO;
        wait.status.delay = Duration::ZERO;
    }
    log_decision(host, &failed, &decision);
    host.report(Report::Decided(&decision));
    if host.commit(&failed, &decision, turn).await == Flow::End {
        return Next::Ended;
    }
    let class = decision.class();
    if next_key {
        return Next::Attempt(class);
    }
    // Taken after this failure is on the ledger: only what other requests learn ends the wait.
    let id = host.candidate_id(candidate).to_owned();
    let early = match health {
        Some(health) if turn.has_next() => Early::Resting {
            changes: health.subscribe(),
            health,
            id: &id,
            clock: engine.clock(),
        },
        _ => Early::Never,
    };
    carry_out(
        host,
        engine.clock(),
        failed,
        decision,
        attempt,
        class,
        early,
    )
    .await
}

/// What ends a wait before it runs out.
pub(super) enum Early<'a> {
    /// Nothing.
    Never,
    /// Any change of the ledger: a rest, which a probe's report or a new deadline ends.
    Change(tokio::sync::watch::Receiver<u64>),
    /// The candidate waited for starts resting in the ledger (another request opened its
    /// circuit or learned its cooldown) while the route has another candidate: the loop then
    /// passes it over at once instead of waiting on (S2).
    Resting {
        /// The ledger's changes since the failure was recorded.
        changes: tokio::sync::watch::Receiver<u64>,
        /// The ledger.
        health: &'a SharedHealth,
        /// The candidate's ledger id.
        id: &'a str,
        /// The engine's clock, to wait out the rest of a wait the ledger did not end.
        clock: &'a dyn Clock,
    },
}

/// Carries out a committed decision; a wait ends early as `early` says.
async fn carry_out<H: Host>(
    host: &mut H,
    clock: &dyn Clock,
    failed: Failed<H::Detail>,
    decision: Decision,
    attempt: u32,
    class: &'static str,
    early: Early<'_>,
) -> Next<H::Stopped> {
    let flow = match decision.action {
        Action::Retry(wait) => {
            let started = clock.now();
            let flow = wait_out(host, &failed, wait, attempt, early).await;
            let waited = clock.now().duration_since(started).unwrap_or_default();
            host.report(Report::Waited(waited));
            flow
        }
        Action::Fallback { candidate, .. } => host.fall_back(&failed, candidate, attempt).await,
        Action::Stop(diagnostics) => {
            return Next::Stopped(host.stop(failed, diagnostics, attempt).await);
        }
    };
    match flow {
        Flow::Continue => Next::Attempt(class),
        Flow::End => {
            host.report(Report::Ended);
            Next::Ended
        }
    }
}

/// Spends `wait` through the host, unless `early` ends it first.
async fn wait_out<H: Host>(
    host: &mut H,
    failed: &Failed<H::Detail>,
    mut wait: Wait,
    attempt: u32,
    early: Early<'_>,
) -> Flow {
    match early {
        Early::Never => host.wait(failed, &wait, attempt).await,
        // A closed ledger cannot change again: the wait runs out.
        Early::Change(mut changes) => tokio::select! {
            flow = host.wait(failed, &wait, attempt) => flow,
            Ok(()) = changes.changed() => Flow::Continue,
        },
        Early::Resting {
            mut changes,
            health,
            id,
            clock,
        } => loop {
            let started = clock.now();
            tokio::select! {
                flow = host.wait(failed, &wait, attempt) => return flow,
                Ok(()) = changes.changed() => {
                    let now = clock.now();
                    if !health.may_serve(id, now) {
                        return Flow::Continue;
                    }
                    // Another candidate's change: the rest of the wait, then the retry.
                    let spent = now.duration_since(started).unwrap_or_default();
                    wait.delay = wait.delay.saturating_sub(spent);
                    if wait.delay.is_zero() {
                        return Flow::Continue;
                    }
                }
            }
        },
    }
}

/// Classifies the evidence and asks the turn: the one call of [`Turn::on_failure`].
fn decide<D>(
    engine: &Engine,
    turn: &mut Turn,
    failed: &Failed<D>,
    candidate: usize,
    attempt: u32,
) -> Decision {
    let now = engine.clock.now();
    let classification = engine.catalogue.classify(&failed.evidence, now);
    #[expect(
        clippy::disallowed_methods,
        reason = "the recovery loop is the one place a failure is decided"
    )]
    let action = turn.on_failure(
        Failure {
            evidence: &failed.evidence,
            classification: &classification,
            safety: failed.safety,
        },
        now,
        engine.draw(),
    );
    Decision {
        candidate,
        attempt,
        classification,
        action,
        rested: false,
    }
}

fn succeeded<H: Host>(
    host: &H,
    candidate: usize,
    attempt: u32,
    recovered_from: Option<&'static str>,
) {
    tracing::info!(
        target: LOG_TARGET,
        route = %host.route_id(),
        candidate = %host.candidate_id(candidate),
        attempt,
        outcome = %"ok",
    );
    host.report(Report::Succeeded {
        candidate,
        attempt,
        recovered_from,
    });
}

/// One log event per decided failure (G6): codes, classes, rule ids, statuses and candidate
/// ids, never headers or bodies. A request that ends in an error is a warning.
fn log_decision<H: Host>(host: &H, failed: &Failed<H::Detail>, decision: &Decision) {
    let evidence = &failed.evidence;
    let (action, delay_ms, next, reason) = match &decision.action {
        Action::Retry(wait) => ("retry", Some(millis(wait.delay)), None, None),
        Action::Fallback { candidate, .. } => {
            ("fallback", None, Some(host.candidate_id(*candidate)), None)
        }
        Action::Stop(diagnostics) => ("stop", None, None, Some(diagnostics.reason.as_str())),
    };
    macro_rules! event {
        ($level:ident) => {
            tracing::$level!(
                target: LOG_TARGET,
                route = %host.route_id(),
                candidate = %host.candidate_id(decision.candidate),
                attempt = decision.attempt,
                outcome = %if decision.rested { "rested" } else { "failed" },
                phase = %evidence.phase.as_str(),
                status = evidence.status,
                transport = evidence.transport.map(|t| display(t.as_str())),
                sse_event = evidence.sse_event.as_deref().map(display),
                code = %decision.code(),
                class = %decision.class(),
                rule = decision.classification.rule_id.as_deref().map(display),
                action = %action,
                delay_ms,
                next = next.map(display),
                reason = reason.map(display),
            )
        };
    }
    if reason.is_some() {
        event!(warn);
    } else {
        event!(info);
    }
}

fn millis(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}
