//! The three C math functions the executable's dependencies call, defined here so that the
//! executable does not need `libm.so.6`, which the loader would otherwise open and relocate at
//! every start, `dsh --version` included (docs/PERFORMANCE.md, "`--version`, thirteenth pass").
//! Callers: `pow` in tokio's scheduler statistics, `log2` in zopfli's entropy estimate, `log` in
//! SQLite's FTS5 ranking. A definition in the executable takes the place of the shared
//! library's for the static linker, which then drops the unused library (`--as-needed`). The
//! bodies are the `libm` crate's (a port of musl's), within an ulp of glibc's.
//!
//! A dependency that starts calling another libm function brings `libm.so.6` back; the test
//! `version_cli::the_executable_needs_only_the_c_library` says which.

/// `x` raised to the power `y`.
#[no_mangle]
extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// The natural logarithm of `x`.
#[no_mangle]
extern "C" fn log(x: f64) -> f64 {
    libm::log(x)
}

/// The base-2 logarithm of `x`.
#[no_mangle]
extern "C" fn log2(x: f64) -> f64 {
    libm::log2(x)
}
