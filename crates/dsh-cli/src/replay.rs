//! `dsh replay <session.jsonl>`: re-runs a recorded session (ours or the original dsh's) with
//! the recorded model replies and real tools, then reports what differed. No network, no key.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use dsh_agent::{compare_runs, Agent, RecordedRun, ReplayAdapter};
use dsh_runtime::{Choices, ProviderReplacement, SessionSpec};
use dsh_tools::PermissionPreset;
use tokio::sync::Notify;

// Arguments of `dsh replay` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// A session log (`session.jsonl`), or a folder holding one.
    pub(crate) session: PathBuf,
    /// Directory the tools work in (default: a new temporary directory, seeded with the
    /// `workspace/` folder next to the log when there is one).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    /// Permission preset for the replayed tool calls (default: workspace-write). The recorded
    /// commands really run: use danger-full-access only for recordings you trust.
    #[arg(long, default_value = "workspace-write")]
    pub(crate) permission: String,
}

/// Copies the folder `from` to `to` without following links: a symbolic link is made again as
/// the same link (a recording's `workspace/k -> ~/.dsh/.env` would otherwise copy the
/// victim's file into the workspace the replayed commands read; fourth adversarial review),
/// and only folders and regular files are copied (a FIFO or device is skipped).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            copy_link(&entry.path(), &target)?;
        } else if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn copy_link(link: &Path, target: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(std::fs::read_link(link)?, target)
}

#[cfg(not(unix))]
fn copy_link(_link: &Path, _target: &Path) -> std::io::Result<()> {
    // Links are not made again where making one needs privileges; a recording's link is left
    // out rather than followed.
    Ok(())
}

/// Runs `dsh replay`.
pub(crate) fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::run::async_runtime()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (file, recording) = load_recording(&args.session)?;
    let recorded = RecordedRun::from_events(&recording.events);
    if recorded.turns.is_empty() {
        anyhow::bail!("{} holds no turns to replay", file.display());
    }
    let permission: PermissionPreset = args
        .permission
        .parse()
        .map_err(|msg: String| anyhow::anyhow!(msg))?;
    let cwd = working_directory(args.cwd.as_deref(), &file)?;
    let (mut agent, hanging) = replay_agent(&cwd, permission, &recording, &recorded)?;
    let location = agent.handle().location();
    eprintln!(
        "dsh: replaying {} turn(s) in {}",
        recorded.turns.len(),
        cwd.display()
    );
    let goal_commands = recorded_goal_commands(&recording.events);
    replay_turns(&mut agent, &hanging, &recorded, &goal_commands).await?;
    drop(agent);
    report(&location, &cwd, &recorded)
}

/// The log `session` names (a file, or a folder holding `session.jsonl`) and its events.
fn load_recording(session: &Path) -> anyhow::Result<(PathBuf, dsh_session::LoadedLog)> {
    let file = if session.is_dir() {
        session.join("session.jsonl")
    } else {
        session.to_path_buf()
    };
    let recording = dsh_session::load_file(&file)
        .with_context(|| format!("cannot replay {}", file.display()))?;
    Ok((file, recording))
}

/// The directory the tools work in: `--cwd`, or a new temporary directory seeded with the
/// `workspace/` folder next to the log.
fn working_directory(cwd: Option<&Path>, file: &Path) -> anyhow::Result<PathBuf> {
    let cwd = match cwd {
        Some(dir) => dir.to_path_buf(),
        None => {
            let temp = tempdir_in_system("dsh-replay")?;
            let workspace = file.parent().map(|p| p.join("workspace"));
            if let Some(workspace) = workspace.filter(|w| w.is_dir()) {
                copy_dir(&workspace, &temp)
                    .with_context(|| format!("cannot copy {}", workspace.display()))?;
            }
            temp
        }
    };
    std::fs::canonicalize(&cwd)
        .with_context(|| format!("working directory {} does not exist", cwd.display()))
}

/// The folder under `$DSH_HOME` whose `sessions/` holds the sessions replays write.
const REPLAYS_DIR: &str = "replays";

/// The agent of the replay, composed by the runtime exactly as a live `dsh run` in `cwd` under
/// `permission` would be (sandbox, safety policy, hooks, MCP servers, skills, subagents), with
/// one part replaced: the provider, whose every reply comes from the recording. Logs to a new
/// session under `$DSH_HOME/replays/sessions/`. Also returns the signal the adapter gives when a recorded reply
/// ends without a finish (a cancelled call).
fn replay_agent(
    cwd: &Path,
    permission: PermissionPreset,
    recording: &dsh_session::LoadedLog,
    recorded: &RecordedRun,
) -> anyhow::Result<(Agent, Arc<Notify>)> {
    let adapter = Arc::new(ReplayAdapter::new(recorded.calls.clone()));
    let hanging = adapter.hanging();
    let model = recording
        .events
        .iter()
        .find_map(|e| match &e.event {
            dsh_session::Event::RequestContext(c) => Some(c.model.clone()),
            _ => None,
        })
        .unwrap_or_else(|| "recorded-model".to_string());
    let choices = Choices {
        permission: Some(permission.to_string()),
        ..crate::flags::base_choices()
    };
    let runtime = crate::run::runtime(Some(cwd), choices)?;
    let spec = SessionSpec {
        provider: Some(ProviderReplacement {
            adapter,
            model,
            goal_ids: recorded_goal_ids(&recording.events),
        }),
        ..SessionSpec::default()
    };
    // Replays are kept apart from the user's sessions (`sessions list` does not show them);
    // the path printed at the end opens one.
    let store = dsh_session::JsonlStore::new(&runtime.home().join(REPLAYS_DIR));
    let opened = runtime
        .open(&spec, &store)
        .map_err(crate::run::runtime_error)?;
    Ok((opened.agent, hanging))
}

