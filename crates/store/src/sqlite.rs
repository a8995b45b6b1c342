//! The embedded store: one SQLite file, nothing to install or start (P4).
//!
//! Times are stored as integer milliseconds since the Unix epoch (the `_ms` columns) and are
//! [`SystemTime`]s everywhere else: the conversion happens here, when a row is written or
//! read, to the millisecond.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use rusqlite::types::FromSql;
use rusqlite::{Connection, Row, TransactionBehavior, named_params};

use crate::column::{new_id, to_json, to_ms};
use crate::model::{
    AttemptOp, AttemptOutcome, AttemptRecord, JobRecord, JobState, JobStore, NewJob, StoreError,
};
use crate::row::{self, Columns};
use crate::sqlite_file::{self, OpenError, Schema};

/// Schema migrations, applied in order; `PRAGMA user_version` counts those applied. A
/// migration, once released, is never edited: databases at its version exist.
const MIGRATIONS: [&str; 2] = [
    // 1: the first schema, when durable jobs were called routes.
    r"
CREATE TABLE routes (
    id               TEXT PRIMARY KEY,
    generation       INTEGER NOT NULL,
    state            TEXT NOT NULL,
    protocol         TEXT NOT NULL,
    route_id         TEXT NOT NULL,
    candidates       TEXT NOT NULL,
    policies         TEXT NOT NULL,
    request          BLOB NOT NULL,
    turn             TEXT NOT NULL,
    deadline_ms      INTEGER,
    pending_outcome  TEXT,
    classification   TEXT,
    response_status  INTEGER,
    response         BLOB,
    error            TEXT,
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL
);
CREATE INDEX routes_by_state ON routes (state, deadline_ms);
CREATE TABLE attempts (
    route_id          TEXT NOT NULL REFERENCES routes (id),
    number            INTEGER NOT NULL,
    candidate         TEXT NOT NULL,
    started_ms        INTEGER NOT NULL,
    finished_ms       INTEGER,
    outcome           TEXT NOT NULL,
    status            INTEGER,
    code              TEXT,
    class             TEXT,
    rule_id           TEXT,
    catalogue_version TEXT,
    phase             TEXT,
    PRIMARY KEY (route_id, number)
);
",
    // 2: one word. The table is `jobs`, and an attempt names its job by `job_id` (a job's
    // `route_id` is the gateway route it runs on). Renaming the table rewrites the foreign
    // key that points at it; SQLite cannot rename an index, so it is made anew.
    r"
ALTER TABLE routes RENAME TO jobs;
ALTER TABLE attempts RENAME COLUMN route_id TO job_id;
DROP INDEX routes_by_state;
CREATE INDEX jobs_by_state ON jobs (state, deadline_ms);
",
];

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

fn opening(e: OpenError) -> StoreError {
    StoreError::Database(e.to_string())
}

/// The jobs' schema: its version is the file's `PRAGMA user_version`.
const SCHEMA: Schema<'static> = Schema {
    name: "jobs",
    migrations: &MIGRATIONS,
    read_version: |conn| conn.pragma_query_value(None, "user_version", |r| r.get(0)),
    write_version: |conn, version| conn.pragma_update(None, "user_version", version),
};

