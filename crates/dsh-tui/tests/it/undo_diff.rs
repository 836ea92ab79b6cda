//! `/undo`, `/diff` and `/status` against a real agent: the real `write`/`edit`/`read` tools
//! change files in a temp workspace during scripted turns, and the commands read the session
//! log back from the store (docs/tui.md, "Undo and diff"). `/undo` is the protocol's
//! `Op::Undo`, submitted as the TUI submits it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet, ReplayAdapter};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk, MessageSource};
use dsh_protocol::undo::UNDO_EVENT;
use dsh_protocol::{Interactions, Op, OpError, SessionControl};
use dsh_session::{load_file, open_store, Envelope, Event, StoreKind};
use dsh_test_support::chunks::{text, tool_call};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use dsh_tui::pager::Pager;
use dsh_tui::status::{status_text, StatusFacts};
use dsh_tui::worktree::{diff_lines, DiffLine};
use dsh_tui::{App, StatusInfo};
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use ratatui::Terminal;
use serde_json::json;

/// A real agent with the built-in tools in a temp workspace (also the resume tests').
pub(crate) struct Session {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    pub(crate) cwd: PathBuf,
    pub(crate) agent: Agent,
}

impl Session {
    /// A workspace holding `kept.txt`, and an agent that will serve `replies`.
    pub(crate) fn new(replies: Vec<Vec<Chunk>>) -> Session {
        Session::with_extensions(replies, ExtensionSet::new())
    }

    /// [`Session::new`] with `extensions` (a safety policy that asks approvals).
    pub(crate) fn with_extensions(replies: Vec<Vec<Chunk>>, extensions: ExtensionSet) -> Session {
        let work = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(work.path()).unwrap();
        std::fs::write(cwd.join("kept.txt"), "alpha\nbeta\n").unwrap();
        let mut adapters = AdapterRegistry::new();
        adapters
            .register("scripted", Arc::new(ReplayAdapter::new(replies)))
            .unwrap();
        let tool_context =
            ToolContext::new(&cwd, SpillDir::create(home.path().join("spill")).unwrap())
                .unwrap()
                .with_permission(PermissionPreset::WorkspaceWrite);
        let parts = AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context,
            options: AgentOptions::new(CallConfig::new("scripted", "m"), &cwd),
        };
        let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
        let agent = Agent::create(parts, store.as_ref()).unwrap();
        Session {
            _dirs: (work, home),
            cwd,
            agent,
        }
    }

    /// The confiner `/diff` runs git with, as the TUI makes it.
    fn confiner(&self) -> dsh_tools::CommandConfiner {
        dsh_runtime::read_only_confiner(&self.cwd, self._dirs.1.path())
    }

    pub(crate) async fn turn(&mut self, prompt: &str) {
        self.agent.handle().followup(prompt).unwrap();
        self.agent.run_turn().await.unwrap().unwrap();
    }

    /// `/undo` as the TUI runs it: `Op::Undo` on the session's control; the note shown, or
    /// the refusal.
    fn undo(&self) -> Result<String, OpError> {
        let control = SessionControl::new(
            self.agent.handle(),
            Interactions::interactive(),
            CallConfig::new("scripted", "m"),
            Arc::new(|_: &str| None),
            &self.cwd,
        );
        control.submit(Op::Undo).map(|notes| notes.join("\n"))
    }

    pub(crate) fn events(&self) -> Vec<Envelope> {
        load_file(Path::new(&self.agent.handle().location()))
            .unwrap()
            .events
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.cwd.join(name)).unwrap()
    }
}

/// Turn 1 creates `made/new.txt` and edits `kept.txt` twice; turn 2 replies only.
fn replies() -> Vec<Vec<Chunk>> {
    let call =
        |id: &str, name: &str, args: serde_json::Value| tool_call(id, name, &args.to_string());
    vec![
        call("r", "read", json!({"file_path": "kept.txt"})),
        call(
            "w",
            "write",
            json!({"file_path": "made/new.txt", "content": "fresh\n"}),
        ),
        call(
            "e1",
            "edit",
            json!({"file_path": "kept.txt", "old_string": "beta", "new_string": "BETA"}),
        ),
        call(
            "e2",
            "edit",
            json!({"file_path": "kept.txt", "old_string": "alpha", "new_string": "ALPHA"}),
        ),
        text("done"),
        text("noted"),
    ]
}

