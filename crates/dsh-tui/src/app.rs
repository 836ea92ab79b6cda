//! The UI state and what keys do to it. Keys never talk to the agent directly: they change
//! the state and return [`Action`]s that the runtime carries out, so this file is testable
//! without a terminal or a model.

use std::collections::VecDeque;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use dsh_agent::{ApprovalChoice, ApprovalDecision, ApprovalRequest, UserCommand};
use dsh_protocol::Reply;
use dsh_session::{PriceTable, SessionSummary};
use dsh_tools::PermissionPreset;

use crate::commands::{completions, parse, SlashCommand, PERMISSION_PRESETS};
use crate::composer::Composer;
use crate::question::QuestionForm;
use crate::transcript::Transcript;

/// The hint shown from a cancel until the turn has ended (the runtime then clears it).
pub const CANCELLING: &str = "cancelling the turn…";

/// What the runtime must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Queue text for the next turn (starts one when idle).
    Send(String),
    /// Queue text for the next step of the running turn.
    Steer(String),
    /// Cancel the running turn.
    Cancel,
    /// Run a slash command.
    Command(SlashCommand),
    /// Continue the session with this id (picked in `/resume`).
    OpenSession(String),
    /// Switch the permission preset, confirmed (danger-full-access asks before this).
    SetPermission(PermissionPreset),
    /// Append a confirmed `# note` to an instructions file (`dsh_protocol::Op::Remember`).
    Remember(dsh_agent::NoteScope, String),
    /// The user started writing a message while no turn runs: open the provider connection
    /// now, so the call finds it ready (docs/tui.md, "Connection warm-up").
    WarmConnection,
    /// Answer approval question `id` (`dsh_protocol::Op::Approve`).
    Approve {
        /// The question.
        id: String,
        /// The user's answer.
        decision: ApprovalDecision,
    },
    /// Answer the questions of tool call `call_id` (`dsh_protocol::Op::Answer`).
    Answer {
        /// The waiting call.
        call_id: String,
        /// The user's answers, or a dismissal.
        reply: Reply,
    },
    /// Rewind the session (chosen in `/rewind`, docs/rewind.md).
    Rewind(crate::rewind::RewindChoice),
    /// Leave.
    Quit,
}

/// The fixed facts the status line shows next to the live figures.
#[derive(Debug, Clone, Default)]
pub struct StatusInfo {
    /// Model asked for (until a request header says otherwise).
    pub model: String,
    /// Effort asked for.
    pub effort: Option<String>,
    /// Permission preset name (the runtime keeps it in step with the agent).
    pub permission: String,
    /// Context window of the model, in tokens.
    pub context_window: u64,
    /// Prices for the cost figure.
    pub prices: PriceTable,
}

/// A tool call waiting for the user's answer (the session's `dsh_protocol::Interactions`
/// holds it until [`Action::Approve`] answers it).
pub struct PendingApproval {
    /// The question.
    pub request: ApprovalRequest,
    /// What the call would change, as its tool previews it (a diff for `write` and `edit`).
    pub preview: Option<dsh_tools::ChangePreview>,
    /// Rows of the arguments scrolled past (Up/Down/PgUp/PgDn; the view clamps it).
    pub scroll: usize,
}

impl PendingApproval {
    /// The question `request`, with its call's preview from the tools every session has.
    pub fn new(request: ApprovalRequest) -> Self {
        let preview =
            dsh_agent::Presenter::standard_tools().preview(&request.tool_name, &request.arguments);
        PendingApproval {
            request,
            preview,
            scroll: 0,
        }
    }
}

/// Questions from `ask_user_question` (or a plan review) waiting for the user's answers (the
/// session's `dsh_protocol::Interactions` holds them until [`Action::Answer`] answers them).
pub struct PendingQuestion {
    /// The questions and the user's answers so far.
    pub form: QuestionForm,
}

