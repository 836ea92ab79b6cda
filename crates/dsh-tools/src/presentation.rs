//! How front ends show a tool call (docs/tools.md, "Presentation"): each tool describes its own
//! calls ([`crate::Tool::present`]) and results ([`crate::Tool::summarize`]), so no front end
//! has to know tool names.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a call does, in ACP's set of tool kinds (so ACP maps them one to one); front ends may
/// pick an icon or a colour by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads files or data.
    Read,
    /// Changes files.
    Edit,
    /// Deletes files or data.
    Delete,
    /// Moves or renames files.
    Move,
    /// Searches for files or text.
    Search,
    /// Runs a command or code.
    Execute,
    /// Internal reasoning or planning (the todo list).
    Think,
    /// Fetches from the network.
    Fetch,
    /// Switches the session's mode (leaves plan mode).
    SwitchMode,
    /// Anything else (also a kind a newer writer added).
    #[default]
    #[serde(other)]
    Other,
}

impl ToolKind {
    /// The name as logged and as ACP spells it (`read`, `switch_mode`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Edit => "edit",
            ToolKind::Delete => "delete",
            ToolKind::Move => "move",
            ToolKind::Search => "search",
            ToolKind::Execute => "execute",
            ToolKind::Think => "think",
            ToolKind::Fetch => "fetch",
            ToolKind::SwitchMode => "switch_mode",
            ToolKind::Other => "other",
        }
    }
}

/// How front ends lay out a call and its result. A view names a layout, never a tool: several
/// tools may share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolView {
    /// A command's output, tail first; the summary is its exit status (`meta.exitCode`).
    Terminal,
    /// File changes from `meta.diffs` (or `meta.unifiedDiff`).
    Diff,
    /// A file's contents, folded away.
    Contents,
    /// Search results (paths or matching lines), folded away.
    Results,
    /// Web sources from `meta.sources` (title, URL).
    Sources,
    /// The todo list of the arguments' `todos`.
    Todos,
    /// Questions for the user (`questions` of the arguments); the call waits for the answers.
    Question,
    /// A plan for the user to review (`plan` of the arguments); the call waits for the review.
    PlanReview,
    /// The result text (also a view a newer writer added).
    #[default]
    #[serde(other)]
    Text,
}

/// How a call is shown: what the tool says about a call from its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolPresentation {
    /// The tool as people read it: its name for dsh's tools, `server · tool` (or the title the
    /// server gives it) for MCP tools.
    pub title: String,
    /// What the call acts on, on one line: `$ cargo test`, a path, a pattern, a URL. `None`:
    /// front ends show the call's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The call in words, for a title of its own (ACP's card, the web's tooltip): `bash`'s
    /// `description`, else its command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What the call does.
    #[serde(default)]
    pub kind: ToolKind,
    /// How to lay it out.
    #[serde(default)]
    pub view: ToolView,
    /// The files it reads or changes, as the arguments give them (relative paths are relative
    /// to the session's working directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<String>,
}

impl ToolPresentation {
    /// The presentation of a tool that says nothing about its calls: its name, kind `other`,
    /// view `text`, the arguments as subject.
    pub fn new(title: impl Into<String>) -> Self {
        ToolPresentation {
            title: title.into(),
            ..ToolPresentation::default()
        }
    }

    /// With a subject.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// With a detail, when there is one.
    pub fn detail(mut self, detail: Option<&str>) -> Self {
        self.detail = detail.map(str::to_string);
        self
    }

    /// With a kind.
    pub fn kind(mut self, kind: ToolKind) -> Self {
        self.kind = kind;
        self
    }

    /// With a view.
    pub fn view(mut self, view: ToolView) -> Self {
        self.view = view;
        self
    }

    /// With `path` among the locations.
    pub fn location(mut self, path: impl Into<String>) -> Self {
        self.locations.push(path.into());
        self
    }

    /// One line naming the call: `title: detail` (or the subject), or the title alone (ACP's
    /// tool call title, a child's latest activity).
    pub fn headline(&self) -> String {
        match self.detail.as_deref().or(self.subject.as_deref()) {
            Some(what) if !what.is_empty() => format!("{}: {what}", self.title),
            _ => self.title.clone(),
        }
    }
}

/// How a result reads at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    /// The call's own check passed (a command exited 0).
    Success,
    /// The call's own check failed (a command exited non-zero, timed out, was killed).
    Failure,
    /// Neither good nor bad news (a count, a diff size; also a tone a newer writer added).
    #[default]
    #[serde(other)]
    Neutral,
}

impl Tone {
    fn is_neutral(&self) -> bool {
        *self == Tone::Neutral
    }
}

