//! Built-in extension: the session's safety policy (docs/SECURITY.md).
//!
//! * Logs the permission preset and the sandbox mode as model-invisible events
//!   (`permission/preset {preset}`, `sandbox/mode {mode, detail, network}`) before the first
//!   step of a session, and again whenever they differ from what the log last recorded (a
//!   resumed session with another preset or host). A switch with `/permission`
//!   ([`crate::AgentHandle::set_permission`]) is logged by the handle; the policy takes the new
//!   preset from the step where it applies.
//! * Escalation: a call whose arguments carry `sandbox_permissions` (dsh's field: the wider
//!   preset the call needs) with a `justification` becomes [`ToolVerdict::Ask`]; the agent's
//!   approver decides (headless: rejected). Without a justification, or with an unknown mode,
//!   the call is denied with the reason. A mode no wider than the session's is ignored.
//! * Network (docs/SECURITY.md, "Network"): in a session without network
//!   ([`SafetyPolicy::with_network`]), a `bash` call with `network: true` and a `justification`
//!   becomes [`ToolVerdict::Ask`] (without one it is denied); `bash` gives the call the network
//!   only once it was approved. With network it changes nothing.
//! * The `ask` preset (docs/SECURITY.md, "Presets and switching"): every call that may change
//!   something becomes [`ToolVerdict::Ask`] ("the session's preset is ask: ..."): `write`,
//!   `edit`, `bash` (foreground and background) and any tool not in [`RUNS_UNASKED`], the
//!   tools known to only read or to touch nothing but the session's own state. MCP tools
//!   (`mcp__*`) are left to the MCP extension, which asks under `ask` for every tool not
//!   declared read-only. Remembered approval rules answer these asks as any other; headless,
//!   the approver refuses them. The tools refuse an unapproved `write`/`edit`/`bash` under
//!   `ask` by themselves too, so a session built without this policy writes nothing unasked.
//! * Protected paths (docs/SECURITY.md, "Protected paths"): under `workspace-write` (and
//!   `ask`), a `write` or `edit` call whose real target lies in a protected entry (`.git/hooks`,
//!   `.git/config`, `.dsh`, `.env*`, `.agents`, `.mcp.json`, at any depth, symlinks followed)
//!   becomes [`ToolVerdict::Ask`] with the reason "writes `<path>`, which configures code that
//!   runs later (...)"; headless, the approver refuses it (`PERMISSION_DENIED` naming the
//!   path). The tools refuse such writes by themselves unless the call was approved, so this
//!   only decides who is asked. Needs [`SafetyPolicy::with_workspace`].
//! * Leftover temp files: on resume ([`Extension::restore`]), `.dsh-tmp-<hex>` files that a
//!   crash between creating and renaming them left beside the targets of the session's logged
//!   `write`/`edit` calls are removed (only in those directories, only below a writable root,
//!   never following links). Needs [`SafetyPolicy::with_workspace`].
//! * Redaction: every tool outcome passes through a [`SecretRedactor`] before it is logged
//!   or sent, so secret values (from the environment, plus e.g. the provider key) appear as
//!   `[REDACTED:<NAME>]`.

use dsh_llm::LockExt;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dsh_session::{Envelope, Event};
use dsh_tools::{PermissionPreset, SecretRedactor};
use serde_json::Value;

use crate::extension::{Extension, PreStepContext, ToolCallInfo, ToolPostContext, ToolVerdict};

/// Event type of the preset record.
pub const PERMISSION_PRESET_EVENT: &str = "permission/preset";
/// Event type of the sandbox record.
pub const SANDBOX_MODE_EVENT: &str = "sandbox/mode";

/// Tools whose `file_path` argument is written (protected-path approvals, leftover cleanup).
pub(crate) const FILE_WRITING_TOOLS: [&str; 2] = ["write", "edit"];

/// The tools that run under `ask` without a question: they read (files, the web, skills,
/// job output, the subagent list) or change only the session's own state (the todo list,
/// questions to the user, plan review, messages to and from subagents, stopping a job or a
/// subagent turn). A subagent starts under its parent's preset, so its own writes and commands
/// are asked in turn. Any other tool (a new built-in, a tool added later) is asked.
pub const RUNS_UNASKED: &[&str] = &[
    "read",
    "glob",
    "grep",
    "read_image",
    "web_fetch",
    "web_search",
    "skill",
    "todo_write",
    "ask_user_question",
    "exit_plan_mode",
    "job_output",
    "job_list",
    "job_kill",
    "subagent",
    "subagent_fork",
    "send_message",
    "list_agents",
    "interrupt_agent",
    "report",
];

