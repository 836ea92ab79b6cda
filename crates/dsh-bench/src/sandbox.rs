//! Sandbox cost per `bash` call (issue 23, item 4): the wall time of the `bash` tool running
//! `true`, called through the tool registry exactly as the loop calls it, confined with
//! bubblewrap, with Landlock (and its read-only mount namespace when the host allows one) and
//! unconfined (`danger-full-access`, no sandbox), in a fresh workspace under the system temp
//! dir. The three are interleaved call by call (so load on a shared machine hits them alike)
//! and each is summarised by its median; the overhead is a mechanism's median minus the
//! unconfined median. A mechanism this host cannot run is reported with the reason, never
//! replaced by another.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use dsh_sandbox::{
    Landlock, MountNamespace, Sandbox, SandboxMode, SandboxPreference, SandboxProbe,
};
use dsh_tools::ToolRegistry;
use dsh_tools::{CommandConfinement, NoSandbox, PermissionPreset, SpillDir, ToolContext};
use serde_json::{json, Value};

use crate::stats::median;

/// One way of running the command.
struct Subject {
    name: &'static str,
    context: ToolContext,
    times: Vec<f64>,
}

fn context(
    cwd: &std::path::Path,
    spill: &SpillDir,
    preset: PermissionPreset,
    confinement: Arc<dyn CommandConfinement>,
) -> anyhow::Result<ToolContext> {
    Ok(ToolContext::new(cwd, spill.clone())?
        .with_permission(preset)
        .with_confinement(confinement))
}

/// The sandbox of `mode` for `workspace-write`, or why it is not available here.
fn sandbox(mode: SandboxMode) -> Result<Sandbox, String> {
    let (probe, preference) = match mode {
        SandboxMode::Bubblewrap => (
            SandboxProbe::cached().clone(),
            SandboxPreference::Bubblewrap,
        ),
        // Bubblewrap hidden from the probe, so Auto settles on Landlock.
        _ => (
            SandboxProbe::run(Some("/nonexistent-dir-without-bwrap".as_ref())),
            SandboxPreference::Auto,
        ),
    };
    let chosen = Sandbox::choose(PermissionPreset::WorkspaceWrite, preference, &probe);
    if chosen.mode() == mode {
        Ok(chosen)
    } else {
        Err(format!("not available here: {}", chosen.detail()))
    }
}

async fn call(registry: &ToolRegistry, ctx: &ToolContext, command: &str) -> anyhow::Result<f64> {
    let args = json!({"command": command, "description": "bench"}).to_string();
    let started = Instant::now();
    let out = registry.invoke("bash", &args, ctx).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match out {
        Ok(out) if out.text_content().trim() == "(no output)" => Ok(ms),
        Ok(out) => bail!("`{command}` did not succeed: {}", out.text_content()),
        Err(err) => bail!("`{command}` failed: {}", err.result_text()),
    }
}

