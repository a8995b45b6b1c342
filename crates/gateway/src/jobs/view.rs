//! The JSON view of a job, as the jobs API and its event stream show it.
//!
//! Times are [`SystemTime`]s in the store and integer milliseconds since the Unix epoch on
//! the wire: `deadline_ms`, `created_ms`, `updated_ms`, and an attempt's `started_ms` and
//! `finished_ms`.

use std::time::{SystemTime, UNIX_EPOCH};

use rebound_store::{AttemptRecord, JobRecord};
use serde_json::{Value, json};

/// Milliseconds since the Unix epoch (0 for a time before it, which no clock here gives).
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A job; with its attempts (and, when done, its response) when `attempts` is given.
pub(super) fn summary(job: &JobRecord, attempts: Option<&[AttemptRecord]>) -> Value {
    let mut out = json!({
        "id": job.id,
        "generation": job.generation,
        "state": job.state,
        "protocol": job.protocol,
        "route_id": job.route_id,
        "candidate": job.candidates.get(job.turn.candidate),
        "candidates": job.candidates,
        "turn": job.turn,
        "deadline_ms": job.deadline.map(unix_ms),
        "pending_outcome": job.pending_outcome,
        "classification": job.classification,
        "error": job.error,
        "response_status": job.response_status,
        "created_ms": unix_ms(job.created),
        "updated_ms": unix_ms(job.updated),
    });
    if let (Some(attempts), Value::Object(map)) = (attempts, &mut out) {
        map.insert(
            "attempts".into(),
            attempts.iter().map(attempt).collect::<Vec<_>>().into(),
        );
        if let Some(body) = &job.response {
            let response = serde_json::from_slice::<Value>(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
            map.insert("response".into(), response);
        }
    }
    out
}

/// One attempt.
fn attempt(a: &AttemptRecord) -> Value {
    json!({
        "number": a.number,
        "candidate": a.candidate,
        "started_ms": unix_ms(a.started),
        "finished_ms": a.finished.map(unix_ms),
        "outcome": a.outcome,
        "status": a.status,
        "code": a.code,
        "class": a.class,
        "rule_id": a.rule_id,
        "catalogue_version": a.catalogue_version,
        "phase": a.phase,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rebound_store::{AttemptOutcome, JobState};

    use super::*;

    #[test]
    fn the_wire_keeps_its_millisecond_fields() {
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        let job = JobRecord {
            id: "job_1".into(),
            generation: 2,
            state: JobState::Waiting,
            protocol: "openai".into(),
            route_id: "r".into(),
            candidates: vec!["a".into()],
            policies: vec![],
            request: vec![],
            turn: rebound_core::TurnSnapshot::default(),
            deadline: Some(at(1_796_050_920_000)),
            pending_outcome: Some("retry".into()),
            classification: None,
            response_status: None,
            response: None,
            error: None,
            created: at(1_796_050_800_000),
            updated: at(1_796_050_800_250),
        };
        let attempts = [AttemptRecord {
            finished: Some(at(1_796_050_800_200)),
            outcome: AttemptOutcome::Failed,
            ..AttemptRecord::in_flight(1, "a", at(1_796_050_800_100))
        }];
        let view = summary(&job, Some(&attempts));
        assert_eq!(view["deadline_ms"], 1_796_050_920_000_u64);
        assert_eq!(view["created_ms"], 1_796_050_800_000_u64);
        assert_eq!(view["updated_ms"], 1_796_050_800_250_u64);
        assert_eq!(view["state"], "waiting");
        let attempt = &view["attempts"][0];
        assert_eq!(attempt["started_ms"], 1_796_050_800_100_u64);
        assert_eq!(attempt["finished_ms"], 1_796_050_800_200_u64);
        assert_eq!(attempt["outcome"], "failed");
        assert_eq!(
            attempt.as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "candidate",
                "catalogue_version",
                "class",
                "code",
                "finished_ms",
                "number",
                "outcome",
                "phase",
                "rule_id",
                "started_ms",
                "status"
            ]
        );
    }
}