/// The ids of the goals the recording created, in order.
fn recorded_goal_ids(events: &[dsh_session::Envelope]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            dsh_session::Event::GoalChange(change)
                if change.operation == dsh_session::GoalOperation::Create =>
            {
                change.goal.as_ref().map(|g| g.id.clone())
            }
            _ => None,
        })
        .collect()
}

/// The user's `/goal` changes of the recording (`goal/change` events between turns, as the
/// command logs them), as `(turn index before which it came, /goal arguments)`.
fn recorded_goal_commands(events: &[dsh_session::Envelope]) -> Vec<(usize, String)> {
    use dsh_session::{Event, GoalOperation};
    let (mut turns, mut open) = (0, false);
    let mut commands = Vec::new();
    for envelope in events {
        match &envelope.event {
            Event::TurnStart(_) => {
                turns += 1;
                open = true;
            }
            Event::TurnEnd(_) => open = false,
            Event::GoalChange(change) if !open => {
                let objective = change.goal.as_ref().map(|g| g.objective.clone());
                let arguments = match (change.operation, objective) {
                    (GoalOperation::Create, Some(objective)) => objective,
                    (GoalOperation::Edit, Some(objective)) => format!("edit {objective}"),
                    (GoalOperation::Pause, _) => "pause".to_string(),
                    (GoalOperation::Resume, _) => "resume".to_string(),
                    (GoalOperation::Clear, _) => "clear".to_string(),
                    _ => continue,
                };
                commands.push((turns, arguments));
            }
            _ => {}
        }
    }
    commands
}

/// Sends each recorded prompt (or, for a turn nobody typed, lets the idle agent queue what it
/// queues: a goal's round) and runs its turn, the user's recorded `/goal` changes first; a turn the recording ended by cancelling is
/// cancelled when its reply runs out.
async fn replay_turns(
    agent: &mut Agent,
    hanging: &Arc<Notify>,
    recorded: &RecordedRun,
    goal_commands: &[(usize, String)],
) -> anyhow::Result<()> {
    let handle = agent.handle();
    for (index, turn) in recorded.turns.iter().enumerate() {
        // The user's `/goal` changes before this turn, as the user made them.
        for (_, arguments) in goal_commands.iter().filter(|(at, _)| *at == index) {
            if let Err(err) = handle.run_user_command(dsh_agent::GOAL_COMMAND, arguments) {
                eprintln!("dsh: the recorded `/goal {arguments}` was refused: {err}");
            }
        }
        if turn.prompt.is_empty() {
            // A turn nobody typed (a goal's continuation round): what the idle agent queues
            // by itself starts it, as live.
            agent.idle();
        } else {
            handle.followup(turn.prompt.clone())?;
        }
        let was_cancelled = matches!(turn.end, Some(dsh_session::TurnEndReason::Aborted { .. }));
        let canceller = was_cancelled.then(|| {
            let handle = handle.clone();
            let hanging = Arc::clone(hanging);
            tokio::spawn(async move {
                hanging.notified().await;
                handle.cancel(false);
            })
        });
        let outcome = agent.run_turn().await?;
        if let Some(task) = canceller {
            task.abort();
        }
        if let Some(outcome) = outcome {
            eprintln!(
                "dsh: turn {} ended {}: {}",
                outcome.turn,
                outcome.reason.kind(),
                crate::progress::one_line(&outcome.final_text, 100)
            );
        }
    }
    // The idle point a live run reaches after its last turn (what that turn's end leaves to
    // log, a cancelled round's pause, is logged there).
    agent.idle();
    Ok(())
}

/// Compares the replayed log at `location` with the recording and prints the differences;
/// exit code 1 when there are any.
fn report(location: &str, cwd: &Path, recorded: &RecordedRun) -> anyhow::Result<ExitCode> {
    let ours = dsh_session::load_file(Path::new(location))?;
    let replayed = RecordedRun::from_events(&ours.events);
    let differences = compare_runs(recorded, &replayed);
    println!("replay session: {location}");
    println!("working directory: {}", cwd.display());
    if differences.is_empty() {
        println!("no differences: same turn ends, final texts, tool calls and tool errors");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{} difference(s):", differences.len());
        for difference in &differences {
            println!("  {difference}");
        }
        Ok(ExitCode::from(1))
    }
}

fn tempdir_in_system(prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