/// The subjects measured: unconfined, each mechanism this host has (else why not, in the
/// returned map), and Landlock building its layout per call.
fn subjects(
    cwd: &std::path::Path,
    spill: &SpillDir,
) -> anyhow::Result<(Vec<Subject>, serde_json::Map<String, Value>)> {
    let mut subjects = vec![Subject {
        name: "unconfined",
        context: context(
            cwd,
            spill,
            PermissionPreset::DangerFullAccess,
            Arc::new(NoSandbox),
        )?,
        times: Vec::new(),
    }];
    let mut notes = serde_json::Map::new();
    for (name, mode) in [
        ("bubblewrap", SandboxMode::Bubblewrap),
        ("landlock", SandboxMode::Landlock),
    ] {
        match sandbox(mode) {
            Ok(sandbox) => {
                notes.insert(
                    format!("{name}_detail"),
                    Value::String(sandbox.detail().into()),
                );
                subjects.push(Subject {
                    name,
                    context: context(
                        cwd,
                        spill,
                        PermissionPreset::WorkspaceWrite,
                        sandbox.confinement(),
                    )?,
                    times: Vec::new(),
                });
            }
            Err(why) => {
                notes.insert(name.to_string(), Value::String(why));
            }
        }
    }
    // For reference, each only where it works here: bubblewrap started for every call (the path
    // before the prepared sandbox, and the one hosts that cannot enter a prepared sandbox take),
    // and Landlock building its layout in every child (in a user namespace, as it does when dsh
    // is not root), the cost the prepared namespace of docs/SECURITY.md saves.
    let mut references = Vec::new();
    if let Ok(bwrap) = &SandboxProbe::cached().bubblewrap {
        let probe = SandboxProbe {
            bubblewrap: Ok(bwrap.clone().per_call()),
            landlock: Err("not measured".into()),
        };
        references.push((
            "bubblewrap_per_call",
            probe,
            SandboxPreference::Bubblewrap,
            SandboxMode::Bubblewrap,
        ));
    }
    if let Ok(abi) = dsh_sandbox::kernel_abi() {
        let probe = SandboxProbe {
            bubblewrap: Err("not measured".into()),
            landlock: Ok(Landlock::with_abi(abi.min(dsh_sandbox::TARGET_ABI))
                .with_mount_namespace(MountNamespace::UserNamespace)),
        };
        references.push((
            "landlock_per_call_layer",
            probe,
            SandboxPreference::Landlock,
            SandboxMode::Landlock,
        ));
    }
    for (name, probe, preference, mode) in references {
        let chosen = Sandbox::choose(PermissionPreset::WorkspaceWrite, preference, &probe);
        if chosen.mode() == mode {
            subjects.push(Subject {
                name,
                context: context(
                    cwd,
                    spill,
                    PermissionPreset::WorkspaceWrite,
                    chosen.confinement(),
                )?,
                times: Vec::new(),
            });
        }
    }
    Ok((subjects, notes))
}

/// Medians and minima per subject, and each confined subject's overhead over unconfined.
fn summary(subjects: &[Subject], runs: usize) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    out.insert("runs".into(), json!(runs));
    let mut medians = Vec::new();
    for subject in subjects {
        let mut times = subject.times.clone();
        let med = median(&mut times);
        medians.push((subject.name, med));
        out.insert(format!("{}_ms", subject.name), json!(med));
        out.insert(
            format!("{}_min_ms", subject.name),
            json!(times.first().copied().unwrap_or(f64::NAN)),
        );
    }
    let unconfined = medians
        .iter()
        .find(|(name, _)| *name == "unconfined")
        .map_or(f64::NAN, |(_, m)| *m);
    for (name, med) in medians {
        if name != "unconfined" {
            out.insert(format!("{name}_overhead_ms"), json!(med - unconfined));
        }
    }
    out
}

/// The `bash-call` subcommand: `runs` interleaved calls of `bash -c true` per subject.
pub(crate) async fn bash_call(runs: usize) -> anyhow::Result<Value> {
    let root = tempfile::tempdir()?;
    let base = std::fs::canonicalize(root.path())?;
    let cwd = base.join("ws");
    std::fs::create_dir_all(&cwd)?;
    let spill = SpillDir::create(base.join("spill"))?;
    let registry = ToolRegistry::with_builtins();
    let (mut subjects, notes) = subjects(&cwd, &spill)?;
    // One warm-up call each (the page cache, the seccomp program, a first namespace).
    for subject in &subjects {
        call(&registry, &subject.context, "true")
            .await
            .with_context(|| format!("warm-up of {}", subject.name))?;
    }
    for _ in 0..runs {
        for subject in &mut subjects {
            let ms = call(&registry, &subject.context, "true").await?;
            subject.times.push(ms);
        }
    }
    let mut out = summary(&subjects, runs);
    out.extend(notes);
    Ok(Value::Object(out))
}
