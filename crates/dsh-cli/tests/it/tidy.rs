//! The tidy test (docs/ARCHITECTURE.md, "Crate rules"): the crate graph and the source tree
//! match what docs/ARCHITECTURE.md says about them.
//!
//! - Every `dsh-*` edge of every `crates/*/Cargo.toml` (`[dependencies]`, `[build-dependencies]`,
//!   `[dev-dependencies]` and their `[target.*]` forms; `dsh-x.workspace = true`,
//!   `dsh-x = { path = ... }` and renamed `package = "dsh-x"` alike) is listed in the crate's
//!   section of the doc, and every edge listed there exists.
//! - Every source file (`crates/*/src/**/*.rs`, `crates/*/ui/**`) is placed by the crate's
//!   section, and every `.rs` file the section names exists.
//!
//! The checks work on text, so the tests below run them on in-memory manifests and docs too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The doc the rules live in, relative to the workspace root.
const DOC: &str = "docs/ARCHITECTURE.md";

/// What one crate's section allows and places.
#[derive(Debug, Default)]
struct Section {
    /// `**Depends on:**`: what `[dependencies]` (and build dependencies) may name.
    depends: BTreeSet<String>,
    /// `**Tests also use:**`: what `[dev-dependencies]` may name besides the above.
    tests_use: BTreeSet<String>,
    /// `**Edges still to repair:**`: wrong-way edges accepted until they are repaired.
    to_repair: BTreeSet<String>,
    /// Every backticked path in the section: files (`turn.rs`, `ui/app.js`) and folders
    /// (`subagents/`).
    paths: BTreeSet<String>,
}

/// The rules of the whole doc.
#[derive(Debug, Default)]
struct Rules {
    /// Sections by crate name (`### \`dsh-x\``).
    crates: BTreeMap<String, Section>,
    /// `**Every crate's tests may use:**`: dev-dependency edges any crate may have.
    any_tests_use: BTreeSet<String>,
}

/// The kind of a manifest edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// `[dependencies]` or `[build-dependencies]` (also under `[target.*]`).
    Normal,
    /// `[dev-dependencies]` (also under `[target.*]`).
    Dev,
}

/// One crate's manifest: its name and its `dsh-*` edges with the table each was found in.
#[derive(Debug)]
struct Manifest {
    name: String,
    edges: BTreeMap<(String, Kind), String>,
}

/// Backticked spans of `text`.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The crate names in backticks on a rule line.
fn crate_names(line: &str) -> BTreeSet<String> {
    backticked(line)
        .filter(|s| s.starts_with("dsh-"))
        .map(str::to_string)
        .collect()
}

/// Parses the rules out of the doc's text: sections are `### \`dsh-x\`` headings (up to the
/// next heading of level 2 or 3); a rule is a list item (with its indented continuation lines)
/// that starts with one of the bold labels above.
fn parse_rules(doc: &str) -> Rules {
    let mut rules = Rules::default();
    // Each section's name (`None` outside crate sections) and its list items and text.
    let mut sections: Vec<(Option<String>, Vec<String>, String)> =
        vec![(None, vec![], String::new())];
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            let name = heading.trim().trim_matches('`');
            let name = name.starts_with("dsh-").then(|| name.to_string());
            sections.push((name, Vec::new(), String::new()));
            continue;
        }
        if line.starts_with("## ") || line.starts_with("# ") {
            sections.push((None, Vec::new(), String::new()));
            continue;
        }
        let Some((_, items, text)) = sections.last_mut() else {
            continue;
        };
        text.push_str(line);
        text.push('\n');
        if let Some(item) = line.strip_prefix("- ") {
            items.push(item.to_string());
        } else if line.starts_with(' ') && !line.trim().is_empty() {
            if let Some(item) = items.last_mut() {
                item.push(' ');
                item.push_str(line.trim());
            }
        }
    }
    for (name, items, text) in sections {
        for item in &items {
            if item.starts_with("**Every crate's tests may use:**") {
                rules.any_tests_use.extend(crate_names(item));
            }
        }
        let Some(name) = name else {
            continue;
        };
        let section = rules.crates.entry(name).or_default();
        for item in &items {
            if item.starts_with("**Depends on:**") {
                section.depends.extend(crate_names(item));
            } else if item.starts_with("**Tests also use:**") {
                section.tests_use.extend(crate_names(item));
            } else if item.starts_with("**Edges still to repair:**") {
                section.to_repair.extend(crate_names(item));
            }
        }
        for span in backticked(&text) {
            if !span.contains(char::is_whitespace) && (span.ends_with('/') || span.contains('.')) {
                section.paths.insert(span.to_string());
            }
        }
    }
    rules
}

