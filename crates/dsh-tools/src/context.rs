//! Per-session state every tool call sees.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::ask::{Asker, HeadlessAsker};
use crate::confinement::{CommandConfinement, NoSandbox};
use crate::error::{ToolError, ToolErrorCode};
use crate::gate::GatePolicy;
use crate::jobs::JobTable;
use crate::observe::FileObservations;
use crate::paths::{absolutize, protected_write_target, write_root_of};
use crate::snapshot::SnapshotDir;
use crate::spill::{externalize, SpillDir, DEFAULT_SPILL_THRESHOLD};

/// The permission preset of a session (docs/SECURITY.md, "What is protected").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionPreset {
    /// No file modifications by `write`/`edit`; `bash` only when confined read-only.
    ReadOnly,
    /// Writes only inside the session cwd and the temp directories (the default).
    #[default]
    WorkspaceWrite,
    /// No restriction; `bash` runs unconfined.
    DangerFullAccess,
    /// Confined as `workspace-write`, and every call that may change something (`write`,
    /// `edit`, `bash`, MCP tools not declared read-only, any tool not known to only read) is
    /// asked of the user first; the tools themselves refuse a `write`/`edit`/`bash` call that
    /// was not approved.
    Ask,
}

impl PermissionPreset {
    /// The preset's spelling in flags, config and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionPreset::ReadOnly => "read-only",
            PermissionPreset::WorkspaceWrite => "workspace-write",
            PermissionPreset::DangerFullAccess => "danger-full-access",
            PermissionPreset::Ask => "ask",
        }
    }

    /// Every preset, narrowest first, as listed to users.
    pub const ALL: [PermissionPreset; 4] = [
        PermissionPreset::ReadOnly,
        PermissionPreset::Ask,
        PermissionPreset::WorkspaceWrite,
        PermissionPreset::DangerFullAccess,
    ];

    /// The preset whose confinement (sandbox, writable roots, path rules) applies: `ask` is
    /// confined exactly as `workspace-write`; the others are their own.
    pub fn confinement(self) -> PermissionPreset {
        match self {
            PermissionPreset::Ask => PermissionPreset::WorkspaceWrite,
            other => other,
        }
    }

    /// True when every call that may change something needs the user's approval first (`ask`).
    pub fn asks_first(self) -> bool {
        self == PermissionPreset::Ask
    }

    /// Orders presets by what the model may do without asking: `read-only` 0, `ask` 1,
    /// `workspace-write` 2, `danger-full-access` 3 (a switch to a higher rank widens).
    pub fn rank(self) -> u8 {
        match self {
            PermissionPreset::ReadOnly => 0,
            PermissionPreset::Ask => 1,
            PermissionPreset::WorkspaceWrite => 2,
            PermissionPreset::DangerFullAccess => 3,
        }
    }
}

impl fmt::Display for PermissionPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermissionPreset {
    type Err = String;

    /// Parses `read-only`, `ask`, `workspace-write` or `danger-full-access`; anything else is
    /// an error listing the accepted values.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(PermissionPreset::ReadOnly),
            "workspace-write" => Ok(PermissionPreset::WorkspaceWrite),
            "danger-full-access" => Ok(PermissionPreset::DangerFullAccess),
            "ask" => Ok(PermissionPreset::Ask),
            other => Err(format!(
                "unknown permission preset `{other}` (expected read-only, ask, workspace-write or danger-full-access)"
            )),
        }
    }
}

/// Deployment-tunable limits of the built-in tools. [`Default`] gives the documented values;
/// [`ToolLimits::validate`] rejects nonsensical settings at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLimits {
    /// Results above this many bytes are externalised (docs/tools.md, "Externalising"). Default
    /// 50,000.
    pub spill_threshold: usize,
    /// `bash` timeout when the call gives none. Default 60 s.
    pub bash_default_timeout: Duration,
    /// Largest `bash` timeout a call may ask for. Default 600 s.
    pub bash_max_timeout: Duration,
    /// Bytes of each `bash` stream kept in the result (the tail). Default 64 KiB.
    pub bash_stream_cap: usize,
    /// Lines per `read` result. Default 2,000.
    pub read_max_lines: usize,
    /// Characters per line in a `read` result. Default 2,000.
    pub read_max_line_chars: usize,
    /// Bytes per `read` result. Default 50 KB (51,200).
    pub read_max_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            spill_threshold: DEFAULT_SPILL_THRESHOLD,
            bash_default_timeout: Duration::from_secs(60),
            bash_max_timeout: Duration::from_secs(600),
            bash_stream_cap: 64 * 1024,
            read_max_lines: 2_000,
            read_max_line_chars: 2_000,
            read_max_bytes: 50 * 1024,
        }
    }
}

