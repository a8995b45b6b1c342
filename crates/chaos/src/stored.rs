//! Responses the Responses API created, kept in memory for `GET /v1/responses/{id}`,
//! `…/cancel`, `…/input_items` and `previous_response_id`.
//!
//! A `background: true` response is `queued` when created; each `GET` moves it one step,
//! to `in_progress` and then to its final state, so a client that polls sees it complete
//! without timers. A request with `store: false` is not kept, as at OpenAI.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

/// Where a background response is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Queued,
    InProgress,
    Done,
    Cancelled,
}

#[derive(Debug)]
struct Stored {
    /// The final object.
    object: Value,
    input: Vec<Value>,
    background: bool,
    stage: Stage,
}

/// Why a cancel is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CancelError {
    NotFound,
    NotBackground,
}

/// The store.
#[derive(Debug, Default)]
pub(crate) struct ResponseStore(Mutex<HashMap<String, Stored>>);

fn with_stage(object: &Value, stage: Stage) -> Value {
    let mut object = object.clone();
    let status = match stage {
        Stage::Queued => "queued",
        Stage::InProgress => "in_progress",
        Stage::Cancelled => "cancelled",
        Stage::Done => return object,
    };
    object["status"] = json!(status);
    object["output"] = json!([]);
    object["usage"] = Value::Null;
    object["incomplete_details"] = Value::Null;
    object
}

impl ResponseStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Stored>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a response; returns it as the creating request sees it: `queued` when it runs in
    /// the background and was not streamed (a streamed one has finished when it is read).
    pub(crate) fn insert(
        &self,
        object: Value,
        input: Vec<Value>,
        background: bool,
        streamed: bool,
    ) -> Value {
        let stage = if background && !streamed {
            Stage::Queued
        } else {
            Stage::Done
        };
        let seen = with_stage(&object, stage);
        let id = object
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.lock().insert(
            id,
            Stored {
                object,
                input,
                background,
                stage,
            },
        );
        seen
    }

    /// Whether `id` is kept.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// `GET`: the response, one stage further when it runs in the background.
    pub(crate) fn get(&self, id: &str) -> Option<Value> {
        let mut store = self.lock();
        let stored = store.get_mut(id)?;
        stored.stage = match stored.stage {
            Stage::Queued => Stage::InProgress,
            Stage::InProgress | Stage::Done => Stage::Done,
            Stage::Cancelled => Stage::Cancelled,
        };
        Some(with_stage(&stored.object, stored.stage))
    }

    /// `POST …/cancel`: a background response that has not finished is cancelled; a finished
    /// one is returned as it is.
    pub(crate) fn cancel(&self, id: &str) -> Result<Value, CancelError> {
        let mut store = self.lock();
        let stored = store.get_mut(id).ok_or(CancelError::NotFound)?;
        if !stored.background {
            return Err(CancelError::NotBackground);
        }
        if matches!(stored.stage, Stage::Queued | Stage::InProgress) {
            stored.stage = Stage::Cancelled;
        }
        Ok(with_stage(&stored.object, stored.stage))
    }

    /// `DELETE`: forgets the response.
    pub(crate) fn delete(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// `GET …/input_items`: the request's input items, oldest first.
    pub(crate) fn input_items(&self, id: &str) -> Option<Vec<Value>> {
        self.lock().get(id).map(|s| s.input.clone())
    }
}