/// Reads the `dsh-*` edges of a manifest's text; `workspace` holds the names of the
/// workspace's crates (only edges to those count).
fn parse_manifest(text: &str, workspace: &BTreeSet<String>) -> Result<Manifest, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
    let name = table
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .ok_or("no [package] name")?
        .to_string();
    let mut tables: Vec<(String, &toml::Value)> = Vec::new();
    let kinds = [
        ("dependencies", Kind::Normal),
        ("build-dependencies", Kind::Normal),
        ("dev-dependencies", Kind::Dev),
    ];
    for (key, _) in kinds {
        if let Some(deps) = table.get(key) {
            tables.push((format!("[{key}]"), deps));
        }
    }
    for (target, value) in table
        .get("target")
        .and_then(toml::Value::as_table)
        .into_iter()
        .flatten()
    {
        for (key, _) in kinds {
            if let Some(deps) = value.get(key) {
                tables.push((format!("[target.'{target}'.{key}]"), deps));
            }
        }
    }
    let mut edges = BTreeMap::new();
    for (label, deps) in tables {
        let kind = if label.ends_with("dev-dependencies]") {
            Kind::Dev
        } else {
            Kind::Normal
        };
        for (key, value) in deps.as_table().into_iter().flatten() {
            let target = value
                .get("package")
                .and_then(toml::Value::as_str)
                .unwrap_or(key);
            if workspace.contains(target) {
                edges.insert((target.to_string(), kind), label.clone());
            }
        }
    }
    Ok(Manifest { name, edges })
}

/// Every way `manifests` break `rules`, each naming the crate, the edge and what to do.
fn check_edges(rules: &Rules, manifests: &[Manifest]) -> Vec<String> {
    let mut problems = Vec::new();
    let fix = format!("list it in the crate's section of {DOC} with the reason, or remove it");
    for manifest in manifests {
        let name = &manifest.name;
        let Some(section) = rules.crates.get(name) else {
            problems.push(format!(
                "{name} has no section `### `{name}`` in {DOC}: add one (what it is, its \
                 invariant, its API, **Depends on:**)"
            ));
            continue;
        };
        for ((to, kind), table) in &manifest.edges {
            let allowed = section.depends.contains(to)
                || section.to_repair.contains(to)
                || (*kind == Kind::Dev
                    && (section.tests_use.contains(to) || rules.any_tests_use.contains(to)));
            if !allowed {
                let label = match kind {
                    Kind::Normal => "**Depends on:**",
                    Kind::Dev => "**Tests also use:**",
                };
                problems.push(format!(
                    "{name} -> {to} ({table} of crates/{name}/Cargo.toml) is an edge {DOC} does \
                     not allow: {fix} ({label})"
                ));
            }
        }
        let has = |to: &str, kind: Kind| manifest.edges.contains_key(&(to.to_string(), kind));
        for to in &section.depends {
            if !has(to, Kind::Normal) {
                problems.push(format!(
                    "{DOC} lists {name} -> {to} under **Depends on:**, but \
                     crates/{name}/Cargo.toml has no such dependency: remove it from the doc"
                ));
            }
        }
        for to in &section.tests_use {
            if !has(to, Kind::Dev) {
                problems.push(format!(
                    "{DOC} lists {name} -> {to} under **Tests also use:**, but \
                     crates/{name}/Cargo.toml has no such dev-dependency: remove it from the doc"
                ));
            }
        }
        for to in &section.to_repair {
            if !has(to, Kind::Normal) && !has(to, Kind::Dev) {
                problems.push(format!(
                    "{name} -> {to} is repaired: remove it from **Edges still to repair:** in {DOC}"
                ));
            }
        }
    }
    let names: BTreeSet<&String> = manifests.iter().map(|m| &m.name).collect();
    for name in rules.crates.keys() {
        if !names.contains(name) {
            problems.push(format!(
                "{DOC} has a section for {name}, which is no crate of the workspace: remove it"
            ));
        }
    }
    problems
}