/// What protected-path approvals say the write would do.
const PROTECTED_REASON: &str =
    "which configures code that runs later (git hooks/config, dsh settings, .env)";

/// The safety policy of one session (see the module docs).
pub struct SafetyPolicy {
    /// `(preset, sandbox event data)` in force.
    current: Mutex<(PermissionPreset, Value)>,
    redactor: SecretRedactor,
    /// What the log last recorded: `(preset event data, sandbox event data)`.
    logged: Mutex<(Option<Value>, Option<Value>)>,
    /// The session cwd and the writable roots of `workspace-write` (`ToolContext::cwd`,
    /// `ToolContext::writable_roots`), for protected paths and leftover cleanup.
    workspace: Option<(PathBuf, Vec<PathBuf>)>,
    /// Whether the session's commands have the network (`[sandbox] network`).
    network: bool,
}

impl SafetyPolicy {
    /// The policy for a session running under `preset`, whose commands are confined by
    /// `sandbox_mode` (`bubblewrap`, `landlock`, `unavailable`, `none`) for the reason
    /// `sandbox_detail`. Redacts the secrets of this process's environment
    /// ([`SecretRedactor::from_env`]); add more with [`SafetyPolicy::with_secret`].
    pub fn new(preset: PermissionPreset, sandbox_mode: &str, sandbox_detail: &str) -> Self {
        Self {
            current: Mutex::new((
                preset,
                crate::permission::sandbox_data(sandbox_mode, sandbox_detail),
            )),
            redactor: SecretRedactor::from_env(),
            logged: Mutex::new((None, None)),
            workspace: None,
            network: true,
        }
    }

    /// Sets whether the session's confined commands have the network (default `true`); without
    /// it, a `bash` call's `network: true` is an escalation (see the module docs).
    pub fn with_network(mut self, network: bool) -> Self {
        self.network = network;
        self
    }