/// The `/permission` list: the presets, the one in force marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermissionMenu {
    /// The preset in force.
    pub current: PermissionPreset,
    /// The highlighted row of [`PERMISSION_PRESETS`].
    pub selected: usize,
}

impl PermissionMenu {
    /// The list with the preset in force highlighted.
    pub fn new(current: PermissionPreset) -> Self {
        let selected = PERMISSION_PRESETS
            .iter()
            .position(|(preset, _)| *preset == current)
            .unwrap_or(0);
        PermissionMenu { current, selected }
    }
}

/// A list to choose a session from (`/resume`).
#[derive(Debug, Clone, Default)]
pub struct Picker {
    /// Sessions, most recent first.
    pub sessions: Vec<SessionSummary>,
    /// The highlighted row.
    pub selected: usize,
}

/// What a first Ctrl-C armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    /// A second Ctrl-C clears the draft.
    ClearDraft,
    /// A second Ctrl-C quits.
    Quit,
}

/// Everything on screen.
pub struct App {
    /// The conversation.
    pub transcript: Transcript,
    /// The draft.
    pub composer: Composer,
    /// Queued input: `(is_steering, text)`, in the order it will be used.
    pub queue: Vec<(bool, String)>,
    /// Status line facts.
    pub status: StatusInfo,
    /// The session id, once a session is open.
    pub session_id: Option<String>,
    /// What `tui.status_command` printed last, shown in place of the status line's figures
    /// (docs/tui.md, "Status line").
    pub status_text: Option<String>,
    /// Questions from the approver, first one shown.
    pub approvals: VecDeque<PendingApproval>,
    /// Questions from `ask_user_question`, first one shown (after any approval).
    pub questions: VecDeque<PendingQuestion>,
    /// The `/permission` list, when open.
    pub permission_menu: Option<PermissionMenu>,
    /// A switch to this preset waits for y/n (danger-full-access removes the sandbox).
    pub confirm_permission: Option<PermissionPreset>,
    /// A `# note` (project) or `## note` (user) waiting for y/n before it is written into an
    /// instructions file (docs/tui.md, "Notes to the instructions").
    pub confirm_note: Option<(dsh_agent::NoteScope, String)>,
    /// Slash commands of the session's extensions (user-invocable skills).
    pub user_commands: Vec<UserCommand>,
    /// The `/resume` picker, when open.
    pub picker: Option<Picker>,
    /// The `/rewind` list, when open.
    pub rewind_menu: Option<crate::rewind::RewindMenu>,
    /// Show reasoning in full.
    pub expand_reasoning: bool,
    /// The inline mode (docs/tui.md, "Modes"): the conversation's finished cells are in the
    /// terminal's scrollback, out of the UI's reach (Ctrl-T opens a view of them instead, and
    /// PgUp/PgDn have no conversation to scroll).
    pub inline: bool,
    /// Lines scrolled up from the bottom of the conversation.
    pub scroll: usize,
    /// Highlighted completion.
    pub completion: usize,
    /// A one-line hint above the composer (Ctrl-C prompts, errors of commands).
    pub hint: Option<String>,
    /// What a first Ctrl-C armed.
    pub armed: Option<Armed>,
    /// Height of the conversation view at the last draw (for paging).
    pub page: usize,
    /// Set when the session is still being opened.
    pub loading: bool,
    /// The `@` file finder (docs/tui.md, "File mentions").
    pub finder: crate::finder::Finder,
    /// The scrollable view `/diff` opens.
    pub pager: Option<crate::pager::Pager>,
    /// A first `/init` found an AGENTS.md; a second one asks the agent to rewrite it.
    pub init_armed: bool,
    /// Esc closed the command list; it stays closed until the draft changes.
    pub completions_closed: bool,
    /// The session's sub-agents: the panel, `/agents` and the followed child
    /// (docs/tui.md, "Children").
    pub children: crate::children::Children,
    /// A `/review` running in its own read-only session (crate::review): the line above the
    /// composer shows it; Esc and Ctrl-C cancel it.
    pub review: Option<crate::review::Progress>,
}

