//! Built-in extension: the session's safety policy (SPEC S7).
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
//! * Redaction: every tool outcome passes through a [`SecretRedactor`] before it is logged
//!   or sent, so secret values (from the environment, plus e.g. the provider key) appear as
//!   `[REDACTED:<NAME>]`.

use std::sync::Mutex;

use dsh_session::{Envelope, Event};
use dsh_tools::{PermissionPreset, SecretRedactor};
use serde_json::Value;

use crate::extension::{Extension, PreStepContext, ToolCallInfo, ToolPostContext, ToolVerdict};

/// Event type of the preset record.
pub const PERMISSION_PRESET_EVENT: &str = "permission/preset";
/// Event type of the sandbox record.
pub const SANDBOX_MODE_EVENT: &str = "sandbox/mode";

/// The safety policy of one session (see the module docs).
pub struct SafetyPolicy {
    /// `(preset, sandbox event data)` in force.
    current: Mutex<(PermissionPreset, Value)>,
    redactor: SecretRedactor,
    /// What the log last recorded: `(preset event data, sandbox event data)`.
    logged: Mutex<(Option<Value>, Option<Value>)>,
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
        }
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
        self.current.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// Orders presets by what they allow.
fn breadth(preset: PermissionPreset) -> u8 {
    match preset {
        PermissionPreset::ReadOnly => 0,
        PermissionPreset::WorkspaceWrite => 1,
        PermissionPreset::DangerFullAccess => 2,
    }
}

impl Extension for SafetyPolicy {
    fn name(&self) -> &str {
        "safety"
    }

    fn restore(&self, events: &[Envelope]) {
        for envelope in events {
            self.on_event(envelope);
        }
    }

    fn on_event(&self, envelope: &Envelope) {
        if let Event::Opaque { event_type, data } = &envelope.event {
            let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
            match event_type.as_str() {
                PERMISSION_PRESET_EVENT => logged.0 = Some(data.clone()),
                SANDBOX_MODE_EVENT => logged.1 = Some(data.clone()),
                _ => {}
            }
        }
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), String> {
        let (preset, sandbox) = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(change) = &ctx.permission_change {
                *current = (change.preset, change.sandbox_data());
            }
            (crate::permission::preset_data(current.0), current.1.clone())
        };
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
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
        let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.arguments) else {
            return ToolVerdict::Continue;
        };
        let Some(requested) = args.get("sandbox_permissions") else {
            return ToolVerdict::Continue;
        };
        let wanted = match requested.as_str().map(str::parse::<PermissionPreset>) {
            Some(Ok(preset)) => preset,
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

    fn tool_post(&self, ctx: &mut ToolPostContext<'_>) {
        self.redactor.redact_outcome(ctx.outcome);
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
        }
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
