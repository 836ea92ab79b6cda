//! Rewind (docs/rewind.md): workspace checkpoints at every turn, and going back to the start of
//! an earlier turn, restoring the conversation (a fork before that turn), the files, or both.
//!
//! [`Checkpoints`] is the extension that takes a checkpoint (`dsh_tools::CheckpointStore`) when
//! a turn of the session the user talks to begins and when it ends, and logs each as
//! `workspace/checkpoint`. The rest reads those events back: [`rewind_points`] lists the turns
//! one can go back to, [`plan_files`] checks that nothing changed the files outside dsh since
//! that turn (a checkpoint at a turn's end that differs from the next one's start, or from the
//! files now) and plans the restore, which `dsh_tools::CheckpointStore::restore` carries out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dsh_agent::{Extension, TurnBoundary};
use dsh_session::{Envelope, Event, WORKSPACE_CHECKPOINT_EVENT};
use dsh_tools::{CheckpointLimits, CheckpointStore, GatePolicy, RestorePlan};
use futures::future::BoxFuture;
use serde_json::{json, Value};

/// The store of `workspace`'s checkpoints under dsh's `home`, with `[rewind]`'s limits.
pub fn checkpoint_store(
    home: &Path,
    workspace: &Path,
    settings: &dsh_config::RewindSettings,
) -> CheckpointStore {
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let gate = GatePolicy::new(&workspace).with_dsh_home(home);
    CheckpointStore::new(
        home,
        &workspace,
        gate,
        CheckpointLimits {
            max_file_bytes: settings.max_file_bytes,
            max_files: settings.max_files,
        },
    )
}

/// The checkpoint store sessions of `setup` use, when `[rewind]` is on there; never one of `/`
/// or of a folder holding dsh's home.
pub(crate) fn configured_store(setup: &crate::Configuration) -> Option<CheckpointStore> {
    let settings = setup.config.rewind;
    (settings.enabled && crate::unsafe_root(&setup.cwd, &setup.home).is_none())
        .then(|| checkpoint_store(&setup.home, &setup.cwd, &settings))
}

/// Takes a checkpoint of the workspace when a turn begins and when it ends (docs/rewind.md).
/// After a checkpoint failed because the workspace is too large, the session stops trying.
pub(crate) struct Checkpoints {
    store: Arc<CheckpointStore>,
    given_up: Arc<AtomicBool>,
}

impl Checkpoints {
    pub(crate) fn new(store: CheckpointStore) -> Self {
        Checkpoints {
            store: Arc::new(store),
            given_up: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Extension for Checkpoints {
    fn name(&self) -> &str {
        "checkpoints"
    }

    fn turn_boundary(&self, boundary: TurnBoundary) -> Option<BoxFuture<'static, Vec<Event>>> {
        if self.given_up.load(Ordering::SeqCst) {
            return None;
        }
        let (turn, at) = match boundary {
            TurnBoundary::Start(turn) => (turn, "start"),
            TurnBoundary::End(turn) => (turn, "end"),
        };
        let store = Arc::clone(&self.store);
        let given_up = Arc::clone(&self.given_up);
        Some(Box::pin(async move {
            let taken = tokio::task::spawn_blocking(move || store.take()).await;
            let data = match taken {
                Ok(Ok(checkpoint)) => json!({
                    "turn": turn,
                    "at": at,
                    "tree": checkpoint.tree,
                    "files": checkpoint.files,
                    "large": checkpoint.large,
                }),
                Ok(Err(err)) => {
                    if matches!(err, dsh_tools::CheckpointError::TooManyFiles { .. }) {
                        given_up.store(true, Ordering::SeqCst);
                    }
                    json!({"turn": turn, "at": at, "error": err.to_string()})
                }
                Err(err) => json!({"turn": turn, "at": at, "error": err.to_string()}),
            };
            vec![checkpoint_event(data)]
        }))
    }
}

fn checkpoint_event(data: Value) -> Event {
    Event::Opaque {
        event_type: WORKSPACE_CHECKPOINT_EVENT.to_string(),
        data,
    }
}

/// The event a rewind logs after restoring the files to checkpoint `tree` (the files' state
/// from then on; the next turn's start is compared with it).
pub fn restored_event(tree: &str) -> Event {
    checkpoint_event(json!({"at": "rewind", "tree": tree}))
}

/// Where a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Start,
    End,
    Rewind,
}

/// A `workspace/checkpoint` event read back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    turn: Option<u64>,
    at: At,
    /// `Err`: why no checkpoint was taken.
    tree: Result<String, String>,
}

