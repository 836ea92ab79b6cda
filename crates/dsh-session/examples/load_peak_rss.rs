//! Writes a 100,000-event log, then loads and projects it in a fresh process state and
//! reports the time and the peak resident memory (VmHWM from /proc/self/status).
//!
//! `cargo run --release -p dsh-session --example load_peak_rss -- [packed|unpacked]`

use std::time::Instant;

use dsh_session::*;

#[path = "../benches/common.rs"]
mod common;

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), SessionError> {
    let pack = std::env::args().nth(1).as_deref() != Some("unpacked");
    let dir = std::env::temp_dir().join(format!("dsh-session-rss-{}", std::process::id()));
    let path = if std::env::args().nth(2).as_deref() == Some("--read") {
        std::path::PathBuf::from(std::env::args().nth(3).unwrap_or_default())
    } else {
        let path = common::write_log(&dir, 100_000, pack);
        // Measure the load in a new process so the writer's memory does not count.
        let out =
            std::process::Command::new(std::env::current_exe().map_err(|e| SessionError::Io {
                action: "finding the example binary",
                path: dir.clone(),
                source: e,
            })?)
            .args([
                if pack { "packed" } else { "unpacked" },
                "--read",
                &path.to_string_lossy(),
            ])
            .output()
            .map_err(|e| SessionError::Io {
                action: "running",
                path: dir.clone(),
                source: e,
            })?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        let _ = std::fs::remove_dir_all(&dir); // a temp folder; leftovers are harmless
        return Ok(());
    };
    let base = vm_hwm_kib();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let start = Instant::now();
    let mut reader = LogReader::open(&path)?;
    let mut projector = Projector::new();
    let mut events = 0u64;
    while let Some(env) = reader.next_event()? {
        events += 1;
        projector.push_owned(env)?;
    }
    let elapsed = start.elapsed();
    println!(
        "{} events ({} file, {} bytes), {} history messages: load+project {:.1} ms, peak RSS {} KiB (baseline {} KiB)",
        events,
        if pack { "packed" } else { "unpacked" },
        size,
        projector.len(),
        elapsed.as_secs_f64() * 1000.0,
        vm_hwm_kib(),
        base
    );
    Ok(())
}