/// Whether `file` (relative to `src/`, or `ui/...` relative to the crate) is placed by `paths`:
/// the crate root (`lib.rs`, `main.rs`); named itself; inside a named folder (`subagents/`);
/// or a `tests.rs` beside a named module (`request/tests.rs` by `request.rs`).
fn placed(file: &str, paths: &BTreeSet<String>) -> bool {
    if file == "lib.rs" || file == "main.rs" || paths.contains(file) {
        return true;
    }
    if paths
        .iter()
        .any(|p| p.ends_with('/') && file.starts_with(p.as_str()))
    {
        return true;
    }
    file.strip_suffix("/tests.rs")
        .is_some_and(|module| paths.contains(&format!("{module}.rs")))
}

/// Every source file of `files` (crate name to paths) that its section does not place, and
/// every `.rs` file a section names for which `exists(crate, path)` is false.
fn check_placement(
    rules: &Rules,
    files: &BTreeMap<String, Vec<String>>,
    exists: &dyn Fn(&str, &str) -> bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let empty = Section::default();
    for (name, list) in files {
        let section = rules.crates.get(name).unwrap_or(&empty);
        for file in list {
            if !placed(file, &section.paths) {
                let shown = if file.starts_with("ui/") {
                    format!("crates/{name}/{file}")
                } else {
                    format!("crates/{name}/src/{file}")
                };
                problems.push(format!(
                    "{shown} is not placed by {DOC}: name `{file}` (or its folder) in the \
                     section of {name} with what it holds"
                ));
            }
        }
        for path in section.paths.iter().filter(|p| p.ends_with(".rs")) {
            // Another crate's file is named with its crate: `dsh-runtime/src/mcp.rs`.
            let found = match path.split_once('/') {
                Some((other, rest)) if other.starts_with("dsh-") => {
                    exists(other, rest.strip_prefix("src/").unwrap_or(rest))
                }
                _ => exists(name, path),
            };
            if !found {
                problems.push(format!(
                    "the section of {name} in {DOC} names `{path}`, which is no file of \
                     crates/{name}: correct or remove it"
                ));
            }
        }
    }
    problems
}

/// Files under `dir` (recursively) whose name passes `keep`, relative to `base`, with `/`.
fn files_under(dir: &Path, base: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, base, keep, out);
        } else if keep(&path) {
            let relative = path.strip_prefix(base).unwrap();
            let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
            out.push(parts.join("/"));
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The crate directories of the workspace (`crates/*` with a `Cargo.toml`), sorted.
fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The workspace's manifests and the rules of its doc.
fn load_workspace(root: &Path) -> (Rules, Vec<Manifest>, Vec<PathBuf>) {
    let doc = std::fs::read_to_string(root.join(DOC)).unwrap();
    let dirs = crate_dirs(root);
    let texts: Vec<String> = dirs
        .iter()
        .map(|d| std::fs::read_to_string(d.join("Cargo.toml")).unwrap())
        .collect();
    let workspace: BTreeSet<String> = texts
        .iter()
        .map(|t| parse_manifest(t, &BTreeSet::new()).unwrap().name)
        .collect();
    let manifests = texts
        .iter()
        .zip(&dirs)
        .map(|(t, d)| {
            parse_manifest(t, &workspace).unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        })
        .collect();
    (parse_rules(&doc), manifests, dirs)
}

fn report(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} problem(s) with the crate rules (docs/ARCHITECTURE.md, \"Crate rules\"):\n- {}",
        problems.len(),
        problems.join("\n- ")
    );
}