fn undo_events(events: &[Envelope]) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == UNDO_EVENT => Some(data.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn undo_reverts_the_last_turn_logs_it_and_tells_the_model() {
    let mut s = Session::new(replies());
    s.turn("change things").await;
    assert_eq!(s.read("kept.txt"), "ALPHA\nBETA\n");
    assert_eq!(s.read("made/new.txt"), "fresh\n");
    let handle = s.agent.handle();

    let message = s.undo().unwrap();
    assert_eq!(s.read("kept.txt"), "alpha\nbeta\n");
    assert!(!s.cwd.join("made/new.txt").exists());
    assert!(
        message.contains("made/new.txt (deleted: the turn created it)")
            && message.contains("kept.txt (restored)")
            && message.contains("bash commands are not tracked"),
        "{message}"
    );
    // Logged, with what was done to which file.
    let logged = undo_events(&s.events());
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["turn"], 1);
    assert_eq!(logged[0]["complete"], true);
    let actions: Vec<_> = logged[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(actions, ["deleted", "restored"]);
    // Ours, not dsh's: written ignorable so dsh can still load the log.
    let raw = std::fs::read_to_string(handle.location()).unwrap();
    let line = raw.lines().find(|l| l.contains("\"files/undo\"")).unwrap();
    assert!(line.contains("\"ignorable\":true"), "{line}");

    // The note reaches the model with its next turn: a logged, model-visible user message.
    s.turn("what now?").await;
    let events = s.events();
    let note = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::UserMessage(m) if matches!(m.source, MessageSource::Plugin { .. }) => {
                Some(m.text())
            }
            _ => None,
        })
        .find(|t| t.contains("The user ran /undo"))
        .expect("the undo note was logged as a model-visible message");
    assert!(note.contains("turn 1") && note.contains("bash"), "{note}");

    // Nothing left to undo: turn 1 is undone and turn 2 changed nothing.
    let again = s.undo().unwrap_err();
    assert_eq!(again.code, "UNDO_REFUSED");
    assert!(
        again.message.starts_with("nothing to undo"),
        "{}",
        again.message
    );
    assert_eq!(undo_events(&s.events()).len(), 1);
}

#[tokio::test]
async fn undo_refuses_when_a_file_changed_since_and_logs_nothing() {
    let mut s = Session::new(replies());
    s.turn("change things").await;
    // Someone (an editor, a bash command) changed a file the turn wrote.
    std::fs::write(s.cwd.join("kept.txt"), "mine now\n").unwrap();
    let refused = s.undo().unwrap_err();
    assert_eq!(refused.code, "UNDO_REFUSED");
    assert!(
        refused
            .message
            .contains("cannot undo turn 1: kept.txt was changed since")
            && refused.message.contains("nothing was reverted"),
        "{}",
        refused.message
    );
    assert_eq!(s.read("kept.txt"), "mine now\n");
    assert_eq!(s.read("made/new.txt"), "fresh\n", "no file may be undone");
    assert!(undo_events(&s.events()).is_empty());
    assert!(s.agent.handle().pending().1.is_empty(), "no note queued");
}