impl App {
    /// A fresh UI with `status`.
    pub fn new(status: StatusInfo) -> Self {
        App {
            transcript: Transcript::new(),
            composer: Composer::new(),
            queue: Vec::new(),
            status,
            session_id: None,
            status_text: None,
            approvals: VecDeque::new(),
            questions: VecDeque::new(),
            permission_menu: None,
            confirm_permission: None,
            confirm_note: None,
            user_commands: Vec::new(),
            picker: None,
            rewind_menu: None,
            expand_reasoning: false,
            inline: false,
            scroll: 0,
            completion: 0,
            hint: None,
            armed: None,
            page: 20,
            loading: true,
            finder: crate::finder::Finder::default(),
            pager: None,
            init_armed: false,
            completions_closed: false,
            children: crate::children::Children::default(),
            review: None,
        }
    }

    /// Commands matching the draft (for the completion popup): `(completion, description)`.
    pub fn completions(&self) -> Vec<(String, String)> {
        if self.completions_closed {
            return Vec::new();
        }
        completions(&self.composer.text(), &self.user_commands)
    }

    /// True while something replaces the composer or sits over it and takes the keys.
    pub fn modal(&self) -> bool {
        !self.approvals.is_empty()
            || !self.questions.is_empty()
            || self.confirm_permission.is_some()
            || self.confirm_note.is_some()
            || self.permission_menu.is_some()
            || self.picker.is_some()
            || self.rewind_menu.is_some()
            || self.pager.is_some()
            || self.children.menu.is_some()
    }

