//! The shared health table (X3): the deadlines of S1 that one instance learned, for the
//! others to honour.
//!
//! One row per candidate (or key) id holds the farthest deadline any instance set, with the
//! failure's details. An instance writes a deadline with an upsert that only ever extends it
//! (`GREATEST`: a nearer deadline leaves the row as it is) and, in the same transaction, when
//! the row moved, `NOTIFY rebound_health` with the id. Every instance keeps one connection of
//! its own open with `LISTEN rebound_health` ([`HealthListener`]) and reads the row a
//! notification names: a cooldown reaches the other instances as soon as its transaction
//! commits, with no polling.
//!
//! Deadlines are wall-clock times in milliseconds since the Unix epoch, as the instance that
//! learned them computed them from the server's hint: the instances' clocks are taken to
//! agree (NTP); a skew between two instances shifts the deadline one learns from the other by
//! that skew.

use std::time::{Duration, SystemTime};

use postgres::fallible_iterator::FallibleIterator;

use super::{Failure, PostgresStore, describe};
use crate::column::{from_ms, to_ms};
use crate::model::StoreError;

/// The channel the instances notify each other on.
pub const CHANNEL: &str = "rebound_health";

/// A deadline as the shared table holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedDeadline {
    /// The candidate or key id (`primary`, `primary#key2`).
    pub candidate: String,
    /// The state it rests in: `cooling` or `open`.
    pub state: String,
    /// The deadline.
    pub until: SystemTime,
    /// The failure's scope, class, code and rule, by their wire names.
    pub scope: Option<String>,
    /// The failure's class.
    pub class: Option<String>,
    /// The failure's code.
    pub code: Option<String>,
    /// The rule that classified it.
    pub rule_id: Option<String>,
    /// The instance that set it (its `owner` name).
    pub updated_by: String,
}

const COLUMNS: &str = "candidate, state, until_ms, scope, class, code, rule_id, updated_by";

fn read(row: &postgres::Row) -> Result<SharedDeadline, Failure> {
    let candidate: String = row.try_get(0)?;
    let until_ms: i64 = row.try_get(2)?;
    let until = from_ms(until_ms).ok_or_else(|| StoreError::Corrupt {
        id: candidate.clone(),
        field: "health.until_ms".into(),
        message: format!("{until_ms} is out of range"),
    })?;
    Ok(SharedDeadline {
        state: row.try_get(1)?,
        until,
        scope: row.try_get(3)?,
        class: row.try_get(4)?,
        code: row.try_get(5)?,
        rule_id: row.try_get(6)?,
        updated_by: row.try_get(7)?,
        candidate,
    })
}

impl PostgresStore {
    /// Writes `deadline` as this instance's (its `updated_by` is ignored) unless the table
    /// holds one as far or farther, and then tells every listening instance. Returns whether
    /// the row moved.
    pub fn publish_deadline(&self, deadline: &SharedDeadline) -> Result<bool, StoreError> {
        let until_ms = to_ms(deadline.until);
        self.with(|conn| {
            let mut tx = conn.transaction()?;
            let moved = tx.query_opt(
                &format!(
                    "INSERT INTO health AS h ({COLUMNS}, updated_ms) VALUES \
                     ($1, $2, $3, $4, $5, $6, $7, $8, (extract(epoch FROM now()) * 1000)::bigint) \
                     ON CONFLICT (candidate) DO UPDATE SET \
                     until_ms = GREATEST(h.until_ms, excluded.until_ms), \
                     state = excluded.state, scope = excluded.scope, class = excluded.class, \
                     code = excluded.code, rule_id = excluded.rule_id, \
                     updated_by = excluded.updated_by, updated_ms = excluded.updated_ms \
                     WHERE excluded.until_ms > h.until_ms RETURNING candidate"
                ),
                &[
                    &deadline.candidate,
                    &deadline.state,
                    &until_ms,
                    &deadline.scope,
                    &deadline.class,
                    &deadline.code,
                    &deadline.rule_id,
                    &self.owner,
                ],
            )?;
            if moved.is_some() {
                tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &deadline.candidate])?;
            }
            tx.commit()?;
            Ok(moved.is_some())
        })
    }

    /// The deadline of `candidate`, if any instance set one.
    pub fn deadline(&self, candidate: &str) -> Result<Option<SharedDeadline>, StoreError> {
        self.with(|conn| {
            conn.query_opt(
                &format!("SELECT {COLUMNS} FROM health WHERE candidate = $1"),
                &[&candidate],
            )?
            .as_ref()
            .map(read)
            .transpose()
        })
    }

    /// Every deadline later than `after`, as an instance reads them when it starts.
    pub fn deadlines_after(&self, after: SystemTime) -> Result<Vec<SharedDeadline>, StoreError> {
        self.with(|conn| {
            conn.query(
                &format!("SELECT {COLUMNS} FROM health WHERE until_ms > $1 ORDER BY candidate"),
                &[&to_ms(after)],
            )?
            .iter()
            .map(read)
            .collect()
        })
    }

    /// A connection of its own that listens for the other instances' deadlines. Listen
    /// first, then read the table: no deadline set in between is missed.
    pub fn listen_health(&self) -> Result<HealthListener, StoreError> {
        let mut client = self
            .config
            .connect(self.tls.clone())
            .map_err(|e| StoreError::Database(format!("cannot connect: {}", describe(&e))))?;
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .map_err(|e| StoreError::Database(describe(&e)))?;
        Ok(HealthListener { client })
    }
}

/// A connection listening on [`CHANNEL`].
pub struct HealthListener {
    client: postgres::Client,
}

impl HealthListener {
    /// Waits up to `timeout` for the next notifications, and returns the ids they name (none
    /// when the time ran out). An error means the connection is gone: listen again.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<String>, StoreError> {
        let lost = |e: postgres::Error| StoreError::Database(describe(&e));
        let mut ids = Vec::new();
        let first = {
            let mut notifications = self.client.notifications();
            let mut waiting = notifications.timeout_iter(timeout);
            waiting.next().map_err(lost)?
        };
        if let Some(first) = first {
            ids.push(first.payload().to_owned());
            let mut notifications = self.client.notifications();
            let mut pending = notifications.iter();
            while let Some(more) = pending.next().map_err(lost)? {
                ids.push(more.payload().to_owned());
            }
        }
        if ids.is_empty() && self.client.is_closed() {
            return Err(StoreError::Database(
                "the listening connection closed".into(),
            ));
        }
        Ok(ids)
    }
}
