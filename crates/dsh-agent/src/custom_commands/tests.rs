use super::*;

fn parse(text: &str) -> Result<(CustomCommand, Vec<String>), String> {
    parse_command("c", text, Path::new("/c.md"))
}

#[test]
fn front_matter_keys_and_defaults() {
    let (c, warnings) = parse(
        "---\ndescription: \"Open a PR\"\nargument-hint: '[title] [base]'\nallowed-tools: read, grep, mcp__gh__*\nmodel: deepseek-v4-pro\ncolor: blue\n---\n\nBody $1.\n",
    )
    .unwrap();
    assert_eq!(c.description, "Open a PR");
    assert_eq!(c.argument_hint.as_deref(), Some("[title] [base]"));
    assert_eq!(
        c.allowed_tools.as_deref(),
        Some(&["read".to_string(), "grep".into(), "mcp__gh__*".into()][..])
    );
    assert_eq!(c.model.as_deref(), Some("deepseek-v4-pro"));
    assert_eq!(c.body, "Body $1.");
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("`color`"), "{warnings:?}");

    // No front matter: the body is the file, the description its first line.
    let (c, warnings) = parse("# Review the diff\n\nLook closely.\n").unwrap();
    assert_eq!(c.description, "Review the diff");
    assert!(c.allowed_tools.is_none() && c.model.is_none() && warnings.is_empty());
}

#[test]
fn tool_lists_in_three_spellings() {
    for text in [
        "---\nallowed-tools: [read, \"grep\"]\n---\nx",
        "---\nallowed-tools:\n  - read\n  - 'grep'\n---\nx",
        "---\nallowed-tools: read,grep\n---\nx",
    ] {
        let (c, _) = parse(text).unwrap();
        assert_eq!(
            c.allowed_tools.as_deref(),
            Some(&["read".to_string(), "grep".into()][..]),
            "{text}"
        );
    }
}

#[test]
fn malformed_front_matter_is_an_error() {
    for (text, says) in [
        ("---\ndescription: x\nbody without end", "not closed"),
        ("---\njust words\n---\nx", "not `key: value`"),
        ("---\nmodel: a\nmodel: b\n---\nx", "twice"),
        (
            "---\nallowed-tools: Bash(git add:*)\n---\nx",
            "argument patterns",
        ),
        ("---\nallowed-tools: [read\n---\nx", "unclosed `[`"),
        ("---\ndescription: \"open\n---\nx", "unclosed quote"),
        ("---\nmodel:\n  - a\n---\nx", "not a list"),
        ("---\nallowed-tools:\n---\nx", "names no tool"),
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.contains(says), "{text:?}: {err}");
    }
}

#[test]
fn arguments_split_as_a_shell_would_without_running_anything() {
    assert_eq!(
        split_arguments(r#"one "two words" 'three $x' four\ five "q\"uote" $(id)"#).unwrap(),
        [
            "one",
            "two words",
            "three $x",
            "four five",
            "q\"uote",
            "$(id)"
        ]
    );
    assert!(split_arguments("\"open").is_err());
    assert!(split_arguments("'open").is_err());
    assert!(split_arguments("   ").unwrap().is_empty());
}

#[test]
fn substitution() {
    assert_eq!(
        substitute(
            "Fix $1 in $2 (all: $ARGUMENTS); cost $$5, $HOME, $0, $9.",
            " a  \"b c\" "
        )
        .unwrap(),
        "Fix a in b c (all: a  \"b c\"); cost $5, $HOME, $0, ."
    );
    // Arguments the body does not name are appended, not lost.
    assert_eq!(
        substitute("Review.", "the parser").unwrap(),
        "Review.\n\nARGUMENTS: the parser"
    );
    assert_eq!(substitute("Review.", "").unwrap(), "Review.");
    assert!(substitute("$1", "\"x").is_err());
    // `!` and `@` are text: nothing runs, nothing is included.
    assert_eq!(
        substitute("!`rm -rf /` @secrets.txt $1", "@x").unwrap(),
        "!`rm -rf /` @secrets.txt @x"
    );
}

#[test]
fn names_come_from_paths() {
    assert_eq!(command_name(Path::new("git/pr.md")).unwrap(), "git:pr");
    assert_eq!(
        command_name(Path::new("review_2-x.md")).unwrap(),
        "review_2-x"
    );
    assert!(command_name(Path::new("bad name.md")).is_err());
    assert!(command_name(Path::new("a.b.md")).is_err());
    assert!(command_name(Path::new("compact.md"))
        .unwrap_err()
        .contains("dsh's own"));
    // A namespaced name is not dsh's own.
    assert_eq!(
        command_name(Path::new("x/compact.md")).unwrap(),
        "x:compact"
    );
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn project(ws: &Path, files: &[&str]) -> ProjectCommands {
    let dir = ws.join(".dsh/commands");
    ProjectCommands {
        gate: dsh_tools::GatePolicy::new(ws),
        pinned: files
            .iter()
            .map(|f| {
                let path = dir.join(f);
                let bytes = std::fs::read(&path).unwrap();
                (path, bytes)
            })
            .collect(),
        dirs: vec![dir],
    }
}

#[test]
fn project_commands_replace_the_users_and_pass_the_gate_as_pinned() {
    let root = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(root.path()).unwrap();
    let (home, ws, outside) = (root.join("home"), root.join("ws"), root.join("outside"));
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    let user = home.join("commands");
    write(&user.join("review.md"), "the user's review");
    write(&user.join("own.md"), "---\ndescription: mine\n---\nmine");
    write(&user.join("help.md"), "shadows /help");
    let cmds = ws.join(".dsh/commands");
    write(&cmds.join("review.md"), "the project's review");
    write(&cmds.join("git/pr.md"), "open a PR");
    write(&cmds.join("big.md"), &"x".repeat(70 * 1024));
    write(&cmds.join("later.md"), "pinned text");
    write(&outside.join("secret.md"), "OUTSIDE-SECRET");
    std::os::unix::fs::symlink(outside.join("secret.md"), cmds.join("leak.md")).unwrap();
    write(
        &ws.join("README.md"),
        "in the project, not in .dsh/commands",
    );
    std::os::unix::fs::symlink(ws.join("README.md"), cmds.join("readme.md")).unwrap();
    let pinned = project(&ws, &["review.md", "git/pr.md", "big.md", "later.md"]);
    // Changed after the trust check: not used.
    write(&cmds.join("later.md"), "planted after the check");
    write(&cmds.join("new.md"), "not pinned at all");

    let set = CustomCommandSet::load(Some(&user), Some(&pinned));
    let names: Vec<&str> = set.commands().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["git:pr", "own", "review"], "{:?}", set.problems());
    assert_eq!(set.get("review").unwrap().body, "the project's review");
    assert_eq!(set.get("own").unwrap().description, "mine");
    let problems: Vec<String> = set
        .problems()
        .iter()
        .map(|p| format!("{}: {}", p.path.display(), p.message))
        .collect();
    let says = |file: &str, what: &str| {
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("/{file}: ")) && p.contains(what)),
            "{file} {what}: {problems:#?}"
        )
    };
    says("help.md", "dsh's own");
    says("big.md", "larger than 64 KiB");
    says("leak.md", "symlink-out");
    says("readme.md", "outside");
    says("later.md", "changed since");
    says("new.md", "changed since");
    assert!(set.commands().iter().all(|c| !c.body.contains("OUTSIDE")));

    // Untrusted: the project is not read at all.
    let set = CustomCommandSet::load(Some(&user), None);
    assert_eq!(set.get("review").unwrap().body, "the user's review");
}

