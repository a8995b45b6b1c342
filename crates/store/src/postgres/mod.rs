//! The shared store: one PostgreSQL database for several gateway instances (X1, X2).
//!
//! Each [`PostgresStore`] speaks for one instance, named by its `owner` id. Every job it
//! creates or changes becomes its own, held until `lease_until`, a time on the database's
//! clock (`now()`), never on an instance's: the instances' clocks may disagree, the
//! database's is one. The instance renews the leases of the jobs it drives; a job whose lease
//! ran out is [claimed](JobStore::claim) by whichever instance looks first, with
//! `FOR UPDATE SKIP LOCKED` so that instances looking at once never wait on each other, and
//! its generation bumped so its former holder's next transition is stale (P2).
//!
//! A transition is the same compare-and-set as SQLite's, on a row locked for the
//! transaction: `SELECT … FOR UPDATE`, the generation checked, the change and its attempt rows
//! written, committed together.
//!
//! ## Why `postgres` with `r2d2`
//! The store interface is synchronous and the gateway calls it on its blocking pool, so the
//! synchronous `postgres` client (the `tokio-postgres` protocol implementation behind a
//! blocking API) fits it without an async runtime inside the store, and `r2d2` is the pool
//! that client's author maintains an adapter for. `sqlx` would bring a query macro layer and
//! several times the compile time for the dozen statements here; `deadpool-postgres` is async
//! and would need a runtime handle threaded through every call.
//!
//! ## When the database goes away
//! A call that fails because the connection broke (the server restarted, the network
//! dropped) is tried again on a fresh connection for up to [`RECONNECT_WINDOW`], then fails.
//! Nothing is half done: every call is one transaction. A commit whose answer was lost is
//! found on the retry as a stale generation, and the caller stops exactly as when another
//! actor moved the job on.

pub mod health;
mod row;
mod schema;
mod tls;

use std::time::{Duration, Instant, SystemTime};

use postgres::GenericClient;
use r2d2::{Pool, PooledConnection};
use r2d2_postgres::PostgresConnectionManager;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::column::{new_id, to_json, to_ms};
use crate::model::{
    AttemptOp, AttemptOutcome, AttemptRecord, JobRecord, JobState, JobStore, NewJob, StoreError,
};
use row::{ATTEMPT_COLUMNS, JOB_COLUMNS, read_attempt, read_job};

/// How long a call keeps trying when the database cannot be reached.
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(30);

/// How long a call waits for a pooled connection before trying again.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest pause between two tries.
const RETRY_PAUSE_CAP: Duration = Duration::from_millis(500);

/// How to reach the database and how this instance holds its jobs.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user@host:port/database` (libpq's URL form, its query parameters
    /// included), without a password.
    pub url: String,
    /// The password, from the environment.
    pub password: Option<String>,
    /// A PEM file of CA certificates to trust besides the public roots, for a server whose
    /// certificate a provider's own CA signed (TLS follows the URL's `sslmode`).
    pub ca_file: Option<std::path::PathBuf>,
    /// How long a hold lasts unless renewed.
    pub lease: Duration,
    /// The most connections this instance opens.
    pub pool_size: u32,
    /// This instance's name in the `owner` column; a fresh random one by default.
    pub owner: Option<String>,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("lease", &self.lease)
            .field("pool_size", &self.pool_size)
            .field("owner", &self.owner)
            .finish()
    }
}

type Manager = PostgresConnectionManager<MakeRustlsConnect>;

/// Durable jobs in a PostgreSQL database shared by several instances.
pub struct PostgresStore {
    pool: Pool<Manager>,
    /// How to open a connection of its own (the health listener's).
    config: postgres::Config,
    tls: MakeRustlsConnect,
    owner: String,
    lease: Duration,
    /// The lease as PostgreSQL milliseconds, bound into the statements that take a hold.
    lease_ms: f64,
}