    /// The network part of `tool_pre`: `None` when the call asks for nothing more, else the
    /// reason to ask (`Ok`) or to deny (`Err`).
    fn network_escalation(&self, call: &ToolCallInfo) -> Option<Result<String, String>> {
        if self.network
            || call.name != "bash"
            || self.preset() == PermissionPreset::DangerFullAccess
        {
            return None;
        }
        let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.arguments) else {
            return None;
        };
        if args.get("network") != Some(&Value::Bool(true)) {
            return None;
        }
        let justification = args
            .get("justification")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        Some(if justification.is_empty() {
            Err("network: true needs a `justification`: one sentence for the user saying why this exact command needs the network, which the session's commands do not have".to_string())
        } else {
            Ok(format!("bash asks for network access: {justification}"))
        })
    }

    /// Judges `write`/`edit` targets against the protected paths of `writable_roots` (the
    /// session's `ToolContext::writable_roots`, with `cwd` its `ToolContext::cwd`), and cleans
    /// leftover temp files there on resume. Without it the policy asks nothing about protected
    /// paths and the tools refuse such writes themselves.
    pub fn with_workspace(mut self, cwd: &Path, writable_roots: Vec<PathBuf>) -> Self {
        self.workspace = Some((cwd.to_path_buf(), writable_roots));
        self
    }

    /// Also redacts `value` as `[REDACTED:<name>]` (e.g. a provider key read from a file).
    pub fn with_secret(mut self, name: &str, value: &str) -> Self {
        self.redactor.add(name, value);
        self
    }

    /// Replaces the redactor.
    pub fn with_redactor(mut self, redactor: SecretRedactor) -> Self {
        self.redactor = redactor;
        self
    }

    fn preset(&self) -> PermissionPreset {
        self.current.lock_or_recover().0
    }

    /// The approval reason for a `write`/`edit` call to a protected path under
    /// `workspace-write` (or `ask`, confined the same), or `None`.
    fn protected_write(&self, call: &ToolCallInfo) -> Option<String> {
        if !FILE_WRITING_TOOLS.contains(&call.name.as_str())
            || self.preset().confinement() != PermissionPreset::WorkspaceWrite
        {
            return None;
        }
        let (cwd, roots) = self.workspace.as_ref()?;
        let file_path = file_path_of(&call.arguments)?;
        let (real, _entry) = dsh_tools::protected_write_path(cwd, roots, &file_path)?;
        let requested = dsh_tools::absolutize(cwd, &file_path);
        let via = if requested == real {
            String::new()
        } else {
            format!(" (as {})", shown(cwd, &requested))
        };
        Some(format!(
            "writes {}{via}, {PROTECTED_REASON}",
            shown(cwd, &real)
        ))
    }

    /// The escalation part of `tool_pre` (see the module docs).
    fn escalation(&self, call: &ToolCallInfo) -> ToolVerdict {
        let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.arguments) else {
            return ToolVerdict::Continue;
        };
        let Some(requested) = args.get("sandbox_permissions") else {
            return ToolVerdict::Continue;
        };
        // `ask` names no confinement of its own: asking for it is asking for workspace-write.
        let wanted = match requested.as_str().map(str::parse::<PermissionPreset>) {
            Some(Ok(preset)) => preset.confinement(),
            _ => {
                return ToolVerdict::Deny {
                    reason: format!(
                        "sandbox_permissions must be \"workspace-write\" or \"danger-full-access\", not {requested}"
                    ),
                }
            }
        };
        let preset = self.preset();
        if breadth(wanted) <= breadth(preset) {
            return ToolVerdict::Continue;
        }
        let justification = args
            .get("justification")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if justification.is_empty() {
            return ToolVerdict::Deny {
                reason: format!(
                    "sandbox_permissions \"{wanted}\" needs a `justification`: one sentence for the user saying why this exact call needs more than the session's {preset} preset"
                ),
            };
        }
        ToolVerdict::Ask {
            reason: format!(
                "{} asks for {wanted} instead of {preset}: {justification}",
                call.name
            ),
            escalation: Some(wanted),
        }
    }

    /// Removes leftover temp files beside the targets of the logged `write`/`edit` calls in
    /// `events` (see the module docs). Returns the paths removed.
    pub fn remove_leftover_temps(&self, events: &[Envelope]) -> Vec<PathBuf> {
        let Some((cwd, roots)) = &self.workspace else {
            return Vec::new();
        };
        let mut dirs = BTreeSet::new();
        for envelope in events {
            let Event::ToolCall(call) = &envelope.event else {
                continue;
            };
            if !FILE_WRITING_TOOLS.contains(&call.name.as_str()) {
                continue;
            }
            let Some(file_path) = file_path_of(&call.arguments) else {
                continue;
            };
            let Ok(real) = dsh_tools::resolve_real_path(&dsh_tools::absolutize(cwd, &file_path))
            else {
                continue;
            };
            if let Some(dir) = real.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        let mut removed = Vec::new();
        for dir in dirs {
            // The longest root the directory lies in; directories outside every root are not
            // touched (a session under danger-full-access cleans only inside them too).
            let Some(root) = roots
                .iter()
                .filter(|root| dir.starts_with(root))
                .max_by_key(|root| root.as_os_str().len())
            else {
                continue;
            };
            let Ok(relative) = dir.strip_prefix(root) else {
                continue;
            };
            if let Ok(names) = dsh_tools::remove_leftover_temps(root, relative) {
                removed.extend(names.into_iter().map(|name| dir.join(name)));
            }
        }
        removed
    }
}

/// The `file_path` argument of a `write`/`edit` call, if the arguments carry one.
fn file_path_of(arguments: &str) -> Option<String> {
    let args: Value = serde_json::from_str(arguments).ok()?;
    let path = args.get("file_path")?.as_str()?;
    (!path.is_empty()).then(|| path.to_string())
}

/// `path` relative to `cwd` when inside it, else absolute.
fn shown(cwd: &Path, path: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => path.display().to_string(),
    }
}

/// Orders presets by what their confinement allows (`ask` is confined as `workspace-write`,
/// so asking for `workspace-write` under `ask` escalates nothing).
fn breadth(preset: PermissionPreset) -> u8 {
    match preset.confinement() {
        PermissionPreset::ReadOnly => 0,
        PermissionPreset::WorkspaceWrite | PermissionPreset::Ask => 1,
        PermissionPreset::DangerFullAccess => 2,
    }
}