fn records(events: &[Envelope]) -> Vec<(usize, Record)> {
    let mut out = Vec::new();
    for (index, envelope) in events.iter().enumerate() {
        let Event::Opaque { event_type, data } = &envelope.event else {
            continue;
        };
        if event_type != WORKSPACE_CHECKPOINT_EVENT {
            continue;
        }
        let at = match data.get("at").and_then(Value::as_str) {
            Some("start") => At::Start,
            Some("end") => At::End,
            Some("rewind") => At::Rewind,
            _ => continue,
        };
        let tree = match (data.get("tree").and_then(Value::as_str), data.get("error")) {
            (Some(tree), _) => Ok(tree.to_string()),
            (None, Some(error)) => Err(error.as_str().unwrap_or("unknown").to_string()),
            (None, None) => Err("no checkpoint was recorded".to_string()),
        };
        out.push((
            index,
            Record {
                turn: data.get("turn").and_then(Value::as_u64),
                at,
                tree,
            },
        ));
    }
    out
}

/// A turn one can rewind to: the state just before its first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindPoint {
    /// The turn number.
    pub turn: u64,
    /// The first message the user sent in it (empty when the turn had none, e.g. a goal round).
    pub message: String,
    /// The checkpoint of the files at its start, or why there is none.
    pub files: Result<String, String>,
}

/// The turns of `events` one can rewind to, oldest first (the last of each number: a fork
/// that continued from a seed repeats none).
pub fn rewind_points(events: &[Envelope]) -> Vec<RewindPoint> {
    let mut points: Vec<RewindPoint> = Vec::new();
    let mut open: Option<usize> = None;
    for envelope in events {
        match &envelope.event {
            Event::TurnStart(start) => {
                points.retain(|p| p.turn != start.turn);
                points.push(RewindPoint {
                    turn: start.turn,
                    message: String::new(),
                    files: Err("dsh took no checkpoint of the files at its start (rewind was off, or the session is older)".into()),
                });
                open = Some(points.len() - 1);
            }
            Event::TurnEnd(_) => open = None,
            Event::UserMessage(message) => {
                if let Some(point) = open.and_then(|i| points.get_mut(i)) {
                    if point.message.is_empty() {
                        point.message = message.text();
                    }
                }
            }
            _ => {}
        }
    }
    for (_, record) in records(events) {
        if record.at != At::Start {
            continue;
        }
        if let Some(point) = points.iter_mut().find(|p| Some(p.turn) == record.turn) {
            point.files = record
                .tree
                .map_err(|why| format!("its checkpoint failed: {why}"));
        }
    }
    points
}

impl RewindPoint {
    /// The first line of the turn's message that is not blank, cut to `width` characters
    /// (`…` when cut) and printable; empty when the turn had no message.
    pub fn first_line(&self, width: usize) -> String {
        let line = self
            .message
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let mut shown: String = line.chars().take(width).collect();
        if line.chars().count() > width {
            shown.push('…');
        }
        dsh_tools::printable(&shown).into_owned()
    }
}

/// What a rewind restores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindMode {
    /// Files and conversation.
    Both,
    /// The conversation only (a fork before the turn).
    Conversation,
    /// The files only; the session goes on.
    Files,
}

