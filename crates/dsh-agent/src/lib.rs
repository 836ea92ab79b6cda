//! The dsh agent loop (docs/agent.md): turns and steps over a session log, with tools, steering and
//! cancellation. The loop knows no concrete provider or tool: it talks to the adapter and tool
//! registries, and every policy (retry, guards, timeouts, prompt sections) is an [`Extension`].
//!
//! ```text
//! inbox claim -> step/start -> user messages -> pre_step -> header -> request -> stream
//!   -> assistant/message -> tool/call* -> (tool_pre, tool_execute, tool_post) -> tool/result*
//!   -> step/end -> more steps while tool calls or steering are pending -> turn/end
//! ```
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod agent;
mod approval_rules;
mod background_jobs;
mod budget;
mod cache_report;
mod compaction;
mod context;
mod custom_commands;
mod errors;
mod extension;
mod goals;
mod hooks;
mod inbox;
mod log;
mod permission;
mod pipeline;
mod plan;
mod presentation;
mod prompt;
mod repeat_guard;
mod replay;
mod safety;
mod skills;
mod subagents;
mod titles;
mod todo_events;
mod turn;
mod turn_settings;

pub use agent::{
    generic_model_info, new_user_message, plugin_message, session_failure, Agent, AgentError,
    AgentHandle, AgentOptions, AgentParts, ToolFilter, TurnOutcome, WeakAgentHandle,
};
pub use approval_rules::{
    approvals_path, proposed_rule, read_rules, write_rules, ApprovalChoice, ApprovalRule,
    ApprovalRules, RuleScope, APPROVALS_FILE,
};
pub use background_jobs::{
    BackgroundJobs, BACKGROUND_JOBS_PLUGIN, JOBS_STOPPED_EVENT, MAX_CONSECUTIVE_WAKES,
};
pub use budget::{
    budget_of, parse_duration, TurnBudget, BUDGET_COST, BUDGET_STEPS, BUDGET_WALL_TIME,
};
pub use cache_report::{CacheReport, CacheTracker, PrefixBreak, CACHE_REPORT_EVENT};
pub use compaction::{CompactionOutcome, CompactionSettings, CompactionTrigger, COMPACTION_PLUGIN};
pub use context::{
    civil_date, ContextMessages, ContextSource, SystemContext, PROJECT_INSTRUCTIONS_PLUGIN,
    RUNTIME_CONTEXT_PLUGIN,
};
pub use custom_commands::{
    command_name, parse_claude_command, parse_command, split_arguments, substitute, CommandProblem,
    CustomCommand, CustomCommandSet, CustomCommands, ProjectCommands, MAX_COMMAND_BYTES,
    RESERVED_COMMAND_NAMES,
};
pub use dsh_tools::{
    AskOutcome, AskUserQuestionTool, Asker, HeadlessAsker, QuestionOption, QuestionRequest,
    UserAnswer, UserQuestion,
};
pub use errors::{ExtensionError, PermissionError, SubagentError};
pub use extension::{
    ApprovalDecision, ApprovalRequest, Approver, AttachedAgent, CommandExpansion, Extension,
    ExtensionGuard, ExtensionSet, HeadlessApprover, NoteScope, PreStepContext, RetryExtension,
    ToolCallInfo, ToolFuture, ToolOutcome, ToolPostContext, ToolTimeoutExtension, ToolVerdict,
    TurnBoundary, TurnSettings, TurnStoppingContext, UserCommand,
};
pub use goals::{
    describe_goal, goal_round_of, goal_value, GoalBook, GoalRefusal, GoalState, Goals,
    BLOCKED_AFTER_ROUNDS, CREATE_GOAL, DEFAULT_MAX_GOAL_ROUNDS, GET_GOAL, GOAL_COMMAND,
    GOAL_PLUGIN, UPDATE_GOAL,
};
pub use hooks::{
    ClaudeCodeHooks, CommandHooks, HookCommand, HookConfigError, HookDialect, HookEvent, HookGroup,
    HookTable, HooksConfig, ScriptCheck, CODEX_HOOKS_FILE, DEFAULT_CODEX_HOOK_TIMEOUT,
    DEFAULT_HOOK_TIMEOUT, HOOKS_FILE, HOOKS_PLUGIN,
};
pub use inbox::{Inbox, InboxTarget, Splice};
pub use log::{SessionEvent, SessionLog};
pub use permission::{PermissionSetting, PermissionSource};
pub use pipeline::{is_error_result, ABORTED_BEFORE_DISPATCH};
pub use plan::{
    decision_of, fold_plan_mode, last_presented_plan, plan_mode_of, plan_title, review_request,
    PlanDecision, PlanMode, APPROVE_LABEL, EXIT_PLAN_MODE, KEEP_PLANNING_LABEL, PLAN_COMMAND,
    PLAN_EDITS_QUESTION, PLAN_MODE_EVENT, PLAN_MODE_REFUSAL, PLAN_PLUGIN, PLAN_REVIEW_QUESTION,
};
pub use presentation::Presenter;
pub use prompt::{
    assemble_system_prompt, AppendedPrompt, BasePrompt, PromptContext, PromptSection,
};
pub use repeat_guard::RepeatCallGuard;
pub use replay::{compare_runs, Difference, RecordedRun, RecordedTurn, ReplayAdapter};
pub use safety::{SafetyPolicy, PERMISSION_PRESET_EVENT, RUNS_UNASKED, SANDBOX_MODE_EVENT};
pub use skills::{parse_skill, Skill, SkillProblem, SkillSet, Skills, SKILLS_PLUGIN};
pub use subagents::{
    child_state_after, read_children, ChildActivity, ChildFactory, ChildFeed, ChildIdentity,
    ChildIds, ModelChoice, ParentLink, StoredChild, Subagents, DEFAULT_MAX_CONCURRENT,
    MAX_DELEGATION_DEPTH, SUBAGENT_USAGE_EVENT,
};
pub use titles::TitleMode;
pub use todo_events::TodoEvents;
/// The cancellation token type taken by [`Agent::compact`].
pub use tokio_util::sync::CancellationToken as CompactionCancel;
pub use turn_settings::USER_COMMAND_EVENT;

/// Registers the built-in extensions in their standard order: base prompt, retry with `retry`,
/// the repeat-call guard, todo logging, and a default tool timeout. Keep the guards alive as long
/// as the extensions should stay.
pub fn register_builtin_extensions(
    set: &ExtensionSet,
    retry: dsh_llm::RetryPolicy,
    tool_timeout: std::time::Duration,
) -> Vec<ExtensionGuard> {
    vec![
        set.register(std::sync::Arc::new(BasePrompt)),
        set.register(std::sync::Arc::new(RetryExtension::new(retry))),
        set.register(std::sync::Arc::new(RepeatCallGuard::new())),
        set.register(std::sync::Arc::new(TodoEvents)),
        set.register(std::sync::Arc::new(ToolTimeoutExtension::new(
            tool_timeout,
            std::time::Duration::from_secs(5),
        ))),
    ]
}
