//! Reading a stored row back into a job or an attempt, written once for every store: a store
//! says how its driver reads a column as text, an integer or bytes ([`Columns`]); the typed
//! readings and the records are built here. A value that does not convert is
//! [`StoreError::Corrupt`] naming the job and the field.

use std::time::SystemTime;

use crate::column::from_ms;
use crate::model::{AttemptOutcome, AttemptRecord, JobRecord, JobState, StoreError};

/// One row of a job (or of one of its attempts), as its store's driver reads it.
pub(crate) trait Columns {
    /// The job the row belongs to.
    fn job(&self) -> &str;
    /// The prefix of the field names (`attempts[2].` for an attempt's row).
    fn at(&self) -> &str;
    /// A text column that may be NULL.
    fn text_or_null(&self, column: &str) -> Result<Option<String>, StoreError>;
    /// An integer column that may be NULL.
    fn int_or_null(&self, column: &str) -> Result<Option<i64>, StoreError>;
    /// A bytes column that may be NULL.
    fn bytes_or_null(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The field name `column` stands for in an error.
    fn field(&self, column: &str) -> String {
        format!("{}{}", self.at(), column.trim_end_matches("_ms"))
    }

    /// A corrupt value of `column`.
    fn corrupt(&self, column: &str, message: impl ToString) -> StoreError {
        StoreError::corrupt(self.job(), self.field(column), message)
    }

    /// A text column.
    fn text(&self, column: &str) -> Result<String, StoreError> {
        self.text_or_null(column)?
            .ok_or_else(|| self.corrupt(column, "NULL"))
    }

    /// An integer column.
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.int_or_null(column)?
            .ok_or_else(|| self.corrupt(column, "NULL"))
    }

    /// A bytes column.
    fn bytes(&self, column: &str) -> Result<Vec<u8>, StoreError> {
        self.bytes_or_null(column)?
            .ok_or_else(|| self.corrupt(column, "NULL"))
    }

    /// A JSON text column.
    fn json<T: serde::de::DeserializeOwned>(&self, column: &str) -> Result<T, StoreError> {
        let text = self.text(column)?;
        serde_json::from_str(&text).map_err(|e| self.corrupt(column, e))
    }

    /// A JSON text column that may be NULL.
    fn json_or_null<T: serde::de::DeserializeOwned>(
        &self,
        column: &str,
    ) -> Result<Option<T>, StoreError> {
        self.text_or_null(column)?
            .map(|t| serde_json::from_str(&t).map_err(|e| self.corrupt(column, e)))
            .transpose()
    }

    /// A time column (`_ms`).
    fn time(&self, column: &str) -> Result<SystemTime, StoreError> {
        let ms = self.int(column)?;
        from_ms(ms).ok_or_else(|| self.corrupt(column, format!("{ms} ms")))
    }

    /// A time column that may be NULL.
    fn time_or_null(&self, column: &str) -> Result<Option<SystemTime>, StoreError> {
        self.int_or_null(column)?
            .map(|ms| from_ms(ms).ok_or_else(|| self.corrupt(column, format!("{ms} ms"))))
            .transpose()
    }

    /// A text column `parse` must accept.
    fn parsed<T>(&self, column: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, StoreError> {
        let text = self.text(column)?;
        parse(&text).ok_or_else(|| self.corrupt(column, format!("`{text}`")))
    }

    /// An integer column of an unsigned type.
    fn unsigned<T: TryFrom<i64>>(&self, column: &str) -> Result<T, StoreError> {
        let n = self.int(column)?;
        T::try_from(n).map_err(|_| self.corrupt(column, n))
    }

    /// An HTTP status column that may be NULL.
    fn status(&self, column: &str) -> Result<Option<u16>, StoreError> {
        self.int_or_null(column)?
            .map(|n| u16::try_from(n).map_err(|_| self.corrupt(column, n)))
            .transpose()
    }
}

/// A job row, selected as the job columns; `id` read already.
pub(crate) fn read_job(id: String, f: &impl Columns) -> Result<JobRecord, StoreError> {
    Ok(JobRecord {
        generation: f.unsigned("generation")?,
        state: f.parsed("state", JobState::parse)?,
        protocol: f.text("protocol")?,
        route_id: f.text("route_id")?,
        candidates: f.json("candidates")?,
        policies: f.json("policies")?,
        request: f.bytes("request")?,
        turn: f.json("turn")?,
        deadline: f.time_or_null("deadline_ms")?,
        pending_outcome: f.text_or_null("pending_outcome")?,
        classification: f.json_or_null("classification")?,
        response_status: f.status("response_status")?,
        response: f.bytes_or_null("response")?,
        error: f.json_or_null("error")?,
        created: f.time("created_ms")?,
        updated: f.time("updated_ms")?,
        id,
    })
}

/// An attempt row, numbered `number`, selected as the attempt columns.
pub(crate) fn read_attempt(number: u32, f: &impl Columns) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        number,
        candidate: f.text("candidate")?,
        started: f.time("started_ms")?,
        finished: f.time_or_null("finished_ms")?,
        outcome: f.parsed("outcome", AttemptOutcome::parse)?,
        status: f.status("status")?,
        code: f.text_or_null("code")?,
        class: f.text_or_null("class")?,
        rule_id: f.text_or_null("rule_id")?,
        catalogue_version: f.text_or_null("catalogue_version")?,
        phase: f.text_or_null("phase")?,
    })
}