#[test]
fn every_edge_is_listed_in_the_architecture_doc() {
    let (rules, manifests, _) = load_workspace(&workspace_root());
    assert!(rules.crates.len() > 10, "no crate sections found in {DOC}");
    report(&check_edges(&rules, &manifests));
}

#[test]
fn every_source_file_is_placed_by_the_architecture_doc() {
    let root = workspace_root();
    let (rules, manifests, dirs) = load_workspace(&root);
    let mut files = BTreeMap::new();
    for (manifest, dir) in manifests.iter().zip(&dirs) {
        let mut list = Vec::new();
        let rust = |p: &Path| p.extension().is_some_and(|e| e == "rs");
        files_under(&dir.join("src"), &dir.join("src"), &rust, &mut list);
        files_under(&dir.join("ui"), dir, &|_| true, &mut list);
        list.sort();
        files.insert(manifest.name.clone(), list);
    }
    // A named `.rs` file is under `src/` or, like `build.rs` or a test, beside it.
    let dir_of: BTreeMap<&str, &PathBuf> = manifests
        .iter()
        .map(|m| m.name.as_str())
        .zip(&dirs)
        .collect();
    let exists = |name: &str, path: &str| {
        dir_of
            .get(name)
            .is_some_and(|dir| dir.join("src").join(path).is_file() || dir.join(path).is_file())
    };
    report(&check_placement(&rules, &files, &exists));
}

const DOC_FIXTURE: &str = "\
# Architecture

## Crate rules

- **Every crate's tests may use:** `dsh-test-support`.

## Crates

### `dsh-llm`

The vocabulary (`message.rs`, `retry.rs`).

- **Depends on:** nothing of ours.

### `dsh-tools`

Tools (`tool.rs`, `builtin/`, `web/search.rs`; a retry is `dsh-llm/src/retry.rs`).

- **Depends on:**
  `dsh-llm`.
- **Tests also use:** `dsh-session`.
";

fn workspace_names() -> BTreeSet<String> {
    ["dsh-llm", "dsh-tools", "dsh-session", "dsh-test-support"]
        .map(String::from)
        .into()
}

fn manifest(text: &str) -> Manifest {
    parse_manifest(text, &workspace_names()).unwrap()
}

const LLM: &str = "[package]\nname = \"dsh-llm\"\n[dependencies]\nserde = \"1\"\n";

