//! `dsh --version` is answered before clap builds its command tree (docs/PERFORMANCE.md,
//! "Start-up floors"): the line must stay the one clap prints, for the same flags.

use crate::common::{dsh_command, output, text};

#[tokio::test]
async fn version_prints_clap_s_line_for_clap_s_flags_and_touches_nothing() {
    let home = tempfile::tempdir().unwrap();
    let expected = format!("dsh {}\n", env!("CARGO_PKG_VERSION"));
    for flag in ["--version", "-V"] {
        let mut cmd = dsh_command(home.path(), home.path());
        cmd.arg(flag);
        let out = output(cmd).await;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{flag}: {stderr}");
        assert_eq!(stdout, expected, "{flag}");
        assert_eq!(stderr, "", "{flag}");
    }
    // The flags the shortcut answers are the ones clap documents.
    let mut cmd = dsh_command(home.path(), home.path());
    cmd.arg("--help");
    let (help, _) = text(&output(cmd).await);
    assert!(help.contains("-V, --version"), "{help}");
    // With one more argument the shortcut stands aside and clap answers (it prints the version
    // as soon as it meets the flag): its line must be the shortcut's.
    let mut cmd = dsh_command(home.path(), home.path());
    cmd.args(["--version", "extra"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, expected, "clap's own version line");
    // Nothing was set up for a version line.
    let left: Vec<_> = std::fs::read_dir(home.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A reader that has gone away is not an error: `dsh --version` with its stdout a pipe whose
/// read end is closed ends with status 0 and says nothing, as clap would. (On glibc the line is
/// written before Rust's runtime would ignore SIGPIPE, so this fails if the early answer does
/// not ignore it itself.)
#[cfg(unix)]
#[test]
fn version_ignores_a_closed_stdout() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let home = tempfile::tempdir().unwrap();
    for flag in ["--version", "-V"] {
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(read_end);
        let mut cmd = dsh_command(home.path(), home.path());
        cmd.arg(flag)
            .stdout(write_end)
            .stderr(std::process::Stdio::piped());
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}: {:?}", out.status);
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{flag}");
    }
}

/// The executable is position-independent, so its image loads at a random address
/// (docs/decisions/0009-start-up-floors.md): an ELF of type `ET_DYN` with an entry point, not
/// `ET_EXEC`. `release/build` checks the same of the release archives' static executables.
#[cfg(target_os = "linux")]
#[test]
fn the_executable_is_position_independent() {
    let image = std::fs::read(env!("CARGO_BIN_EXE_dsh")).unwrap();
    assert_eq!(&image[..4], b"\x7fELF");
    const ET_DYN: u16 = 3;
    let e_type = match image[5] {
        2 => u16::from_be_bytes([image[16], image[17]]),
        _ => u16::from_le_bytes([image[16], image[17]]),
    };
    assert_eq!(e_type, ET_DYN, "dsh is not a PIE (ELF type {e_type})");
}
