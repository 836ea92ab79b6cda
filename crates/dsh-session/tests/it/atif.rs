//! ATIF export of dsh's recorded sessions (docs/harbor.md, "Trajectories"): the structure
//! Harbor's validator requires (checked here without Python; `tests/harbor/` runs Harbor's own
//! validator over the same exports) and the numbers taken from the log.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dsh_session::{export_atif, load_file, load_sub_agent_logs, AtifOptions, Event, PriceTable};
use serde_json::Value;

fn fixtures() -> PathBuf {
    dsh_test_support::snapshot_fixtures_dir()
        .parent()
        .map(Path::to_path_buf)
        .expect("fixtures/dsh")
}

fn options() -> AtifOptions {
    AtifOptions {
        agent_name: "dsh".into(),
        agent_version: "test".into(),
        prices: PriceTable::default_deepseek(),
    }
}

fn export(rel: &str) -> (Value, dsh_session::LoadedLog) {
    let main = fixtures().join(rel);
    let log = load_file(&main).expect("recorded log loads");
    let (subs, _) = load_sub_agent_logs(main.parent().expect("folder"), &main);
    (export_atif(&log, &subs, &options()), log)
}

/// The rules of Harbor's `Trajectory` model that a producer can break: sequential step ids,
/// agent-only fields on agent steps only, observations naming calls of their own step,
/// resolvable and unique sub-agent references; recursively for embedded trajectories.
fn check_structure(t: &Value) {
    assert_eq!(t["schema_version"], "ATIF-v1.7");
    assert!(t["agent"]["name"].is_string() && t["agent"]["version"].is_string());
    let steps = t["steps"].as_array().expect("steps");
    assert!(!steps.is_empty());
    let embedded: Vec<&str> = t["subagent_trajectories"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["trajectory_id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let unique: BTreeSet<&str> = embedded.iter().copied().collect();
    assert_eq!(unique.len(), embedded.len(), "trajectory ids unique");
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step["step_id"], i + 1);
        let source = step["source"].as_str().expect("source");
        assert!(["system", "user", "agent"].contains(&source));
        assert!(step["message"].is_string());
        if source != "agent" {
            for field in ["model_name", "reasoning_content", "tool_calls", "metrics"] {
                assert!(step.get(field).is_none(), "{field} on a {source} step");
            }
        }
        let calls: BTreeSet<&str> = step["tool_calls"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["tool_call_id"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        for call in step["tool_calls"].as_array().into_iter().flatten() {
            assert!(call["arguments"].is_object());
        }
        for result in step["observation"]["results"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(id) = result["source_call_id"].as_str() {
                assert!(calls.contains(id), "result names call {id} of another step");
            }
            for r in result["subagent_trajectory_ref"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let id = r["trajectory_id"].as_str().expect("ref id");
                assert!(unique.contains(id), "ref {id} resolves");
            }
        }
    }
    for sub in t["subagent_trajectories"].as_array().into_iter().flatten() {
        check_structure(sub);
    }
}

#[test]
fn every_recorded_acp_scenario_exports_a_well_formed_trajectory() {
    let mut count = 0;
    for dir in dsh_test_support::snapshot_fixture_dirs().expect("scenario folders") {
        let main = dir.join("session.jsonl");
        let log = load_file(&main).expect("recorded log loads");
        let (subs, _) = load_sub_agent_logs(&dir, &main);
        let t = export_atif(&log, &subs, &options());
        check_structure(&t);
        count += 1;
    }
    assert!(count >= 29, "only {count} scenarios");
}

#[test]
fn a_text_turn_has_user_and_agent_steps_with_the_logged_usage() {
    let (t, log) = export("acp-snapshots/text-turn/session.jsonl");
    check_structure(&t);
    let steps = t["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["source"] == "user"));
    let agent: Vec<&Value> = steps.iter().filter(|s| s["source"] == "agent").collect();
    assert!(!agent.is_empty());
    // Each agent step's prompt tokens are the logged usage's billed input.
    let usages: Vec<dsh_llm::Usage> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::AssistantMessage(m) => m.usage,
            _ => None,
        })
        .collect();
    let prompt: u64 = usages.iter().map(|u| u.billed_input()).sum();
    let completion: u64 = usages.iter().map(|u| u.output_tokens).sum();
    assert!(prompt > 0);
    assert_eq!(t["final_metrics"]["total_prompt_tokens"], prompt);
    assert_eq!(t["final_metrics"]["total_completion_tokens"], completion);
    assert!(t["final_metrics"]["total_cost_usd"].as_f64().unwrap() > 0.0);
    assert_eq!(t["final_metrics"]["total_steps"], steps.len());
}

#[test]
fn tool_results_are_observations_of_the_step_that_called() {
    let (t, _) = export("acp-snapshots/tool-call-turn/session.jsonl");
    check_structure(&t);
    let with_calls: Vec<&Value> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tool_calls"].is_array())
        .collect();
    assert!(!with_calls.is_empty());
    for step in with_calls {
        let calls = step["tool_calls"].as_array().unwrap().len();
        let results = step["observation"]["results"]
            .as_array()
            .map_or(0, Vec::len);
        assert_eq!(calls, results, "every call has its result: {step}");
    }
}

#[test]
fn sub_agents_are_embedded_and_linked_to_the_call_that_ran_them() {
    let (t, _) = export("examples/acp-agent/tests/snapshots/subagent-multi/session.jsonl");
    check_structure(&t);
    let subs = t["subagent_trajectories"].as_array().expect("embedded");
    assert_eq!(subs.len(), 2);
    // The call asking for ALPHA is linked to the child whose first message asks for ALPHA.
    for step in t["steps"].as_array().unwrap() {
        for (call, result) in step["tool_calls"].as_array().into_iter().flatten().zip(
            step["observation"]["results"]
                .as_array()
                .into_iter()
                .flatten(),
        ) {
            let prompt = call["arguments"]["prompt"].as_str().unwrap();
            let id = result["subagent_trajectory_ref"][0]["trajectory_id"]
                .as_str()
                .unwrap();
            let child = subs.iter().find(|s| s["trajectory_id"] == id).unwrap();
            let first_user = child["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["source"] == "user")
                .unwrap();
            assert_eq!(
                first_user["message"].as_str().unwrap().trim(),
                prompt.trim()
            );
        }
    }
    // The run's cost counts the children's.
    let own: f64 = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["metrics"]["cost_usd"].as_f64())
        .sum();
    let children: f64 = subs
        .iter()
        .map(|s| s["final_metrics"]["total_cost_usd"].as_f64().unwrap())
        .sum();
    let total = t["final_metrics"]["total_cost_usd"].as_f64().unwrap();
    assert!(children > 0.0);
    assert!((total - own - children).abs() < 1e-12);
}

#[test]
fn a_compaction_becomes_system_steps() {
    let (t, _) =
        export("examples/headless-agent/tests/snapshots/compaction-recovery/session.jsonl");
    check_structure(&t);
    let steps = t["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["source"] == "system"
        && s["message"]
            .as_str()
            .unwrap()
            .starts_with("Compaction summary:")));
    assert!(steps
        .iter()
        .any(|s| s["source"] == "system" && s["extra"]["compaction"] == true));
}
