//! Runtime context and project instructions enter as user messages, only when they change,
//! and never touch the system prompt.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_test_support::chunks::text;
use std::sync::{Arc, Mutex};

use dsh_agent::{
    Agent, AgentOptions, AgentParts, ContextMessages, ContextSource, ExtensionSet, ReplayAdapter,
    PROJECT_INSTRUCTIONS_PLUGIN, RUNTIME_CONTEXT_PLUGIN,
};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, ChunkStream, GenerateRequest, Message, MessageSource,
};
use dsh_session::{open_store, StoreKind};
use dsh_tools::{SpillDir, ToolContext, ToolRegistry};

struct FixedDay(Arc<Mutex<String>>);

impl ContextSource for FixedDay {
    fn today(&self) -> String {
        self.0.lock().unwrap().clone()
    }
    fn permission(&self) -> String {
        "workspace-write".into()
    }
}

struct Spy {
    inner: ReplayAdapter,
    requests: Arc<Mutex<Vec<GenerateRequest>>>,
}

impl Adapter for Spy {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request)
    }
}

fn plugin_messages(messages: &[Message], name: &str) -> Vec<String> {
    messages
        .iter()
        .filter(|m| matches!(&m.source, MessageSource::Plugin { plugin, .. } if plugin == name))
        .map(Message::text)
        .collect()
}

#[tokio::test]
async fn changed_agents_md_adds_one_message_and_keeps_the_system_prompt() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    let cwd = project.path().join("sub");
    std::fs::create_dir(&cwd).unwrap();
    std::fs::write(project.path().join("AGENTS.md"), "Use tabs.").unwrap();
    std::fs::write(cwd.join("CLAUDE.md"), "Run make test.").unwrap();
    // The same file reached twice (a symlink) counts once.
    std::os::unix::fs::symlink(project.path().join("AGENTS.md"), cwd.join("AGENTS.md")).unwrap();

    let requests = Arc::new(Mutex::new(Vec::new()));
    let spy = Arc::new(Spy {
        inner: ReplayAdapter::new(vec![text("a"), text("b"), text("c")]),
        requests: requests.clone(),
    });
    let mut adapters = AdapterRegistry::new();
    adapters.register("spy", spy).unwrap();
    let extensions = ExtensionSet::new();
    let day = Arc::new(Mutex::new("2026-11-30".to_string()));
    let _context = extensions.register(Arc::new(ContextMessages::new(
        &cwd,
        Some(home.path().to_path_buf()),
        Box::new(FixedDay(day.clone())),
    )));
    let _base = extensions.register(Arc::new(dsh_agent::BasePrompt));
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context: ToolContext::new(&cwd, SpillDir::create(home.path().join("s")).unwrap())
                .unwrap(),
            options: AgentOptions::new(CallConfig::new("spy", "m"), &cwd),
        },
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("one").unwrap();
    agent.run_until_idle().await.unwrap();
    handle.followup("two").unwrap();
    agent.run_until_idle().await.unwrap();
    std::fs::write(project.path().join("AGENTS.md"), "Use spaces.").unwrap();
    *day.lock().unwrap() = "2026-12-01".into();
    handle.followup("three").unwrap();
    agent.run_until_idle().await.unwrap();

    let requests = requests.lock().unwrap();
    assert_eq!(requests.len(), 3);
    let last = &requests[2].messages;
    let instructions = plugin_messages(last, PROJECT_INSTRUCTIONS_PLUGIN);
    assert_eq!(
        instructions.len(),
        2,
        "one at the start, one after the change"
    );
    assert!(instructions[0].contains("Use tabs.") && instructions[0].contains("Run make test."));
    assert_eq!(
        instructions[0].matches("Use tabs.").count(),
        1,
        "symlinked duplicate was sent"
    );
    assert!(instructions[1].contains("Use spaces."));
    let runtime = plugin_messages(last, RUNTIME_CONTEXT_PLUGIN);
    assert_eq!(runtime.len(), 2, "the date changed once");
    assert!(runtime[1].contains("2026-12-01"));
    // The second request added nothing but the new turn.
    assert_eq!(
        plugin_messages(&requests[1].messages, PROJECT_INSTRUCTIONS_PLUGIN).len(),
        1
    );
    assert_eq!(requests[0].system, requests[2].system);
    assert!(!requests[2].system.contains("Use spaces."));
    assert!(!requests[2].system.contains("2026"));
}