/// A short summary of a finished call, from the tool: `exit 1`, `42 lines read`, `3 matches`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultSummary {
    /// The summary, on one line.
    pub text: String,
    /// Good, bad or neutral.
    #[serde(default, skip_serializing_if = "Tone::is_neutral")]
    pub tone: Tone,
    /// The subject once the result is in, when it differs from the call's (a `read` of a line
    /// range shows the path alone: the summary tells the lines read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl ResultSummary {
    /// A neutral summary.
    pub fn new(text: impl Into<String>) -> Self {
        ResultSummary {
            text: text.into(),
            ..ResultSummary::default()
        }
    }

    /// With a tone.
    pub fn tone(mut self, tone: Tone) -> Self {
        self.tone = tone;
        self
    }
}

/// What a call would change, worked out from its arguments alone (no file is read, so a
/// preview never shows the user a file the call has not written yet): shown while the call
/// waits for approval ([`crate::Tool::preview`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangePreview {
    /// A unified diff of the change (`---`/`+++` headers, `@@` hunks, `+`/`-`/` ` lines).
    pub diff: String,
    /// The arguments the diff shows, which front ends need not list again.
    pub covers: Vec<&'static str>,
}

/// What a tool summarises a result from: as the log keeps it, so logs can be summarised later.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResultFacts<'a> {
    /// The result text the model saw.
    pub text: &'a str,
    /// The tool's structured data (`meta` of `tool/result`), when it gave some.
    pub meta: Option<&'a Value>,
    /// The error code of a failed call (`PERMISSION_DENIED`, ...).
    pub error: Option<&'a str>,
}

impl<'a> ResultFacts<'a> {
    /// The number `key` of the data.
    pub fn meta_u64(&self, key: &str) -> Option<u64> {
        self.meta?.get(key)?.as_u64()
    }

    /// The value `key` of the data.
    pub fn meta_value(&self, key: &str) -> Option<&'a Value> {
        self.meta?.get(key)
    }
}

