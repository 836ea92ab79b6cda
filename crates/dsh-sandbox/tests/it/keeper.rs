//! The Landlock keeper starts the command from the [`ExecImage`] the spawner prepared, without
//! a copy of dsh's memory (docs/PERFORMANCE.md, "The keeper starts the command without a
//! copy"). These tests give the image and the `Command` different environments, so the output
//! says which of the two ran the command.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

use dsh_tools::{CommandPlan, ConfinementRequest, ExecImage, PermissionPreset};

use crate::escapes::landlock_only;

/// Confines `program args` with Landlock (workspace-write in a temp dir), gives the plan the
/// image of `image_program` with `MARK=image`, and spawns the plan's own program with
/// `MARK=command`, running the plan's hooks as dsh's spawner does.
fn run_confined(image_program: &str, program: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let plan = CommandPlan::new(program, args.clone());
    let request = ConfinementRequest {
        preset: PermissionPreset::WorkspaceWrite,
        cwd: cwd.clone(),
        workdir: cwd.clone(),
        writable_roots: vec![cwd.clone()],
        hidden_dirs: Vec::new(),
        network: true,
    };
    let plan = landlock_only()
        .confinement()
        .confine(plan, &request)
        .unwrap();
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let image_env = [
        (OsString::from("PATH"), path.clone()),
        (OsString::from("MARK"), OsString::from("image")),
    ];
    let image = ExecImage::new(image_program.as_ref(), &args, &image_env).unwrap();
    plan.exec_image.set(image).unwrap();
    let hooks = plan.pre_exec.clone();
    let mut command = Command::new(&plan.program);
    command
        .args(&plan.args)
        .env_clear()
        .env("PATH", path)
        .env("MARK", "command")
        .current_dir(&cwd)
        .stdin(Stdio::null());
    // SAFETY: the hooks are async-signal-safe (contract of `PreExecHook`).
    unsafe {
        command.pre_exec(move || {
            for hook in &hooks {
                hook()?;
            }
            Ok(())
        });
    }
    command.output().unwrap()
}

#[test]
fn the_keeper_runs_the_image_with_its_arguments_and_environment() {
    let out = run_confined(
        "sh",
        "sh",
        &["-c", "printf '%s|%s|%s' \"$0\" \"$1\" \"$MARK\"", "a", "b"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a|b|image",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{:?}", out.status);
}

#[test]
fn the_commands_exit_status_comes_back_through_the_keeper() {
    let out = run_confined("sh", "sh", &["-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn an_image_that_cannot_run_ends_with_127_and_says_why() {
    let out = run_confined("/nonexistent/dsh-keeper-test", "sh", &["-c", "echo ran"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("dsh: cannot start the command (errno {})\n", libc::ENOENT)
    );
}
