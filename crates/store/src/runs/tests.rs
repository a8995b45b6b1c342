use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::model::AttemptOutcome;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn new_run() -> NewRun {
    NewRun {
        route_id: "agents".into(),
        profiles: vec!["claude".into(), "codex".into()],
        handoff: false,
        policies: vec![],
        prompt: "fix the build".into(),
        cwd: "/srv/repo".into(),
    }
}

fn invocation(number: u32, outcome: AttemptOutcome) -> Invocation {
    Invocation {
        number,
        profile: "claude".into(),
        mode: InvocationMode::Fresh,
        started: at(10),
        finished: None,
        outcome,
        exit_code: None,
        session: None,
        acted: false,
        code: None,
        class: None,
        rule_id: None,
        catalogue_version: None,
    }
}

#[test]
fn a_transition_is_fenced_by_generation_and_commits_with_its_invocations() {
    let store = SqliteRunStore::in_memory().unwrap();
    let run = store.create(new_run(), at(1)).unwrap();
    assert_eq!((run.generation, run.state), (1, RunState::Pending));
    let moved = store
        .transition(&run.id, 1, at(2), &mut |r| {
            r.state = RunState::Running;
            vec![InvocationOp::Begin(invocation(1, AttemptOutcome::InFlight))]
        })
        .unwrap();
    assert_eq!((moved.generation, moved.state), (2, RunState::Running));
    assert_eq!(moved.updated, at(2));
    // A timer or a manual action that read generation 1 changes nothing (P2).
    let stale = store.transition(&run.id, 1, at(3), &mut |r| {
        r.state = RunState::Failed;
        vec![InvocationOp::Begin(invocation(2, AttemptOutcome::InFlight))]
    });
    assert!(matches!(
        stale,
        Err(RunStoreError::Stale {
            expected: 1,
            actual: 2,
            ..
        })
    ));
    let read = store.get(&run.id).unwrap();
    assert_eq!(read, moved);
    assert_eq!(store.invocations(&run.id).unwrap().len(), 1);
}

#[test]
fn the_restart_rule_holds_a_running_run_and_re_arms_pending_and_waiting_ones() {
    let store = SqliteRunStore::in_memory().unwrap();
    let running = store.create(new_run(), at(1)).unwrap();
    store
        .transition(&running.id, 1, at(2), &mut |r| {
            r.state = RunState::Running;
            vec![InvocationOp::Begin(invocation(1, AttemptOutcome::InFlight))]
        })
        .unwrap();
    let waiting = store.create(new_run(), at(3)).unwrap();
    store
        .transition(&waiting.id, 1, at(4), &mut |r| {
            r.state = RunState::Waiting;
            r.deadline = Some(at(3600));
            vec![]
        })
        .unwrap();
    let pending = store.create(new_run(), at(5)).unwrap();
    let done = store.create(new_run(), at(6)).unwrap();
    store
        .transition(&done.id, 1, at(7), &mut |r| {
            r.state = RunState::Succeeded;
            vec![]
        })
        .unwrap();

    let reconciled = reconcile_runs(&store, at(100)).unwrap();
    assert_eq!(reconciled.action_required, vec![running.id.clone()]);
    let mut due = reconciled.due.clone();
    due.sort();
    let mut want = vec![waiting.id.clone(), pending.id.clone()];
    want.sort();
    assert_eq!(due, want);
    let held = store.get(&running.id).unwrap();
    assert_eq!(held.state, RunState::ActionRequired);
    assert_eq!(held.error.unwrap()["reason"], "invocation_may_have_run");
    let invocations = store.invocations(&running.id).unwrap();
    assert_eq!(invocations[0].outcome, AttemptOutcome::Unknown);
    assert_eq!(invocations[0].finished, Some(at(100)));
    assert_eq!(store.get(&waiting.id).unwrap().deadline, Some(at(3600)));
}

#[test]
fn runs_survive_reopening_the_file_beside_jobs() {
    let dir = std::env::temp_dir().join(format!("rebound-runs-{}", fastrand::u64(..)));
    let path = dir.join("jobs.db");
    let jobs = crate::SqliteStore::open(&path).unwrap();
    let id = {
        let store = SqliteRunStore::open(&path).unwrap();
        let run = store.create(new_run(), at(1)).unwrap();
        store
            .transition(&run.id, 1, at(2), &mut |r| {
                r.state = RunState::Waiting;
                r.deadline = Some(at(7200));
                r.session = Some(RunSession {
                    profile: "claude".into(),
                    id: "9b2c0e4e".into(),
                });
                r.acted = true;
                vec![]
            })
            .unwrap();
        run.id
    };
    drop(jobs);
    let store = SqliteRunStore::open(&path).unwrap();
    let run = store.get(&id).unwrap();
    assert_eq!(run.state, RunState::Waiting);
    assert_eq!(run.deadline, Some(at(7200)));
    assert_eq!(run.session.unwrap().id, "9b2c0e4e");
    assert!(run.acted);
    assert_eq!(store.list(10).unwrap().len(), 1);
    // The jobs' schema is untouched by the runs' tables.
    crate::SqliteStore::open(&path).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_missing_run_is_named() {
    let store = SqliteRunStore::in_memory().unwrap();
    let err = store.get("run_nope").unwrap_err();
    assert_eq!(err.to_string(), "no run run_nope");
}