impl ToolLimits {
    /// Checks that every limit is positive and the bash timeouts are ordered.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("spill_threshold", self.spill_threshold),
            ("bash_stream_cap", self.bash_stream_cap),
            ("read_max_lines", self.read_max_lines),
            ("read_max_line_chars", self.read_max_line_chars),
            ("read_max_bytes", self.read_max_bytes),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(format!("tool limit `{name}` must be positive"));
            }
        }
        if self.bash_default_timeout.is_zero() || self.bash_default_timeout > self.bash_max_timeout
        {
            return Err("bash default timeout must be positive and at most the maximum".into());
        }
        Ok(())
    }
}

/// What a tool call may use: the session's cwd, cancellation, spill directory, permission
/// preset, file observations, limits, process confinement and the id of the call.
///
/// Cloning is cheap and shares the observation map; the pipeline typically clones the session
/// context per call with [`ToolContext::for_call`] to give each call its own cancel token, and
/// names the call with [`ToolContext::with_call_id`].
#[derive(Clone)]
pub struct ToolContext {
    cwd: PathBuf,
    cancel: CancellationToken,
    spill: SpillDir,
    permission: PermissionPreset,
    observations: FileObservations,
    limits: Arc<ToolLimits>,
    confinement: Arc<dyn CommandConfinement>,
    temp_roots: Arc<Vec<PathBuf>>,
    /// Directories the user added as writable roots (`--add-dir`, ACP
    /// `additionalDirectories`), canonical.
    extra_roots: Arc<Vec<PathBuf>>,
    jobs: Option<JobTable>,
    asker: Arc<dyn Asker>,
    call_id: Option<String>,
    approved: bool,
    snapshots: SnapshotDir,
    network: bool,
    gate: Arc<GatePolicy>,
    progress: Option<ProgressSink>,
}

/// How far a long call has come, as the tool reports it (an MCP server's
/// `notifications/progress`): shown on the call's card, never model-visible.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolProgress {
    /// The progress so far; grows with every report.
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What is happening, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last lines a running command printed (`bash`: stdout and stderr as they came, at
    /// most [`ToolProgress::OUTPUT_LINES`], control characters removed); `progress` then counts
    /// the lines printed so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<String>,
}

impl ToolProgress {
    /// Most lines of output a report carries.
    pub const OUTPUT_LINES: usize = 5;

    /// A report of how far: `progress` of `total`, with a message.
    pub fn new(progress: f64, total: Option<f64>, message: Option<String>) -> Self {
        ToolProgress {
            progress,
            total,
            message,
            output: Vec::new(),
        }
    }

    /// The report in words, on one line: `2/4 (50%) copying`, `7 copying` without a total; a
    /// command's last line of output when the report carries output.
    pub fn describe(&self) -> String {
        if let Some(last) = self.output.last() {
            return last.chars().take(200).collect();
        }
        let mut line = match self.total {
            Some(total) if total > 0.0 => format!(
                "{}/{} ({:.0}%)",
                self.progress,
                total,
                (self.progress / total * 100.0).clamp(0.0, 100.0)
            ),
            _ => format!("{}", self.progress),
        };
        if let Some(message) = self.message.as_deref().map(str::trim) {
            if !message.is_empty() {
                line.push(' ');
                line.extend(
                    message
                        .chars()
                        .map(|c| if c.is_control() { ' ' } else { c }),
                );
            }
        }
        line
    }
}