/// Nested instruction files arrive when a tool first touches their directory, and changes or
/// removals of loaded files are reported, each once (as dsh's agent-instructions plugin does);
/// a resumed session knows which nested files the model already has.
#[tokio::test]
async fn nested_instructions_load_on_touch_and_changes_are_reported() {
    use dsh_test_support::chunks::tool_call;
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().to_path_buf();
    std::fs::create_dir(cwd.join(".git")).unwrap();
    std::fs::create_dir_all(cwd.join("pkg/deep")).unwrap();
    std::fs::create_dir_all(cwd.join("other")).unwrap();
    std::fs::write(cwd.join("AGENTS.md"), "Root rule.").unwrap();
    std::fs::write(cwd.join("pkg/AGENTS.md"), "Package rule.").unwrap();
    // Same content as its sibling: loaded once.
    std::fs::write(cwd.join("pkg/CLAUDE.md"), "Package rule.\n").unwrap();
    std::fs::write(cwd.join("pkg/deep/task.txt"), "task").unwrap();
    std::fs::write(cwd.join("other/AGENTS.md"), "Other rule.").unwrap();

    let requests = Arc::new(Mutex::new(Vec::new()));
    let spy = Arc::new(Spy {
        inner: ReplayAdapter::new(vec![
            tool_call("c1", "read", r#"{"file_path":"pkg/deep/task.txt"}"#),
            text("read it"),
            text("second turn"),
            tool_call("c2", "read", r#"{"file_path":"pkg/deep/task.txt"}"#),
            text("third turn"),
        ]),
        requests: requests.clone(),
    });
    let mut adapters = AdapterRegistry::new();
    adapters.register("spy", spy).unwrap();
    let extensions = ExtensionSet::new();
    let day = Arc::new(Mutex::new("2026-11-30".to_string()));
    let _context = extensions.register(Arc::new(ContextMessages::new(
        &cwd,
        None,
        Box::new(FixedDay(day.clone())),
    )));
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context: ToolContext::new(&cwd, SpillDir::create(home.path().join("s")).unwrap())
                .unwrap(),
            options: AgentOptions::new(CallConfig::new("spy", "m"), &cwd),
        },
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("one").unwrap();
    agent.run_until_idle().await.unwrap();
    {
        let requests = requests.lock().unwrap();
        let first = plugin_messages(&requests[0].messages, PROJECT_INSTRUCTIONS_PLUGIN);
        assert_eq!(first.len(), 1);
        assert!(first[0].contains("Root rule."));
        assert!(!first[0].contains("Package rule."), "not touched yet");
        let second = plugin_messages(&requests[1].messages, PROJECT_INSTRUCTIONS_PLUGIN);
        assert_eq!(second.len(), 2, "{second:#?}");
        let added = &second[1];
        assert!(
            added.starts_with("Additional instructions from: pkg/AGENTS.md"),
            "{added}"
        );
        assert!(added.contains("under `pkg`"), "{added}");
        assert_eq!(added.matches("Package rule.").count(), 1, "{added}");
        assert!(
            !added.contains("Other rule."),
            "an untouched directory: {added}"
        );
    }

    // Between turns: the package file changes and the root file goes away.
    std::fs::write(cwd.join("pkg/AGENTS.md"), "Package rule, revised.").unwrap();
    std::fs::write(cwd.join("pkg/CLAUDE.md"), "").unwrap();
    std::fs::remove_file(cwd.join("AGENTS.md")).unwrap();
    handle.followup("two").unwrap();
    agent.run_until_idle().await.unwrap();
    let location = handle.location();
    {
        let requests = requests.lock().unwrap();
        let all = plugin_messages(&requests[2].messages, PROJECT_INSTRUCTIONS_PLUGIN);
        assert_eq!(all.len(), 3, "{all:#?}");
        let update = &all[2];
        assert!(
            update.contains("Instructions removed: AGENTS.md"),
            "{update}"
        );
        assert!(
            update.contains("Updated instructions from: pkg/AGENTS.md"),
            "{update}"
        );
        assert!(update.contains("Package rule, revised."), "{update}");
        assert!(!update.contains("Root rule."), "{update}");
    }
    drop(agent);

    // Resumed: the model has pkg/AGENTS.md; touching pkg again adds nothing, a change made
    // while the session was closed is reported at the first step.
    std::fs::write(cwd.join("pkg/AGENTS.md"), "Package rule, third.").unwrap();
    let log = dsh_session::load_file(std::path::Path::new(&location)).unwrap();
    let update = log
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            dsh_session::Event::UserMessage(m) => match &m.source {
                MessageSource::Plugin { plugin, extra, .. }
                    if plugin == PROJECT_INSTRUCTIONS_PLUGIN =>
                {
                    extra.get("changes").cloned()
                }
                _ => None,
            },
            _ => None,
        })
        .unwrap();
    assert_eq!(update[0]["action"], "remove", "{update}");
    assert_eq!(update[1]["action"], "replace", "{update}");
    assert_eq!(update[1]["path"], "pkg/AGENTS.md", "{update}");

    let context = ContextMessages::new(&cwd, None, Box::new(FixedDay(day)));
    dsh_agent::Extension::restore(&context, &log.events);
    let mut step = dsh_agent::PreStepContext::default();
    dsh_agent::Extension::pre_step(&context, &mut step).unwrap();
    let texts: Vec<String> = step.inject.iter().map(Message::text).collect();
    assert_eq!(texts.len(), 1, "{texts:#?}");
    assert!(
        texts[0].starts_with("Updated instructions from: pkg/AGENTS.md"),
        "{texts:#?}"
    );
    assert!(texts[0].contains("Package rule, third."));
}

