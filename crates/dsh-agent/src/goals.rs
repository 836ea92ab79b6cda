//! Session goals, as dsh has them (docs/goals.md): a session may hold one goal (an objective
//! with a phase: active, paused, blocked, complete). The model manages it with `get_goal`,
//! `create_goal` and `update_goal`; the user with `/goal`. Every mutation is logged as a
//! `goal/change` event holding the whole goal after it, so resume restores the goal from the
//! last one (ours and dsh's alike).
//!
//! The continuation driver: when a turn ends `completed` while the goal is active and armed,
//! and no input is queued, the next round is queued as a new turn (a plugin message of plugin
//! `goal`, form `round`, carrying `goalId`, `revision` and `round`). A goal that used its
//! `maxGoalRounds` is blocked (`round-limit`). A turn that ends otherwise (cancelled, blocked,
//! a failure or a budget) stops the driver: a cancelled round pauses the goal, anything else
//! only disarms it (the phase stays). Arming is live state, never logged: a resumed session's
//! goal is disarmed until the user (`/goal resume`, or a request the model answers with
//! `update_goal` action `resume`) rearms it, as in dsh.

use std::sync::{Arc, Mutex};

use dsh_llm::{LockExt, Message, MessageSource};
use dsh_session::{
    Envelope, Event, GoalBlockReason, GoalChange, GoalOperation, GoalPhase, GoalRef, GoalSnapshot,
    TurnEndReason,
};
use dsh_tools::{Tool, ToolContext, ToolError, ToolErrorCode, ToolOutput};
use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use crate::extension::{AttachedAgent, Extension, ToolPostContext};
use crate::prompt::{PromptContext, PromptSection};
use crate::{plugin_message, ExtensionError, UserCommand, WeakAgentHandle};

/// Name of the extension, and the plugin of its model-facing messages.
pub const GOAL_PLUGIN: &str = "goal";
/// The slash command (`/goal`, `/goal <objective>`, `/goal pause|resume|clear|edit <text>`).
pub const GOAL_COMMAND: &str = "goal";
/// dsh's default round cap of a goal created without one (`[goals] max_rounds`).
pub const DEFAULT_MAX_GOAL_ROUNDS: u64 = 256;
/// Rounds a goal must have run before the model may report it blocked from a round (dsh's
/// `blockedAfterConsecutiveRounds`).
pub const BLOCKED_AFTER_ROUNDS: u64 = 3;

/// The three model tools.
pub const GET_GOAL: &str = "get_goal";
/// See [`GET_GOAL`].
pub const CREATE_GOAL: &str = "create_goal";
/// See [`GET_GOAL`].
pub const UPDATE_GOAL: &str = "update_goal";

/// A goal as the log last left it, with its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalState {
    /// The goal.
    pub goal: GoalSnapshot,
    /// Rounds started so far.
    pub rounds_started: u64,
    /// Epoch ms of the create.
    pub created_at: u64,
    /// Epoch ms of the latest mutation.
    pub updated_at: u64,
}

/// The goal of a session, folded from its log: the pure state machine behind the tools, the
/// command and the driver. Mutations return the `goal/change` to log; [`GoalBook::apply`] takes
/// a logged one in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoalBook {
    /// The current goal (`None`: never created, or cleared).
    pub current: Option<GoalState>,
}

/// A refused mutation, in words for the model or the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalRefusal(pub String);

impl std::fmt::Display for GoalRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse<T>(message: impl Into<String>) -> Result<T, GoalRefusal> {
    Err(GoalRefusal(message.into()))
}

/// The goal id and round of a goal-round message (ours, or dsh's read as a plugin source).
pub fn goal_round_of(message: &Message) -> Option<(String, u64, u64)> {
    let MessageSource::Plugin { plugin, extra, .. } = &message.source else {
        return None;
    };
    if plugin != GOAL_PLUGIN {
        return None;
    }
    let id = extra.get("goalId")?.as_str()?.to_string();
    let revision = extra.get("revision")?.as_u64()?;
    let round = extra.get("round")?.as_u64()?;
    (round > 0).then_some((id, revision, round))
}

impl GoalBook {
    /// The goal after `events` (every `goal/change`, and each goal round's message counted).
    pub fn fold(events: &[Envelope]) -> Self {
        let mut book = GoalBook::default();
        for envelope in events {
            book.observe(&envelope.event);
        }
        book
    }

