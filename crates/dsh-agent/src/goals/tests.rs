use super::*;

fn created(max: u64) -> GoalBook {
    let mut book = GoalBook::default();
    let change = book
        .create("goal-1", "  Ship the parser ", max, 10)
        .unwrap();
    book.apply(&change);
    book
}

fn step(
    book: &mut GoalBook,
    change: impl FnOnce(&GoalBook) -> Result<GoalChange, GoalRefusal>,
) -> GoalChange {
    let change = change(book).unwrap();
    book.apply(&change);
    change
}

#[test]
fn create_trims_and_starts_active_at_revision_one() {
    let book = created(5);
    let state = book.current.as_ref().unwrap();
    assert_eq!(state.goal.objective, "Ship the parser");
    assert_eq!(state.goal.phase, GoalPhase::Active);
    assert_eq!((state.goal.revision, state.rounds_started), (1, 0));
    assert_eq!(state.goal.max_goal_rounds, 5);
    assert!(GoalBook::default().create("g", "  ", 5, 0).is_err());
    assert!(GoalBook::default().create("g", "x", 0, 0).is_err());
}

#[test]
fn an_unfinished_goal_is_not_replaced_but_a_complete_one_is() {
    let mut book = created(5);
    let err = book.create("goal-2", "other", 5, 11).unwrap_err();
    assert!(err.0.contains("clear it first"), "{err}");
    step(&mut book, |b| b.complete(12));
    let again = step(&mut book, |b| b.create("goal-2", "other", 5, 13));
    assert_eq!(again.goal.unwrap().revision, 1);
}

#[test]
fn transitions_follow_dshs_phases_and_bump_the_revision() {
    let mut book = created(5);
    let paused = step(&mut book, |b| b.pause(11));
    assert_eq!(paused.goal.as_ref().unwrap().phase, GoalPhase::Paused);
    assert_eq!(paused.goal.as_ref().unwrap().revision, 2);
    assert!(book.pause(12).is_err(), "only an active goal pauses");
    assert!(
        book.block("model-reported", "x", 12).is_err(),
        "only an active goal blocks"
    );
    step(&mut book, |b| b.resume(12));
    let blocked = step(&mut book, |b| b.block("model-reported", " no key ", 13));
    let goal = blocked.goal.unwrap();
    assert_eq!(goal.phase, GoalPhase::Blocked);
    assert_eq!(goal.blocked_reason.unwrap().message, "no key");
    let resumed = step(&mut book, |b| b.resume(14));
    assert!(resumed.goal.unwrap().blocked_reason.is_none());
    let edited = step(&mut book, |b| b.edit(Some("Ship it all"), Some(9), 15));
    let goal = edited.goal.unwrap();
    assert_eq!(
        (goal.objective.as_str(), goal.max_goal_rounds, goal.revision),
        ("Ship it all", 9, 6)
    );
    assert_eq!(goal.phase, GoalPhase::Active);
    assert!(book.edit(None, None, 16).is_err());
    step(&mut book, |b| b.complete(16));
    assert!(book.complete(17).is_err());
    let cleared = step(&mut book, |b| b.clear(18));
    assert_eq!(cleared.operation, GoalOperation::Clear);
    assert_eq!(cleared.cleared.unwrap().revision, 8);
    assert!(book.current.is_none());
    assert!(book.clear(19).is_err());
}

#[test]
fn rounds_are_counted_from_round_messages_and_bound_resume() {
    let mut book = created(2);
    let round = |n: u64, id: &str| {
        let mut message = plugin_message(GOAL_PLUGIN, "round", "r");
        if let MessageSource::Plugin { extra, .. } = &mut message.source {
            extra.insert("goalId".into(), json!(id));
            extra.insert("revision".into(), json!(1));
            extra.insert("round".into(), json!(n));
        }
        Event::UserMessage(message)
    };
    book.observe(&round(1, "other-goal"));
    assert_eq!(book.current.as_ref().unwrap().rounds_started, 0);
    book.observe(&round(1, "goal-1"));
    book.observe(&round(2, "goal-1"));
    assert_eq!(book.current.as_ref().unwrap().rounds_started, 2);
    step(&mut book, |b| b.block("round-limit", "limit", 20));
    let err = book.resume(21).unwrap_err();
    assert!(err.0.contains("all 2 of its rounds"), "{err}");
    step(&mut book, |b| b.edit(None, Some(4), 22));
    let resumed = step(&mut book, |b| b.resume(23));
    assert_eq!(resumed.rounds_started, Some(2));
}

#[test]
fn check_ref_wants_the_current_revision() {
    let book = created(3);
    assert!(book.check_ref("goal-1", 1).is_ok());
    let err = book.check_ref("goal-1", 2).unwrap_err();
    assert!(err.0.contains("revision 1"), "{err}");
    assert!(GoalBook::default().check_ref("goal-1", 1).is_err());
}

#[test]
fn the_fold_reads_dshs_recorded_changes() {
    let line = r#"{"kind":"goal/change","version":1,"operation":"pause","goal":{"id":"goal-x","revision":2,"objective":"Finish","phase":"paused","maxGoalRounds":2},"roundsStarted":2,"createdAt":0,"updatedAt":0}"#;
    let change: GoalChange = serde_json::from_str(line).unwrap();
    let book = GoalBook::fold(&[Envelope::new(Event::GoalChange(change))]);
    let state = book.current.unwrap();
    assert_eq!(
        (state.goal.phase, state.rounds_started),
        (GoalPhase::Paused, 2)
    );
    let value = goal_value(Some(&state), true);
    assert_eq!(value["activation"], "disarmed");
    assert_eq!(value["goal"]["roundsStarted"], 2);
    assert_eq!(goal_value(None, true), json!({"goal": null}));
}
