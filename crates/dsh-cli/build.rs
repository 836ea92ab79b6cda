//! Link settings for the `dsh` executable on glibc Linux that make it cheaper to start
//! (docs/PERFORMANCE.md, "`--version`, thirteenth pass"; docs/decisions/0009-start-up-floors.md).
//! Each is tried on this machine first and left out when it does not work, so a build elsewhere
//! (another linker, an older glibc, a cross build) links as Rust's defaults would.
//!
//! - The unwinder is linked in (`libgcc_eh.a`, under the name `libgcc_s` that Rust's standard
//!   library asks the linker for), so the loader does not open `libgcc_s.so.1` at every start.
//! - Relative relocations are packed (`-z pack-relative-relocs`, DT_RELR): the loader reads
//!   a few KB of bitmaps instead of a 750 KB table. Only when a test program linked that way
//!   runs here, which needs glibc 2.36's loader.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("HOST") != var("TARGET")
    {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    // Rust links through the C compiler driver unless a linker is configured.
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".to_string());
    if let Some(dir) = static_unwinder(&linker, &out) {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    if packed_relocations_run(&linker, &out) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// A folder holding `libgcc_s.a`, a link to the compiler's `libgcc_eh.a`: searched before the
/// system's folders, it answers the `-lgcc_s` of Rust's standard library with the static
/// unwinder (what `gcc -static-libgcc` links), and `libgcc_s.so.1` is no longer needed.
fn static_unwinder(linker: &str, out: &Path) -> Option<PathBuf> {
    let output = Command::new(linker)
        .arg("-print-file-name=libgcc_eh.a")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let archive = PathBuf::from(String::from_utf8(output.stdout).ok()?.trim());
    // A driver that does not know the file prints its bare name back.
    if !output.status.success() || !archive.is_absolute() || !archive.is_file() {
        return None;
    }
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir).ok()?;
    let link = dir.join("libgcc_s.a");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&archive, &link).ok()?;
    Some(dir)
}

/// True when a small position-independent program linked with `-z pack-relative-relocs` links
/// and runs here: the linker knows the option and this machine's loader applies DT_RELR.
fn packed_relocations_run(linker: &str, out: &Path) -> bool {
    let dir = out.join("relr-check");
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    let source = dir.join("check.c");
    let program = dir.join("check");
    // A pointer in writable data: a relative relocation for the loader to apply.
    let text =
        "static int value = 7;\nint *pointer = &value;\nint main(void) { return *pointer - 7; }\n";
    if std::fs::write(&source, text).is_err() {
        return false;
    }
    let linked = Command::new(linker)
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&program)
        .arg(&source)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    linked
        && Command::new(&program)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}