    /// Takes one logged event in: a `goal/change`, or a round's `user/message`.
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::GoalChange(change) => self.apply(change),
            Event::UserMessage(message) => {
                if let (Some((id, _, round)), Some(state)) =
                    (goal_round_of(message), self.current.as_mut())
                {
                    if state.goal.id == id && round > state.rounds_started {
                        state.rounds_started = round;
                    }
                }
            }
            _ => {}
        }
    }

    /// Applies a logged change (the last one wins: each carries the whole goal).
    pub fn apply(&mut self, change: &GoalChange) {
        match (&change.goal, change.operation) {
            (_, GoalOperation::Clear) | (None, _) => self.current = None,
            (Some(goal), _) => {
                self.current = Some(GoalState {
                    goal: goal.clone(),
                    rounds_started: change.rounds_started.unwrap_or(0),
                    created_at: change.created_at.unwrap_or(0),
                    updated_at: change.updated_at.unwrap_or(0),
                });
            }
        }
    }

    fn next(
        &self,
        operation: GoalOperation,
        now: u64,
        edit: impl FnOnce(&mut GoalSnapshot),
    ) -> Result<GoalChange, GoalRefusal> {
        let Some(state) = &self.current else {
            return refuse("there is no goal; create one first");
        };
        let mut goal = state.goal.clone();
        goal.revision += 1;
        edit(&mut goal);
        Ok(GoalChange::snapshot(
            operation,
            goal,
            state.rounds_started,
            state.created_at,
            now.max(state.updated_at),
        ))
    }

    /// Checks `reference` (`goal_id`, `revision`) against the current goal.
    pub fn check_ref(&self, id: &str, revision: u64) -> Result<&GoalState, GoalRefusal> {
        match &self.current {
            None => refuse("there is no goal; create one first"),
            Some(state) if state.goal.id != id || state.goal.revision != revision => {
                refuse(format!(
                "goal_id and revision must be the current goal's: `{}` revision {} (call get_goal)",
                state.goal.id, state.goal.revision
            ))
            }
            Some(state) => Ok(state),
        }
    }

    /// A new goal; only a completed goal (or none) may be replaced.
    pub fn create(
        &self,
        id: &str,
        objective: &str,
        max_rounds: u64,
        now: u64,
    ) -> Result<GoalChange, GoalRefusal> {
        let objective = objective.trim();
        if objective.is_empty() {
            return refuse("the objective is empty; say what is to be achieved");
        }
        if max_rounds == 0 {
            return refuse("max_goal_rounds must be a positive whole number");
        }
        if let Some(state) = &self.current {
            if state.goal.phase != GoalPhase::Complete {
                return refuse(format!(
                    "the session already has a {} goal ({:?}); edit it, or clear it first",
                    state.goal.phase.as_str(),
                    state.goal.objective
                ));
            }
        }
        Ok(GoalChange::snapshot(
            GoalOperation::Create,
            GoalSnapshot {
                id: id.to_string(),
                revision: 1,
                objective: objective.to_string(),
                phase: GoalPhase::Active,
                blocked_reason: None,
                max_goal_rounds: max_rounds,
            },
            0,
            now,
            now,
        ))
    }

    /// A new objective and/or round cap; the phase stays.
    pub fn edit(
        &self,
        objective: Option<&str>,
        max_rounds: Option<u64>,
        now: u64,
    ) -> Result<GoalChange, GoalRefusal> {
        let objective = objective.map(str::trim).filter(|o| !o.is_empty());
        if objective.is_none() && max_rounds.is_none() {
            return refuse("an edit needs a new objective or max_goal_rounds");
        }
        if max_rounds == Some(0) {
            return refuse("max_goal_rounds must be a positive whole number");
        }
        self.next(GoalOperation::Edit, now, |goal| {
            if let Some(objective) = objective {
                goal.objective = objective.to_string();
            }
            if let Some(max) = max_rounds {
                goal.max_goal_rounds = max;
            }
        })
    }

    /// Active to paused.
    pub fn pause(&self, now: u64) -> Result<GoalChange, GoalRefusal> {
        self.require_phase(&[GoalPhase::Active], "pause")?;
        self.next(GoalOperation::Pause, now, |goal| {
            goal.phase = GoalPhase::Paused
        })
    }

    /// Paused, blocked or active (rearming after a resume of the session) to active, while
    /// rounds are left.
    pub fn resume(&self, now: u64) -> Result<GoalChange, GoalRefusal> {
        self.require_phase(
            &[GoalPhase::Active, GoalPhase::Paused, GoalPhase::Blocked],
            "resume",
        )?;
        if let Some(state) = &self.current {
            if state.rounds_started >= state.goal.max_goal_rounds {
                return refuse(format!(
                    "the goal has used all {} of its rounds; raise max_goal_rounds with an edit first",
                    state.goal.max_goal_rounds
                ));
            }
        }
        self.next(GoalOperation::Resume, now, |goal| {
            goal.phase = GoalPhase::Active;
            goal.blocked_reason = None;
        })
    }

    /// Marked achieved.
    pub fn complete(&self, now: u64) -> Result<GoalChange, GoalRefusal> {
        self.require_phase(
            &[GoalPhase::Active, GoalPhase::Paused, GoalPhase::Blocked],
            "complete",
        )?;
        self.next(GoalOperation::Complete, now, |goal| {
            goal.phase = GoalPhase::Complete;
            goal.blocked_reason = None;
        })
    }

    /// Active to blocked, with a reason.
    pub fn block(&self, code: &str, message: &str, now: u64) -> Result<GoalChange, GoalRefusal> {
        self.require_phase(&[GoalPhase::Active], "block")?;
        let message = message.trim();
        if message.is_empty() {
            return refuse("blocked_reason is required with action blocked");
        }
        self.next(GoalOperation::Block, now, |goal| {
            goal.phase = GoalPhase::Blocked;
            goal.blocked_reason = Some(GoalBlockReason {
                code: code.to_string(),
                message: message.to_string(),
            });
        })
    }

    /// Removes the goal (a tombstone is logged).
    pub fn clear(&self, now: u64) -> Result<GoalChange, GoalRefusal> {
        let Some(state) = &self.current else {
            return refuse("there is no goal to clear");
        };
        Ok(GoalChange::clear(
            GoalRef {
                id: state.goal.id.clone(),
                revision: state.goal.revision + 1,
            },
            now.max(state.updated_at),
        ))
    }

    fn require_phase(&self, phases: &[GoalPhase], what: &str) -> Result<(), GoalRefusal> {
        match &self.current {
            None => refuse("there is no goal; create one first"),
            Some(state) if !phases.contains(&state.goal.phase) => refuse(format!(
                "cannot {what} a {} goal",
                state.goal.phase.as_str()
            )),
            Some(_) => Ok(()),
        }
    }
}

