//! Reading a PostgreSQL row back into a job or an attempt: a value that does not convert is
//! [`StoreError::Corrupt`] naming the job and the field.

use std::time::SystemTime;

use postgres::Row;
use postgres::types::FromSql;

use crate::column::from_ms;
use crate::model::{AttemptOutcome, AttemptRecord, JobRecord, JobState, StoreError};

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
    fn field(&self, column: &str) -> String {
        format!("{}{}", self.at, column.trim_end_matches("_ms"))
    }

    fn get<'a, T: FromSql<'a>>(&'a self, column: &str) -> Result<T, StoreError> {
        self.row
            .try_get(column)
            .map_err(|e| StoreError::corrupt(&self.id, self.field(column), e))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, column: &str) -> Result<T, StoreError> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text)
            .map_err(|e| StoreError::corrupt(&self.id, self.field(column), e))
    }

    fn json_or_null<T: serde::de::DeserializeOwned>(
        &self,
        column: &str,
    ) -> Result<Option<T>, StoreError> {
        let text: Option<String> = self.get(column)?;
        text.map(|t| {
            serde_json::from_str(&t)
                .map_err(|e| StoreError::corrupt(&self.id, self.field(column), e))
        })
        .transpose()
    }

    fn time(&self, column: &str) -> Result<SystemTime, StoreError> {
        let ms: i64 = self.get(column)?;
        from_ms(ms)
            .ok_or_else(|| StoreError::corrupt(&self.id, self.field(column), format!("{ms} ms")))
    }

    fn time_or_null(&self, column: &str) -> Result<Option<SystemTime>, StoreError> {
        let ms: Option<i64> = self.get(column)?;
        ms.map(|ms| {
            from_ms(ms).ok_or_else(|| {
                StoreError::corrupt(&self.id, self.field(column), format!("{ms} ms"))
            })
        })
        .transpose()
    }

    fn parsed<T>(&self, column: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, StoreError> {
        let text: String = self.get(column)?;
        parse(&text)
            .ok_or_else(|| StoreError::corrupt(&self.id, self.field(column), format!("`{text}`")))
    }

    fn unsigned<T: TryFrom<i64>>(&self, column: &str) -> Result<T, StoreError> {
        let n: i64 = self.get(column)?;
        T::try_from(n).map_err(|_| StoreError::corrupt(&self.id, self.field(column), n))
    }

    fn status(&self, column: &str) -> Result<Option<u16>, StoreError> {
        let n: Option<i32> = self.get(column)?;
        n.map(|n| {
            u16::try_from(n).map_err(|_| StoreError::corrupt(&self.id, self.field(column), n))
        })
        .transpose()
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
    Ok(JobRecord {
        generation: f.unsigned("generation")?,
        state: f.parsed("state", JobState::parse)?,
        protocol: f.get("protocol")?,
        route_id: f.get("route_id")?,
        candidates: f.json("candidates")?,
        policies: f.json("policies")?,
        request: f.get("request")?,
        turn: f.json("turn")?,
        deadline: f.time_or_null("deadline_ms")?,
        pending_outcome: f.get("pending_outcome")?,
        classification: f.json_or_null("classification")?,
        response_status: f.status("response_status")?,
        response: f.get("response")?,
        error: f.json_or_null("error")?,
        created: f.time("created_ms")?,
        updated: f.time("updated_ms")?,
        id,
    })
}

/// An attempt row of job `job`, selected as [`ATTEMPT_COLUMNS`].
pub(super) fn read_attempt(job: &str, row: &Row) -> Result<AttemptRecord, StoreError> {
    let number: i32 = row
        .try_get("number")
        .map_err(|e| StoreError::Database(e.to_string()))?;
    let f = Fields {
        row,
        id: job.to_owned(),
        at: format!("attempts[{number}]."),
    };
    Ok(AttemptRecord {
        number: u32::try_from(number)
            .map_err(|_| StoreError::corrupt(job, format!("attempts[{number}].number"), number))?,
        candidate: f.get("candidate")?,
        started: f.time("started_ms")?,
        finished: f.time_or_null("finished_ms")?,
        outcome: f.parsed("outcome", AttemptOutcome::parse)?,
        status: f.status("status")?,
        code: f.get("code")?,
        class: f.get("class")?,
        rule_id: f.get("rule_id")?,
        catalogue_version: f.get("catalogue_version")?,
        phase: f.get("phase")?,
    })
}
