//! Plan mode over ACP (docs/acp.md, "Plan mode"): the session mode `plan`, the review of
//! `exit_plan_mode` as `session/request_permission`, and the mode reported back when the plan
//! is approved.

use super::*;

/// A reply that presents `plan` for review: an `exit_plan_mode` call with id `id`.
fn present_plan(id: &str, plan: &str) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .tool_call(
                0,
                id,
                "exit_plan_mode",
                &json!({ "plan": plan }).to_string(),
            )
            .finish("tool_calls", None),
    )
}

/// A fake provider, and a client connected to a server with plan mode and workspace-write
/// access; the folders live as long as this value.
struct PlanSetup {
    provider: FakeProvider,
    _home: tempfile::TempDir,
    _cwd_dir: tempfile::TempDir,
    /// The session's working directory, canonical.
    cwd: PathBuf,
    client: Client,
}

/// Starts the fake provider with `replies` (the last one, "ok", is added here) and connects.
async fn plan_setup(mut replies: Vec<ScriptedReply>) -> PlanSetup {
    replies.push(ScriptedReply::from(
        SseReply::new().text("ok").finish("stop", None),
    ));
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd_dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(cwd_dir.path()).unwrap();
    let mut factory = TestFactory::new(
        provider.base_url(),
        home.path(),
        PermissionPreset::WorkspaceWrite,
    );
    factory.plan = true;
    let client = connect(factory);
    PlanSetup {
        provider,
        _home: home,
        _cwd_dir: cwd_dir,
        cwd,
        client,
    }
}

/// Switches `session` to plan mode: the response.
async fn enter_plan_mode(client: &mut Client, session: &str) -> Value {
    let id = client
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "plan"}),
        )
        .await;
    client.response(id, "").await
}

/// The requests the server sent the client with `method`, in order.
fn sent<'a>(client: &'a Client, method: &str) -> Vec<&'a Value> {
    client
        .seen
        .iter()
        .filter(|l| l["method"] == method)
        .collect()
}

/// The names of a permission request's options, in order.
fn option_names(params: &Value) -> Vec<&str> {
    params["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_is_a_session_mode_and_the_review_is_a_permission_request() {
    let plan = "# Add a greeting flag\n\n- parse `--greeting`";
    let mut setup = plan_setup(vec![
        ScriptedReply::from(
            SseReply::new()
                .tool_call(
                    0,
                    "call_w",
                    "write",
                    r#"{"file_path":"out.txt","content":"x\n"}"#,
                )
                .finish("tool_calls", None),
        ),
        present_plan("call_plan", plan),
    ])
    .await;
    let (cwd, client) = (&setup.cwd, &mut setup.client);
    let id = client
        .request(
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        )
        .await;
    let answer = client.response(id, "").await;
    let session = answer["result"]["sessionId"].as_str().unwrap().to_string();
    let modes = &answer["result"]["modes"];
    assert_eq!(modes["currentModeId"], "workspace-write", "{answer}");
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "read-only",
            "ask",
            "workspace-write",
            "danger-full-access",
            "plan"
        ]
    );

    assert_eq!(enter_plan_mode(client, &session).await["result"], json!({}));
    let switched = updates_of(client, "current_mode_update");
    assert_eq!(switched.last().unwrap()["currentModeId"], "plan");

    // In plan mode the write is refused with the plan-mode message; the plan is reviewed with
    // a permission request on the exit_plan_mode card, and approving it leaves plan mode.
    let id = client
        .request("session/prompt", prompt(&session, "plan a flag"))
        .await;
    let answer = client
        .response_with(id, |_| {
            Some(json!({"outcome": {"outcome": "selected", "optionId": "answer-0"}}))
        })
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let (text, status) = tool_result(client, "call_w");
    assert_eq!(status, "failed");
    assert!(text.contains("plan mode"), "{text}");
    assert!(!cwd.join("out.txt").exists());
    let asked = sent(client, "session/request_permission");
    assert_eq!(asked.len(), 1);
    let params = &asked[0]["params"];
    assert_eq!(params["toolCall"]["toolCallId"], "call_plan");
    assert_eq!(
        option_names(params),
        ["Approve", "Keep planning", "Don't answer"]
    );
    assert!(
        params.to_string().contains("parse `--greeting`"),
        "{params}"
    );
    let (text, status) = tool_result(client, "call_plan");
    assert_eq!(status, "completed");
    assert!(text.contains("Plan approved"), "{text}");
    let switched = updates_of(client, "current_mode_update");
    assert_eq!(
        switched.last().unwrap()["currentModeId"],
        "workspace-write",
        "{switched:?}"
    );
}

/// A client that renders forms (`clientCapabilities.elicitation.form`) gets "Approve with
/// edits": the plan editor is an `elicitation/create` form prefilled with the plan, and the
/// edited plan is what the model reads; "Keep planning" asks for feedback the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_with_edits_is_an_elicitation_form_prefilled_with_the_plan() {
    let plan = "# Add a greeting flag\n\n- parse `--greeting`";
    let edited = "# Add a greeting flag\n\n- parse `--greeting`\n- document it in the README";
    let mut setup = plan_setup(vec![
        present_plan("call_p1", plan),
        present_plan("call_p2", plan),
    ])
    .await;
    let (cwd, provider, client) = (&setup.cwd, &setup.provider, &mut setup.client);
    let id = client
        .request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": {}}}}),
        )
        .await;
    client.response(id, "").await;
    let session = new_session(client, cwd).await;
    enter_plan_mode(client, &session).await;

    // First review: Keep planning, with feedback typed in the form. Second: Approve with
    // edits, the form's plan replaced by the user's version.
    let id = client
        .request("session/prompt", prompt(&session, "plan a flag"))
        .await;
    let mut reviews = 0;
    let answer = client
        .response_with(id, |request| {
            if request["method"] == "elicitation/create" {
                return Some(if reviews == 1 {
                    json!({"action": "accept", "content": {"feedback": "mention the README"}})
                } else {
                    json!({"action": "accept", "content": {"plan": edited}})
                });
            }
            reviews += 1;
            let option = if reviews == 1 {
                "answer-1"
            } else {
                "plan-edit"
            };
            Some(json!({"outcome": {"outcome": "selected", "optionId": option}}))
        })
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    let asked = sent(client, "session/request_permission");
    assert_eq!(asked.len(), 2);
    assert_eq!(
        option_names(&asked[0]["params"]),
        [
            "Approve",
            "Approve with edits",
            "Keep planning",
            "Don't answer"
        ]
    );
    let forms = sent(client, "elicitation/create");
    assert_eq!(forms.len(), 2);
    assert_eq!(forms[1]["params"]["toolCallId"], "call_p2");
    assert_eq!(forms[1]["params"]["mode"], "form");
    assert_eq!(
        forms[1]["params"]["requestedSchema"]["properties"]["plan"]["default"],
        plan
    );
    assert_eq!(forms[1]["params"]["sessionId"], json!(session));

    let (text, status) = tool_result(client, "call_p1");
    assert_eq!(status, "failed");
    assert!(text.contains("mention the README"), "{text}");
    let (text, status) = tool_result(client, "call_p2");
    assert_eq!(status, "completed");
    assert!(text.contains("document it in the README"), "{text}");
    // The model read the edited plan in the tool result.
    let last = provider.requests().last().unwrap().body.to_string();
    assert!(last.contains("document it in the README"), "{last}");
    let switched = updates_of(client, "current_mode_update");
    assert_eq!(switched.last().unwrap()["currentModeId"], "workspace-write");
}