/// The tools' result: `{goal: null}` or `{goal: {...}, activation}`, dsh's compact shape.
pub fn goal_value(state: Option<&GoalState>, armed: bool) -> Value {
    let Some(state) = state else {
        return json!({ "goal": null });
    };
    let mut goal = json!({
        "id": state.goal.id,
        "revision": state.goal.revision,
        "objective": state.goal.objective,
        "phase": state.goal.phase.as_str(),
        "roundsStarted": state.rounds_started,
        "maxGoalRounds": state.goal.max_goal_rounds,
    });
    if let (Some(reason), Some(map)) = (&state.goal.blocked_reason, goal.as_object_mut()) {
        map.insert(
            "blockedReason".into(),
            json!({"code": reason.code, "message": reason.message}),
        );
    }
    let armed = armed && state.goal.phase == GoalPhase::Active;
    json!({ "goal": goal, "activation": if armed { "armed" } else { "disarmed" } })
}

/// The goal in one line for people: `"objective" — active, round 2/256`.
pub fn describe_goal(state: &GoalState, armed: bool) -> String {
    let mut text = format!(
        "Goal: {:?} — {}, round {}/{}",
        state.goal.objective,
        state.goal.phase.as_str(),
        state.rounds_started,
        state.goal.max_goal_rounds
    );
    if let Some(reason) = &state.goal.blocked_reason {
        text.push_str(&format!("; blocked ({}): {}", reason.code, reason.message));
    }
    if state.goal.phase == GoalPhase::Active && !armed {
        text.push_str("; not continuing automatically (/goal resume continues it)");
    }
    text
}

fn round_text(state: &GoalState, round: u64) -> String {
    format!(
        "<goal_round>\nObjective: {}\nRound: {round}/{}\n\nThis is an automatic continuation \
         round of the session's goal. Look at the workspace and at what tools report now rather \
         than trusting earlier summaries; make concrete progress and check it. When the whole \
         objective is achieved and you have evidence of it, call get_goal and mark the goal \
         complete with update_goal. If work remains, leave the goal active and another round \
         will follow. Report the goal blocked only as the goal policy allows.\n</goal_round>",
        Value::String(state.goal.objective.clone()),
        state.goal.max_goal_rounds
    )
}