fn git(cwd: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(cwd)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .status()
        .expect("git must be installed for the /diff tests (.ci/run installs it)");
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn diff_shows_session_changes_and_git_diff_in_a_coloured_pager() {
    let mut s = Session::new(replies());
    let outside_git = diff_lines(&s.events(), &s.cwd, &s.confiner());
    assert!(outside_git
        .iter()
        .any(|l| *l == DiffLine::Plain("(not a git work tree: no git diff)".into())));
    git(&s.cwd, &["init", "-q"]);
    git(&s.cwd, &["add", "kept.txt"]);
    git(&s.cwd, &["commit", "-q", "-m", "start"]);
    s.turn("change things").await;
    let lines = diff_lines(&s.events(), &s.cwd, &s.confiner());
    let has = |want: &DiffLine| lines.iter().any(|l| l == want);
    assert!(
        has(&DiffLine::Heading("kept.txt  +1 -2".into()))
            || has(&DiffLine::Heading("kept.txt  +2 -2".into())),
        "{lines:#?}"
    );
    assert!(has(&DiffLine::Removed("-alpha".into())), "{lines:#?}");
    assert!(has(&DiffLine::Added("+ALPHA".into())), "{lines:#?}");
    assert!(
        has(&DiffLine::Heading("made/new.txt  +1 -0, new file".into())),
        "{lines:#?}"
    );
    assert!(
        has(&DiffLine::Heading("+++ b/made/new.txt".into())),
        "{lines:#?}"
    );
    let git_at = lines
        .iter()
        .position(|l| matches!(l, DiffLine::Heading(h) if h.starts_with("git diff")))
        .expect("a git diff section");
    assert!(
        lines[git_at..].contains(&DiffLine::Removed("-beta".into())),
        "{lines:#?}"
    );

    // The pager shows it, coloured, and scrolls.
    let mut app = App::new(StatusInfo::default());
    app.loading = false;
    app.pager = Some(Pager::new("/diff", lines.clone()));
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    terminal
        .draw(|f| dsh_tui::view::draw(f, &mut app, &mut Default::default()))
        .unwrap();
    let screen = terminal.backend().buffer().clone();
    let rows: Vec<String> = (0..20)
        .map(|y| (0..80).map(|x| screen[(x, y)].symbol()).collect::<String>())
        .collect();
    assert_eq!(lines.len(), 27, "{lines:#?}");
    assert!(rows[0].contains("/diff · lines 1-18 of 27"), "{rows:#?}");
    let minus = rows
        .iter()
        .position(|r| r.contains("-alpha"))
        .expect("-alpha shown");
    let x = rows[minus].find("-alpha").unwrap() as u16;
    assert_eq!(screen[(x, minus as u16)].fg, Color::Red);
    app.on_key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::PageDown,
    ));
    let top = app.pager.as_ref().unwrap().top;
    assert_eq!(top, 9, "a page down stops at the last full page");
    app.on_key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::Esc,
    ));
    assert!(app.pager.is_none());
}

#[tokio::test]
async fn status_names_the_session_and_its_settings() {
    let mut s = Session::new(replies());
    s.turn("change things").await;
    let handle = s.agent.handle();
    let mut app = App::new(StatusInfo {
        model: "m".into(),
        context_window: 1000,
        ..StatusInfo::default()
    });
    let events = s.events();
    for e in &events {
        app.transcript.apply(e);
    }
    let facts = StatusFacts {
        session_id: handle.session_id(),
        location: handle.location(),
        preset: handle.permission().as_str().to_string(),
        cwd: &s.cwd,
        events: &events,
    };
    let text = status_text(&app, &facts);
    for want in [
        format!("session   {}", handle.session_id()),
        format!("log       {}", handle.location()),
        "model     m · effort".to_string(),
        "preset    workspace-write · sandbox".to_string(),
        format!("cwd       {}", s.cwd.display()),
        "tokens    0 requests".to_string(),
        "context   ".to_string(),
        "cache     ".to_string(),
        "mcp       none".to_string(),
    ] {
        assert!(text.contains(&want), "{want:?} missing in:\n{text}");
    }
}

#[tokio::test]
async fn init_asks_the_agent_and_confirms_over_an_existing_agents_md() {
    let s = Session::new(vec![]);
    let handle = s.agent.handle();
    let mut app = App::new(StatusInfo::default());
    // No AGENTS.md: the prompt is queued at once, as typed input.
    dsh_tui::worktree::init(&mut app, &handle, &s.cwd);
    let queued: Vec<String> = handle.pending().0.iter().map(|m| m.text()).collect();
    assert_eq!(queued, [dsh_tui::commands::INIT_PROMPT]);
    // With one: the first /init only warns, the second queues the prompt.
    std::fs::write(s.cwd.join("AGENTS.md"), "# old\n").unwrap();
    dsh_tui::worktree::init(&mut app, &handle, &s.cwd);
    assert_eq!(handle.pending().0.len(), 1, "nothing more queued");
    let warned = format!("{:?}", app.transcript.cells.last().unwrap());
    assert!(
        warned.contains("already exists: run /init again"),
        "{warned}"
    );
    dsh_tui::worktree::init(&mut app, &handle, &s.cwd);
    assert_eq!(handle.pending().0.len(), 2);
}

