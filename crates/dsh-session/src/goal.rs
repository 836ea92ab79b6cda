//! `goal/change`: the durable state of a session's goal (docs/goals.md), in dsh's shape. Every
//! mutation logs the whole goal after it (`operation` says which mutation), or a tombstone when
//! the goal is cleared; the last `goal/change` of a log is the session's goal.

use serde::{Deserialize, Serialize};

/// The event type.
pub const GOAL_CHANGE_EVENT: &str = "goal/change";

/// The version of the payload dsh and this build write.
pub const GOAL_CHANGE_VERSION: u32 = 1;

/// Where a goal stands (dsh's `GoalPhase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GoalPhase {
    /// Work goes on; continuation rounds may run.
    Active,
    /// Stopped by the user (or by a cancelled round) until resumed.
    Paused,
    /// Stopped by a problem: the model reported one, or the rounds ran out.
    Blocked,
    /// Achieved.
    Complete,
}

impl GoalPhase {
    /// dsh's spelling (`active`, `paused`, `blocked`, `complete`).
    pub fn as_str(self) -> &'static str {
        match self {
            GoalPhase::Active => "active",
            GoalPhase::Paused => "paused",
            GoalPhase::Blocked => "blocked",
            GoalPhase::Complete => "complete",
        }
    }
}

/// Why a goal is blocked: a stable lower-kebab-case `code` and words for people and models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalBlockReason {
    /// `model-reported`, `round-limit`, ...
    pub code: String,
    /// The explanation.
    pub message: String,
}

/// A goal as one revision of it stands (dsh's `GoalSnapshot`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalSnapshot {
    /// Stable id of the goal.
    pub id: String,
    /// Positive; every mutation adds one.
    pub revision: u64,
    /// What is to be achieved.
    pub objective: String,
    /// Where it stands.
    pub phase: GoalPhase,
    /// Present exactly while the phase is `blocked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<GoalBlockReason>,
    /// Most continuation rounds the goal may start.
    pub max_goal_rounds: u64,
}

/// The mutation a `goal/change` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GoalOperation {
    /// A new goal.
    Create,
    /// Objective or round cap replaced.
    Edit,
    /// Active to paused.
    Pause,
    /// Paused, blocked (or active after a resume of the session) to active.
    Resume,
    /// Marked achieved.
    Complete,
    /// Marked blocked.
    Block,
    /// The goal was removed (a tombstone).
    Clear,
}

/// The identity of one goal revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalRef {
    /// The goal's id.
    pub id: String,
    /// The revision.
    pub revision: u64,
}

/// `goal/change` data: `{kind, version, operation, goal, roundsStarted, createdAt, updatedAt}`,
/// or for a clear `{kind, version, operation: "clear", cleared: {id, revision}, clearedAt}`.
/// Times are epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalChange {
    /// Always `goal/change`.
    pub kind: String,
    /// [`GOAL_CHANGE_VERSION`].
    pub version: u32,
    /// Which mutation.
    pub operation: GoalOperation,
    /// The goal after the mutation (not for a clear).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalSnapshot>,
    /// Rounds started so far (not for a clear).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds_started: Option<u64>,
    /// When the goal was created (not for a clear).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    /// When it last changed (not for a clear).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<u64>,
    /// The revision a clear removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared: Option<GoalRef>,
    /// When it was cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared_at: Option<u64>,
}

impl GoalChange {
    /// A change that leaves `goal` standing, with its counters.
    pub fn snapshot(
        operation: GoalOperation,
        goal: GoalSnapshot,
        rounds_started: u64,
        created_at: u64,
        updated_at: u64,
    ) -> Self {
        GoalChange {
            kind: GOAL_CHANGE_EVENT.to_string(),
            version: GOAL_CHANGE_VERSION,
            operation,
            goal: Some(goal),
            rounds_started: Some(rounds_started),
            created_at: Some(created_at),
            updated_at: Some(updated_at),
            cleared: None,
            cleared_at: None,
        }
    }

    /// The tombstone of a cleared goal.
    pub fn clear(cleared: GoalRef, cleared_at: u64) -> Self {
        GoalChange {
            kind: GOAL_CHANGE_EVENT.to_string(),
            version: GOAL_CHANGE_VERSION,
            operation: GoalOperation::Clear,
            goal: None,
            rounds_started: None,
            created_at: None,
            updated_at: None,
            cleared: Some(cleared),
            cleared_at: Some(cleared_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dshs_lines_round_trip_byte_for_byte() {
        for line in [
            r#"{"kind":"goal/change","version":1,"operation":"create","goal":{"id":"goal-1","revision":1,"objective":"Ship it","phase":"active","maxGoalRounds":2},"roundsStarted":0,"createdAt":0,"updatedAt":0}"#,
            r#"{"kind":"goal/change","version":1,"operation":"block","goal":{"id":"goal-1","revision":2,"objective":"Ship it","phase":"blocked","blockedReason":{"code":"round-limit","message":"no"},"maxGoalRounds":2},"roundsStarted":2,"createdAt":0,"updatedAt":5}"#,
            r#"{"kind":"goal/change","version":1,"operation":"clear","cleared":{"id":"goal-1","revision":3},"clearedAt":9}"#,
        ] {
            let change: GoalChange = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&change).unwrap(), line);
        }
    }
}
