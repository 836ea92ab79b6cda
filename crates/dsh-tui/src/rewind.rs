//! `/rewind` (docs/rewind.md, docs/tui.md "Rewind"): a list of the session's turns, newest
//! first; Enter on one offers what to restore (files and conversation, the conversation only,
//! the files only). The files come back from the workspace checkpoints
//! (`dsh_runtime::rewind`); the conversation continues in a new session forked just before that
//! turn, with the turn's message in the composer to edit and send again. When files changed
//! outside dsh since then, the list asks before it overwrites them.

use crossterm::event::{KeyCode, KeyEvent};
use dsh_agent::AgentHandle;
use dsh_runtime::rewind::RewindMode;
use dsh_runtime::rewind::{
    record_restore, restore_files, restored_event, rewind_points, RewindError, RewindPoint,
};
use dsh_session::SessionStore;
use dsh_tools::CheckpointStore;

/// What each mode is called in the list.
fn label(mode: RewindMode) -> &'static str {
    match mode {
        RewindMode::Both => "files and conversation",
        RewindMode::Conversation => "conversation only (files stay as they are)",
        RewindMode::Files => "files only (the conversation goes on)",
    }
}

/// Where the `/rewind` list is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewindStage {
    /// Choosing the turn.
    Turn,
    /// Choosing what to restore for the chosen turn.
    Mode(usize),
    /// Files changed outside dsh: y overwrites them, n keeps them.
    Force(RewindMode, String),
}

/// The `/rewind` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindMenu {
    /// The turns, newest first.
    pub points: Vec<RewindPoint>,
    /// The highlighted turn.
    pub selected: usize,
    /// What is being chosen.
    pub stage: RewindStage,
}

/// What a key did to the `/rewind` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MenuKey {
    /// The list stays open.
    Stay,
    /// The list closes; nothing happens.
    Close,
    /// The list closes and the session rewinds.
    Rewind(RewindChoice),
}

/// What the user chose: rewind to `turn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindChoice {
    /// The turn.
    pub turn: u64,
    /// What to restore.
    pub mode: RewindMode,
    /// Overwrite changes made outside dsh.
    pub force: bool,
}

impl RewindMenu {
    /// The question whether to overwrite files changed outside dsh (`message`) for a rewind
    /// to `point`.
    pub fn force(point: RewindPoint, mode: RewindMode, message: String) -> Self {
        RewindMenu {
            points: vec![point],
            selected: 0,
            stage: RewindStage::Force(mode, message),
        }
    }

    /// The list of `points` (oldest first, as [`rewind_points`] gives them).
    pub fn new(mut points: Vec<RewindPoint>) -> Self {
        points.reverse();
        RewindMenu {
            points,
            selected: 0,
            stage: RewindStage::Turn,
        }
    }

    fn point(&self) -> Option<&RewindPoint> {
        self.points.get(self.selected)
    }

    /// The modes offered for the highlighted turn: files only where it has a checkpoint.
    pub fn modes(&self) -> Vec<RewindMode> {
        match self.point() {
            Some(point) if point.files.is_ok() => vec![
                RewindMode::Both,
                RewindMode::Conversation,
                RewindMode::Files,
            ],
            Some(_) => vec![RewindMode::Conversation],
            None => Vec::new(),
        }
    }

    /// Applies a key.
    pub fn on_key(&mut self, key: KeyEvent) -> MenuKey {
        let turn = self.point().map(|p| p.turn);
        let modes = self.modes();
        let choose = |mode: Option<RewindMode>, force: bool| {
            turn.zip(mode).map_or(MenuKey::Close, |(turn, mode)| {
                MenuKey::Rewind(RewindChoice { turn, mode, force })
            })
        };
        match (&mut self.stage, key.code) {
            (RewindStage::Force(mode, _), KeyCode::Char('y' | 'Y')) => {
                return choose(Some(*mode), true)
            }
            (RewindStage::Force(..), KeyCode::Char('n' | 'N') | KeyCode::Esc)
            | (RewindStage::Turn, KeyCode::Esc) => return MenuKey::Close,
            (RewindStage::Mode(_), KeyCode::Esc) => self.stage = RewindStage::Turn,
            (RewindStage::Turn, KeyCode::Up) => self.selected = self.selected.saturating_sub(1),
            (RewindStage::Turn, KeyCode::Down) => {
                self.selected = (self.selected + 1).min(self.points.len().saturating_sub(1));
            }
            (RewindStage::Turn, KeyCode::Enter) if turn.is_some() => {
                self.stage = RewindStage::Mode(0)
            }
            (RewindStage::Mode(at), KeyCode::Up) => *at = at.saturating_sub(1),
            (RewindStage::Mode(at), KeyCode::Down) => {
                *at = (*at + 1).min(modes.len().saturating_sub(1))
            }
            (RewindStage::Mode(at), KeyCode::Enter) => {
                return choose(modes.get(*at).copied(), false)
            }
            _ => {}
        }
        MenuKey::Stay
    }