#[test]
fn the_new_commands_parse_and_complete() {
    use dsh_tui::commands::{completions, parse, SlashCommand};
    for (text, command) in [
        ("/undo", SlashCommand::Undo),
        ("/diff", SlashCommand::Diff),
        ("/init", SlashCommand::Init),
        ("/status", SlashCommand::Status),
    ] {
        assert_eq!(parse(text, &[]), Ok(command));
        assert!(
            parse(&format!("{text} x"), &[]).is_err(),
            "{text} takes no argument"
        );
    }
    let names: Vec<_> = completions("/st", &[]).into_iter().map(|c| c.0).collect();
    assert_eq!(names, ["/status"]);
    let mut app = App::new(StatusInfo::default());
    app.loading = false;
    for c in "/undo".chars() {
        app.on_key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char(c),
        ));
    }
    let actions = app.on_key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::Enter,
    ));
    assert_eq!(actions, [dsh_tui::Action::Command(SlashCommand::Undo)]);
}

/// A repository whose configuration names programs (a command of the session may have made it
/// with `git init` where there was none, adversarial review of issue 38): `/diff` runs none of
/// them, clean and process filters included.
#[tokio::test]
async fn diff_runs_no_filter_or_hook_a_planted_repository_names() {
    let s = Session::new(replies());
    let marker = s.cwd.join("..").join(format!(
        "diff-ran-{}",
        s.cwd.file_name().unwrap().to_string_lossy()
    ));
    git(&s.cwd, &["init", "-q"]);
    git(&s.cwd, &["add", "kept.txt"]);
    git(&s.cwd, &["commit", "-q", "-m", "start"]);
    let touch = format!("sh -c \"touch {}; cat\"", marker.display());
    for (key, value) in [
        ("filter.x.clean", touch.as_str()),
        ("filter.x.process", touch.as_str()),
        ("filter.y.smudge", touch.as_str()),
        ("core.fsmonitor", touch.as_str()),
        ("core.pager", touch.as_str()),
        ("diff.external", touch.as_str()),
    ] {
        git(&s.cwd, &["config", key, value]);
    }
    std::fs::write(s.cwd.join(".gitattributes"), "* filter=x diff=x\n").unwrap();
    git(&s.cwd, &["config", "diff.x.textconv", &touch]);
    std::fs::write(s.cwd.join("kept.txt"), "changed\n").unwrap();
    let lines = diff_lines(&s.events(), &s.cwd, &s.confiner());
    assert!(
        lines
            .iter()
            .any(|l| matches!(l, DiffLine::Heading(h) if h.starts_with("git diff"))),
        "{lines:#?}"
    );
    assert!(!marker.exists(), "/diff ran a program the repository names");
}

/// A planted partial clone: the blob `git diff` needs is missing and a promisor remote would
/// fetch it by running its `uploadpack` (third adversarial review of issue 38). `/diff` runs
/// no transport.
#[tokio::test]
async fn diff_fetches_nothing_for_a_planted_partial_clone() {
    let s = Session::new(replies());
    let marker = s.cwd.join("..").join(format!(
        "fetch-ran-{}",
        s.cwd.file_name().unwrap().to_string_lossy()
    ));
    git(&s.cwd, &["init", "-q"]);
    git(&s.cwd, &["add", "kept.txt"]);
    let blob = std::process::Command::new("git")
        .arg("-C")
        .arg(&s.cwd)
        .args(["rev-parse", ":kept.txt"])
        .output()
        .unwrap();
    let blob = String::from_utf8_lossy(&blob.stdout).trim().to_string();
    std::fs::remove_file(s.cwd.join(".git/objects").join(&blob[..2]).join(&blob[2..])).unwrap();
    let upload = format!("sh -c 'touch {}' #", marker.display());
    let origin = s.cwd.display().to_string();
    for (key, value) in [
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", origin.as_str()),
        ("remote.origin.promisor", "true"),
        ("remote.origin.uploadpack", upload.as_str()),
    ] {
        git(&s.cwd, &["config", key, value]);
    }
    std::fs::write(s.cwd.join("kept.txt"), "changed\n").unwrap();
    let _ = diff_lines(&s.events(), &s.cwd, &s.confiner());
    assert!(!marker.exists(), "/diff ran the remote's uploadpack");
}

