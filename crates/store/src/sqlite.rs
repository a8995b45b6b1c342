//! The embedded store: one SQLite file, nothing to install or start (P4).

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use crate::model::{
    AttemptOp, AttemptRecord, JobRecord, JobState, NewJob, Reconciliation, RouteStore, StoreError,
};

/// Schema migrations, applied in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: [&str; 1] = [r"
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
"];

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

/// Durable routes in a SQLite file.
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Database(format!("{}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path).map_err(db)?;
        Self::init(conn)
    }

    /// A database in memory (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory().map_err(db)?)
    }

    fn init(conn: Connection) -> Result<Self, StoreError> {
        // WAL with full sync: a committed transition survives a crash of the process or the
        // machine, and readers never block the one writer.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(db)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(db)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db)?;
        let version: usize = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(db)?;
        if version > MIGRATIONS.len() {
            return Err(StoreError::Database(format!(
                "the database has schema version {version}; this rebound knows up to {}",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            conn.execute_batch(&format!(
                "BEGIN; {sql}; PRAGMA user_version = {}; COMMIT;",
                i + 1
            ))
            .map_err(db)?;
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

const COLUMNS: &str = "id, generation, state, protocol, route_id, candidates, policies, request, turn, deadline_ms, \
     pending_outcome, classification, response_status, response, error, created_ms, updated_ms";

fn json<T: serde::de::DeserializeOwned>(
    id: &str,
    text: Option<String>,
) -> Result<Option<T>, StoreError> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("{id}: {e}"))))
        .transpose()
}

fn read_job(row: &Row<'_>) -> rusqlite::Result<Result<JobRecord, StoreError>> {
    let id: String = row.get(0)?;
    let state: String = row.get(2)?;
    let generation: i64 = row.get(1)?;
    let raw = (
        row.get::<_, String>(5)?,
        row.get::<_, String>(6)?,
        row.get::<_, String>(8)?,
        row.get::<_, Option<String>>(11)?,
        row.get::<_, Option<String>>(14)?,
    );
    let deadline: Option<i64> = row.get(9)?;
    let status: Option<i64> = row.get(12)?;
    let created: i64 = row.get(15)?;
    let updated: i64 = row.get(16)?;
    let (protocol, route_id, request, pending_outcome, response) = (
        row.get::<_, String>(3)?,
        row.get::<_, String>(4)?,
        row.get::<_, Vec<u8>>(7)?,
        row.get::<_, Option<String>>(10)?,
        row.get::<_, Option<Vec<u8>>>(13)?,
    );
    Ok((|| {
        Ok(JobRecord {
            state: JobState::parse(&state)
                .ok_or_else(|| StoreError::Corrupt(format!("{id}: state `{state}`")))?,
            generation: u64::try_from(generation)
                .map_err(|_| StoreError::Corrupt(format!("{id}: generation")))?,
            candidates: json(&id, Some(raw.0))?.unwrap_or_default(),
            policies: json(&id, Some(raw.1))?.unwrap_or_default(),
            turn: json(&id, Some(raw.2))?.unwrap_or_default(),
            classification: json(&id, raw.3)?,
            error: json(&id, raw.4)?,
            deadline_ms: deadline.and_then(|d| u64::try_from(d).ok()),
            response_status: status.and_then(|s| u16::try_from(s).ok()),
            created_ms: u64::try_from(created).unwrap_or(0),
            updated_ms: u64::try_from(updated).unwrap_or(0),
            protocol,
            route_id,
            request,
            pending_outcome,
            response,
            id,
        })
    })())
}

fn read_attempt(row: &Row<'_>) -> rusqlite::Result<AttemptRecord> {
    Ok(AttemptRecord {
        number: row.get(0)?,
        candidate: row.get(1)?,
        started_ms: u64::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
        finished_ms: row
            .get::<_, Option<i64>>(3)?
            .and_then(|v| u64::try_from(v).ok()),
        outcome: row.get(4)?,
        status: row
            .get::<_, Option<i64>>(5)?
            .and_then(|v| u16::try_from(v).ok()),
        code: row.get(6)?,
        class: row.get(7)?,
        rule_id: row.get(8)?,
        catalogue_version: row.get(9)?,
        phase: row.get(10)?,
    })
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn get_job(conn: &Connection, id: &str) -> Result<JobRecord, StoreError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM routes WHERE id = ?1"),
        [id],
        read_job,
    )
    .optional()
    .map_err(db)?
    .ok_or_else(|| StoreError::NotFound(id.to_owned()))?
}

fn write_job(conn: &Connection, job: &JobRecord) -> Result<(), StoreError> {
    let text = |v: &serde_json::Value| v.to_string();
    conn.execute(
        "UPDATE routes SET generation = ?2, state = ?3, turn = ?4, deadline_ms = ?5, pending_outcome = ?6, \
         classification = ?7, response_status = ?8, response = ?9, error = ?10, updated_ms = ?11 WHERE id = ?1",
        params![
            job.id,
            to_i64(job.generation),
            job.state.as_str(),
            serde_json::to_string(&job.turn).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            job.deadline_ms.map(to_i64),
            job.pending_outcome,
            job.classification.as_ref().map(text),
            job.response_status.map(i64::from),
            job.response,
            job.error.as_ref().map(text),
            to_i64(job.updated_ms),
        ],
    )
    .map_err(db)?;
    Ok(())
}

