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