/// A clean filter planted in a submodule (fourth adversarial review of issue 38): `git diff`
/// checks a submodule with a `git status` of its own, under the submodule's configuration,
/// which the top repository's `-c` overrides do not reach. `/diff` runs git in the read-only
/// sandbox without network, so the filter cannot write anything, and ignores submodules.
#[tokio::test]
async fn diff_runs_no_filter_planted_in_a_submodule() {
    let s = Session::new(replies());
    let marker = s.cwd.join("..").join(format!(
        "sub-filter-ran-{}",
        s.cwd.file_name().unwrap().to_string_lossy()
    ));
    let sub = s.cwd.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    std::fs::write(sub.join(".gitattributes"), "f.txt filter=lint\n").unwrap();
    std::fs::write(sub.join("f.txt"), "one\n").unwrap();
    git(&sub, &["add", "."]);
    git(
        &sub,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "s",
        ],
    );
    let touch = format!("sh -c \"touch {}; cat\"", marker.display());
    git(&sub, &["config", "filter.lint.clean", &touch]);
    git(&s.cwd, &["init", "-q"]);
    git(&s.cwd, &["add", "kept.txt", "sub"]);
    std::fs::write(sub.join("f.txt"), "two\n").unwrap();
    // Control: an unconfined `git diff` runs the planted filter.
    let control = std::process::Command::new("git")
        .arg("-C")
        .arg(&s.cwd)
        .args(["diff", "--no-ext-diff"])
        .output()
        .unwrap();
    assert!(control.status.success());
    assert!(
        marker.exists(),
        "the control did not run the filter: the test proves nothing"
    );
    std::fs::remove_file(&marker).unwrap();
    let lines = diff_lines(&s.events(), &s.cwd, &s.confiner());
    assert!(
        lines
            .iter()
            .any(|l| matches!(l, DiffLine::Heading(h) if h.starts_with("git diff"))),
        "{lines:#?}"
    );
    assert!(
        !marker.exists(),
        "/diff ran a filter planted in a submodule"
    );
}

/// Every git `/diff` starts goes through the confiner, not only `git diff`: the fifth
/// adversarial review had the unconfined `git rev-parse` load a library planted in the
/// workspace (through an empty entry of dsh's own `LD_LIBRARY_PATH`).
#[tokio::test]
async fn every_git_of_diff_runs_through_the_confiner() {
    let s = Session::new(replies());
    git(&s.cwd, &["init", "-q"]);
    git(&s.cwd, &["add", "kept.txt"]);
    std::fs::write(s.cwd.join("kept.txt"), "changed\n").unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = Arc::clone(&seen);
    let inner = s.confiner();
    let recording: dsh_tools::CommandConfiner = Arc::new(move |plan, workdir| {
        let words: Vec<String> = plan
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        record.lock().unwrap().push(words.join(" "));
        inner(plan, workdir)
    });
    let lines = diff_lines(&s.events(), &s.cwd, &recording);
    assert!(
        lines
            .iter()
            .any(|l| matches!(l, DiffLine::Added(a) if a.contains("changed"))),
        "{lines:#?}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|c| c.contains("rev-parse")), "{seen:?}");
    assert!(seen.iter().any(|c| c.contains("config")), "{seen:?}");
    assert!(seen.iter().any(|c| c.contains(" diff ")), "{seen:?}");
}