fn wrapup_text(objective: &str, blocked: Option<&str>) -> String {
    let objective = Value::String(objective.to_string());
    match blocked {
        None => format!(
            "<goal_complete>\nObjective: {objective}\nThe goal is marked complete, so the \
             automatic rounds end here. Write your closing message to the user now: the \
             outcome, what was done and how it was checked, where the results are, and anything \
             they should look at next. Say only what this session's tool results show. Call no \
             more tools.\n</goal_complete>"
        ),
        Some(reason) => format!(
            "<goal_blocked>\nObjective: {objective}\nBlocked: {}\nThe goal is marked blocked, \
             so the automatic rounds end here. Write your closing message to the user now: what \
             is done, the blocking condition and what you tried, and exactly what you need from \
             them to go on. Say only what this session's tool results show. Call no more \
             tools.\n</goal_blocked>",
            Value::String(reason.to_string())
        ),
    }
}

const POLICY: &str = "Goals: use the goal tools for one long-running objective of this session. \
create_goal may be used when the user's own message asks for substantial work that should go on \
across automatic rounds (in any wording or language); not for routine one-turn work. While the \
goal is active, each time you end a turn without marking it, dsh starts another round. Call \
get_goal before update_goal and copy its goal_id and revision. After the session was resumed an \
active goal does not continue by itself: when the user asks to go on, use update_goal action \
resume. Mark the goal complete only when the objective is achieved. Mark it blocked only after \
the same blocking condition held for at least 3 rounds, and say what it is in blocked_reason; \
difficulty, doubt or remaining work is not a blocker.";

#[derive(Default)]
struct Live {
    book: GoalBook,
    /// May the driver start rounds (process-local, never logged).
    armed: bool,
    handle: Option<WeakAgentHandle>,
    /// The running turn has a message the user typed.
    turn_has_user: bool,
    /// The round the running turn is, if it is one.
    turn_round: Option<u64>,
    /// No turn runs.
    idle: bool,
    /// A round was queued and its turn has not started yet.
    round_queued: bool,
    /// A terminal update in the running round, to wrap up after.
    wrapup: Option<Message>,
    /// A cancelled round's pause, not logged yet: the next idle point logs it (or the task
    /// the turn's end started, whichever comes first).
    pause_pending: bool,
}

/// The goals extension: the three tools, `/goal`, the `goal/change` events, the continuation
/// driver. One per top-level agent.
#[derive(Clone)]
pub struct Goals {
    live: Arc<Mutex<Live>>,
    /// Serialises mutations (compute, log, apply).
    mutation: Arc<Mutex<()>>,
    /// Serialises the driver, so one idle moment queues one round.
    driving: Arc<Mutex<()>>,
    max_rounds: u64,
    /// Ids for the goals created next, in order (a replay's recorded ones); then new ones.
    ids: Arc<Mutex<std::collections::VecDeque<String>>>,
}

impl Goals {
    /// Goals created in this session take `ids` first, in order (`dsh replay`: the recording's
    /// ids, so its calls naming a goal still match).
    pub fn with_ids(self, ids: Vec<String>) -> Self {
        *self.ids.lock_or_recover() = ids.into();
        self
    }

    fn new_id(&self) -> String {
        self.ids
            .lock_or_recover()
            .pop_front()
            .unwrap_or_else(|| format!("goal-{}", uuid::Uuid::new_v4()))
    }

    /// Goals created without a cap get `max_rounds` rounds (`[goals] max_rounds`).
    pub fn new(max_rounds: u64) -> Self {
        Goals {
            live: Arc::new(Mutex::new(Live {
                idle: true,
                ..Live::default()
            })),
            mutation: Arc::new(Mutex::new(())),
            driving: Arc::new(Mutex::new(())),
            max_rounds: max_rounds.max(1),
            ids: Arc::default(),
        }
    }

    /// The current goal and whether it continues by itself.
    pub fn current(&self) -> (Option<GoalState>, bool) {
        let live = self.live.lock_or_recover();
        (live.book.current.clone(), live.armed)
    }

    fn handle(&self) -> Result<crate::AgentHandle, GoalRefusal> {
        self.live
            .lock_or_recover()
            .handle
            .as_ref()
            .and_then(WeakAgentHandle::upgrade)
            .ok_or_else(|| GoalRefusal("goals are not attached to a running session".into()))
    }

