//! Runs in SQLite: their own tables beside the jobs' in the same file, with their own schema
//! version (the `run_schema` table), so jobs' migrations and runs' never interleave.
//!
//! The queried fields (state, generation, deadline) are columns; the rest of a record is one
//! JSON document, read back whole and checked against the columns.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, named_params};

use super::{Invocation, InvocationOp, NewRun, RunRecord, RunState, RunStore, RunStoreError};
use crate::model::AttemptOutcome;
use crate::sqlite_file::{self, OpenError, Schema};

/// The runs' schema, in order; `run_schema.version` counts those applied. Never edited once
/// released.
const MIGRATIONS: [&str; 1] = [r"
CREATE TABLE runs (
    id          TEXT PRIMARY KEY,
    generation  INTEGER NOT NULL,
    state       TEXT NOT NULL,
    deadline_ms INTEGER,
    created_ms  INTEGER NOT NULL,
    record      TEXT NOT NULL
);
CREATE INDEX runs_by_state ON runs (state, deadline_ms);
CREATE TABLE run_invocations (
    run_id  TEXT NOT NULL REFERENCES runs (id),
    number  INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    record  TEXT NOT NULL,
    PRIMARY KEY (run_id, number)
);
"];

fn db(e: rusqlite::Error) -> RunStoreError {
    RunStoreError::Database(e.to_string())
}

fn opening(e: OpenError) -> RunStoreError {
    RunStoreError::Database(e.to_string())
}

/// The runs' schema: its version is the one row of `run_schema`, a table of its own so the
/// jobs' `user_version` stays theirs.
const SCHEMA: Schema<'static> = Schema {
    name: "runs",
    migrations: &MIGRATIONS,
    read_version: |conn| {
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'run_schema')",
            [],
            |r| r.get(0),
        )?;
        if !exists {
            return Ok(0);
        }
        let version: Option<usize> = conn
            .query_row("SELECT version FROM run_schema", [], |r| r.get(0))
            .optional()?;
        Ok(version.unwrap_or(0))
    },
    write_version: |conn, version| {
        conn.execute_batch("CREATE TABLE IF NOT EXISTS run_schema (version INTEGER NOT NULL)")?;
        conn.execute("DELETE FROM run_schema", [])?;
        conn.execute("INSERT INTO run_schema VALUES (?1)", [version])?;
        Ok(())
    },
};

fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn corrupt(id: &str, field: &str, message: impl ToString) -> RunStoreError {
    RunStoreError::Corrupt {
        id: id.to_owned(),
        field: field.to_owned(),
        message: message.to_string(),
    }
}

/// Durable runs in a SQLite file.
pub struct SqliteRunStore {
    conn: Mutex<Connection>,
}

impl SqliteRunStore {
    /// Opens (creating if needed) the database at `path` and migrates its runs' tables. Other
    /// processes may open the same file at the same time.
    pub fn open(path: &Path) -> Result<Self, RunStoreError> {
        Self::init(sqlite_file::open(Some(path)).map_err(opening)?)
    }

    /// A database in memory (tests).
    pub fn in_memory() -> Result<Self, RunStoreError> {
        Self::init(sqlite_file::open(None).map_err(opening)?)
    }

