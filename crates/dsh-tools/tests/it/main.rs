//! Integration tests of dsh-tools (all but bash.rs, see there): fuzzing, jobs, untrusted arguments,
//! protected writes, read, registry, search, web_fetch, web_search, write/edit and the write race.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

mod checkpoints;
mod common;
mod file_gate;
mod file_gate_race;
mod file_modes;
mod fuzz_props;
mod jobs;
mod opt_in_untrusted;
mod protected_writes;
mod read;
mod read_image;
mod registry;
mod search;
mod snapshots;
mod untrusted_args;
mod web_fetch;
mod web_search;
mod write_edit;
mod write_race;