    /// Computes a mutation from the current goal, logs it and takes it in; `arm` sets the
    /// driver's arming afterwards (`None`: unchanged).
    fn mutate(
        &self,
        arm: Option<bool>,
        change: impl FnOnce(&GoalBook, u64) -> Result<GoalChange, GoalRefusal>,
    ) -> Result<GoalState, GoalRefusal> {
        let _serial = self.mutation.lock_or_recover();
        let handle = self.handle()?;
        let book = self.live.lock_or_recover().book.clone();
        let change = change(&book, dsh_session::now_ms())?;
        handle
            .log_event(Event::GoalChange(change.clone()))
            .map_err(|err| GoalRefusal(format!("the goal change could not be logged: {err}")))?;
        let mut live = self.live.lock_or_recover();
        live.book.apply(&change);
        if let Some(arm) = arm {
            live.armed = arm;
        }
        let state = live.book.current.clone();
        drop(live);
        if arm == Some(true) {
            self.schedule_drive();
        }
        state.ok_or_else(|| GoalRefusal("the goal was cleared".into()))
    }

    /// Runs the driver from a task: the log's lock may be held by the caller (events are
    /// delivered under it, and queuing input takes it).
    fn schedule_drive(&self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let goals = self.clone();
            runtime.spawn(async move { goals.drive() });
        }
    }

    /// At idle: queue the next round, or block the goal whose rounds ran out.
    fn drive(&self) {
        let _serial = self.driving.lock_or_recover();
        let Ok(handle) = self.handle() else {
            return;
        };
        let (state, armed, idle) = {
            let live = self.live.lock_or_recover();
            (
                live.book.current.clone(),
                live.armed,
                live.idle && !live.round_queued,
            )
        };
        let Some(state) = state else { return };
        if !armed || !idle || state.goal.phase != GoalPhase::Active {
            return;
        }
        // The user's input goes first; the driver looks again when its turn ended.
        if !handle.pending().1.is_empty() {
            return;
        }
        if state.rounds_started >= state.goal.max_goal_rounds {
            let max = state.goal.max_goal_rounds;
            let blocked = self.mutate(Some(false), |book, now| {
                book.block(
                    "round-limit",
                    &format!("Goal reached its configured limit of {max} rounds."),
                    now,
                )
            });
            if blocked.is_err() {
                self.live.lock_or_recover().armed = false;
            }
            return;
        }
        let round = state.rounds_started + 1;
        let mut message = plugin_message(GOAL_PLUGIN, "round", round_text(&state, round));
        if let MessageSource::Plugin { extra, .. } = &mut message.source {
            let mut map = Map::new();
            map.insert("goalId".into(), json!(state.goal.id));
            map.insert("revision".into(), json!(state.goal.revision));
            map.insert("round".into(), json!(round));
            *extra = map;
        }
        self.live.lock_or_recover().round_queued = true;
        if handle.followup_message(message).is_err() {
            let mut live = self.live.lock_or_recover();
            live.round_queued = false;
            live.armed = false;
        }
    }

    fn on_turn_end(&self, reason: &TurnEndReason) {
        let mut live = self.live.lock_or_recover();
        live.idle = true;
        let round = live.turn_round.take();
        live.wrapup = None;
        match reason {
            // The next round is queued when the agent is idle (`on_idle`).
            TurnEndReason::Completed => {}
            TurnEndReason::Aborted { .. } if round.is_some() => {
                // A cancelled round pauses the goal, so it does not start again by itself.
                // Logged outside the turn's end (which holds the log): at the next idle point
                // (`on_idle`, which `run_until_idle` and `dsh replay` reach before the process
                // ends), or by this task, whichever comes first. A full test run on a busy
                // machine saw the task alone come too late: the replay had ended.
                live.armed = false;
                live.pause_pending = true;
                drop(live);
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let goals = self.clone();
                    runtime.spawn(async move { goals.pause_if_pending() });
                }
            }
            _ => live.armed = false,
        }
    }

    /// Logs the pause of a cancelled round once.
    fn pause_if_pending(&self) {
        let pending = std::mem::take(&mut self.live.lock_or_recover().pause_pending);
        if pending {
            let _ = self.mutate(Some(false), |book, now| book.pause(now));
        }
    }

    /// What `/goal ...` does; returns the note for the user.
    pub fn command(&self, arguments: &str) -> Result<String, GoalRefusal> {
        let arguments = arguments.trim();
        let (word, rest) = arguments
            .split_once(char::is_whitespace)
            .map_or((arguments, ""), |(w, r)| (w, r.trim()));
        let word = word.to_ascii_lowercase();
        let shown = |state: GoalState, armed: bool| describe_goal(&state, armed);
        match (word.as_str(), rest.is_empty()) {
            ("", _) => {
                let (state, armed) = self.current();
                Ok(match state {
                    Some(state) => shown(state, armed),
                    None => "No goal. /goal <objective> sets one; /goal pause, /goal resume, \
                             /goal clear and /goal edit <objective> change it."
                        .to_string(),
                })
            }
            ("pause", true) => self
                .mutate(Some(false), |book, now| book.pause(now))
                .map(|s| shown(s, false)),
            ("resume", true) => self
                .mutate(Some(true), |book, now| book.resume(now))
                .map(|s| shown(s, true)),
            ("clear", true) => {
                self.mutate(Some(false), |book, now| book.clear(now))
                    .map(|_| String::new())
                    .or_else(|err| {
                        if self.current().0.is_none() {
                            Ok(String::new())
                        } else {
                            Err(err)
                        }
                    })?;
                Ok("Goal cleared.".to_string())
            }
            ("edit", false) => {
                let (state, armed) = self.current();
                if state
                    .as_ref()
                    .is_some_and(|s| s.goal.phase == GoalPhase::Complete)
                {
                    return self.create(rest);
                }
                self.mutate(None, |book, now| book.edit(Some(rest), None, now))
                    .map(|s| shown(s, armed))
            }
            _ => self.create(arguments),
        }
    }

    fn create(&self, objective: &str) -> Result<String, GoalRefusal> {
        let id = self.new_id();
        let max = self.max_rounds;
        self.mutate(Some(true), |book, now| {
            book.create(&id, objective, max, now)
        })
        .map(|s| describe_goal(&s, true))
    }

    fn tools_of(&self) -> Vec<Arc<dyn Tool>> {
        [GET_GOAL, CREATE_GOAL, UPDATE_GOAL]
            .into_iter()
            .map(|name| {
                Arc::new(GoalTool {
                    goals: self.clone(),
                    name,
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

impl Extension for Goals {
    fn name(&self) -> &str {
        GOAL_PLUGIN
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools_of()
    }

    fn prompt_sections(&self, _ctx: &PromptContext<'_>) -> Vec<PromptSection> {
        vec![PromptSection {
            order: 114,
            name: "tool:goal".to_string(),
            text: POLICY.to_string(),
        }]
    }

    fn attach(&self, agent: &AttachedAgent) {
        self.live.lock_or_recover().handle = Some(agent.handle.clone());
    }

    fn restore(&self, events: &[Envelope]) {
        let mut live = self.live.lock_or_recover();
        live.book = GoalBook::fold(events);
        // A resumed goal waits for the user before continuing (dsh's disarm on session start).
        live.armed = false;
    }

    fn on_event(&self, envelope: &Envelope) {
        match &envelope.event {
            Event::TurnStart(_) => {
                let mut live = self.live.lock_or_recover();
                live.idle = false;
                live.round_queued = false;
                live.turn_has_user = false;
                live.turn_round = None;
            }
            Event::UserMessage(message) => {
                let mut live = self.live.lock_or_recover();
                if matches!(message.source, MessageSource::User) {
                    live.turn_has_user = true;
                }
                if let Some((_, _, round)) = goal_round_of(message) {
                    live.turn_round = Some(round);
                }
                live.book.observe(&envelope.event);
            }
            Event::TurnEnd(end) => self.on_turn_end(&end.reason),
            _ => {}
        }
    }

    fn on_idle(&self) {
        self.pause_if_pending();
        self.drive();
    }

    fn tool_post(&self, ctx: &mut ToolPostContext<'_>) {
        if ctx.call.name != UPDATE_GOAL {
            return;
        }
        if let Some(message) = self.live.lock_or_recover().wrapup.take() {
            ctx.inject_next_step.push(message);
        }
    }

    fn user_commands(&self) -> Vec<UserCommand> {
        vec![UserCommand {
            name: GOAL_COMMAND.to_string(),
            description: "The session's goal: show it, set one (/goal <objective>), \
                          /goal pause|resume|clear, /goal edit <objective>"
                .to_string(),
            hint: Some("objective, or pause|resume|clear|edit".to_string()),
        }]
    }

    fn expand_user_command(
        &self,
        name: &str,
        arguments: &str,
    ) -> Option<Result<crate::CommandExpansion, ExtensionError>> {
        if name != GOAL_COMMAND {
            return None;
        }
        Some(
            self.command(arguments)
                .map(|note| crate::CommandExpansion {
                    note: Some(note).filter(|n| !n.is_empty()),
                    ..crate::CommandExpansion::default()
                })
                .map_err(|err| ExtensionError::CommandRefused(err.0)),
        )
    }
}

struct GoalTool {
    goals: Goals,
    name: &'static str,
}

fn text_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A positive whole number; 0 and absence are "not given" (dsh: strict-schema fillers).
fn count_arg(args: &Value, key: &str) -> Result<Option<u64>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_f64() {
            Some(0.0) => Ok(None),
            Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= 1e9 => Ok(Some(n as u64)),
            _ => Err(ToolError::invalid_args(format!(
                "{key} must be a positive whole number"
            ))),
        },
    }
}

fn refused(err: GoalRefusal) -> ToolError {
    ToolError::new(ToolErrorCode::InvalidArgs, err.0)
}

impl GoalTool {
    fn result(&self) -> ToolOutput {
        let (state, armed) = self.goals.current();
        let value = goal_value(state.as_ref(), armed);
        let summary = state.as_ref().map_or_else(
            || "no goal".to_string(),
            |s| s.goal.phase.as_str().to_string(),
        );
        ToolOutput::text(value.to_string())
            .with_summary(summary)
            .with_data(value)
    }

    fn run(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        let (has_user, round) = {
            let live = self.goals.live.lock_or_recover();
            (live.turn_has_user, live.turn_round)
        };
        match self.name {
            GET_GOAL => Ok(self.result()),
            CREATE_GOAL => {
                if !has_user {
                    return Err(ToolError::new(
                        ToolErrorCode::PermissionDenied,
                        "create_goal needs a message the user typed in this turn",
                    ));
                }
                let objective = args.get("objective").and_then(Value::as_str).unwrap_or("");
                let id = self.goals.new_id();
                let max = count_arg(args, "max_goal_rounds")?.unwrap_or(self.goals.max_rounds);
                self.goals
                    .mutate(Some(true), |book, now| {
                        book.create(&id, objective, max, now)
                    })
                    .map_err(refused)?;
                Ok(self.result())
            }
            _ => self.update(args, has_user, round),
        }
    }

    fn update(
        &self,
        args: &Value,
        has_user: bool,
        round: Option<u64>,
    ) -> Result<ToolOutput, ToolError> {
        let id = args.get("goal_id").and_then(Value::as_str).unwrap_or("");
        let revision = args.get("revision").and_then(Value::as_u64).unwrap_or(0);
        let action = args.get("action").and_then(Value::as_str).unwrap_or("");
        let objective = text_arg(args, "objective");
        let max = count_arg(args, "max_goal_rounds")?;
        let reason = text_arg(args, "blocked_reason");
        let state = {
            let live = self.goals.live.lock_or_recover();
            live.book
                .check_ref(id, revision)
                .cloned()
                .map_err(refused)?
        };
        let human = || {
            if has_user {
                Ok(())
            } else {
                Err(ToolError::new(
                    ToolErrorCode::PermissionDenied,
                    format!("action {action} needs a message the user typed in this turn"),
                ))
            }
        };
        let only_edit = || {
            if objective.is_some() || max.is_some() {
                Err(ToolError::invalid_args(
                    "objective and max_goal_rounds are valid only with action edit",
                ))
            } else {
                Ok(())
            }
        };
        let no_reason = || {
            if reason.is_some() {
                Err(ToolError::invalid_args(
                    "blocked_reason is valid only with action blocked",
                ))
            } else {
                Ok(())
            }
        };
        match action {
            "edit" => {
                human()?;
                no_reason()?;
                self.goals
                    .mutate(None, |book, now| book.edit(objective, max, now))
                    .map_err(refused)?;
            }
            "pause" | "resume" => {
                human()?;
                only_edit()?;
                no_reason()?;
                let resume = action == "resume";
                self.goals
                    .mutate(Some(resume), |book, now| {
                        if resume {
                            book.resume(now)
                        } else {
                            book.pause(now)
                        }
                    })
                    .map_err(refused)?;
            }
            "complete" | "blocked" => {
                if objective.is_some() || max.is_some() {
                    return Err(ToolError::invalid_args(
                        "objective and max_goal_rounds are valid only with action edit",
                    ));
                }
                self.conclude(action == "blocked", reason, &state, has_user, round)?;
            }
            other => {
                return Err(ToolError::invalid_args(format!(
                    "action must be edit, pause, resume, complete or blocked, not `{other}`"
                )))
            }
        }
        Ok(self.result())
    }

    /// `complete` or `blocked`: from the user's turn, or from the goal's current round (then
    /// the model is told once to wrap up).
    fn conclude(
        &self,
        blocked: bool,
        reason: Option<&str>,
        state: &GoalState,
        has_user: bool,
        round: Option<u64>,
    ) -> Result<(), ToolError> {
        let in_round = round.is_some_and(|r| r == state.rounds_started);
        if !has_user && !in_round {
            return Err(ToolError::new(
                ToolErrorCode::PermissionDenied,
                "complete and blocked need a message the user typed in this turn, or the goal's \
                 current round",
            ));
        }
        match (blocked, reason) {
            (true, None) => {
                return Err(ToolError::invalid_args(
                    "blocked_reason is required with action blocked",
                ))
            }
            (false, Some(_)) => {
                return Err(ToolError::invalid_args(
                    "blocked_reason is valid only with action blocked",
                ))
            }
            _ => {}
        }
        if blocked && !has_user && state.rounds_started < BLOCKED_AFTER_ROUNDS {
            return Err(ToolError::new(
                ToolErrorCode::PermissionDenied,
                format!(
                    "blocked requires at least {BLOCKED_AFTER_ROUNDS} consecutive goal rounds; \
                     current round is {}",
                    state.rounds_started
                ),
            ));
        }
        let done = self
            .goals
            .mutate(Some(false), |book, now| {
                if blocked {
                    book.block("model-reported", reason.unwrap_or_default(), now)
                } else {
                    book.complete(now)
                }
            })
            .map_err(refused)?;
        if in_round && !has_user {
            let text = wrapup_text(&done.goal.objective, reason.filter(|_| blocked));
            self.goals.live.lock_or_recover().wrapup =
                Some(plugin_message(GOAL_PLUGIN, "notice", text));
        }
        Ok(())
    }
}

impl Tool for GoalTool {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        match self.name {
            GET_GOAL => {
                "Read the session's goal: its goal_id and revision, objective, phase, rounds \
                 started and the round limit, the blocker when there is one, and whether it \
                 continues automatically. Call it before update_goal."
            }
            CREATE_GOAL => {
                "Create the session's goal when the user's own message in this turn asks for a \
                 long-running objective that should go on across automatic rounds. Not for \
                 routine one-turn work. Refused without the user's message in this turn."
            }
            _ => {
                "Update the current goal revision (goal_id and revision from get_goal). edit, \
                 pause and resume need the user's message in this turn; complete and blocked \
                 are also allowed in an automatic round of the goal. blocked is refused before \
                 3 rounds; say what blocks in blocked_reason."
            }
        }
    }

    fn parameters(&self) -> Value {
        match self.name {
            GET_GOAL => json!({"type": "object", "properties": {}, "additionalProperties": false}),
            CREATE_GOAL => json!({
                "type": "object",
                "properties": {
                    "objective": {"type": "string", "description": "The concrete objective the user asked for."},
                    "max_goal_rounds": {"type": "number", "description": "Optional positive limit on automatic continuation rounds."}
                },
                "required": ["objective"],
                "additionalProperties": false
            }),
            _ => json!({
                "type": "object",
                "properties": {
                    "goal_id": {"type": "string", "description": "The id get_goal returned."},
                    "revision": {"type": "number", "description": "The revision get_goal returned."},
                    "action": {"type": "string", "enum": ["edit", "pause", "resume", "complete", "blocked"], "description": "edit | pause | resume | complete | blocked"},
                    "objective": {"type": "string", "description": "New objective; only with action edit."},
                    "max_goal_rounds": {"type": "number", "description": "New round limit; only with action edit."},
                    "blocked_reason": {"type": "string", "description": "The blocking condition; only, and required, with action blocked."}
                },
                "required": ["goal_id", "revision", "action"],
                "additionalProperties": false
            }),
        }
    }

    fn present(&self, args: &Value) -> dsh_tools::ToolPresentation {
        let subject = match self.name {
            GET_GOAL => "goal".to_string(),
            CREATE_GOAL => text_arg(args, "objective").unwrap_or("goal").to_string(),
            _ => text_arg(args, "action").unwrap_or("goal").to_string(),
        };
        dsh_tools::ToolPresentation::new(self.name).subject(subject)
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move { self.run(&args) })
    }
}

#[cfg(test)]
mod tests;
