//! A job's policy snapshot, compiled: one policy per candidate, or an error that names the job
//! and the candidate, never a silent fallback.

use std::sync::Arc;

use rebound_core::policy::document::PolicyError;
use rebound_core::{Catalogue, Policy};
use rebound_store::JobRecord;
use serde_json::{Value, json};

/// A job's policy snapshot that this gateway cannot run: the job needs a human, never a
/// silent fallback to some other policy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    /// One candidate's document does not compile against the catalogue.
    #[error("job {job}: the policy snapshot of candidate `{candidate}` does not compile: {source}")]
    Compile {
        /// The job.
        job: String,
        /// The candidate whose document it is.
        candidate: String,
        /// What is wrong, with the document's field.
        source: PolicyError,
    },
    /// The snapshot does not have one document per candidate.
    #[error("job {job}: the policy snapshot has {policies} documents for {candidates} candidates")]
    Count {
        /// The job.
        job: String,
        /// Documents in the snapshot.
        policies: usize,
        /// Candidates of the job.
        candidates: usize,
    },
}

impl SnapshotError {
    /// The job's `error` while it waits for a human.
    pub(crate) fn to_job_error(&self) -> Value {
        let mut error = json!({"reason": "policy_snapshot_invalid", "message": self.to_string()});
        if let (
            SnapshotError::Compile {
                candidate, source, ..
            },
            Value::Object(map),
        ) = (self, &mut error)
        {
            map.insert("candidate".into(), json!(candidate));
            map.insert("field".into(), json!(source.field));
        }
        error
    }
}

/// The job's route as policies, one per candidate, compiled from its snapshot against
/// `catalogue`.
pub(crate) fn policies_of(
    job: &JobRecord,
    catalogue: &Catalogue,
) -> Result<Vec<Arc<Policy>>, SnapshotError> {
    if job.policies.len() != job.candidates.len() {
        return Err(SnapshotError::Count {
            job: job.id.clone(),
            policies: job.policies.len(),
            candidates: job.candidates.len(),
        });
    }
    job.policies
        .iter()
        .zip(&job.candidates)
        .map(|(doc, candidate)| {
            doc.compile(&Policy::immediate_skip(), catalogue)
                .map(Arc::new)
                .map_err(|source| SnapshotError::Compile {
                    job: job.id.clone(),
                    candidate: candidate.clone(),
                    source,
                })
        })
        .collect()
}