    fn init(mut conn: Connection) -> Result<Self, RunStoreError> {
        sqlite_file::migrate(&mut conn, &SCHEMA).map_err(opening)?;
        Ok(SqliteRunStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn read_run(
    id: &str,
    generation: i64,
    state: &str,
    record: &str,
) -> Result<RunRecord, RunStoreError> {
    let run: RunRecord = serde_json::from_str(record).map_err(|e| corrupt(id, "record", e))?;
    if run.id != id {
        return Err(corrupt(id, "record.id", format!("`{}`", run.id)));
    }
    if i64::try_from(run.generation).ok() != Some(generation) {
        return Err(corrupt(
            id,
            "generation",
            format!("{generation} beside {}", run.generation),
        ));
    }
    if run.state.as_str() != state {
        return Err(corrupt(
            id,
            "state",
            format!("`{state}` beside `{}`", run.state.as_str()),
        ));
    }
    Ok(run)
}

fn select_runs(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<RunRecord>, RunStoreError> {
    let mut stmt = conn.prepare(sql).map_err(db)?;
    let mut rows = stmt.query(params).map_err(db)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        let id: String = row.get("id").map_err(db)?;
        let generation: i64 = row.get("generation").map_err(db)?;
        let state: String = row.get("state").map_err(db)?;
        let record: String = row.get("record").map_err(db)?;
        out.push(read_run(&id, generation, &state, &record)?);
    }
    Ok(out)
}

fn get_run(conn: &Connection, id: &str) -> Result<RunRecord, RunStoreError> {
    select_runs(
        conn,
        "SELECT id, generation, state, record FROM runs WHERE id = :id",
        named_params! {":id": id},
    )?
    .pop()
    .ok_or_else(|| RunStoreError::NotFound(id.to_owned()))
}

fn write_run(conn: &Connection, run: &RunRecord, insert: bool) -> Result<(), RunStoreError> {
    let record = serde_json::to_string(run).map_err(|e| corrupt(&run.id, "record", e))?;
    let sql = if insert {
        "INSERT INTO runs (id, generation, state, deadline_ms, created_ms, record) \
         VALUES (:id, :generation, :state, :deadline_ms, :created_ms, :record)"
    } else {
        "UPDATE runs SET generation = :generation, state = :state, deadline_ms = :deadline_ms, \
         created_ms = :created_ms, record = :record WHERE id = :id"
    };
    conn.execute(
        sql,
        named_params! {
            ":id": run.id,
            ":generation": i64::try_from(run.generation).unwrap_or(i64::MAX),
            ":state": run.state.as_str(),
            ":deadline_ms": run.deadline.map(to_ms),
            ":created_ms": to_ms(run.created),
            ":record": record,
        },
    )
    .map_err(db)?;
    Ok(())
}

fn write_invocation(
    conn: &Connection,
    run: &str,
    invocation: &Invocation,
    insert: bool,
) -> Result<(), RunStoreError> {
    let record = serde_json::to_string(invocation)
        .map_err(|e| corrupt(run, &format!("invocations[{}]", invocation.number), e))?;
    let sql = if insert {
        "INSERT INTO run_invocations (run_id, number, outcome, record) \
         VALUES (:run_id, :number, :outcome, :record)"
    } else {
        "UPDATE run_invocations SET outcome = :outcome, record = :record \
         WHERE run_id = :run_id AND number = :number"
    };
    conn.execute(
        sql,
        named_params! {
            ":run_id": run,
            ":number": invocation.number,
            ":outcome": invocation.outcome.as_str(),
            ":record": record,
        },
    )
    .map_err(db)?;
    Ok(())
}

fn read_invocations(conn: &Connection, run: &str) -> Result<Vec<Invocation>, RunStoreError> {
    let mut stmt = conn
        .prepare(
            "SELECT number, record FROM run_invocations WHERE run_id = :run_id ORDER BY number",
        )
        .map_err(db)?;
    let mut rows = stmt.query(named_params! {":run_id": run}).map_err(db)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        let number: u32 = row.get("number").map_err(db)?;
        let record: String = row.get("record").map_err(db)?;
        out.push(
            serde_json::from_str(&record)
                .map_err(|e| corrupt(run, &format!("invocations[{number}]"), e))?,
        );
    }
    Ok(out)
}

fn apply(conn: &Connection, run: &str, op: &InvocationOp) -> Result<(), RunStoreError> {
    match op {
        InvocationOp::Begin(invocation) => write_invocation(conn, run, invocation, true),
        InvocationOp::Finish(invocation) => write_invocation(conn, run, invocation, false),
        InvocationOp::MarkInFlightUnknown { finished } => {
            for mut invocation in read_invocations(conn, run)? {
                if invocation.outcome == AttemptOutcome::InFlight {
                    invocation.outcome = AttemptOutcome::Unknown;
                    invocation.finished = Some(*finished);
                    write_invocation(conn, run, &invocation, false)?;
                }
            }
            Ok(())
        }
    }
}

fn new_id() -> String {
    format!("run_{:016x}{:08x}", fastrand::u64(..), fastrand::u32(..))
}

impl RunStore for SqliteRunStore {
    fn create(&self, run: NewRun, now: SystemTime) -> Result<RunRecord, RunStoreError> {
        let record = RunRecord {
            id: new_id(),
            generation: 1,
            state: RunState::Pending,
            route_id: run.route_id,
            profiles: run.profiles,
            handoff: run.handoff,
            policies: run.policies,
            prompt: run.prompt,
            cwd: run.cwd,
            turn: rebound_core::TurnSnapshot {
                attempts: 1,
                ..Default::default()
            },
            session: None,
            acted: false,
            deadline: None,
            pending_outcome: None,
            classification: None,
            evidence: None,
            error: None,
            result: None,
            output: String::new(),
            created: now,
            updated: now,
        };
        write_run(&self.conn(), &record, true)?;
        Ok(record)
    }

    fn get(&self, id: &str) -> Result<RunRecord, RunStoreError> {
        get_run(&self.conn(), id)
    }

    fn list(&self, limit: usize) -> Result<Vec<RunRecord>, RunStoreError> {
        select_runs(
            &self.conn(),
            "SELECT id, generation, state, record FROM runs ORDER BY created_ms DESC, id LIMIT :limit",
            named_params! {":limit": i64::try_from(limit).unwrap_or(i64::MAX)},
        )
    }

    fn in_states(&self, states: &[RunState]) -> Result<Vec<RunRecord>, RunStoreError> {
        let conn = self.conn();
        let mut out = Vec::new();
        for state in states {
            out.extend(select_runs(
                &conn,
                "SELECT id, generation, state, record FROM runs WHERE state = :state ORDER BY created_ms, id",
                named_params! {":state": state.as_str()},
            )?);
        }
        Ok(out)
    }

    fn invocations(&self, id: &str) -> Result<Vec<Invocation>, RunStoreError> {
        let conn = self.conn();
        get_run(&conn, id)?;
        read_invocations(&conn, id)
    }

    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut RunRecord) -> Vec<InvocationOp>,
    ) -> Result<RunRecord, RunStoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let mut run = get_run(&tx, id)?;
        if run.generation != expected_generation {
            return Err(RunStoreError::Stale {
                id: id.to_owned(),
                expected: expected_generation,
                actual: run.generation,
            });
        }
        let ops = change(&mut run);
        run.id = id.to_owned();
        run.generation = expected_generation + 1;
        run.updated = now;
        write_run(&tx, &run, false)?;
        for op in &ops {
            apply(&tx, id, op)?;
        }
        tx.commit().map_err(db)?;
        Ok(run)
    }
}