    /// The title and rows to draw, with the highlighted row's index.
    pub fn lines(&self) -> (String, Vec<String>, Option<usize>) {
        match &self.stage {
            RewindStage::Turn => (
                " rewind to the start of a turn · Enter chooses · Esc closes ".into(),
                self.points
                    .iter()
                    .map(|p| {
                        let files = if p.files.is_ok() {
                            ""
                        } else {
                            " (no file checkpoint)"
                        };
                        let message = Some(p.first_line(70))
                            .filter(|line| !line.is_empty())
                            .unwrap_or_else(|| "(no message)".into());
                        format!("turn {:>3}  {message}{files}", p.turn)
                    })
                    .collect(),
                Some(self.selected),
            ),
            RewindStage::Mode(at) => (
                format!(
                    " rewind to turn {}: restore what? · Esc goes back ",
                    self.point().map_or(0, |p| p.turn)
                ),
                self.modes().iter().map(|m| label(*m).to_string()).collect(),
                Some(*at),
            ),
            RewindStage::Force(_, message) => (
                " files changed outside dsh · y overwrites them · n keeps them ".into(),
                message.lines().map(str::to_string).collect(),
                None,
            ),
        }
    }
}

/// The list for the session logged at `location`.
pub fn menu(location: &str) -> anyhow::Result<RewindMenu> {
    let events = dsh_session::load_location(location)?.events;
    let points = rewind_points(&events);
    anyhow::ensure!(
        !points.is_empty(),
        "this session has no turn to go back to yet"
    );
    Ok(RewindMenu::new(points))
}

/// What a rewind did, for the UI.
pub enum Rewound {
    /// Done: a notice, and the fork to open with the turn's message as the draft.
    Done {
        /// What was restored.
        notice: String,
        /// The new session, for a conversation rewind, and the draft to put in the composer.
        fork: Option<(String, String)>,
    },
    /// Files changed outside dsh: ask before overwriting them (the turn, the mode chosen and
    /// what changed).
    NeedsForce(RewindPoint, RewindMode, String),
}

/// Carries out `choice` for the live session `handle` (whose store is `store`): the files
/// through `checkpoints`, the conversation as a fork before the turn. Runs on a blocking
/// thread.
pub fn rewind(
    handle: &AgentHandle,
    store: &dyn SessionStore,
    checkpoints: Option<CheckpointStore>,
    choice: &RewindChoice,
) -> anyhow::Result<Rewound> {
    let location = handle.location();
    let events = dsh_session::load_location(&location)?.events;
    let point = rewind_points(&events)
        .into_iter()
        .find(|p| p.turn == choice.turn)
        .ok_or_else(|| anyhow::anyhow!("the session has no turn {}", choice.turn))?;
    let mut notice = Vec::new();
    let mut restored = None;
    if choice.mode.files() {
        let checkpoints = checkpoints
            .ok_or_else(|| anyhow::anyhow!("rewind of files is off here ([rewind] enabled)"))?;
        let files = match restore_files(&checkpoints, &events, choice.turn, choice.force) {
            Err(RewindError::ChangedOutside(message)) => {
                return Ok(Rewound::NeedsForce(point, choice.mode, message))
            }
            other => other?,
        };
        notice.extend(files.lines(None));
        restored = Some(files.tree);
    }
    if !choice.mode.conversation() {
        if let Some(tree) = &restored {
            handle.log_event(restored_event(tree))?;
        }
        return Ok(Rewound::Done {
            notice: notice.join("\n"),
            fork: None,
        });
    }
    let forked = dsh_session::fork_location_before(&location, choice.turn)?;
    if let Some(tree) = &restored {
        record_restore(store, &forked.header.id, tree)?;
    }
    notice.push(format!(
        "the conversation as before turn {}, in a new session (the old one is unchanged); turn {}'s message is in the composer",
        choice.turn, choice.turn
    ));
    Ok(Rewound::Done {
        notice: notice.join("\n"),
        fork: Some((forked.header.id, point.message)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyModifiers;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn point(turn: u64, files: bool) -> RewindPoint {
        RewindPoint {
            turn,
            message: format!("message {turn}"),
            files: if files {
                Ok("t".into())
            } else {
                Err("none".into())
            },
        }
    }

    #[test]
    fn the_list_chooses_a_turn_then_what_to_restore() {
        let mut menu = RewindMenu::new(vec![point(1, true), point(2, false)]);
        // Newest first; a turn without a checkpoint offers the conversation only.
        assert_eq!(
            menu.lines().1[0],
            "turn   2  message 2 (no file checkpoint)"
        );
        assert_eq!(menu.on_key(key(KeyCode::Enter)), MenuKey::Stay);
        assert_eq!(menu.modes(), vec![RewindMode::Conversation]);
        assert_eq!(menu.on_key(key(KeyCode::Esc)), MenuKey::Stay);
        assert_eq!(menu.stage, RewindStage::Turn);
        menu.on_key(key(KeyCode::Down));
        menu.on_key(key(KeyCode::Enter));
        menu.on_key(key(KeyCode::Down));
        menu.on_key(key(KeyCode::Down));
        menu.on_key(key(KeyCode::Down));
        assert_eq!(
            menu.on_key(key(KeyCode::Enter)),
            MenuKey::Rewind(RewindChoice {
                turn: 1,
                mode: RewindMode::Files,
                force: false
            })
        );
        let mut asked = RewindMenu::force(point(1, true), RewindMode::Both, "x".into());
        assert_eq!(asked.on_key(key(KeyCode::Enter)), MenuKey::Stay);
        assert_eq!(asked.on_key(key(KeyCode::Char('n'))), MenuKey::Close);
        assert_eq!(
            asked.on_key(key(KeyCode::Char('y'))),
            MenuKey::Rewind(RewindChoice {
                turn: 1,
                mode: RewindMode::Both,
                force: true
            })
        );
    }
}
