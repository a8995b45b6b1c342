//! The PostgreSQL schema and its migrations.
//!
//! The same two tables as SQLite's (`jobs`, `attempts`), with the columns a shared store
//! needs besides: who holds a job (`owner`) and until when (`lease_until`, on the database's
//! clock); and the shared health ledger's deadlines (`health`). Migrations are applied by
//! whichever instance starts first, under a transaction-level advisory lock, so instances
//! starting together never apply one twice.

use postgres::Client;

use super::describe;
use crate::model::StoreError;

/// The advisory lock key under which migrations run (any constant, the same for every
/// instance): "rebound" in ASCII.
const MIGRATION_LOCK: i64 = 0x0072_6562_6f75_6e64;

/// Schema migrations, applied in order; `rebound_schema` records those applied. A migration,
/// once released, is never edited: databases at its version exist.
const MIGRATIONS: [&str; 2] = [
    // 1: jobs, their attempts, and their holders' leases.
    r"
CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    generation       BIGINT NOT NULL,
    state            TEXT NOT NULL,
    protocol         TEXT NOT NULL,
    route_id         TEXT NOT NULL,
    candidates       TEXT NOT NULL,
    policies         TEXT NOT NULL,
    request          BYTEA NOT NULL,
    turn             TEXT NOT NULL,
    deadline_ms      BIGINT,
    pending_outcome  TEXT,
    classification   TEXT,
    response_status  INTEGER,
    response         BYTEA,
    error            TEXT,
    created_ms       BIGINT NOT NULL,
    updated_ms       BIGINT NOT NULL,
    owner            TEXT,
    lease_until      TIMESTAMPTZ
);
CREATE INDEX jobs_by_state ON jobs (state, deadline_ms);
CREATE INDEX jobs_by_created ON jobs (created_ms DESC, id);
CREATE TABLE attempts (
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    number            INTEGER NOT NULL,
    candidate         TEXT NOT NULL,
    started_ms        BIGINT NOT NULL,
    finished_ms       BIGINT,
    outcome           TEXT NOT NULL,
    status            INTEGER,
    code              TEXT,
    class             TEXT,
    rule_id           TEXT,
    catalogue_version TEXT,
    phase             TEXT,
    PRIMARY KEY (job_id, number)
);
",
    // 2: the shared health ledger's deadlines (X3), one row per candidate or key id.
    r"
CREATE TABLE health (
    candidate   TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    until_ms    BIGINT NOT NULL,
    scope       TEXT,
    class       TEXT,
    code        TEXT,
    rule_id     TEXT,
    updated_by  TEXT NOT NULL,
    updated_ms  BIGINT NOT NULL
);
",
];

/// Brings the database's schema up to date; an error when the database is newer than this
/// rebound.
pub(super) fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let db = |e: postgres::Error| {
        StoreError::Database(format!("migrating the schema: {}", describe(&e)))
    };
    let mut tx = client.transaction().map_err(db)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(db)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS rebound_schema (version INTEGER NOT NULL)")
        .map_err(db)?;
    let version: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM rebound_schema", &[])
        .and_then(|row| row.try_get(0))
        .map_err(db)?;
    let known = MIGRATIONS.len();
    let version = usize::try_from(version).unwrap_or(usize::MAX);
    if version > known {
        return Err(StoreError::Database(format!(
            "the database has schema version {version}; this rebound knows up to {known}"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let to = i32::try_from(i + 1).unwrap_or(i32::MAX);
        tx.batch_execute(sql).map_err(|e| {
            StoreError::Database(format!(
                "migrating to schema version {to}: {}",
                describe(&e)
            ))
        })?;
        tx.execute("INSERT INTO rebound_schema (version) VALUES ($1)", &[&to])
            .map_err(db)?;
    }
    tx.commit().map_err(db)
}