    /// Applies a key; returns what the runtime must do.
    pub fn on_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let was_empty = self.composer.is_empty();
        let mut actions = self.apply_key(key);
        if self.started_writing(was_empty) {
            actions.push(Action::WarmConnection);
        }
        actions
    }

    /// Pastes `text` where the keys go; returns what the runtime must do.
    pub fn on_paste(&mut self, text: &str) -> Vec<Action> {
        let was_empty = self.composer.is_empty();
        self.paste(text);
        if self.started_writing(was_empty) {
            vec![Action::WarmConnection]
        } else {
            Vec::new()
        }
    }

    /// The composer was empty, holds text now, and no turn runs: a call is likely soon.
    fn started_writing(&self, was_empty: bool) -> bool {
        was_empty && !self.composer.is_empty() && !self.transcript.running
    }

    fn apply_key(&mut self, key: KeyEvent) -> Vec<Action> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let shift = key.modifiers.contains(KeyModifiers::SHIFT);
        let is_ctrl_c = ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C'));
        if !is_ctrl_c {
            self.armed = None;
        }
        if is_ctrl_c {
            return self.ctrl_c();
        }
        if ctrl && matches!(key.code, KeyCode::Char('d') | KeyCode::Char('D')) {
            return vec![Action::Quit];
        }
        if !self.approvals.is_empty() {
            return self.approval_key(key);
        }
        // `/diff`'s view takes the keys while it is open (a question hides it, crate::pager).
        if self.questions.is_empty() {
            if let Some(actions) = crate::pager::Pager::on_key(self, &key) {
                return actions;
            }
        }
        // Scrolling works under every other prompt, to reread what led to it.
        if self.scroll_key(key.code) {
            return Vec::new();
        }
        if !self.questions.is_empty() {
            return self.question_key(key);
        }
        if let Some(actions) = self.menu_key(key) {
            return actions;
        }
        self.hint = None;
        if let Some(actions) = crate::finder::Finder::on_key(self, &key) {
            return actions;
        }
        match key.code {
            KeyCode::Enter if alt || shift => self.composer.insert('\n'),
            KeyCode::Char('j') | KeyCode::Char('J') if ctrl => self.composer.insert('\n'),
            KeyCode::Enter => return self.submit(false),
            KeyCode::Char('s') | KeyCode::Char('S') if ctrl => return self.submit(true),
            KeyCode::Char('t') | KeyCode::Char('T') if ctrl => self.toggle_reasoning(),
            KeyCode::Char('a') if ctrl => self.composer.home(),
            KeyCode::Char('e') if ctrl => self.composer.end(),
            KeyCode::Char('u') if ctrl => self.composer.delete_to_line_start(),
            KeyCode::Char('w') if ctrl => self.composer.delete_word(),
            KeyCode::Backspace if alt || ctrl => self.composer.delete_word(),
            KeyCode::Char(c) if !ctrl => {
                self.composer.insert(c);
                self.completion = 0;
                self.completions_closed = false;
            }
            KeyCode::Backspace => {
                self.composer.backspace();
                self.completion = 0;
                self.completions_closed = false;
            }
            KeyCode::Delete => self.composer.delete(),
            KeyCode::Left => self.composer.left(),
            KeyCode::Right => self.composer.right(),
            KeyCode::Home => self.composer.home(),
            KeyCode::End => self.composer.end(),
            KeyCode::Up => {
                let matches = self.completions().len();
                if matches > 0 {
                    self.completion = (self.completion + matches - 1) % matches;
                } else {
                    self.composer.up();
                }
            }
            KeyCode::Down => {
                let matches = self.completions().len();
                if matches > 0 {
                    self.completion = (self.completion + 1) % matches;
                } else {
                    self.composer.down();
                }
            }
            KeyCode::Tab => {
                if let Some((name, _)) = self.completions().get(self.completion) {
                    self.composer.set_text(&format!("{name} "));
                    self.completion = 0;
                }
            }
            KeyCode::Esc => return self.esc(),
            _ => {}
        }
        Vec::new()
    }

    /// Ctrl-T: reasoning in full, or collapsed again. Drawn anew on every frame, the full
    /// screen and a followed child's view expand it in place; the inline mode's history is in
    /// the terminal's scrollback, so there it opens the conversation with its reasoning in full
    /// in a view of its own (crate::pager), which Ctrl-T closes again.
    fn toggle_reasoning(&mut self) {
        if self.inline && self.children.followed().is_none() {
            self.pager = Some(crate::pager::Pager::conversation(&self.transcript));
        } else {
            self.expand_reasoning = !self.expand_reasoning;
        }
    }

    /// PgUp/PgDn scroll the conversation by a page; true when `code` was one of them. Inline,
    /// the conversation is in the terminal's scrollback: only a followed child's view scrolls.
    fn scroll_key(&mut self, code: KeyCode) -> bool {
        if !matches!(code, KeyCode::PageUp | KeyCode::PageDown) {
            return false;
        }
        if self.inline && self.children.followed().is_none() {
            return true;
        }
        let page = self.page.max(2) - 1;
        match code {
            KeyCode::PageUp => self.scroll += page,
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(page),
            _ => return false,
        }
        true
    }

    /// Esc: closes the command list when it is open; else cancels a running `/review`; else
    /// interrupts a running turn like Ctrl-C; else returns the conversation to its bottom.
    fn esc(&mut self) -> Vec<Action> {
        if !self.completions().is_empty() {
            self.completions_closed = true;
            return Vec::new();
        }
        self.scroll = 0;
        if self.review.is_some() {
            return self.cancel_review();
        }
        if self.transcript.running {
            self.hint = Some(CANCELLING.to_string());
            return vec![Action::Cancel];
        }
        Vec::new()
    }

    /// Esc or Ctrl-C while a `/review` runs: marks it cancelling, which the runtime carries
    /// out after the key (crate::review::Running::cancel).
    fn cancel_review(&mut self) -> Vec<Action> {
        if let Some(review) = self.review.as_mut() {
            review.cancelling = true;
        }
        Vec::new()
    }

    /// Inserts pasted text into the draft.
    fn paste(&mut self, text: &str) {
        if !self.approvals.is_empty() {
            return;
        }
        if let Some(pending) = self.questions.front_mut() {
            pending.form.on_paste(text);
            return;
        }
        if !self.modal() {
            self.composer.insert_str(text);
        }
    }

    fn ctrl_c(&mut self) -> Vec<Action> {
        let closed = self.picker.take().is_some()
            | self.rewind_menu.take().is_some()
            | self.children.menu.take().is_some()
            | self.permission_menu.take().is_some()
            | self.confirm_permission.take().is_some()
            | self.note_kept();
        if closed && self.approvals.is_empty() && self.questions.is_empty() {
            return Vec::new();
        }
        if self.review.is_some() && self.approvals.is_empty() && self.questions.is_empty() {
            self.armed = None;
            return self.cancel_review();
        }
        if self.transcript.running || !self.approvals.is_empty() || !self.questions.is_empty() {
            // The cancel ends the turn, and with it what its calls wait for (the broker
            // forgets questions whose turn ended).
            self.approvals.clear();
            self.questions.clear();
            self.armed = None;
            self.hint = Some(CANCELLING.to_string());
            return vec![Action::Cancel];
        }
        if !self.composer.is_empty() {
            if self.armed == Some(Armed::ClearDraft) {
                self.composer.take();
                self.armed = None;
                self.hint = Some("draft cleared (Up recalls it)".to_string());
            } else {
                self.armed = Some(Armed::ClearDraft);
                self.hint = Some("press Ctrl-C again to clear the draft".to_string());
            }
            return Vec::new();
        }
        if self.armed == Some(Armed::Quit) {
            return vec![Action::Quit];
        }
        self.armed = Some(Armed::Quit);
        self.hint = Some("press Ctrl-C again (or Ctrl-D) to quit".to_string());
        Vec::new()
    }

    fn submit(&mut self, steer: bool) -> Vec<Action> {
        let draft = self.composer.text();
        if draft.trim().is_empty() {
            return Vec::new();
        }
        if draft.starts_with('/') {
            let matches = self.completions();
            let exact = matches.iter().any(|(name, _)| name == draft.trim());
            let line = match matches.get(self.completion) {
                Some((name, _)) if !exact => name.clone(),
                _ => draft.trim().to_string(),
            };
            self.completion = 0;
            return match parse(&line, &self.user_commands) {
                Ok(command) => {
                    self.composer.take();
                    vec![Action::Command(command)]
                }
                Err(message) => {
                    self.hint = Some(message);
                    Vec::new()
                }
            };
        }
        if let Some(note) = note_of(&draft) {
            // Asked first: a message that only looks like a heading is not written away.
            self.composer.take();
            self.confirm_note = Some(note);
            return Vec::new();
        }
        if self.review.is_some() {
            // Its findings join the conversation when it ends: a message sent before would
            // go without them.
            self.hint =
                Some("a review is running: send once it is done (Esc cancels it)".to_string());
            return Vec::new();
        }
        let text = self.composer.take();
        self.scroll = 0;
        if steer && self.transcript.running {
            vec![Action::Steer(text)]
        } else {
            vec![Action::Send(text)]
        }
    }

    fn approval_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let page = self.page.max(2) / 2;
        if let Some(pending) = self.approvals.front_mut() {
            let scroll = &mut pending.scroll;
            match key.code {
                KeyCode::Up => *scroll = scroll.saturating_sub(1),
                KeyCode::Down => *scroll += 1,
                KeyCode::PageUp => *scroll = scroll.saturating_sub(page),
                KeyCode::PageDown => *scroll += page,
                KeyCode::Home => *scroll = 0,
                _ => {}
            }
            if matches!(
                key.code,
                KeyCode::Up | KeyCode::Down | KeyCode::PageUp | KeyCode::PageDown | KeyCode::Home
            ) {
                return Vec::new();
            }
        }
        let offers = |choice: ApprovalChoice| {
            self.approvals
                .front()
                .is_some_and(|pending| pending.request.offers(choice))
        };
        let decision = match key.code {
            KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => ApprovalDecision::AllowOnce,
            // Keys of choices the request does not offer do nothing (the box does not show them).
            KeyCode::Char('s') | KeyCode::Char('S') if offers(ApprovalChoice::AllowSession) => {
                ApprovalDecision::AllowSession
            }
            KeyCode::Char('a') | KeyCode::Char('A') if offers(ApprovalChoice::AllowAlways) => {
                ApprovalDecision::AllowAlways
            }
            KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Char('r') | KeyCode::Esc => {
                ApprovalDecision::Reject {
                    message: "the user rejected this call; do not retry it without asking"
                        .to_string(),
                }
            }
            _ => return Vec::new(),
        };
        match self.approvals.pop_front() {
            Some(pending) => vec![Action::Approve {
                id: pending.request.id,
                decision,
            }],
            None => Vec::new(),
        }
    }

    fn question_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(pending) = self.questions.front_mut() else {
            return Vec::new();
        };
        let Some(reply) = pending.form.on_key(key) else {
            return Vec::new();
        };
        match self.questions.pop_front() {
            Some(pending) => vec![Action::Answer {
                call_id: pending.form.request.call_id,
                reply,
            }],
            None => Vec::new(),
        }
    }

    /// The note waiting for its confirmation goes back into the composer, as typed; true when
    /// there was one.
    fn note_kept(&mut self) -> bool {
        let Some((scope, text)) = self.confirm_note.take() else {
            return false;
        };
        let mark = match scope {
            dsh_agent::NoteScope::Project => "# ",
            dsh_agent::NoteScope::User => "## ",
        };
        self.composer.insert_str(&format!("{mark}{text}"));
        self.hint = Some("not noted: the text is back in the composer".to_string());
        true
    }

    fn note_key(&mut self, key: KeyEvent) -> Vec<Action> {
        match key.code {
            KeyCode::Char('y') | KeyCode::Char('Y') => match self.confirm_note.take() {
                Some((scope, text)) => vec![Action::Remember(scope, text)],
                None => Vec::new(),
            },
            KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc => {
                self.note_kept();
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn confirm_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(preset) = self.confirm_permission else {
            return Vec::new();
        };
        match key.code {
            KeyCode::Char('y') | KeyCode::Char('Y') => {
                self.confirm_permission = None;
                vec![Action::SetPermission(preset)]
            }
            KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc => {
                self.confirm_permission = None;
                self.hint = Some(format!("kept {}", self.status.permission));
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn permission_menu_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(menu) = self.permission_menu.as_mut() else {
            return Vec::new();
        };
        let last = PERMISSION_PRESETS.len() - 1;
        match key.code {
            KeyCode::Up => menu.selected = menu.selected.saturating_sub(1),
            KeyCode::Down => menu.selected = (menu.selected + 1).min(last),
            KeyCode::Char(c @ '1'..='9') => {
                menu.selected = (c as usize - '1' as usize).min(last);
            }
            KeyCode::Esc => self.permission_menu = None,
            KeyCode::Enter => {
                let chosen = PERMISSION_PRESETS[menu.selected.min(last)].0;
                self.permission_menu = None;
                // The same path as typing it, so danger-full-access asks to confirm.
                return vec![Action::Command(SlashCommand::Permission(Some(
                    chosen.as_str().to_string(),
                )))];
            }
            _ => {}
        }
        Vec::new()
    }

    /// The keys of the open confirmation, list or picker; `None` when none is open (and the
    /// key is not Esc leaving a followed child).
    fn menu_key(&mut self, key: KeyEvent) -> Option<Vec<Action>> {
        if self.confirm_permission.is_some() {
            return Some(self.confirm_key(key));
        }
        if self.confirm_note.is_some() {
            return Some(self.note_key(key));
        }
        if self.permission_menu.is_some() {
            return Some(self.permission_menu_key(key));
        }
        if self.picker.is_some() {
            return Some(self.picker_key(key));
        }
        if let Some(menu) = self.rewind_menu.as_mut() {
            return Some(match menu.on_key(key) {
                crate::rewind::MenuKey::Stay => Vec::new(),
                crate::rewind::MenuKey::Close => {
                    self.rewind_menu = None;
                    Vec::new()
                }
                crate::rewind::MenuKey::Rewind(choice) => {
                    self.rewind_menu = None;
                    vec![Action::Rewind(choice)]
                }
            });
        }
        self.children_key(&key)
    }

    /// The keys of the `/agents` list while it is open, and Esc while a child is followed
    /// (it returns to the parent first, docs/tui.md, "Children"); `None` for other keys.
    fn children_key(&mut self, key: &KeyEvent) -> Option<Vec<Action>> {
        if self.children.menu.is_some() {
            return Some(self.agents_menu_key(*key));
        }
        if key.code == KeyCode::Esc && self.children.followed.is_some() {
            self.children.followed = None;
            self.scroll = 0;
            return Some(Vec::new());
        }
        None
    }

    /// The `/agents` list: Up/Down choose, Enter follows the child, Esc closes.
    fn agents_menu_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(selected) = self.children.menu.as_mut() else {
            return Vec::new();
        };
        let last = self.children.list.len().saturating_sub(1);
        match key.code {
            KeyCode::Up => *selected = selected.saturating_sub(1),
            KeyCode::Down => *selected = (*selected + 1).min(last),
            KeyCode::Esc => self.children.menu = None,
            KeyCode::Enter => {
                let name = self.children.list.get(*selected).map(|c| c.name.clone());
                self.children.menu = None;
                if let Some(name) = name {
                    return vec![Action::Command(SlashCommand::Agents(Some(name)))];
                }
            }
            _ => {}
        }
        Vec::new()
    }

    fn picker_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(picker) = self.picker.as_mut() else {
            return Vec::new();
        };
        match key.code {
            KeyCode::Up => picker.selected = picker.selected.saturating_sub(1),
            KeyCode::Down => {
                picker.selected = (picker.selected + 1).min(picker.sessions.len().saturating_sub(1))
            }
            KeyCode::Esc => self.picker = None,
            KeyCode::Enter => {
                let id = picker.sessions.get(picker.selected).map(|s| s.id.clone());
                self.picker = None;
                if let Some(id) = id {
                    return vec![Action::OpenSession(id)];
                }
            }
            _ => {}
        }
        Vec::new()
    }
}

/// A message that is a note for an instructions file: `# text` for the project's, `## text`
/// for the user's (a `#` then a space; `#!`, `#include` and a lone `#` are messages).
pub fn note_of(draft: &str) -> Option<(dsh_agent::NoteScope, String)> {
    let draft = draft.trim_start();
    let (scope, rest) = match draft.strip_prefix("##") {
        Some(rest) => (dsh_agent::NoteScope::User, rest),
        None => (dsh_agent::NoteScope::Project, draft.strip_prefix('#')?),
    };
    if !rest.starts_with([' ', '\t']) || rest.trim().is_empty() {
        return None;
    }
    Some((scope, rest.trim().to_string()))
}

#[cfg(test)]
mod note_tests {
    use super::note_of;
    use dsh_agent::NoteScope;

    #[test]
    fn notes_are_hash_then_space() {
        assert_eq!(
            note_of("  # use pnpm "),
            Some((NoteScope::Project, "use pnpm".to_string()))
        );
        assert_eq!(
            note_of("## be brief"),
            Some((NoteScope::User, "be brief".to_string()))
        );
        for message in ["#!/bin/sh", "#include <x>", "#", "# ", "### x", "hello # x"] {
            let found = note_of(message);
            assert!(
                found.is_none() || message == "### x",
                "{message}: {found:?}"
            );
        }
    }
}