/// A `# note` (`Extension::remember`, docs/agent.md "Notes to the instructions") is appended
/// to the project's AGENTS.md and the model is told at the next step, as of any change to a
/// loaded file; a `## note` creates the user's file, which the next step adds; a project with
/// only a CLAUDE.md at its root gets the note there.
#[test]
fn notes_reach_the_instructions_and_the_next_step() {
    use dsh_agent::{Extension, NoteScope, PreStepContext};
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(project.path()).unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join("AGENTS.md"), "Root rule.").unwrap();
    let day = Arc::new(Mutex::new("2026-12-07".to_string()));
    let context = ContextMessages::new(
        &root,
        Some(home.path().to_path_buf()),
        Box::new(FixedDay(day.clone())),
    );
    let step = |context: &ContextMessages| {
        let mut step = PreStepContext::default();
        context.pre_step(&mut step).unwrap();
        plugin_messages(&step.inject, PROJECT_INSTRUCTIONS_PLUGIN)
    };
    assert!(step(&context)[0].contains("Root rule."));
    assert!(step(&context).is_empty(), "nothing changed");

    let path = context
        .remember(NoteScope::Project, "use  pnpm,\nnot npm")
        .unwrap()
        .unwrap();
    assert_eq!(path, root.join("AGENTS.md"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "Root rule.\n- use pnpm, not npm\n"
    );
    let update = step(&context);
    assert_eq!(update.len(), 1, "{update:#?}");
    assert!(
        update[0].starts_with("Updated instructions from: AGENTS.md"),
        "{update:#?}"
    );
    assert!(update[0].contains("- use pnpm, not npm"));

    let user = context
        .remember(NoteScope::User, "be brief")
        .unwrap()
        .unwrap();
    assert_eq!(user, home.path().join("AGENTS.md"));
    let added = step(&context);
    assert!(
        added[0].contains("Additional instructions from:") && added[0].contains("- be brief"),
        "{added:#?}"
    );
    assert!(
        context.remember(NoteScope::User, "  ").unwrap().is_err(),
        "an empty note"
    );

    let other = tempfile::tempdir().unwrap();
    let other_root = std::fs::canonicalize(other.path()).unwrap();
    std::fs::create_dir(other_root.join(".git")).unwrap();
    std::fs::write(other_root.join("CLAUDE.md"), "Claude rule.\n").unwrap();
    let context = ContextMessages::new(&other_root, None, Box::new(FixedDay(day)));
    let path = context.remember(NoteScope::Project, "x").unwrap().unwrap();
    assert_eq!(path, other_root.join("CLAUDE.md"));
    assert!(
        context.remember(NoteScope::User, "x").unwrap().is_err(),
        "no home"
    );
}

/// The file a note goes to and the one `/memory` hands an editor (`instructions_file`) pass
/// one check (adversarial review of issue 43): a planted `AGENTS.md` that is a symbolic link
/// (out of the project, or to a file inside it, which the editor would follow wherever it
/// leads by then), a hard link to a file elsewhere, a FIFO or a folder is refused, and the
/// file it names keeps its bytes. Before, `/memory` opened a linked `AGENTS.md` in the editor
/// (which wrote through it, as root to `/etc/cron.d/...`), and a note was appended through a
/// hard link.
#[test]
fn notes_and_memory_never_write_through_a_planted_agents_md() {
    use dsh_agent::{Extension, NoteScope};
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "untouched\n").unwrap();
    type Plant<'a> = &'a dyn Fn(&std::path::Path);
    let plants: [(&str, Plant); 5] = [
        ("link out", &|at| {
            std::os::unix::fs::symlink(&victim, at).unwrap()
        }),
        ("link in", &|at| {
            std::fs::write(at.with_file_name("real.md"), "in\n").unwrap();
            std::os::unix::fs::symlink("real.md", at).unwrap()
        }),
        ("hard link", &|at| {
            // Hard links need one file system: the victim's copy lives beside the project.
            std::fs::hard_link(at.with_file_name("../hard-victim"), at).unwrap()
        }),
        ("fifo", &|at| {
            let name = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
        }),
        ("folder", &|at| std::fs::create_dir(at).unwrap()),
    ];
    for (what, plant) in plants {
        let base = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(base.path()).unwrap();
        let root = base.join("project");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(base.join("hard-victim"), "untouched\n").unwrap();
        plant(&root.join("AGENTS.md"));
        let context = ContextMessages::new(&root, None, Box::new(FixedDay(Default::default())));
        let why = context
            .instructions_file(NoteScope::Project)
            .unwrap()
            .expect_err(what);
        assert!(why.contains("AGENTS.md"), "{what}: {why}");
        let why = context
            .remember(NoteScope::Project, "planted")
            .unwrap()
            .expect_err(what);
        assert!(why.contains("AGENTS.md"), "{what}: {why}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
        assert_eq!(
            std::fs::read_to_string(base.join("hard-victim")).unwrap(),
            "untouched\n",
            "{what}"
        );
        if what == "link in" {
            assert_eq!(
                std::fs::read_to_string(root.join("real.md")).unwrap(),
                "in\n"
            );
        }
    }
}