/// The string argument `key`, when it is one and not empty.
pub fn string_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `text` on one line (line ends become spaces), cut to `max` characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// `count noun`, with the noun's singular for one (`1 line`, `2 lines`).
pub(crate) fn count(count: u64, singular: &str, plural: &str) -> String {
    format!("{count} {}", if count == 1 { singular } else { plural })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn presentations_round_trip_and_leave_out_what_is_empty() {
        let p = ToolPresentation::new("bash")
            .subject("$ ls")
            .kind(ToolKind::Execute)
            .view(ToolView::Terminal);
        let value = serde_json::to_value(&p).unwrap_or_default();
        assert_eq!(
            value,
            json!({"title": "bash", "subject": "$ ls", "kind": "execute", "view": "terminal"})
        );
        let back: ToolPresentation = serde_json::from_value(value).unwrap_or_default();
        assert_eq!(back, p);
        let plan = ToolPresentation::new("exit_plan_mode")
            .kind(ToolKind::SwitchMode)
            .view(ToolView::PlanReview);
        let value = serde_json::to_value(&plan).unwrap_or_default();
        assert_eq!(value["kind"], "switch_mode");
        assert_eq!(value["view"], "plan-review");
    }

    #[test]
    fn unknown_kinds_and_views_read_as_the_generic_ones() {
        let p: ToolPresentation =
            serde_json::from_value(json!({"title": "x", "kind": "teleport", "view": "hologram"}))
                .unwrap_or_default();
        assert_eq!((p.kind, p.view), (ToolKind::Other, ToolView::Text));
        let s: ResultSummary =
            serde_json::from_value(json!({"text": "ok", "tone": "sparkly"})).unwrap_or_default();
        assert_eq!(s.tone, Tone::Neutral);
        assert_eq!(
            serde_json::to_value(ResultSummary::new("3 matches")).unwrap_or_default(),
            json!({"text": "3 matches"})
        );
    }

    #[test]
    fn headlines_prefer_the_detail() {
        let bash = ToolPresentation::new("bash")
            .subject("$ cargo test")
            .detail(Some("Run the tests"));
        assert_eq!(bash.headline(), "bash: Run the tests");
        assert_eq!(
            ToolPresentation::new("read").subject("a.txt").headline(),
            "read: a.txt"
        );
        assert_eq!(ToolPresentation::new("mcp").headline(), "mcp");
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    fn facts<'a>(text: &'a str, meta: &'a Value) -> ResultFacts<'a> {
        ResultFacts {
            text,
            meta: Some(meta),
            error: None,
        }
    }

    #[test]
    fn the_built_in_tools_present_their_calls() {
        let tools = crate::ToolRegistry::standard();
        let bash = tools.present(
            "bash",
            r#"{"command":"cargo test\n-q","description":"Run the tests"}"#,
        );
        assert_eq!(bash.subject.as_deref(), Some("$ cargo test -q"));
        assert_eq!(bash.detail.as_deref(), Some("Run the tests"));
        assert_eq!(
            (bash.kind, bash.view),
            (ToolKind::Execute, ToolView::Terminal)
        );
        let read = tools.present("read", r#"{"file_path":"big.rs","offset":10,"limit":5}"#);
        assert_eq!(read.subject.as_deref(), Some("big.rs lines 10-14"));
        assert_eq!(read.locations, ["big.rs"]);
        let edit = tools.present("edit", r#"{"file_path":"src/a.rs"}"#);
        assert_eq!((edit.kind, edit.view), (ToolKind::Edit, ToolView::Diff));
        let grep = tools.present(
            "grep",
            r#"{"pattern":"TODO","path":"src","include":"*.rs"}"#,
        );
        assert_eq!(grep.subject.as_deref(), Some("TODO in src (*.rs)"));
        let search = tools.present("web_search", r#"{"queries":["rust","serde"]}"#);
        assert_eq!(search.headline(), "web_search: rust, serde");
        assert_eq!(search.view, ToolView::Sources);
        let ask = tools.present(
            "ask_user_question",
            r#"{"questions":[{"id":"a","question":"Which db?","header":"Storage"},{"id":"b","question":"Why?"}]}"#,
        );
        assert_eq!(ask.subject.as_deref(), Some("Storage (+1 more)"));
        assert_eq!(ask.view, ToolView::Question);
        let todo = tools.present("todo_write", r#"{"todos":[]}"#);
        assert_eq!((todo.subject, todo.view), (None, ToolView::Todos));
        let plain = tools.present("bash", r#"{"command":"ls"}"#);
        assert_eq!(plain.headline(), "bash: ls");
        // Not JSON, or a tool nobody registered: still a presentation.
        assert_eq!(
            tools.present("bash", "not json").subject.as_deref(),
            Some("$ ")
        );
        assert_eq!(
            tools.present("mystery", "{}"),
            ToolPresentation::new("mystery")
        );
    }

    #[test]
    fn the_built_in_tools_summarise_their_results() {
        let tools = crate::ToolRegistry::standard();
        let summary = |name: &str, args: &str, text: &str, meta: Value| {
            tools.summarize(name, args, &facts(text, &meta))
        };
        let exit = |meta| summary("bash", "{}", "", meta).unwrap_or_default();
        assert_eq!(
            exit(json!({"exitCode": 0})),
            ResultSummary::new("exit 0").tone(Tone::Success)
        );
        assert_eq!(
            exit(json!({"exitCode": 2})),
            ResultSummary::new("exit 2").tone(Tone::Failure)
        );
        assert_eq!(exit(json!({"timedOut": true})).text, "timed out");
        assert_eq!(exit(json!({"exitCode": null})).text, "killed");
        assert_eq!(
            exit(json!({"jobId": "bash-1"})).text,
            "background job bash-1"
        );
        let read = summary(
            "read",
            r#"{"file_path":"big.rs","offset":10,"limit":5}"#,
            "",
            json!({"offset": 10, "linesShown": 5, "totalLines": 900}),
        )
        .unwrap_or_default();
        assert_eq!(read.text, "5 lines read (10-14 of 900)");
        assert_eq!(read.subject.as_deref(), Some("big.rs"));
        let numbered = summary("read", "{}", "1: a\n2\tb\nno", Value::Null).unwrap_or_default();
        assert_eq!(numbered.text, "2 lines read");
        let grep = |meta| summary("grep", "{}", "a\nb", meta).unwrap_or_default().text;
        assert_eq!(
            grep(json!({"total": 300, "shown": 250})),
            "300 matches (250 shown)"
        );
        assert_eq!(grep(json!({"total": 1, "shown": 1})), "1 match");
        assert_eq!(grep(Value::Null), "2 lines");
        let write = summary(
            "write",
            "{}",
            "",
            json!({"added": 2, "removed": 0, "created": true}),
        );
        assert_eq!(write.unwrap_or_default().text, "new file +2 -0");
        let sources = json!({"sources": [{"url": "https://a"}], "truncated": true});
        let found = summary("web_search", "{}", "", sources).unwrap_or_default();
        assert_eq!(found.text, "1 source (cut)");
        let asked = summary("ask_user_question", "{}", "", json!({"answers": {}}));
        assert_eq!(asked.unwrap_or_default().text, "answered");
        // A failed call is summarised by its error code, not by the tool.
        let failed = ResultFacts {
            error: Some("PERMISSION_DENIED"),
            ..ResultFacts::default()
        };
        assert_eq!(tools.summarize("write", "{}", &failed), None);
        assert_eq!(
            tools.summarize("todo_write", "{}", &facts("", &Value::Null)),
            None
        );
    }
}
