//! Reading a PostgreSQL row back into a job or an attempt: a value that does not convert is
//! [`StoreError::Corrupt`] naming the job and the field.

use postgres::Row;
use postgres::types::FromSql;

use crate::model::{AttemptRecord, JobRecord, StoreError};
use crate::row::Columns;

/// The job columns, in the order every job query selects them.
pub(super) const JOB_COLUMNS: &str = "id, generation, state, protocol, route_id, candidates, \
     policies, request, turn, deadline_ms, pending_outcome, classification, response_status, \
     response, error, created_ms, updated_ms";

/// The attempt columns.
pub(super) const ATTEMPT_COLUMNS: &str = "number, candidate, started_ms, finished_ms, outcome, \
     status, code, class, rule_id, catalogue_version, phase";

struct Fields<'r> {
    row: &'r Row,
    id: String,
    /// Prefix of the field names (`attempts[2].` for an attempt's row).
    at: String,
}

impl Fields<'_> {
    fn get<'a, T: FromSql<'a>>(&'a self, column: &str) -> Result<T, StoreError> {
        self.row
            .try_get(column)
            .map_err(|e| self.corrupt(column, e))
    }
}

impl Columns for Fields<'_> {
    fn job(&self) -> &str {
        &self.id
    }

    fn at(&self) -> &str {
        &self.at
    }

    fn text_or_null(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }

    /// `bigint` columns and `integer` ones (statuses, attempt numbers) alike.
    fn int_or_null(&self, column: &str) -> Result<Option<i64>, StoreError> {
        match self.row.try_get::<_, Option<i64>>(column) {
            Ok(n) => Ok(n),
            Err(_) => self.get::<Option<i32>>(column).map(|n| n.map(i64::from)),
        }
    }

    fn bytes_or_null(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(column)
    }
}

/// A job row, selected as [`JOB_COLUMNS`].
pub(super) fn read_job(row: &Row) -> Result<JobRecord, StoreError> {
    let id: String = row
        .try_get("id")
        .map_err(|e| StoreError::Database(e.to_string()))?;
    let f = Fields {
        row,
        id: id.clone(),
        at: String::new(),
    };
    crate::row::read_job(id, &f)
}

/// An attempt row of job `job`, selected as [`ATTEMPT_COLUMNS`].
pub(super) fn read_attempt(job: &str, row: &Row) -> Result<AttemptRecord, StoreError> {
    let number: i32 = row
        .try_get("number")
        .map_err(|e| StoreError::Database(e.to_string()))?;
    let number = u32::try_from(number)
        .map_err(|_| StoreError::corrupt(job, format!("attempts[{number}].number"), number))?;
    let f = Fields {
        row,
        id: job.to_owned(),
        at: format!("attempts[{number}]."),
    };
    crate::row::read_attempt(number, &f)
}
