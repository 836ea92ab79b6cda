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

/// On glibc the loader opens only the C library for `dsh`: the unwinder is linked in and the
/// three libm functions the dependencies call are defined in the executable (crates/dsh-cli
/// build.rs and src/math_symbols.rs; docs/PERFORMANCE.md, "`--version`, thirteenth pass"). With
/// glibc 2.36 or later the relative relocations are packed (DT_RELR).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_executable_needs_only_the_c_library() {
    let binary = env!("CARGO_BIN_EXE_dsh");
    // What the loader maps, as `ldd` asks it: it lists the objects and exits before `main`.
    let out = std::process::Command::new(binary)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listing = String::from_utf8_lossy(&out.stdout);
    let loaded: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| !name.starts_with("linux-vdso") && !name.contains("ld-linux"))
        .collect();
    assert_eq!(
        loaded,
        ["libc.so.6"],
        "dsh loads more than the C library; a dependency calls a libm function \
         src/math_symbols.rs does not define, or build.rs found no libgcc_eh.a:\n{listing}"
    );

    // SAFETY: returns a pointer to a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let version: Vec<u32> = version
        .to_str()
        .unwrap()
        .split('.')
        .map_while(|part| part.parse().ok())
        .collect();
    if version.as_slice() >= [2, 36].as_slice() {
        const DT_RELR: u64 = 36;
        assert!(
            dynamic_tags(&std::fs::read(binary).unwrap()).contains(&DT_RELR),
            "glibc {version:?} applies packed relocations, but dsh was linked without them"
        );
    }
}

/// The tags of a little-endian ELF64 image's dynamic section.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn dynamic_tags(image: &[u8]) -> Vec<u64> {
    let u64_at = |at: usize| u64::from_le_bytes(image[at..at + 8].try_into().unwrap());
    let u16_at = |at: usize| u16::from_le_bytes(image[at..at + 2].try_into().unwrap());
    assert_eq!(
        (image[4], image[5]),
        (2, 1),
        "not a little-endian ELF64 image"
    );
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    const PT_DYNAMIC: u32 = 2;
    let dynamic = (0..usize::from(phnum))
        .map(|i| phoff + i * usize::from(phentsize))
        .find(|&at| u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) == PT_DYNAMIC)
        .expect("no dynamic section");
    let (offset, size) = (u64_at(dynamic + 8) as usize, u64_at(dynamic + 32) as usize);
    (offset..offset + size)
        .step_by(16)
        .map(u64_at)
        .take_while(|&tag| tag != 0)
        .collect()
}