/// True when `e` says the connection or the server went away, rather than that the statement
/// is wrong: such a call is tried again on a fresh connection.
fn is_disconnect(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        // 08: connection exceptions; 57: the server is shutting down or restarting.
        return code.code().starts_with("08") || code.code().starts_with("57");
    }
    // No server error: the socket failed.
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// What went wrong, in one line: the server's own message when it sent one (the driver's
/// `Display` alone says only "db error"), else the driver's and its cause's.
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Why a call failed: the database went away (worth another try), or anything else.
enum Failure {
    Disconnected(String),
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

impl From<postgres::Error> for Failure {
    fn from(e: postgres::Error) -> Self {
        if is_disconnect(&e) {
            Failure::Disconnected(describe(&e))
        } else {
            Failure::Store(StoreError::Database(describe(&e)))
        }
    }
}

impl PostgresStore {
    /// Connects, migrates the schema, and returns the store of a new instance.
    pub fn connect(options: PostgresOptions) -> Result<Self, StoreError> {
        let mut config: postgres::Config = options
            .url
            .parse()
            .map_err(|e| StoreError::Database(format!("the PostgreSQL URL is not valid: {e}")))?;
        if let Some(password) = &options.password {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        // The first connection is made here, so that a wrong address or password is an
        // error at once, in the server's words; it migrates the schema.
        let tls = tls::connector(options.ca_file.as_deref())?;
        let mut first = config
            .connect(tls.clone())
            .map_err(|e| StoreError::Database(format!("cannot connect: {}", describe(&e))))?;
        schema::migrate(&mut first)?;
        drop(first);
        let manager = PostgresConnectionManager::new(config.clone(), tls.clone());
        let pool = Pool::builder()
            .max_size(options.pool_size.max(1))
            .min_idle(Some(1))
            .connection_timeout(CHECKOUT_TIMEOUT)
            // The pool's own log lines go nowhere; failures reach the caller as errors.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        let owner = options
            .owner
            .unwrap_or_else(|| format!("inst_{:016x}", fastrand::u64(..)));
        Ok(PostgresStore {
            pool,
            config,
            tls,
            owner,
            lease: options.lease,
            lease_ms: options.lease.as_secs_f64() * 1000.0,
        })
    }

    /// This instance's name in the `owner` column.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Runs `work` on a pooled connection; when the database went away, again on a fresh
    /// one, for up to [`RECONNECT_WINDOW`].
    fn with<T>(
        &self,
        mut work: impl FnMut(&mut PooledConnection<Manager>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            let failure = match self.pool.get_timeout(CHECKOUT_TIMEOUT) {
                Ok(mut conn) => match work(&mut conn) {
                    Ok(done) => return Ok(done),
                    Err(Failure::Store(e)) => return Err(e),
                    Err(Failure::Disconnected(message)) => message,
                },
                Err(e) => e.to_string(),
            };
            if started.elapsed() >= RECONNECT_WINDOW {
                return Err(StoreError::Database(format!(
                    "the database was unreachable for {}s: {failure}",
                    RECONNECT_WINDOW.as_secs()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(RETRY_PAUSE_CAP);
        }
    }

    fn select_jobs(
        &self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.with(|conn| {
            let rows = conn.query(sql, params)?;
            Ok(rows.iter().map(read_job).collect::<Result<Vec<_>, _>>()?)
        })
    }
}

fn write_job(
    client: &mut impl GenericClient,
    job: &JobRecord,
    owner: &str,
    lease_ms: f64,
) -> Result<(), Failure> {
    let id = job.id.as_str();
    let json_or_null = |field: &str, v: &Option<serde_json::Value>| {
        v.as_ref().map(|v| to_json(id, field, v)).transpose()
    };
    let generation = i64::try_from(job.generation).unwrap_or(i64::MAX);
    let turn = to_json(id, "turn", &job.turn)?;
    let classification = json_or_null("classification", &job.classification)?;
    let error = json_or_null("error", &job.error)?;
    let status = job.response_status.map(i32::from);
    client.execute(
        "UPDATE jobs SET generation = $2, state = $3, turn = $4, deadline_ms = $5, \
         pending_outcome = $6, classification = $7, response_status = $8, response = $9, \
         error = $10, updated_ms = $11, owner = $12, \
         lease_until = now() + $13 * interval '1 millisecond' WHERE id = $1",
        &[
            &id,
            &generation,
            &job.state.as_str(),
            &turn,
            &job.deadline.map(to_ms),
            &job.pending_outcome,
            &classification,
            &status,
            &job.response,
            &error,
            &to_ms(job.updated),
            &owner,
            &lease_ms,
        ],
    )?;
    Ok(())
}

fn apply_attempt(client: &mut impl GenericClient, id: &str, op: &AttemptOp) -> Result<(), Failure> {
    let row = |a: &AttemptRecord| {
        (
            i32::try_from(a.number).unwrap_or(i32::MAX),
            to_ms(a.started),
            a.finished.map(to_ms),
            a.status.map(i32::from),
        )
    };
    match op {
        AttemptOp::Begin(a) => {
            let (number, started, finished, status) = row(a);
            client.execute(
                "INSERT INTO attempts (job_id, number, candidate, started_ms, finished_ms, \
                 outcome, status, code, class, rule_id, catalogue_version, phase) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                &[
                    &id,
                    &number,
                    &a.candidate,
                    &started,
                    &finished,
                    &a.outcome.as_str(),
                    &status,
                    &a.code,
                    &a.class,
                    &a.rule_id,
                    &a.catalogue_version,
                    &a.phase,
                ],
            )?
        }
        AttemptOp::Finish(a) => {
            let (number, started, finished, status) = row(a);
            client.execute(
                "UPDATE attempts SET candidate = $3, started_ms = $4, finished_ms = $5, \
                 outcome = $6, status = $7, code = $8, class = $9, rule_id = $10, \
                 catalogue_version = $11, phase = $12 WHERE job_id = $1 AND number = $2",
                &[
                    &id,
                    &number,
                    &a.candidate,
                    &started,
                    &finished,
                    &a.outcome.as_str(),
                    &status,
                    &a.code,
                    &a.class,
                    &a.rule_id,
                    &a.catalogue_version,
                    &a.phase,
                ],
            )?
        }
        AttemptOp::MarkInFlightUnknown { finished } => client.execute(
            "UPDATE attempts SET outcome = $2, finished_ms = $3 \
             WHERE job_id = $1 AND outcome = $4",
            &[
                &id,
                &AttemptOutcome::Unknown.as_str(),
                &to_ms(*finished),
                &AttemptOutcome::InFlight.as_str(),
            ],
        )?,
    };
    Ok(())
}

/// The open states as stored, for `state = ANY($n)`.
fn open_states() -> Vec<&'static str> {
    JobState::OPEN.iter().map(|s| s.as_str()).collect()
}

impl JobStore for PostgresStore {
    fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError> {
        let record = JobRecord::fresh(new_id(), job, now);
        let id = record.id.as_str();
        let candidates = to_json(id, "candidates", &record.candidates)?;
        let policies = to_json(id, "policies", &record.policies)?;
        let turn = to_json(id, "turn", &record.turn)?;
        let now_ms = to_ms(now);
        self.with(|conn| {
            // A retry after a lost answer finds the row there: it was created.
            conn.execute(
                "INSERT INTO jobs (id, generation, state, protocol, route_id, candidates, \
                 policies, request, turn, created_ms, updated_ms, owner, lease_until) VALUES \
                 ($1, 1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, \
                 now() + $11 * interval '1 millisecond') ON CONFLICT (id) DO NOTHING",
                &[
                    &id,
                    &record.state.as_str(),
                    &record.protocol,
                    &record.route_id,
                    &candidates,
                    &policies,
                    &record.request,
                    &turn,
                    &now_ms,
                    &self.owner,
                    &self.lease_ms,
                ],
            )?;
            Ok(())
        })?;
        Ok(record)
    }

    fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        self.select_jobs(
            &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"),
            &[&id],
        )?
        .pop()
        .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.select_jobs(
            &format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY created_ms DESC, id LIMIT $1"),
            &[&limit],
        )
    }

    fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError> {
        let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        self.select_jobs(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE state = ANY($1) ORDER BY created_ms, id"
            ),
            &[&states],
        )
    }

    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        self.with(|conn| {
            let rows = conn.query(
                &format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = $1 ORDER BY number"
                ),
                &[&id],
            )?;
            Ok(rows
                .iter()
                .map(|row| read_attempt(id, row))
                .collect::<Result<Vec<_>, _>>()?)
        })
    }

    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
    ) -> Result<JobRecord, StoreError> {
        self.with(|conn| {
            let mut tx = conn.transaction()?;
            let row = tx.query_opt(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE"),
                &[&id],
            )?;
            let Some(row) = row else {
                return Err(StoreError::NotFound(id.to_owned()).into());
            };
            let mut job = read_job(&row)?;
            if job.generation != expected_generation {
                return Err(StoreError::Stale {
                    id: id.to_owned(),
                    expected: expected_generation,
                    actual: job.generation,
                }
                .into());
            }
            let ops = change(&mut job);
            job.id = id.to_owned();
            job.generation = expected_generation + 1;
            job.updated = now;
            write_job(&mut tx, &job, &self.owner, self.lease_ms)?;
            for op in &ops {
                apply_attempt(&mut tx, id, op)?;
            }
            tx.commit()?;
            Ok(job)
        })
    }

    fn lease(&self) -> Option<Duration> {
        Some(self.lease)
    }

    fn claim(&self) -> Result<Vec<JobRecord>, StoreError> {
        let open = open_states();
        let columns = JOB_COLUMNS
            .split(", ")
            .map(|c| format!("j.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.select_jobs(
            &format!(
                "WITH expired AS (SELECT id FROM jobs WHERE state = ANY($1) \
                 AND (owner IS NULL OR lease_until < now()) \
                 ORDER BY created_ms, id FOR UPDATE SKIP LOCKED) \
                 UPDATE jobs j SET owner = $2, \
                 lease_until = now() + $3 * interval '1 millisecond', \
                 generation = j.generation + 1, \
                 updated_ms = (extract(epoch FROM now()) * 1000)::bigint \
                 FROM expired WHERE j.id = expired.id RETURNING {columns}"
            ),
            &[&open, &self.owner, &self.lease_ms],
        )
        .map(|mut jobs| {
            jobs.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
            jobs
        })
    }

    fn renew(&self, ids: &[String]) -> Result<usize, StoreError> {
        let open = open_states();
        let held = self.with(|conn| {
            Ok(conn.execute(
                "UPDATE jobs SET lease_until = now() + $3 * interval '1 millisecond' \
                 WHERE owner = $1 AND id = ANY($2) AND state = ANY($4)",
                &[&self.owner, &ids, &self.lease_ms, &open],
            )?)
        })?;
        Ok(usize::try_from(held).unwrap_or(usize::MAX))
    }

    fn release(&self) -> Result<usize, StoreError> {
        let open = open_states();
        let let_go = self.with(|conn| {
            Ok(conn.execute(
                "UPDATE jobs SET owner = NULL, lease_until = NULL \
                 WHERE owner = $1 AND state = ANY($2)",
                &[&self.owner, &open],
            )?)
        })?;
        Ok(usize::try_from(let_go).unwrap_or(usize::MAX))
    }
}
