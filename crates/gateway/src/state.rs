//! What every part of the gateway shares: the configuration, the upstream client, the recovery
//! engine, the metrics and the durable jobs. It lives beside the HTTP front, not in
//! it, so that the front, the forwarder, the jobs and the model list all import it and none of
//! them imports another.

use std::sync::Arc;

use rebound_core::{Catalogue, HealthState};
use rebound_runtime::{Clock, Engine, HttpClient, SharedHealth, Sleeper};

use crate::config::Config;
use crate::jobs::ledger::Jobs;
use crate::metrics::Metrics;
use crate::peers::Outbox;
use crate::responses::Homes;
use crate::runs::ledger::Runs;
use crate::status::Status;
use crate::unstreamed::Unstreamed;

/// Everything a request needs, shared.
pub struct Gateway {
    pub(crate) config: Config,
    pub(crate) client: HttpClient,
    pub(crate) engine: Engine,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) jobs: Option<Jobs>,
    pub(crate) runs: Option<Runs>,
    /// Which candidate made each response id of the Responses API rebound relayed.
    pub(crate) responses: Homes,
    /// Where this instance's deadlines go for the other instances, once shared (X3).
    pub(crate) outbox: Arc<Outbox>,
    /// What the status page shows beyond the health ledger and the jobs: waits, failures.
    pub(crate) status: Arc<Status>,
    /// The candidates that answer stream requests whole.
    pub(crate) unstreamed: Unstreamed,
}

impl Gateway {
    /// A gateway for `config`, on the wall clock. It logs through `tracing`: what it logs goes
    /// wherever the process's subscriber sends it.
    pub fn new(config: Config, client: HttpClient, catalogue: Arc<Catalogue>) -> Self {
        let metrics = Arc::new(Metrics::default());
        let mut engine = Engine::new(catalogue);
        let outbox = Arc::new(Outbox::default());
        if let Some(settings) = config.health.clone() {
            // Every configured candidate starts closed, so each has its gauges from the start.
            for candidate in config.routes.iter().flat_map(|r| r.candidates.iter()) {
                metrics.health_state(&candidate.id, HealthState::Closed.as_str());
            }
            let gauges = Arc::clone(&metrics);
            let peers = Arc::clone(&outbox);
            let health =
                SharedHealth::new(settings).with_observer(Box::new(move |change, entry| {
                    gauges.health_state(&change.candidate, change.to.as_str());
                    peers.post(change, entry);
                }));
            engine = engine.with_health(Arc::new(health));
        }
        Gateway {
            config,
            client,
            engine,
            metrics,
            jobs: None,
            runs: None,
            responses: Homes::default(),
            outbox,
            status: Arc::default(),
            unstreamed: Unstreamed::default(),
        }
    }

    /// Enables durable jobs (`/v1/rebound/jobs`), kept in `store`.
    pub fn with_jobs(mut self, store: Arc<dyn rebound_store::JobStore>) -> Self {
        self.jobs = Some(Jobs::new(store));
        self
    }

    /// Enables durable agent runs (`/v1/rebound/runs`), kept in `store`.
    pub fn with_runs(mut self, store: Arc<dyn rebound_store::runs::RunStore>) -> Self {
        self.runs = Some(Runs::new(store));
        self
    }

    /// Replaces the clock and the sleeper (virtual time in tests).
    pub fn with_time(mut self, clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>) -> Self {
        self.engine = self.engine.with_time(clock, sleeper);
        self
    }

    /// Seeds the jitter draws.
    pub fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.engine = self.engine.with_jitter_seed(seed);
        self
    }

    /// Shares the health ledger with every other instance on `store` (X3); see
    /// [`crate::peers`]. Returns once listening, before the gateway serves.
    pub async fn share_health(&self, store: Arc<rebound_store::PostgresStore>) {
        crate::peers::share(
            self.engine.health(),
            &self.outbox,
            self.engine.shared_clock(),
            store,
        )
        .await;
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The metrics, as `/metrics` renders them.
    pub fn metrics_text(&self) -> String {
        self.metrics.render()
    }

    /// The catalogue failures are classified with.
    pub(crate) fn catalogue(&self) -> &Arc<Catalogue> {
        self.engine.catalogue()
    }

    /// The clock.
    pub(crate) fn clock(&self) -> &dyn Clock {
        self.engine.clock()
    }

    /// The one way to wait.
    pub(crate) fn sleeper(&self) -> &dyn Sleeper {
        self.engine.sleeper()
    }
}
