//! Opening a SQLite file that several processes may open at once: a gateway, a second
//! gateway on another port, `rebound jobs`. Jobs and runs share the file, each with its own
//! schema version, and both open it through here.
//!
//! A new file is migrated by whichever process gets there first. The version is read and the
//! migrations applied inside one `BEGIN IMMEDIATE` transaction, so a process that opens the
//! file while another migrates it waits for the write lock and then finds the schema current.
//! Reading the version before the transaction let two processes both see version 0 and the
//! second fail on `table … already exists`.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

/// How long a statement waits for another process's write lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a file could not be opened or migrated.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// Creating the file's directory failed.
    #[error("{0}")]
    Directory(String),
    /// Other connections kept the file locked while it was to be switched to WAL.
    #[error("the file stayed locked by other processes while it was switched to WAL")]
    Busy,
    /// SQLite refused outside a migration.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// The file's schema is newer than this build knows.
    #[error("the {name}' schema has version {found}; this rebound knows up to {known}")]
    TooNew {
        name: &'static str,
        found: usize,
        known: usize,
    },
    /// Migration `to` (1-based) failed; nothing of it was applied.
    #[error("migrating {name} to schema version {to}: {error}")]
    Migration {
        name: &'static str,
        to: usize,
        error: rusqlite::Error,
    },
}

/// A schema's migrations and where it records how many a file has.
pub(crate) struct Schema<'a> {
    /// What the schema holds, plural, for messages: `jobs`, `runs`.
    pub name: &'static str,
    pub migrations: &'a [&'a str],
    /// Reads the number of migrations applied (0 for a new file), without writing: it runs
    /// before the write lock is taken, and again inside the transaction.
    pub read_version: fn(&Connection) -> rusqlite::Result<usize>,
    /// Records the number applied; runs inside the transaction, after the last migration.
    pub write_version: fn(&Connection, usize) -> rusqlite::Result<()>,
}

/// Opens (creating if needed) the file at `path`, or an in-memory database for `None`.
pub(crate) fn open(path: Option<&Path>) -> Result<Connection, OpenError> {
    let conn = match path {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| OpenError::Directory(format!("{}: {e}", dir.display())))?;
            }
            Connection::open(path)?
        }
        None => Connection::open_in_memory()?,
    };
    // The timeout first: switching a new file to WAL takes a lock another process may hold.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // WAL with full sync: a committed transition survives a crash of the process or the
    // machine, and readers never block the one writer.
    use_wal(&conn)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// Switches a file to WAL, once for all its connections. Two connections switching a new file
/// at once can deadlock on the lock the switch needs, and SQLite then answers one of them
/// `SQLITE_BUSY` at once instead of calling the busy handler. So this waits as the busy handler
/// would, a little longer each time and for the busy timeout in all, and looks again: by then
/// the other connection has switched the file, or the lock is free to try. (With six
/// connections opening one new file, fifty looks without a wait ran out in 1 of 60 runs.)
fn use_wal(conn: &Connection) -> Result<(), OpenError> {
    let mut pause = Duration::from_millis(1);
    let mut waited = Duration::ZERO;
    loop {
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
        if mode.eq_ignore_ascii_case("wal") {
            return Ok(());
        }
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            // A database in memory stays `memory`; there is nothing to share.
            Ok(_) => return Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy =>
            {
                if waited >= BUSY_TIMEOUT {
                    return Err(OpenError::Busy);
                }
            }
            Err(e) => return Err(e.into()),
        }
        std::thread::sleep(pause);
        waited += pause;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Brings `conn` to the schema's last version. A current file is only read: no write lock is
/// taken at every start, so opening one while another process writes does not wait on it.
/// Otherwise the version is read again, and the migrations applied and recorded, in one
/// transaction that holds the write lock from the reading to the writing.
pub(crate) fn migrate(conn: &mut Connection, schema: &Schema<'_>) -> Result<(), OpenError> {
    if current(schema, (schema.read_version)(conn)?)? {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = (schema.read_version)(&tx)?;
    if current(schema, found)? {
        return Ok(());
    }
    for (i, sql) in schema.migrations.iter().enumerate().skip(found) {
        tx.execute_batch(sql)
            .map_err(|error| OpenError::Migration {
                name: schema.name,
                to: i + 1,
                error,
            })?;
    }
    (schema.write_version)(&tx, schema.migrations.len())?;
    tx.commit()?;
    Ok(())
}

/// Whether a file at version `found` needs no migration; an error when it is newer than this
/// build knows.
fn current(schema: &Schema<'_>, found: usize) -> Result<bool, OpenError> {
    let known = schema.migrations.len();
    if found > known {
        return Err(OpenError::TooNew {
            name: schema.name,
            found,
            known,
        });
    }
    Ok(found == known)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(conn: &Connection) -> rusqlite::Result<usize> {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
    }

    fn set_version(conn: &Connection, v: usize) -> rusqlite::Result<()> {
        conn.pragma_update(None, "user_version", v)
    }

    const SCHEMA: Schema<'static> = Schema {
        name: "tests",
        migrations: &["CREATE TABLE a (x INTEGER)", "CREATE TABLE b (y INTEGER)"],
        read_version: version,
        write_version: set_version,
    };

    #[test]
    fn a_failed_migration_leaves_the_file_at_its_version() {
        let mut conn = open(None).unwrap();
        let broken = Schema {
            migrations: &["CREATE TABLE a (x INTEGER)", "CREATE TABLE nonsense ("],
            ..SCHEMA
        };
        match migrate(&mut conn, &broken) {
            Err(OpenError::Migration { to: 2, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(version(&conn).unwrap(), 0);
        // Migration 1 was rolled back with 2, so a correct schema applies from the start.
        migrate(&mut conn, &SCHEMA).unwrap();
        assert_eq!(version(&conn).unwrap(), 2);
    }

    #[test]
    fn a_newer_file_is_refused_and_a_current_one_left_alone() {
        let mut conn = open(None).unwrap();
        migrate(&mut conn, &SCHEMA).unwrap();
        migrate(&mut conn, &SCHEMA).unwrap();
        let older = Schema {
            migrations: &SCHEMA.migrations[..1],
            ..SCHEMA
        };
        match migrate(&mut conn, &older) {
            Err(
                e @ OpenError::TooNew {
                    found: 2, known: 1, ..
                },
            ) => assert_eq!(
                e.to_string(),
                "the tests' schema has version 2; this rebound knows up to 1"
            ),
            other => panic!("{other:?}"),
        }
    }
}