/// Durable jobs in a SQLite file.
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it. Other processes may
    /// open the same file at the same time.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::init(sqlite_file::open(Some(path)).map_err(opening)?)
    }

    /// A database in memory (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::init(sqlite_file::open(None).map_err(opening)?)
    }

    fn init(mut conn: Connection) -> Result<Self, StoreError> {
        sqlite_file::migrate(&mut conn, &SCHEMA).map_err(opening)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

const COLUMNS: &str = "id, generation, state, protocol, route_id, candidates, policies, request, turn, \
     deadline_ms, pending_outcome, classification, response_status, response, error, created_ms, updated_ms";

/// One row, read by column name (see [`Columns`]).
struct Fields<'r, 's> {
    row: &'r Row<'s>,
    id: String,
    /// Prefix of the field names (`attempts[2].` for an attempt's row).
    at: String,
}

impl Fields<'_, '_> {
    fn get<T: FromSql>(&self, column: &str) -> Result<T, StoreError> {
        self.row.get(column).map_err(|e| match e {
            rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => self.corrupt(column, e),
            other => db(other),
        })
    }
}

impl Columns for Fields<'_, '_> {
    fn job(&self) -> &str {
        &self.id
    }

    fn at(&self) -> &str {
        &self.at
    }

    fn text_or_null(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }

    fn int_or_null(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.get(column)
    }

    fn bytes_or_null(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(column)
    }
}

fn read_job(row: &Row<'_>) -> Result<JobRecord, StoreError> {
    let id: String = row.get("id").map_err(db)?;
    let f = Fields {
        row,
        id: id.clone(),
        at: String::new(),
    };
    row::read_job(id, &f)
}

fn read_attempt(job: &str, row: &Row<'_>) -> Result<AttemptRecord, StoreError> {
    let number: u32 = row.get("number").map_err(db)?;
    let f = Fields {
        row,
        id: job.to_owned(),
        at: format!("attempts[{number}]."),
    };
    row::read_attempt(number, &f)
}

/// Every row `sql` selects, read by `read`.
fn select<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: impl Fn(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare(sql).map_err(db)?;
    let mut rows = stmt.query(params).map_err(db)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        out.push(read(row)?);
    }
    Ok(out)
}

fn get_job(conn: &Connection, id: &str) -> Result<JobRecord, StoreError> {
    let mut stmt = conn
        .prepare(&format!("SELECT {COLUMNS} FROM jobs WHERE id = :id"))
        .map_err(db)?;
    let mut rows = stmt.query(named_params! {":id": id}).map_err(db)?;
    match rows.next().map_err(db)? {
        Some(row) => read_job(row),
        None => Err(StoreError::NotFound(id.to_owned())),
    }
}

fn write_job(conn: &Connection, job: &JobRecord) -> Result<(), StoreError> {
    let id = job.id.as_str();
    let json_or_null = |field: &str, v: &Option<serde_json::Value>| {
        v.as_ref().map(|v| to_json(id, field, v)).transpose()
    };
    conn.execute(
        "UPDATE jobs SET generation = :generation, state = :state, turn = :turn, \
         deadline_ms = :deadline_ms, pending_outcome = :pending_outcome, \
         classification = :classification, response_status = :response_status, \
         response = :response, error = :error, updated_ms = :updated_ms WHERE id = :id",
        named_params! {
            ":id": id,
            ":generation": i64::try_from(job.generation).unwrap_or(i64::MAX),
            ":state": job.state.as_str(),
            ":turn": to_json(id, "turn", &job.turn)?,
            ":deadline_ms": job.deadline.map(to_ms),
            ":pending_outcome": job.pending_outcome,
            ":classification": json_or_null("classification", &job.classification)?,
            ":response_status": job.response_status,
            ":response": job.response,
            ":error": json_or_null("error", &job.error)?,
            ":updated_ms": to_ms(job.updated),
        },
    )
    .map_err(db)?;
    Ok(())
}

