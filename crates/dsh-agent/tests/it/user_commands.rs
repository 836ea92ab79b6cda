//! Slash commands contributed by extensions: user-invocable skills listed and expanded
//! through the agent's handle, queued as the next turn's user message.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet, ReplayAdapter, SkillSet, Skills};
use dsh_llm::{AdapterRegistry, CallConfig};
use dsh_session::{open_store, StoreKind};
use dsh_test_support::chunks::text;
use dsh_tools::{SpillDir, ToolContext, ToolRegistry};

fn skill(dir: &std::path::Path, name: &str, extra: &str) {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: The {name} skill.\n{extra}---\nDo the {name} thing.\n"
        ),
    )
    .unwrap();
}

#[tokio::test]
async fn user_invocable_skills_are_commands_that_queue_a_turn() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let skills_dir = cwd.path().join(".dsh/skills");
    skill(&skills_dir, "review", "");
    skill(&skills_dir, "deploy", "disable-model-invocation: true\n");
    skill(&skills_dir, "internal", "user-invocable: false\n");
    let set = SkillSet::discover(&[skills_dir]);

    let mut adapters = AdapterRegistry::new();
    adapters
        .register(
            "scripted",
            Arc::new(ReplayAdapter::new(vec![text("reviewed")])),
        )
        .unwrap();
    let extensions = ExtensionSet::new();
    let _skills = extensions.register(Arc::new(Skills::new(set)));
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::new()),
        extensions,
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("s")).unwrap(),
        )
        .unwrap(),
        options: AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path()),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();

    let names: Vec<String> = handle.user_commands().into_iter().map(|c| c.name).collect();
    assert_eq!(names, vec!["deploy", "review"]);

    let err = handle.run_user_command("internal", "").unwrap_err();
    assert!(err.to_string().contains("not user-invocable"), "{err}");
    let err = handle.run_user_command("nope", "").unwrap_err();
    assert!(err.to_string().contains("unknown command /nope"), "{err}");
    assert!(
        handle.pending().0.is_empty(),
        "a refused command queues nothing"
    );

    handle.run_user_command("review", "the parser").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.final_text, "reviewed");
    let raw = std::fs::read_to_string(handle.location()).unwrap();
    assert!(raw.contains("Do the review thing."), "{raw}");
    assert!(raw.contains("User request: the parser"));
}

/// The model and tool names of each logged request header, in order.
fn headers(raw: &str) -> Vec<(String, Vec<String>)> {
    raw.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["type"] == "request/header")
        .map(|v| {
            let header = &v["data"]["header"];
            let tools = header["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect();
            (
                header["config"]["model"].as_str().unwrap().to_string(),
                tools,
            )
        })
        .collect()
}

/// A command file's `allowed-tools` and `model` hold for the turn its message starts; the
/// next turn has the session's model and every tool again, and the log records the command.
#[tokio::test]
async fn a_custom_commands_tools_and_model_hold_for_its_turn_only() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let commands = home.path().join("commands");
    std::fs::create_dir_all(commands.join("git")).unwrap();
    std::fs::write(
        commands.join("git/look.md"),
        "---\ndescription: Look at a file\nallowed-tools: read, gl*\nmodel: small\n---\nRead $1 closely.\n",
    )
    .unwrap();
    let set = dsh_agent::CustomCommandSet::load(Some(&commands), None);
    assert!(set.problems().is_empty(), "{:?}", set.problems());

    let mut adapters = AdapterRegistry::new();
    adapters
        .register(
            "scripted",
            Arc::new(ReplayAdapter::new(vec![text("looked"), text("plain")])),
        )
        .unwrap();
    let extensions = ExtensionSet::new();
    let _commands = extensions.register(Arc::new(dsh_agent::CustomCommands::new(set, |m| {
        m == "small"
    })));
    let mut tools = ToolRegistry::new();
    for tool in dsh_tools::builtin_tools() {
        tools.register(tool).unwrap();
    }
    let parts = AgentParts {
        adapters,
        tools: Arc::new(tools),
        extensions,
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("s")).unwrap(),
        )
        .unwrap(),
        options: AgentOptions::new(CallConfig::new("scripted", "big"), cwd.path()),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    let listed = handle.user_commands();
    assert_eq!(listed[0].name, "git:look");
    assert_eq!(listed[0].description, "Look at a file");

    handle.run_user_command("git:look", "src/main.rs").unwrap();
    agent.run_turn().await.unwrap().unwrap();
    handle.followup("and now?").unwrap();
    agent.run_turn().await.unwrap().unwrap();

    let raw = std::fs::read_to_string(handle.location()).unwrap();
    assert!(raw.contains("Read src/main.rs closely."), "{raw}");
    let headers = headers(&raw);
    assert_eq!(headers.len(), 2, "{headers:?}");
    assert_eq!(headers[0].0, "small");
    assert_eq!(headers[0].1, ["glob", "read"]);
    assert_eq!(headers[1].0, "big");
    assert!(
        headers[1].1.len() > 2 && headers[1].1.iter().any(|t| t == "bash"),
        "{headers:?}"
    );
    let record = raw
        .lines()
        .find(|l| l.contains("\"user/command\""))
        .expect("the command is recorded");
    assert!(
        record.contains("\"name\":\"git:look\"") && record.contains("look.md"),
        "{record}"
    );
}