/// Where a call's progress reports go (set per call by the agent's pipeline).
pub type ProgressSink = Arc<dyn Fn(ToolProgress) + Send + Sync>;

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("cwd", &self.cwd)
            .field("spill", &self.spill)
            .field("permission", &self.permission)
            .field("confinement", &self.confinement.name())
            .field("call_id", &self.call_id)
            .field("approved", &self.approved)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for a session working in `cwd` (made canonical; it must exist and be a
    /// directory) and spilling into `spill`. Defaults: preset `workspace-write`, default
    /// limits, a fresh cancel token and observation map, and [`NoSandbox`] confinement
    /// (which runs `bash` only under `danger-full-access`).
    pub fn new(cwd: impl AsRef<Path>, spill: SpillDir) -> std::io::Result<Self> {
        let cwd = std::fs::canonicalize(cwd.as_ref())?;
        if !cwd.is_dir() {
            return Err(std::io::Error::other(format!(
                "session cwd {} is not a directory",
                cwd.display()
            )));
        }
        let mut temp_roots = Vec::new();
        for candidate in [
            std::env::temp_dir(),
            PathBuf::from("/tmp"),
            "/var/tmp".into(),
        ] {
            if let Ok(real) = std::fs::canonicalize(&candidate) {
                if !temp_roots.contains(&real) {
                    temp_roots.push(real);
                }
            }
        }
        let snapshots = SnapshotDir::new(spill.path().join("snapshots"));
        let mut roots = vec![cwd.clone()];
        roots.extend(temp_roots.iter().cloned());
        let gate = GatePolicy::new(&cwd)
            .with_write_roots(roots)
            .with_read_exception(spill.path());
        Ok(Self {
            cwd,
            cancel: CancellationToken::new(),
            spill,
            permission: PermissionPreset::default(),
            observations: FileObservations::new(),
            limits: Arc::new(ToolLimits::default()),
            confinement: Arc::new(NoSandbox),
            temp_roots: Arc::new(temp_roots),
            extra_roots: Arc::default(),
            jobs: None,
            asker: Arc::new(HeadlessAsker),
            call_id: None,
            approved: false,
            snapshots,
            network: true,
            gate: Arc::new(gate),
            progress: None,
        })
    }

    /// Sets the permission preset. Under a confining preset, file modes bind the file tools as
    /// root as they bind confined commands ([`GatePolicy::with_file_modes`]).
    pub fn with_permission(mut self, preset: PermissionPreset) -> Self {
        self.permission = preset;
        let modes = preset != PermissionPreset::DangerFullAccess;
        let gate = (*self.gate).clone().with_file_modes(modes);
        self.gate = Arc::new(gate);
        self
    }

    /// Sets the limits (validate them first with [`ToolLimits::validate`]).
    pub fn with_limits(mut self, limits: ToolLimits) -> Self {
        self.limits = Arc::new(limits);
        self
    }

    /// Sets whether confined commands may reach the network (default `true`; the session's
    /// `[sandbox] network`, docs/SECURITY.md "Network"). With `false`, a `bash` call reaches it
    /// only when the user approved that call's `network: true`.
    pub fn with_network(mut self, network: bool) -> Self {
        self.network = network;
        self
    }

    /// Whether confined commands may reach the network (see [`ToolContext::with_network`]).
    pub fn network(&self) -> bool {
        self.network
    }

    /// Sets the process confinement used by `bash` (the sandbox seam).
    pub fn with_confinement(mut self, confinement: Arc<dyn CommandConfinement>) -> Self {
        self.confinement = confinement;
        self
    }

    /// Gives `bash` background jobs (`run_in_background`) and the job tools this table. Without
    /// one, `run_in_background: true` is `UNSUPPORTED`. The table's jobs are killed when its
    /// last clone is dropped, so give each agent its own.
    pub fn with_jobs(mut self, jobs: JobTable) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Sets who answers `ask_user_question` (default: [`HeadlessAsker`], nobody).
    pub fn with_asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = asker;
        self
    }

    /// Keeps the snapshots `write` and `edit` take before changing a file in `dir` (default:
    /// `snapshots/` in the spill directory; docs/tools.md, "Snapshots").
    pub fn with_snapshot_dir(mut self, dir: SnapshotDir) -> Self {
        self.snapshots = dir;
        self
    }

    /// Denies dsh's home `home` to the file tools (docs/SECURITY.md, "The file gate"); the
    /// default already denies `$DSH_HOME` (else `~/.dsh`) as the environment names it.
    pub fn with_dsh_home(mut self, home: &Path) -> Self {
        let gate = (*self.gate).clone().with_dsh_home(home);
        self.gate = Arc::new(gate);
        self
    }

    /// Protects the files trusted hooks and MCP servers run for `write`/`edit` (approval
    /// needed; see [`GatePolicy::with_run_files`]).
    pub fn with_run_files(mut self, files: Vec<PathBuf>) -> Self {
        let gate = (*self.gate).clone().with_run_files(files);
        self.gate = Arc::new(gate);
        self
    }

    /// The file gate's policy: what dsh's file tools may read and write.
    pub fn gate(&self) -> &GatePolicy {
        &self.gate
    }

    /// Where `write` and `edit` keep a file's content before they change it.
    pub fn snapshots(&self) -> &SnapshotDir {
        &self.snapshots
    }

    /// Replaces the cancel token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Names the tool call this context runs (the model's call id).
    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.call_id = Some(call_id.into());
        self
    }

    /// Marks this context's call as approved by the user (an `Ask` verdict answered "allow"),
    /// which lets `write`/`edit` write protected paths under `workspace-write`
    /// (docs/SECURITY.md, "Protected paths"). The pipeline sets it for the approved call only.
    pub fn with_approval(mut self, approved: bool) -> Self {
        self.approved = approved;
        self
    }

    /// True when the user approved this call (see [`ToolContext::with_approval`]).
    pub fn approved(&self) -> bool {
        self.approved
    }

    /// Replaces the observation map (e.g. to share it across contexts of one session).
    pub fn with_observations(mut self, observations: FileObservations) -> Self {
        self.observations = observations;
        self
    }

    /// A copy for one call, with a child of this context's token: cancelling the session
    /// cancels the call, and the call can be cancelled alone.
    pub fn for_call(&self) -> Self {
        let mut ctx = self.clone();
        ctx.cancel = self.cancel.child_token();
        ctx
    }

    /// The id of the tool call this context runs, or `None` outside a call (a session's
    /// context, or a tool run directly as in unit tests).
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    /// Sends this call's progress reports to `sink` (the pipeline sets one per call).
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    /// Reports how far this call has come; nothing happens when nobody listens.
    pub fn report_progress(&self, progress: ToolProgress) {
        if let Some(sink) = &self.progress {
            sink(progress);
        }
    }

    /// The canonical session working directory.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The cancel token of this call or session.
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The private spill directory.
    pub fn spill(&self) -> &SpillDir {
        &self.spill
    }

    /// The permission preset.
    pub fn permission(&self) -> PermissionPreset {
        self.permission
    }

    /// The file observations of the session.
    pub fn observations(&self) -> &FileObservations {
        &self.observations
    }

    /// The background job table, if jobs are enabled.
    pub fn jobs(&self) -> Option<&JobTable> {
        self.jobs.as_ref()
    }

    /// Who answers `ask_user_question`.
    pub fn asker(&self) -> &Arc<dyn Asker> {
        &self.asker
    }

    /// The limits.
    pub fn limits(&self) -> &ToolLimits {
        &self.limits
    }

    /// The process confinement.
    pub fn confinement(&self) -> &Arc<dyn CommandConfinement> {
        &self.confinement
    }

    /// Adds `dirs` (canonical directories the user chose: `--add-dir`, ACP
    /// `additionalDirectories`) to the roots writable under `workspace-write` and `ask`, for
    /// the file tools, the file gate and every confined command alike
    /// ([`ToolContext::writable_roots`]). The runtime checks them first
    /// (`dsh_runtime::extra_roots`).
    pub fn with_extra_roots(mut self, dirs: Vec<PathBuf>) -> Self {
        self.extra_roots = Arc::new(dirs);
        let gate = (*self.gate).clone().with_write_roots(self.writable_roots());
        self.gate = Arc::new(gate);
        self
    }

    /// The directories the user added as writable roots.
    pub fn extra_roots(&self) -> &[PathBuf] {
        &self.extra_roots
    }

    /// Directories writable under `workspace-write`: the cwd, the added directories, then the
    /// temp directories.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.cwd.clone()];
        roots.extend(self.extra_roots.iter().cloned());
        roots.extend(self.temp_roots.iter().cloned());
        roots
    }

    /// The writable roots other than the temp directories, in words (`/w` or `/w, /data`).
    pub fn own_roots_text(&self) -> String {
        std::iter::once(&self.cwd)
            .chain(self.extra_roots.iter())
            .map(|root| root.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The writable root a write to the real path `real` is confined to: the longest of
    /// [`ToolContext::writable_roots`] that contains it, under `workspace-write`. `None` under
    /// the other presets (`danger-full-access` writes by path; `read-only` writes nothing).
    /// `ask` is confined as `workspace-write`.
    pub fn write_root(&self, real: &Path) -> Option<PathBuf> {
        match self.permission.confinement() {
            PermissionPreset::WorkspaceWrite => write_root_of(&self.writable_roots(), real),
            _ => None,
        }
    }

    /// `path` (as the model wrote it) made absolute against the cwd.
    pub fn absolute(&self, path: &str) -> PathBuf {
        absolutize(&self.cwd, path)
    }

    /// Resolves the real target of a write to `path` and checks the preset allows it:
    /// `read-only` refuses every write, `workspace-write` refuses a real path outside the cwd
    /// and temp directories (after following symlinks and `..`), both with
    /// `PERMISSION_DENIED` and the reason. Under `workspace-write` a real path inside a
    /// protected entry (`.git/hooks`, `.git/config`, `.dsh`, `.env*`, ...; see
    /// [`crate::protected_entry`]) is refused too unless the call was approved
    /// ([`ToolContext::with_approval`]). Under every preset the file gate's deny set
    /// (`$DSH_HOME`, other tools' credentials, `/proc/<pid>`, ...; [`GatePolicy::denied`]) is
    /// refused. Under `ask` a call that was not approved is refused before anything is
    /// resolved; an approved one is checked as under `workspace-write`. Returns the real path
    /// to write to.
    pub fn check_writable(&self, path: &str) -> Result<PathBuf, ToolError> {
        if self.permission.asks_first() && !self.approved {
            return Err(ToolError::new(
                ToolErrorCode::PermissionDenied,
                format!(
                    "writing {} needs the user's approval: this session's permission preset is ask, and this call was not approved",
                    self.absolute(path).display()
                ),
            ));
        }
        let requested = self.absolute(path);
        let real = self.gate.resolve(&requested).map_err(|err| match err {
            crate::gate::GateError::Io(err) => ToolError::io("cannot resolve", &requested, &err),
            other => other.into_tool_error(&requested),
        })?;
        self.gate.check_write(&requested)?;
        self.gate.check_write(&real)?;
        match self.permission.confinement() {
            PermissionPreset::DangerFullAccess => Ok(real),
            PermissionPreset::ReadOnly => Err(ToolError::new(
                ToolErrorCode::PermissionDenied,
                format!(
                    "writing {} is not allowed: this session's permission preset is read-only",
                    requested.display()
                ),
            )),
            PermissionPreset::WorkspaceWrite | PermissionPreset::Ask => {
                if self
                    .writable_roots()
                    .iter()
                    .any(|root| real.starts_with(root))
                {
                    let protected = protected_write_target(&self.writable_roots(), &real)
                        .or_else(|| self.gate.run_file(&real).map(Path::to_path_buf));
                    match protected {
                        Some(entry) if !self.approved => {
                            let via = resolves_to(&requested, &real);
                            Err(ToolError::new(
                                ToolErrorCode::PermissionDenied,
                                format!(
                                    "writing {}{via} needs the user's approval: it is inside the protected path {}, which configures code that runs later (git hooks/config, dsh settings, .env), and this call was not approved",
                                    requested.display(),
                                    entry.display()
                                ),
                            ))
                        }
                        _ => Ok(real),
                    }
                } else {
                    let via = resolves_to(&requested, &real);
                    Err(ToolError::new(
                        ToolErrorCode::PermissionDenied,
                        format!(
                            "writing {}{via} is not allowed: the {} preset only permits writes inside {} and the temp directories",
                            requested.display(),
                            self.permission,
                            self.own_roots_text()
                        ),
                    ))
                }
            }
        }
    }

    /// Externalises `text` above the configured threshold (see [`crate::externalize`]).
    /// A failure to write the spill file is `IO`.
    pub fn externalize(&self, text: &str, label: &str) -> Result<String, ToolError> {
        externalize(text, self.limits.spill_threshold, &self.spill, label)
            .map(|e| e.text)
            .map_err(|err| ToolError::io("cannot write spill file in", self.spill.path(), &err))
    }
}

/// ` (resolves to <real>)` when the real target differs from the path asked for, else nothing.
fn resolves_to(requested: &Path, real: &Path) -> String {
    if real == requested {
        String::new()
    } else {
        format!(" (resolves to {})", real.display())
    }
}