fn apply_attempt(conn: &Connection, id: &str, op: &AttemptOp) -> Result<(), StoreError> {
    match op {
        AttemptOp::Begin(a) => conn.execute(
            "INSERT INTO attempts (job_id, number, candidate, started_ms, finished_ms, outcome, \
             status, code, class, rule_id, catalogue_version, phase) VALUES (:job_id, :number, \
             :candidate, :started_ms, :finished_ms, :outcome, :status, :code, :class, :rule_id, \
             :catalogue_version, :phase)",
            named_params! {
                ":job_id": id,
                ":number": a.number,
                ":candidate": a.candidate,
                ":started_ms": to_ms(a.started),
                ":finished_ms": a.finished.map(to_ms),
                ":outcome": a.outcome.as_str(),
                ":status": a.status,
                ":code": a.code,
                ":class": a.class,
                ":rule_id": a.rule_id,
                ":catalogue_version": a.catalogue_version,
                ":phase": a.phase,
            },
        ),
        AttemptOp::Finish(a) => conn.execute(
            "UPDATE attempts SET candidate = :candidate, started_ms = :started_ms, \
             finished_ms = :finished_ms, outcome = :outcome, status = :status, code = :code, \
             class = :class, rule_id = :rule_id, catalogue_version = :catalogue_version, \
             phase = :phase WHERE job_id = :job_id AND number = :number",
            named_params! {
                ":job_id": id,
                ":number": a.number,
                ":candidate": a.candidate,
                ":started_ms": to_ms(a.started),
                ":finished_ms": a.finished.map(to_ms),
                ":outcome": a.outcome.as_str(),
                ":status": a.status,
                ":code": a.code,
                ":class": a.class,
                ":rule_id": a.rule_id,
                ":catalogue_version": a.catalogue_version,
                ":phase": a.phase,
            },
        ),
        AttemptOp::MarkInFlightUnknown { finished } => conn.execute(
            "UPDATE attempts SET outcome = :unknown, finished_ms = :finished_ms \
             WHERE job_id = :job_id AND outcome = :in_flight",
            named_params! {
                ":job_id": id,
                ":unknown": AttemptOutcome::Unknown.as_str(),
                ":in_flight": AttemptOutcome::InFlight.as_str(),
                ":finished_ms": to_ms(*finished),
            },
        ),
    }
    .map_err(db)?;
    Ok(())
}

impl JobStore for SqliteStore {
    fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError> {
        let record = JobRecord::fresh(new_id(), job, now);
        let id = record.id.as_str();
        self.conn()
            .execute(
                "INSERT INTO jobs (id, generation, state, protocol, route_id, candidates, policies, \
                 request, turn, created_ms, updated_ms) VALUES (:id, :generation, :state, \
                 :protocol, :route_id, :candidates, :policies, :request, :turn, :now_ms, :now_ms)",
                named_params! {
                    ":id": id,
                    ":generation": 1,
                    ":state": record.state.as_str(),
                    ":protocol": record.protocol,
                    ":route_id": record.route_id,
                    ":candidates": to_json(id, "candidates", &record.candidates)?,
                    ":policies": to_json(id, "policies", &record.policies)?,
                    ":request": record.request,
                    ":turn": to_json(id, "turn", &record.turn)?,
                    ":now_ms": to_ms(now),
                },
            )
            .map_err(db)?;
        Ok(record)
    }

    fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        get_job(&self.conn(), id)
    }

    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        select(
            &self.conn(),
            &format!("SELECT {COLUMNS} FROM jobs ORDER BY created_ms DESC, id LIMIT :limit"),
            named_params! {":limit": i64::try_from(limit).unwrap_or(i64::MAX)},
            read_job,
        )
    }

    fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError> {
        let placeholders = vec!["?"; states.len()].join(", ");
        select(
            &self.conn(),
            &format!(
                "SELECT {COLUMNS} FROM jobs WHERE state IN ({placeholders}) ORDER BY created_ms, id"
            ),
            rusqlite::params_from_iter(states.iter().map(|s| s.as_str())),
            read_job,
        )
    }

    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        select(
            &self.conn(),
            "SELECT number, candidate, started_ms, finished_ms, outcome, status, code, class, \
             rule_id, catalogue_version, phase FROM attempts WHERE job_id = :job_id ORDER BY number",
            named_params! {":job_id": id},
            |row| read_attempt(id, row),
        )
    }

    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
    ) -> Result<JobRecord, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let mut job = get_job(&tx, id)?;
        if job.generation != expected_generation {
            return Err(StoreError::Stale {
                id: id.to_owned(),
                expected: expected_generation,
                actual: job.generation,
            });
        }
        let ops = change(&mut job);
        job.id = id.to_owned();
        job.generation = expected_generation + 1;
        job.updated = now;
        write_job(&tx, &job)?;
        for op in &ops {
            apply_attempt(&tx, id, op)?;
        }
        tx.commit().map_err(db)?;
        Ok(job)
    }
}
