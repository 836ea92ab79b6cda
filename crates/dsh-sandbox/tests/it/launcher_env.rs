//! The `bwrap` launcher of a per-command bubblewrap sandbox runs unconfined (as root when dsh
//! is), so the command's environment and working directory must not reach it: the fourth
//! adversarial review had a project MCP server's `env` (`LD_LIBRARY_PATH=lib`) and dsh's own
//! `LD_LIBRARY_PATH=:/opt/lib` make `bwrap` load a library planted in the workspace, as root.
//! The spawner now starts the launcher in `/` with a fixed environment and sets the command's
//! inside the sandbox (`dsh_tools::Launcher`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use dsh_sandbox::Bubblewrap;
use dsh_tools::{CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset};

use crate::escapes::scratch_parent;
use crate::root_escapes::require_root;

/// Builds a shared library whose constructor appends its process's executable to `marker`;
/// `None` (and the test is not run) without a C compiler.
fn marker_library(dir: &Path, marker: &Path) -> Option<std::path::PathBuf> {
    let source = dir.join("mark.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void mark(void) {{\n\
               char exe[512] = {{0}};\n\
               if (readlink(\"/proc/self/exe\", exe, sizeof exe - 1) < 0) return;\n\
               FILE *f = fopen(\"{}\", \"a\");\n\
               if (f) {{ fprintf(f, \"%s\\n\", exe); fclose(f); }}\n\
             }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let library = dir.join("libmark.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .is_ok_and(|status| status.success());
    built.then_some(library)
}

fn bwrap() -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("bwrap"))
        .find(|path| path.is_file())
}

#[test]
fn a_per_command_bwrap_never_loads_what_the_commands_environment_names() {
    if !require_root("a_per_command_bwrap_never_loads_what_the_commands_environment_names") {
        return;
    }
    let Some(program) = bwrap() else {
        eprintln!("NOT RUN: needs bubblewrap (.ci/run installs it)");
        return;
    };
    let scratch = tempfile::tempdir_in(scratch_parent()).unwrap();
    let base = std::fs::canonicalize(scratch.path()).unwrap();
    let (ws, outside) = (base.join("ws"), base.join("outside"));
    std::fs::create_dir_all(ws.join("lib")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let marker = outside.join("loaded-by");
    let Some(library) = marker_library(&outside, &marker) else {
        eprintln!("NOT RUN: needs a C compiler (cc)");
        return;
    };
    // The workspace's planted copy, found through a relative `LD_LIBRARY_PATH` entry.
    std::fs::copy(&library, ws.join("lib/libcap.so.2")).unwrap();
    let path = std::env::var_os("PATH").unwrap();
    let env = |extra: &[(&str, &Path)]| -> Vec<(OsString, OsString)> {
        let mut env = vec![(OsString::from("PATH"), path.clone())];
        env.extend(
            extra
                .iter()
                .map(|(k, v)| (OsString::from(k), v.as_os_str().to_os_string())),
        );
        env
    };
    let attack = env(&[
        ("LD_PRELOAD", &library),
        ("LD_LIBRARY_PATH", Path::new("lib")),
    ]);

    // Control: unconfined, the environment makes a program load the library.
    let control = Command::new("true")
        .env_clear()
        .envs(attack.clone())
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(control.success());
    let loaded = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        !loaded.is_empty(),
        "the control did not load the library: the test proves nothing"
    );
    std::fs::remove_file(&marker).unwrap();

    let request = ConfinementRequest {
        preset: PermissionPreset::WorkspaceWrite,
        cwd: ws.clone(),
        workdir: ws.clone(),
        writable_roots: vec![ws.clone()],
        hidden_dirs: Vec::new(),
        network: true,
    };
    let plan = Bubblewrap::new(&program)
        .per_call()
        .confine(
            CommandPlan::new("bash", vec!["-c".into(), "echo ran-$LD_PRELOAD".into()]),
            &request,
        )
        .unwrap();
    let out = dsh_tools::plan_command(&plan, &ws, attack)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The command still gets its environment, inside the sandbox.
    assert!(
        stdout.contains(&format!("ran-{}", library.display())),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        !loaded.lines().any(|exe| exe.ends_with("bwrap")),
        "the unconfined launcher loaded the command's library: {loaded}"
    );
    assert!(
        loaded.is_empty(),
        "something wrote outside the sandbox: {loaded}"
    );
}