impl RewindMode {
    /// Whether the files are restored.
    pub fn files(self) -> bool {
        matches!(self, RewindMode::Both | RewindMode::Files)
    }

    /// Whether the conversation is restored.
    pub fn conversation(self) -> bool {
        matches!(self, RewindMode::Both | RewindMode::Conversation)
    }
}

/// The files of a rewind, restored ([`restore_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesRestored {
    /// The turn whose start they are as at.
    pub turn: u64,
    /// The checkpoint now in force (for [`restored_event`]).
    pub tree: String,
    /// Files left as they are (the store does not hold them), and files that could not be
    /// restored, each with why.
    pub kept: Vec<(PathBuf, String)>,
    /// What the restore did.
    pub report: dsh_tools::RestoreReport,
}

impl FilesRestored {
    /// What was done, one line each, paths printable; `workspace` is named when given.
    pub fn lines(&self, workspace: Option<&Path>) -> Vec<String> {
        let shown = |path: &Path| dsh_tools::printable(&path.display().to_string()).into_owned();
        let of = workspace.map_or(String::new(), |w| format!(" of {}", w.display()));
        let mut lines = vec![format!(
            "files{of} as at the start of turn {}: {} written, {} deleted",
            self.turn,
            self.report.written.len(),
            self.report.deleted.len()
        )];
        for (path, why) in &self.kept {
            lines.push(format!("  left as it is: {}: {why}", shown(path)));
        }
        for (path, why) in &self.report.failed {
            lines.push(format!("  not restored: {}: {why}", shown(path)));
        }
        lines
    }
}

/// Puts the files of `store`'s workspace back as they were when turn `turn` of `events`
/// began ([`plan_files`], then the restore).
pub fn restore_files(
    store: &CheckpointStore,
    events: &[Envelope],
    turn: u64,
    force: bool,
) -> Result<FilesRestored, RewindError> {
    let plan = plan_files(store, events, turn, force)?;
    let report = store.restore(&plan)?;
    Ok(FilesRestored {
        turn,
        tree: plan.target,
        kept: plan.kept,
        report,
    })
}

/// Records in session `id` of `store` that its files were restored to checkpoint `tree`
/// ([`restored_event`]); fails while another dsh holds the session's lock.
pub fn record_restore(
    store: &dyn dsh_session::SessionStore,
    id: &str,
    tree: &str,
) -> Result<(), dsh_session::SessionError> {
    let mut resumed = store.resume(id)?;
    resumed.writer.append(restored_event(tree))?;
    resumed.writer.flush()
}

/// Why the files cannot be rewound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewindError {
    /// No such turn, or no checkpoint at its start.
    #[error("cannot rewind the files to turn {turn}: {why}")]
    NoCheckpoint {
        /// The turn asked for.
        turn: u64,
        /// Why.
        why: String,
    },
    /// Files changed outside dsh since then (a forced rewind overwrites those changes).
    #[error("{0}")]
    ChangedOutside(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] dsh_tools::CheckpointError),
}

/// Plans putting the files back as they were when turn `turn` of `events` began: checks that
/// no file changed outside dsh since then (unless `force`), then takes a checkpoint of the
/// files now and diffs it with that one. Between a checkpoint at a turn's end (or after a
/// rewind) and the next turn's start, and between the last one and now, the files must be
/// the same; a gap with no checkpoint to compare counts as a change.
pub fn plan_files(
    store: &CheckpointStore,
    events: &[Envelope],
    turn: u64,
    force: bool,
) -> Result<RestorePlan, RewindError> {
    let all = records(events);
    let start = all
        .iter()
        .rposition(|(_, r)| r.at == At::Start && r.turn == Some(turn))
        .ok_or_else(|| RewindError::NoCheckpoint {
            turn,
            why: match rewind_points(events).iter().find(|p| p.turn == turn) {
                Some(point) => point.files.clone().err().unwrap_or_default(),
                None => "the session has no such turn".into(),
            },
        })?;
    let target = all[start]
        .1
        .tree
        .clone()
        .map_err(|why| RewindError::NoCheckpoint {
            turn,
            why: format!("its checkpoint failed: {why}"),
        })?;
    if !store.holds(&target) {
        return Err(RewindError::NoCheckpoint {
            turn,
            why: format!(
                "its checkpoint is no longer in {} (deleted or damaged)",
                store.dir().display()
            ),
        });
    }
    let plan = store.plan_restore(&target)?;
    if !force {
        check_gaps(store, &all[start..], &plan.before.tree)?;
    }
    Ok(plan)
}