/// Why `call` needs the user's approval because the session's preset is `ask`, or `None`
/// (another preset, a tool in [`RUNS_UNASKED`], or an MCP tool, which the MCP extension
/// judges).
fn ask_preset_reason(call: &ToolCallInfo) -> Option<String> {
    if !call.preset.asks_first()
        || RUNS_UNASKED.contains(&call.name.as_str())
        || call.name.starts_with("mcp__")
    {
        return None;
    }
    let what = match call.name.as_str() {
        "bash" => "runs a command".to_string(),
        "write" | "edit" => match file_path_of(&call.arguments) {
            Some(path) => format!("changes {path}"),
            None => "changes a file".to_string(),
        },
        _ => "may change something".to_string(),
    };
    Some(format!(
        "the session's preset is ask: every call that may change something is approved first; this {} call {what}",
        call.name
    ))
}

impl Extension for SafetyPolicy {
    fn name(&self) -> &str {
        "safety"
    }

    fn restore(&self, events: &[Envelope]) {
        for envelope in events {
            self.on_event(envelope);
        }
        // A crash between creating a temp file and renaming it leaves `.dsh-tmp-<hex>` beside
        // the target; the resumed session removes its own leftovers.
        let _removed = self.remove_leftover_temps(events);
    }

    fn on_event(&self, envelope: &Envelope) {
        if let Event::Opaque { event_type, data } = &envelope.event {
            let mut logged = self.logged.lock_or_recover();
            match event_type.as_str() {
                PERMISSION_PRESET_EVENT => logged.0 = Some(data.clone()),
                SANDBOX_MODE_EVENT => logged.1 = Some(data.clone()),
                _ => {}
            }
        }
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        let (preset, sandbox) = {
            let mut current = self.current.lock_or_recover();
            if let Some(change) = &ctx.permission_change {
                *current = (change.preset, change.sandbox_data());
            }
            (crate::permission::preset_data(current.0), current.1.clone())
        };
        let mut logged = self.logged.lock_or_recover();
        if logged.0.as_ref() != Some(&preset) {
            ctx.log_events.push(Event::Opaque {
                event_type: PERMISSION_PRESET_EVENT.to_string(),
                data: preset.clone(),
            });
            logged.0 = Some(preset);
        }
        if logged.1.as_ref() != Some(&sandbox) {
            ctx.log_events.push(Event::Opaque {
                event_type: SANDBOX_MODE_EVENT.to_string(),
                data: sandbox.clone(),
            });
            logged.1 = Some(sandbox);
        }
        Ok(())
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        let protected = self.protected_write(call);
        let verdict = match (self.escalation(call), protected) {
            (ToolVerdict::Continue, Some(reason)) => ToolVerdict::Ask {
                reason,
                escalation: None,
            },
            (ToolVerdict::Ask { reason, escalation }, Some(protected)) => ToolVerdict::Ask {
                reason: format!("{reason}; it {protected}"),
                escalation,
            },
            (verdict, _) => verdict,
        };
        // Under `ask` a call that changes something is asked even when nothing above asks;
        // an ask above already puts it to the user, with its own reason.
        let verdict = match (verdict, ask_preset_reason(call)) {
            (ToolVerdict::Continue, Some(reason)) => ToolVerdict::Ask {
                reason,
                escalation: None,
            },
            (verdict, _) => verdict,
        };
        match (verdict, self.network_escalation(call)) {
            (verdict, None) | (verdict @ ToolVerdict::Deny { .. }, _) => verdict,
            (_, Some(Err(reason))) => ToolVerdict::Deny { reason },
            (ToolVerdict::Ask { reason, escalation }, Some(Ok(network))) => ToolVerdict::Ask {
                reason: format!("{reason}; {network}"),
                escalation,
            },
            (_, Some(Ok(reason))) => ToolVerdict::Ask {
                reason,
                escalation: None,
            },
        }
    }

    fn tool_post(&self, ctx: &mut ToolPostContext<'_>) {
        self.redactor.redact_outcome(ctx.outcome);
    }