fn apply_attempt(conn: &Connection, id: &str, op: &AttemptOp) -> Result<(), StoreError> {
    match op {
        AttemptOp::Begin(a) => conn.execute(
            "INSERT INTO attempts (route_id, number, candidate, started_ms, outcome) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, a.number, a.candidate, to_i64(a.started_ms), a.outcome],
        ),
        AttemptOp::Finish(a) => conn.execute(
            "UPDATE attempts SET finished_ms = ?3, outcome = ?4, status = ?5, code = ?6, class = ?7, rule_id = ?8, \
             catalogue_version = ?9, phase = ?10 WHERE route_id = ?1 AND number = ?2",
            params![
                id,
                a.number,
                a.finished_ms.map(to_i64),
                a.outcome,
                a.status.map(i64::from),
                a.code,
                a.class,
                a.rule_id,
                a.catalogue_version,
                a.phase
            ],
        ),
    }
    .map_err(db)?;
    Ok(())
}

fn new_id() -> String {
    format!("job_{:016x}{:08x}", fastrand::u64(..), fastrand::u32(..))
}

impl RouteStore for SqliteStore {
    fn create(&self, job: NewJob, now_ms: u64) -> Result<JobRecord, StoreError> {
        let record = JobRecord {
            id: new_id(),
            generation: 1,
            state: JobState::Pending,
            protocol: job.protocol,
            route_id: job.route_id,
            candidates: job.candidates,
            policies: job.policies,
            request: job.request,
            turn: rebound_core::TurnSnapshot {
                attempts: 1,
                ..Default::default()
            },
            deadline_ms: None,
            pending_outcome: None,
            classification: None,
            response_status: None,
            response: None,
            error: None,
            created_ms: now_ms,
            updated_ms: now_ms,
        };
        let conn = self.conn();
        conn.execute(
            "INSERT INTO routes (id, generation, state, protocol, route_id, candidates, policies, request, turn, created_ms, updated_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
            params![
                record.id,
                to_i64(record.generation),
                record.state.as_str(),
                record.protocol,
                record.route_id,
                serde_json::to_string(&record.candidates).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                record.policies.to_string(),
                record.request,
                serde_json::to_string(&record.turn).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                to_i64(now_ms),
            ],
        )
        .map_err(db)?;
        Ok(record)
    }

    fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        get_job(&self.conn(), id)
    }

    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM routes ORDER BY created_ms DESC, id LIMIT ?1"
            ))
            .map_err(db)?;
        let rows = stmt
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], read_job)
            .map_err(db)?;
        rows.map(|r| r.map_err(db)?).collect()
    }

    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT number, candidate, started_ms, finished_ms, outcome, status, code, class, rule_id, \
                 catalogue_version, phase FROM attempts WHERE route_id = ?1 ORDER BY number",
            )
            .map_err(db)?;
        let rows = stmt.query_map([id], read_attempt).map_err(db)?;
        rows.map(|r| r.map_err(db)).collect()
    }

    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now_ms: u64,
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
        job.updated_ms = now_ms;
        write_job(&tx, &job)?;
        for op in &ops {
            apply_attempt(&tx, id, op)?;
        }
        tx.commit().map_err(db)?;
        Ok(job)
    }

    fn reconcile(&self, now_ms: u64) -> Result<Reconciliation, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let mut out = Reconciliation::default();
        let jobs: Vec<JobRecord> = {
            let mut stmt = tx
                .prepare(&format!("SELECT {COLUMNS} FROM routes WHERE state IN ('pending', 'waiting', 'dispatching')"))
                .map_err(db)?;
            let rows = stmt.query_map([], read_job).map_err(db)?;
            rows.map(|r| r.map_err(db)?).collect::<Result<_, _>>()?
        };
        for mut job in jobs {
            match job.state {
                JobState::Dispatching => {
                    job.state = JobState::ActionRequired;
                    job.generation += 1;
                    job.updated_ms = now_ms;
                    job.deadline_ms = None;
                    job.error = Some(serde_json::json!({
                        "reason": "attempt_may_have_been_sent",
                        "message": "rebound stopped while an attempt was out; it may have reached the provider, so it is not re-sent blindly"
                    }));
                    write_job(&tx, &job)?;
                    tx.execute(
                        "UPDATE attempts SET outcome = 'unknown', finished_ms = ?2 WHERE route_id = ?1 AND outcome = 'in_flight'",
                        params![job.id, to_i64(now_ms)],
                    )
                    .map_err(db)?;
                    out.action_required.push(job.id);
                }
                JobState::Waiting => out.due.push((job.id, job.generation, job.deadline_ms)),
                _ => out.due.push((job.id, job.generation, None)),
            }
        }
        tx.commit().map_err(db)?;
        Ok(out)
    }
}