/// Fails with the files that changed outside dsh in `records` (from the target's start on) or
/// between the last of them and `now`.
fn check_gaps(
    store: &CheckpointStore,
    records: &[(usize, Record)],
    now: &str,
) -> Result<(), RewindError> {
    let refuse = |when: String, paths: Vec<PathBuf>| {
        let mut shown: Vec<String> = paths
            .iter()
            .take(10)
            .map(|p| dsh_tools::printable(&p.display().to_string()).into_owned())
            .collect();
        if paths.len() > 10 {
            shown.push(format!("and {} more", paths.len() - 10));
        }
        let listed = if shown.is_empty() {
            String::new()
        } else {
            format!(": {}", shown.join(", "))
        };
        RewindError::ChangedOutside(format!(
            "files changed outside dsh {when}{listed}; rewinding would overwrite those changes. Commit or move them first, or force the rewind (--force, or confirm in /rewind) to overwrite them"
        ))
    };
    for pair in records.windows(2) {
        let (before, after) = (&pair[0].1, &pair[1].1);
        if after.at != At::Start {
            continue;
        }
        let when = format!(
            "before turn {}",
            after.turn.map_or("?".into(), |t| t.to_string())
        );
        match (&before.at, &before.tree, &after.tree) {
            (At::End | At::Rewind, Ok(a), Ok(b)) if a == b => {}
            (At::End | At::Rewind, Ok(a), Ok(b)) => {
                return Err(refuse(when, store.changed_between(a, b)?));
            }
            _ => {
                return Err(refuse(
                    format!("{when} (or dsh could not tell: a checkpoint is missing)"),
                    Vec::new(),
                ))
            }
        }
    }
    match records.last().map(|(_, r)| r) {
        Some(last) if matches!(last.at, At::End | At::Rewind) => match &last.tree {
            Ok(tree) if tree == now => Ok(()),
            Ok(tree) => Err(refuse(
                "since the session's last turn".into(),
                store.changed_between(tree, now)?,
            )),
            Err(_) => Err(refuse(
                "since the session's last turn (or dsh could not tell: its checkpoint failed)"
                    .into(),
                Vec::new(),
            )),
        },
        _ => Err(refuse(
            "since the session's last turn (or dsh could not tell: that turn never ended)".into(),
            Vec::new(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::TurnStart;

    fn checkpoint(turn: u64, at: &str, tree: &str) -> Envelope {
        Envelope::new(checkpoint_event(
            json!({"turn": turn, "at": at, "tree": tree}),
        ))
    }

    #[test]
    fn rewind_points_name_each_turns_first_message_and_checkpoint() {
        let events = vec![
            Envelope::new(Event::TurnStart(TurnStart { turn: 1 })),
            Envelope::new(Event::UserMessage(dsh_llm::Message::user_text(
                "m1",
                "first task",
            ))),
            checkpoint(1, "start", "aa"),
            Envelope::new(Event::TurnStart(TurnStart { turn: 2 })),
            Envelope::new(checkpoint_event(
                json!({"turn": 2, "at": "start", "error": "too many"}),
            )),
        ];
        let points = rewind_points(&events);
        assert_eq!(points.len(), 2);
        assert_eq!(points[0].message, "first task");
        assert_eq!(points[0].files, Ok("aa".into()));
        assert!(points[1].files.as_ref().unwrap_err().contains("too many"));
    }
}