    fn tool_progress(&self, progress: &mut dsh_tools::ToolProgress) {
        self.redactor.redact_progress(progress);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tokio_util::sync::CancellationToken;

    fn call(arguments: &str) -> ToolCallInfo {
        ToolCallInfo {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: arguments.into(),
            cancel: CancellationToken::new(),
            preset: PermissionPreset::WorkspaceWrite,
        }
    }

    #[test]
    fn ask_asks_before_every_call_that_may_change_something() {
        let policy = SafetyPolicy::new(PermissionPreset::Ask, "landlock", "test");
        let under_ask = |name: &str, arguments: &str| ToolCallInfo {
            name: name.into(),
            preset: PermissionPreset::Ask,
            ..call(arguments)
        };
        for name in RUNS_UNASKED {
            assert_eq!(
                policy.tool_pre(&under_ask(name, "{}")),
                ToolVerdict::Continue,
                "{name}"
            );
        }
        // MCP tools are judged by the MCP extension (by readOnlyHint and trust).
        assert_eq!(
            policy.tool_pre(&under_ask("mcp__srv__create", "{}")),
            ToolVerdict::Continue
        );
        for (name, arguments, says) in [
            ("write", r#"{"file_path":"a.txt"}"#, "changes a.txt"),
            ("edit", r#"{"file_path":"b.rs"}"#, "changes b.rs"),
            ("bash", r#"{"command":"ls"}"#, "runs a command"),
            (
                "bash",
                r#"{"command":"sleep 9","run_in_background":true}"#,
                "runs",
            ),
            // A tool this list does not know is asked too.
            ("new_tool", "{}", "may change something"),
        ] {
            let ToolVerdict::Ask { reason, escalation } =
                policy.tool_pre(&under_ask(name, arguments))
            else {
                panic!("{name} was not asked");
            };
            assert!(
                reason.contains("preset is ask") && reason.contains(says),
                "{reason}"
            );
            assert_eq!(escalation, None);
        }
        // Asking for workspace-write under `ask` escalates nothing but is still asked; a
        // real escalation keeps its own reason and preset.
        let ToolVerdict::Ask { escalation, .. } = policy.tool_pre(&under_ask(
            "bash",
            r#"{"command":"ls","sandbox_permissions":"workspace-write","justification":"x"}"#,
        )) else {
            panic!("not asked");
        };
        assert_eq!(escalation, None);
        let ToolVerdict::Ask { reason, escalation } = policy.tool_pre(&under_ask(
            "bash",
            r#"{"command":"ls","sandbox_permissions":"danger-full-access","justification":"x"}"#,
        )) else {
            panic!("not asked");
        };
        assert!(reason.contains("instead of ask"), "{reason}");
        assert_eq!(escalation, Some(PermissionPreset::DangerFullAccess));
        // The same calls under workspace-write run without a question.
        let plain = SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "landlock", "test");
        assert_eq!(
            plain.tool_pre(&call(r#"{"command":"ls"}"#)),
            ToolVerdict::Continue
        );
    }

    #[test]
    fn escalation_needs_a_wider_mode_and_a_justification() {
        let policy = SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "landlock", "test");
        assert_eq!(
            policy.tool_pre(&call(r#"{"command":"ls"}"#)),
            ToolVerdict::Continue
        );
        assert_eq!(
            policy.tool_pre(&call(r#"{"sandbox_permissions":"workspace-write"}"#)),
            ToolVerdict::Continue
        );
        let ToolVerdict::Deny { reason } =
            policy.tool_pre(&call(r#"{"sandbox_permissions":"danger-full-access"}"#))
        else {
            panic!("expected a denial");
        };
        assert!(reason.contains("justification"), "{reason}");
        let ToolVerdict::Deny { reason } =
            policy.tool_pre(&call(r#"{"sandbox_permissions":"root"}"#))
        else {
            panic!("expected a denial");
        };
        assert!(reason.contains("\"root\""), "{reason}");
        let verdict = policy.tool_pre(&call(
            r#"{"sandbox_permissions":"danger-full-access","justification":"install a package"}"#,
        ));
        assert_eq!(
            verdict,
            ToolVerdict::Ask {
                reason:
                    "bash asks for danger-full-access instead of workspace-write: install a package"
                        .into(),
                escalation: Some(PermissionPreset::DangerFullAccess),
            }
        );
    }

    #[test]
    fn network_is_an_escalation_only_in_a_session_without_it() {
        let with = SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "landlock", "test");
        let asked = r#"{"command":"curl x","network":true,"justification":"fetch a crate"}"#;
        assert_eq!(with.tool_pre(&call(asked)), ToolVerdict::Continue);
        let without = SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "landlock", "test")
            .with_network(false);
        assert_eq!(
            without.tool_pre(&call(asked)),
            ToolVerdict::Ask {
                reason: "bash asks for network access: fetch a crate".into(),
                escalation: None,
            }
        );
        let ToolVerdict::Deny { reason } =
            without.tool_pre(&call(r#"{"command":"curl x","network":true}"#))
        else {
            panic!("expected a denial");
        };
        assert!(reason.contains("justification"), "{reason}");
        assert_eq!(
            without.tool_pre(&call(r#"{"command":"ls","network":false}"#)),
            ToolVerdict::Continue
        );
        // Both at once: one question naming both.
        let both = r#"{"command":"x","network":true,"sandbox_permissions":"danger-full-access","justification":"set up"}"#;
        let ToolVerdict::Ask { reason, escalation } = without.tool_pre(&call(both)) else {
            panic!("expected a question");
        };
        assert_eq!(escalation, Some(PermissionPreset::DangerFullAccess));
        assert!(reason.contains("network access"), "{reason}");
    }

    #[test]
    fn protected_writes_ask_only_under_workspace_write() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        let write = |arguments: &str| ToolCallInfo {
            name: "write".into(),
            ..call(arguments)
        };
        let hook = r#"{"file_path":".git/hooks/pre-commit","content":"x"}"#;
        let expected = ToolVerdict::Ask {
            reason: format!("writes .git/hooks/pre-commit, {PROTECTED_REASON}"),
            escalation: None,
        };
        // Without the workspace the policy cannot judge paths: the tool refuses by itself.
        let bare = SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "none", "test");
        assert_eq!(bare.tool_pre(&write(hook)), ToolVerdict::Continue);

        let policy = SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "none", "test")
            .with_workspace(&cwd, vec![cwd.clone()]);
        assert_eq!(policy.tool_pre(&write(hook)), expected);
        assert_eq!(
            policy.tool_pre(&write(r#"{"file_path":"src/a.rs","content":"x"}"#)),
            ToolVerdict::Continue
        );
        // Other tools are not judged by their arguments here.
        assert_eq!(policy.tool_pre(&call(hook)), ToolVerdict::Continue);
        // Escalation and protected path together: one question naming both.
        let both = r#"{"file_path":".env","content":"x","sandbox_permissions":"danger-full-access","justification":"set up"}"#;
        let ToolVerdict::Ask { reason, escalation } = policy.tool_pre(&write(both)) else {
            panic!("expected a question");
        };
        assert_eq!(escalation, Some(PermissionPreset::DangerFullAccess));
        assert!(
            reason.ends_with(&format!("; it writes .env, {PROTECTED_REASON}")),
            "{reason}"
        );

        for preset in [
            PermissionPreset::ReadOnly,
            PermissionPreset::DangerFullAccess,
        ] {
            let other =
                SafetyPolicy::new(preset, "none", "test").with_workspace(&cwd, vec![cwd.clone()]);
            assert_eq!(
                other.tool_pre(&write(hook)),
                ToolVerdict::Continue,
                "{preset}"
            );
        }
    }

    #[test]
    fn logs_preset_and_sandbox_once_and_again_after_a_change() {
        let policy = SafetyPolicy::new(PermissionPreset::ReadOnly, "bubblewrap", "bwrap works");
        let mut pre = PreStepContext::default();
        policy.pre_step(&mut pre).unwrap();
        let types: Vec<&str> = pre.log_events.iter().map(|e| e.event_type()).collect();
        assert_eq!(types, vec![PERMISSION_PRESET_EVENT, SANDBOX_MODE_EVENT]);
        let mut again = PreStepContext::default();
        policy.pre_step(&mut again).unwrap();
        assert!(again.log_events.is_empty());

        // A resumed session recorded under another preset gets a new record.
        let resumed = SafetyPolicy::new(
            PermissionPreset::WorkspaceWrite,
            "bubblewrap",
            "bwrap works",
        );
        resumed.restore(
            &pre.log_events
                .iter()
                .cloned()
                .map(Envelope::new)
                .collect::<Vec<_>>(),
        );
        let mut next = PreStepContext::default();
        resumed.pre_step(&mut next).unwrap();
        let types: Vec<&str> = next.log_events.iter().map(|e| e.event_type()).collect();
        assert_eq!(types, vec![PERMISSION_PRESET_EVENT]);
    }
}
