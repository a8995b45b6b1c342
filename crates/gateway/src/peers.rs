//! Shared health across instances (X3): the deadlines one instance's ledger sets reach the
//! others through the PostgreSQL store, and theirs reach it.
//!
//! The ledger's observer runs under the ledger's lock, so it only [posts](Outbox::post) a
//! deadline on a channel; a writer thread of its own takes it to the database (an upsert that
//! only extends, and a notification). A listener thread holds a connection of its own with
//! `LISTEN`, reads each row a notification names and hands it to the ledger as
//! [learned](rebound_runtime::SharedHealth::learn): a change learned that way is never posted
//! again, so two instances do not echo a deadline back and forth. When its connection breaks,
//! the listener listens again and reads every deadline still running, so one set meanwhile is
//! not missed. Only deadlines travel (cooling and open); probes and closings stay local: each
//! instance probes for itself when the shared deadline ends.

use std::sync::mpsc;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use rebound_core::classification::{Class, Scope};
use rebound_core::{Change, Entry, HealthState, Learned};
use rebound_runtime::{Clock, SharedHealth};
use rebound_store::{PostgresStore, SharedDeadline, StoreError};

/// The log target of the sharing threads' events.
const LOG_TARGET: &str = "rebound::health";

/// How long a listening wait lasts before the listener checks its gateway is still there.
const WAIT: Duration = Duration::from_secs(1);

/// The pause before listening again after the connection broke.
const RELISTEN_PAUSE: Duration = Duration::from_secs(1);

/// How long sharing may take to start listening before the gateway serves without waiting
/// for it.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the ledger's observer posts this instance's deadlines; empty until shared.
#[derive(Default)]
pub(crate) struct Outbox(OnceLock<mpsc::Sender<SharedDeadline>>);

impl Outbox {
    /// Posts `change` when it is this instance's own deadline. Never blocks: the ledger's
    /// lock is held.
    pub(crate) fn post(&self, change: &Change, entry: Option<&Entry>) {
        let Some(sender) = self.0.get() else {
            return;
        };
        if let Some(deadline) = outgoing(change, entry) {
            // The writer ended only when the gateway is going away.
            let _ = sender.send(deadline);
        }
    }
}

/// The deadline `change` sets, if it is one to pass on: this instance's own, to cooling or
/// open.
fn outgoing(change: &Change, entry: Option<&Entry>) -> Option<SharedDeadline> {
    if change.learned || !matches!(change.to, HealthState::Cooling | HealthState::Open) {
        return None;
    }
    let until = change.until?;
    Some(SharedDeadline {
        candidate: change.candidate.clone(),
        state: change.to.as_str().to_owned(),
        until,
        scope: entry.and_then(|e| e.scope).map(|s| s.as_str().to_owned()),
        class: entry.and_then(|e| e.class).map(|c| c.as_str().to_owned()),
        code: entry.and_then(|e| e.code.clone()),
        rule_id: entry.and_then(|e| e.rule_id.clone()),
        updated_by: String::new(),
    })
}

/// A deadline from the table as the ledger takes it; `None` for a state it does not know
/// (a newer rebound's), which is logged and left alone.
fn incoming(deadline: &SharedDeadline) -> Option<Learned> {
    let state = match deadline.state.as_str() {
        "cooling" => HealthState::Cooling,
        "open" => HealthState::Open,
        other => {
            tracing::warn!(
                target: LOG_TARGET,
                event = "shared_health_unknown_state",
                candidate = %deadline.candidate,
                state = %other,
            );
            return None;
        }
    };
    const SCOPES: [Scope; 5] = [
        Scope::Request,
        Scope::Connection,
        Scope::Model,
        Scope::Account,
        Scope::Provider,
    ];
    Some(Learned {
        state,
        until: deadline.until,
        scope: deadline
            .scope
            .as_deref()
            .and_then(|name| SCOPES.into_iter().find(|s| s.as_str() == name)),
        class: deadline.class.as_deref().and_then(Class::parse),
        code: deadline.code.clone(),
        rule_id: deadline.rule_id.clone(),
    })
}