#[test]
fn expansion_carries_the_turn_settings_and_checks_the_model() {
    let mut set = CustomCommandSet::default();
    set.add(
        Path::new("/"),
        Path::new("/x/go.md"),
        Ok("---\nallowed-tools: read\nmodel: small\nargument-hint: <file>\n---\nRead $1.".into()),
    );
    set.add(
        Path::new("/"),
        Path::new("/y.md"),
        Ok("---\nmodel: unknown-model\n---\nhi".into()),
    );
    let ext = CustomCommands::new(set, |m| m == "small");
    let listed = ext.user_commands();
    assert_eq!(listed[0].name, "x:go");
    assert_eq!(listed[0].hint.as_deref(), Some("<file>"));
    let expansion = ext.expand_user_command("x:go", "a.rs").unwrap().unwrap();
    assert_eq!(expansion.text, "Read a.rs.");
    assert_eq!(expansion.turn.model.as_deref(), Some("small"));
    assert_eq!(
        expansion.turn.tool_filter.unwrap().allowed,
        vec!["read".to_string()]
    );
    assert_eq!(expansion.origin.as_deref(), Some("/x/go.md"));
    let err = ext.expand_user_command("y", "").unwrap().unwrap_err();
    assert!(err.to_string().contains("not in the model table"), "{err}");
    assert!(ext.expand_user_command("nope", "").is_none());
}

/// A `.claude/commands` file: Claude Code's tool names map to dsh's, its other keys are
/// warnings naming them, and a `.claude/commands` folder is read in that dialect.
#[test]
fn claude_code_dialect() {
    let (c, warnings) = parse_claude_command(
        "c",
        "---\nallowed-tools: Bash, Read, MultiEdit, Edit, mcp__gh__*\ndisable-model-invocation: true\n---\nGo.\n",
        Path::new("/c.md"),
    )
    .unwrap();
    assert_eq!(
        c.allowed_tools.as_deref(),
        Some(
            &[
                "bash".to_string(),
                "read".into(),
                "edit".into(),
                "mcp__gh__*".into()
            ][..]
        )
    );
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("`disable-model-invocation`") && warnings[0].contains("Claude Code"),
        "{warnings:?}"
    );
    // Argument patterns are dropped with a warning: the whole tool is offered (the session's
    // preset and approvals still apply); the body keeps its parentheses.
    let (command, warnings) = parse_claude_command(
        "c",
        "---\nallowed-tools: Bash(git add:*, git commit:*), Read\n---\nrun (carefully)",
        Path::new("/c.md"),
    )
    .unwrap();
    assert_eq!(
        command.allowed_tools.as_deref(),
        Some(&["bash".to_string(), "read".to_string()][..])
    );
    assert!(command.body.contains("run (carefully)"), "{}", command.body);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("(git add:*, git commit:*)") && w.contains("not enforced")),
        "{warnings:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let claude = dir.path().join(".claude").join("commands");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(
        claude.join("ship.md"),
        "---\nallowed-tools: Grep\n---\nShip it.",
    )
    .unwrap();
    let own = dir.path().join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("ship.md"), "Mine.").unwrap();
    let set = CustomCommandSet::load_all(&[claude.as_path()], None);
    let ship = set.get("ship").unwrap();
    assert_eq!(
        ship.allowed_tools.as_deref(),
        Some(&["grep".to_string()][..])
    );
    // A later folder (dsh's own) replaces the Claude Code command of the same name.
    let set = CustomCommandSet::load_all(&[claude.as_path(), own.as_path()], None);
    assert_eq!(set.get("ship").unwrap().body, "Mine.");
}
