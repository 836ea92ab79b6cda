//! Escape tests of dsh-sandbox: escapes.rs (workspace-write and read-only, any user) and
//! root_escapes.rs (privileged escapes, run as root), no_real_root.rs (root in the sandbox is not
//! the host's root: kernel settings, set-id files, kernel interfaces, the network switch), probe.rs (probe trials leave no process
//! and no stale scratch directory), probe_cache.rs (planted probe verdicts end confined or
//! refused), prepared_bwrap.rs (the prepared bubblewrap sandbox, as root), keeper.rs (the
//! keeper starts the command from the image the spawner prepared).
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

mod escapes;
mod keeper;
mod launcher_env;
mod no_real_root;
mod prepared_bwrap;
mod probe;
mod probe_cache;
mod root_escapes;
