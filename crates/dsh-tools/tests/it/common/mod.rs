//! Shared helpers for the integration tests: real temp dirs, real tools, no mocks.

#![allow(dead_code, clippy::unwrap_used)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dsh_tools::{
    PermissionPreset, SpillDir, ToolContext, ToolError, ToolErrorCode, ToolOutput, ToolRegistry,
};
use serde_json::Value;
use tempfile::TempDir;

/// A scratch area outside the temp directories (under the cargo target dir), so that
/// `workspace-write` escapes are really outside every writable root.
pub struct Scratch {
    pub root: TempDir,
    pub cwd: PathBuf,
    pub outside: PathBuf,
    pub ctx: ToolContext,
    pub registry: ToolRegistry,
}

impl Scratch {
    pub fn new(preset: PermissionPreset) -> Self {
        let root = tempfile::tempdir_in(scratch_parent()).unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let cwd = real.join("ws");
        let outside = real.join("outside");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let spill = SpillDir::create(real.join("spill")).unwrap();
        let ctx = ToolContext::new(&cwd, spill)
            .unwrap()
            .with_permission(preset);
        Self {
            root,
            cwd,
            outside,
            ctx,
            registry: ToolRegistry::with_builtins(),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.cwd.join(rel)
    }

    pub fn put(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, content).unwrap();
        path
    }

    pub async fn call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.registry
            .invoke(tool, &args.to_string(), &self.ctx)
            .await
    }

    pub async fn call_raw(&self, tool: &str, raw: &str) -> Result<ToolOutput, ToolError> {
        self.registry.invoke(tool, raw, &self.ctx).await
    }

    pub async fn ok(&self, tool: &str, args: Value) -> String {
        match self.call(tool, args.clone()).await {
            Ok(out) => out.text_content(),
            Err(err) => panic!("{tool} {args} failed: {err}"),
        }
    }

    pub async fn err(&self, tool: &str, args: Value, code: ToolErrorCode) -> String {
        match self.call(tool, args.clone()).await {
            Ok(out) => panic!(
                "{tool} {args} succeeded, expected {code}: {}",
                out.text_content()
            ),
            Err(err) => {
                assert_eq!(err.code, code, "{tool} {args}: {}", err.message);
                assert!(err.result_text().starts_with("Error: "));
                err.message
            }
        }
    }
}

pub fn read_file(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// A folder for scratch areas that lies outside every directory the sandbox leaves writable
/// (see `dsh_test_support::scratch_parent`).
pub fn scratch_parent() -> std::path::PathBuf {
    dsh_test_support::scratch_parent(std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))).unwrap()
}

/// The swapper stops after this long even if the calls have not ended.
const SWAP_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Swaps `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`) in a loop on its own thread
/// until stopped (or the limit): the path-swapping adversary of the race tests.
pub struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Swapper {
    pub fn start(a: &Path, b: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let a = CString::new(a.as_os_str().as_bytes()).unwrap();
        let b = CString::new(b.as_os_str().as_bytes()).unwrap();
        let (thread_stop, thread_swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            while !thread_stop.load(Ordering::Relaxed) && started.elapsed() < SWAP_LIMIT {
                // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                if rc != 0 {
                    return Err(format!(
                        "renameat2(RENAME_EXCHANGE) failed: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                thread_swaps.fetch_add(1, Ordering::Relaxed);
                // Let the other side run now and then, so both arrangements last a while.
                std::thread::yield_now();
            }
            Ok(())
        });
        Self {
            stop,
            swaps,
            thread: Some(thread),
        }
    }

    /// Stops the loop and returns how many swaps happened.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap().unwrap();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    /// A test that fails mid-race stops the loop too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