/// Shares the health ledger `health` with every other instance on `store`: reads the
/// deadlines still running, starts listening for new ones, and passes on what `outbox` is
/// posted. Returns once listening (or after [`START_TIMEOUT`], the listener trying on
/// meanwhile), so that a deadline another instance sets after this instance started serving is
/// not missed. Without a ledger (`[health] enabled = false`) nothing is shared.
pub(crate) async fn share(
    health: Option<&Arc<SharedHealth>>,
    outbox: &Outbox,
    clock: Arc<dyn Clock>,
    store: Arc<PostgresStore>,
) {
    let Some(health) = health else {
        return;
    };
    let (sender, posted) = mpsc::channel::<SharedDeadline>();
    if outbox.0.set(sender).is_err() {
        return;
    }
    let writer = Arc::clone(&store);
    let spawned = std::thread::Builder::new()
        .name("rebound-health-writer".into())
        .spawn(move || write(&writer, &posted));
    if let Err(e) = spawned {
        tracing::warn!(target: LOG_TARGET, event = "shared_health_failed", error = %e);
        return;
    }
    let (ready, listening) = tokio::sync::oneshot::channel();
    let health = Arc::downgrade(health);
    let spawned = std::thread::Builder::new()
        .name("rebound-health-listener".into())
        .spawn(move || listen(&store, &health, clock.as_ref(), ready));
    if let Err(e) = spawned {
        tracing::warn!(target: LOG_TARGET, event = "shared_health_failed", error = %e);
        return;
    }
    if tokio::time::timeout(START_TIMEOUT, listening)
        .await
        .is_err()
    {
        tracing::warn!(
            target: LOG_TARGET,
            event = "shared_health_not_listening",
            after_ms = START_TIMEOUT.as_millis(),
        );
    }
}

/// The writer: every posted deadline to the table, in order, until the gateway goes.
fn write(store: &PostgresStore, outbox: &mpsc::Receiver<SharedDeadline>) {
    while let Ok(deadline) = outbox.recv() {
        match store.publish_deadline(&deadline) {
            Ok(moved) => tracing::debug!(
                target: LOG_TARGET,
                event = "shared_health_published",
                candidate = %deadline.candidate,
                moved,
            ),
            Err(e) => tracing::warn!(
                target: LOG_TARGET,
                event = "shared_health_publish_failed",
                candidate = %deadline.candidate,
                error = %e,
            ),
        }
    }
}

/// The listener: listen, catch up on the deadlines still running, then learn each one
/// notified; again after the connection breaks; until the gateway's ledger goes.
fn listen(
    store: &PostgresStore,
    health: &Weak<SharedHealth>,
    clock: &dyn Clock,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    while health.strong_count() > 0 {
        if let Err(e) = listen_once(store, health, clock, &mut ready) {
            tracing::warn!(
                target: LOG_TARGET,
                event = "shared_health_listen_failed",
                error = %e,
            );
            std::thread::sleep(RELISTEN_PAUSE);
        }
    }
}

/// One listening connection's life: `Ok` when the ledger went away.
fn listen_once(
    store: &PostgresStore,
    health: &Weak<SharedHealth>,
    clock: &dyn Clock,
    ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<(), StoreError> {
    let mut listener = store.listen_health()?;
    for deadline in store.deadlines_after(clock.now())? {
        let Some(health) = health.upgrade() else {
            return Ok(());
        };
        learn(&health, store, &deadline, clock);
    }
    if let Some(ready) = ready.take() {
        let _ = ready.send(());
    }
    loop {
        let ids = listener.wait(WAIT)?;
        let Some(health) = health.upgrade() else {
            return Ok(());
        };
        for id in ids {
            if let Some(deadline) = store.deadline(&id)? {
                learn(&health, store, &deadline, clock);
            }
        }
    }
}

fn learn(
    health: &SharedHealth,
    store: &PostgresStore,
    deadline: &SharedDeadline,
    clock: &dyn Clock,
) {
    // This instance's own deadline came back: the ledger has it already.
    if deadline.updated_by == store.owner() {
        return;
    }
    if let Some(learned) = incoming(deadline) {
        health.learn(&deadline.candidate, &learned, clock.now());
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use rebound_core::{Change, HealthState};

    use super::{incoming, outgoing};

    fn change(to: HealthState, learned: bool) -> Change {
        Change {
            candidate: "primary#key2".into(),
            from: HealthState::Closed,
            to,
            until: Some(UNIX_EPOCH + Duration::from_secs(90)),
            learned,
        }
    }

    #[test]
    fn only_own_deadlines_are_posted_and_they_come_back_as_they_went() {
        // X3: a learned change is never posted again (no echo between instances); probes and
        // closings stay local.
        assert!(outgoing(&change(HealthState::Cooling, true), None).is_none());
        assert!(outgoing(&change(HealthState::Probing, false), None).is_none());
        assert!(outgoing(&change(HealthState::Closed, false), None).is_none());
        let posted = outgoing(&change(HealthState::Open, false), None).unwrap();
        assert_eq!(posted.state, "open");
        let learned = incoming(&posted).unwrap();
        assert_eq!(learned.state, HealthState::Open);
        assert_eq!(learned.until, UNIX_EPOCH + Duration::from_secs(90));
        let mut detailed = posted.clone();
        detailed.scope = Some("account".into());
        detailed.class = Some("rate_limit".into());
        let learned = incoming(&detailed).unwrap();
        assert_eq!(
            learned.scope,
            Some(rebound_core::classification::Scope::Account)
        );
        assert_eq!(
            learned.class,
            Some(rebound_core::classification::Class::RateLimit)
        );
        let mut unknown = posted;
        unknown.state = "resting".into();
        assert!(incoming(&unknown).is_none());
    }
}