const TOOLS: &str = "\
[package]
name = \"dsh-tools\"
[dependencies]
dsh-llm.workspace = true
tokio = \"1\"
[dev-dependencies]
dsh-session = { path = \"../dsh-session\" }
dsh-test-support.workspace = true
";

#[test]
fn the_listed_edges_pass() {
    let problems = check_edges(&parse_rules(DOC_FIXTURE), &[manifest(LLM), manifest(TOOLS)]);
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn an_unlisted_edge_fails_naming_crate_edge_and_fix() {
    let extra = LLM.replace("serde = \"1\"", "serde = \"1\"\ndsh-tools.workspace = true");
    let problems = check_edges(
        &parse_rules(DOC_FIXTURE),
        &[manifest(&extra), manifest(TOOLS)],
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = &problems[0];
    assert!(problem.contains("dsh-llm -> dsh-tools"), "{problem}");
    assert!(problem.contains("[dependencies] of crates/dsh-llm/Cargo.toml"));
    assert!(problem.contains("list it in the crate's section of docs/ARCHITECTURE.md"));
    assert!(problem.contains("or remove it"));
}

#[test]
fn path_renamed_and_target_specific_edges_count() {
    let rules = parse_rules(DOC_FIXTURE);
    for extra in [
        "[dependencies]\nanything = { package = \"dsh-tools\", path = \"../dsh-tools\" }",
        "[target.'cfg(unix)'.dependencies]\ndsh-tools = { path = \"../dsh-tools\" }",
        "[build-dependencies]\ndsh-tools.workspace = true",
        "[target.'cfg(windows)'.dev-dependencies]\ndsh-tools.workspace = true",
    ] {
        let text = format!("[package]\nname = \"dsh-llm\"\n{extra}\n");
        let problems = check_edges(&rules, &[manifest(&text), manifest(TOOLS)]);
        assert_eq!(problems.len(), 1, "{extra}: {problems:?}");
        assert!(
            problems[0].contains("dsh-llm -> dsh-tools"),
            "{}",
            problems[0]
        );
    }
}

#[test]
fn a_dev_edge_is_no_normal_edge() {
    let rules = parse_rules(DOC_FIXTURE);
    let moved = TOOLS.replace("[dev-dependencies]\n", "");
    let problems = check_edges(&rules, &[manifest(LLM), manifest(&moved)]);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("dsh-tools -> dsh-session ([dependencies]")),
        "{problems:?}"
    );
    // The test-support crate is allowed to every crate's tests, never to its code.
    assert!(problems
        .iter()
        .any(|p| p.contains("dsh-tools -> dsh-test-support ([dependencies]")));
}

#[test]
fn listed_edges_must_exist_and_repaired_edges_leave_the_list() {
    let doc = DOC_FIXTURE.replace(
        "Tests also use:** `dsh-session`.",
        "Tests also use:** `dsh-session`.\n- **Edges still to repair:** `dsh-test-support`.",
    );
    let without_llm = TOOLS
        .replace("dsh-llm.workspace = true\n", "")
        .replace("dsh-test-support.workspace = true\n", "");
    let problems = check_edges(&parse_rules(&doc), &[manifest(LLM), manifest(&without_llm)]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("lists dsh-tools -> dsh-llm under **Depends on:**"));
    assert!(problems[1].contains("dsh-tools -> dsh-test-support is repaired"));
    // Until it is repaired, the edge is accepted from that list only.
    let with_edge = TOOLS.replace(
        "[dev-dependencies]",
        "dsh-test-support.workspace = true\n[dev-dependencies]",
    );
    let problems = check_edges(&parse_rules(&doc), &[manifest(LLM), manifest(&with_edge)]);
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn a_crate_without_section_fails() {
    let text = "[package]\nname = \"dsh-session\"\n";
    let problems = check_edges(&parse_rules(DOC_FIXTURE), &[manifest(text)]);
    assert!(
        problems[0].contains("dsh-session has no section"),
        "{problems:?}"
    );
}

#[test]
fn files_are_placed_by_name_folder_or_module() {
    let rules = parse_rules(DOC_FIXTURE);
    let files: BTreeMap<String, Vec<String>> = [
        (
            "dsh-tools".to_string(),
            [
                "lib.rs",
                "tool.rs",
                "builtin/mod.rs",
                "builtin/bash.rs",
                "web/search.rs",
            ]
            .map(String::from)
            .into(),
        ),
        (
            "dsh-llm".to_string(),
            vec!["message.rs".to_string(), "retry.rs".to_string()],
        ),
    ]
    .into();
    let listed = |files: &BTreeMap<String, Vec<String>>, name: &str, path: &str| {
        files.get(name).is_some_and(|l| l.iter().any(|f| f == path))
    };
    let exists = |name: &str, path: &str| listed(&files, name, path);
    assert!(check_placement(&rules, &files, &exists).is_empty());

    let mut more = files.clone();
    more.get_mut("dsh-tools")
        .unwrap()
        .extend(["web/mod.rs".to_string(), "tool/tests.rs".to_string()]);
    let problems = check_placement(&rules, &more, &exists);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("crates/dsh-tools/src/web/mod.rs is not placed"));

    // A named file that is gone fails, named by its own crate or by another's section.
    let mut gone = files.clone();
    gone.insert("dsh-llm".to_string(), vec!["message.rs".to_string()]);
    let exists = |name: &str, path: &str| listed(&gone, name, path);
    let problems = check_placement(&rules, &gone, &exists);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("section of dsh-llm in docs/ARCHITECTURE.md names `retry.rs`"));
    assert!(problems[1]
        .contains("section of dsh-tools in docs/ARCHITECTURE.md names `dsh-llm/src/retry.rs`"));
}
