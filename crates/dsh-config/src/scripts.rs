//! Scripts that hooks and MCP servers run, and whether the model could have written them
//! (docs/SECURITY.md, "Planted configuration and workspace trust"; docs/hooks.md, "Scripts in
//! the workspace are pinned").
//!
//! A hook command is shell text and an MCP server a program with arguments; either may name a
//! file the model can write: the program itself (`./.dsh/check.sh`, or a name found on a `PATH`
//! entry inside the workspace), the script an interpreter runs (`sh scripts/pre.sh`,
//! `python3 tools/hook.py`), a file sourced with `.`/`source`, or a file fed on stdin
//! (`bash < x.sh`). [`scripts_of_shell`] and [`scripts_of_argv`] find them; [`model_writable`]
//! says whether a path lies in a root the model can write (the workspace, the working directory
//! and the temp directories); [`ScriptGate`] runs such a command only when every such script
//! still has the bytes pinned when the user trusted the workspace.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Programs whose first non-option argument is the script they run.
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "busybox",
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "tsx",
    "ts-node",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "tclsh",
    "osascript",
    "pwsh",
];

/// Variables whose value names a file the program then runs or loads as code.
const CODE_VARIABLES: &[&str] = &["BASH_ENV", "ENV", "LD_PRELOAD", "PYTHONSTARTUP"];

/// Programs that run a file only when given `-f <file>` (their first argument is program text).
const FILE_OPTION_ONLY: &[&str] = &["awk", "gawk", "mawk", "nawk", "sed"];

/// Options of interpreters whose value is inline code or a module name, not a file: the
/// interpreter runs no script file of its own then (`python3 -c`, `python3 -m json.tool`,
/// `node -e`, `perl -e`).
const INLINE_CODE_OPTIONS: &[&str] = &["-c", "-e", "-E", "-m", "-p", "--eval", "--print"];

/// Interpreters whose `-c` argument is shell text (analysed in turn).
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"];

/// Words that wrap the command that follows them.
const WRAPPERS: &[&str] = &[
    "exec", "command", "builtin", "nice", "nohup", "time", "env", "stdbuf", "setsid", "then", "do",
    "else", "if", "elif", "while", "until", "!", "{", "(", "timeout", "sudo", "doas", "xargs",
    "flock", "ionice", "chrt", "taskset",
];

/// What a command runs that the model may have written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandScripts {
    /// Files the command runs (program, script, sourced file), absolute, as found.
    pub files: Vec<PathBuf>,
    /// A part of the command whose program or script cannot be told before it runs (`$VAR`,
    /// `$(...)` in a program or script position): such a command is refused when it could name
    /// a model-writable file.
    pub unknown: Vec<String>,
}

/// Where a command runs: its working directory, the `PATH` it searches, `$HOME`.
#[derive(Debug, Clone)]
pub struct CommandPlace {
    /// The working directory (relative paths and `$CLAUDE_PROJECT_DIR`/`$DSH_PROJECT_DIR`).
    pub cwd: PathBuf,
    /// The `PATH` of the command's environment.
    pub path: Option<OsString>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
}

impl CommandPlace {
    /// A command run in `cwd` with dsh's own `PATH` and `HOME`.
    pub fn new(cwd: &Path) -> Self {
        CommandPlace {
            cwd: cwd.to_path_buf(),
            path: std::env::var_os("PATH"),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word after quote removal and expansion of the known variables; `dynamic` when it
    /// still depends on something only the shell knows.
    Word { text: String, dynamic: bool },
    /// `;`, `&`, `&&`, `||`, newline, `(`, `)`.
    Separator,
    /// `|`: the next command reads the previous one's output.
    Pipe,
    /// `<` (input redirection: the next word is read by the command).
    Input,
    /// `>`, `>>`, `2>`, ...: the next word is written, not run.
    Output,
}

/// Splits shell text into tokens; command substitutions (`$(...)`, backticks) are analysed as
/// commands of their own and pushed to `nested`.
fn tokenize(text: &str, place: &CommandPlace, nested: &mut Vec<String>) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut dynamic = false;
    let mut in_word = false;
    let mut i = 0;
    let flush =
        |tokens: &mut Vec<Token>, word: &mut String, dynamic: &mut bool, in_word: &mut bool| {
            if *in_word {
                tokens.push(Token::Word {
                    text: std::mem::take(word),
                    dynamic: *dynamic,
                });
            }
            *dynamic = false;
            *in_word = false;
        };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => flush(&mut tokens, &mut word, &mut dynamic, &mut in_word),
            '|' if chars.get(i + 1) != Some(&'|') && (i == 0 || chars[i - 1] != '|') => {
                flush(&mut tokens, &mut word, &mut dynamic, &mut in_word);
                tokens.push(Token::Pipe);
            }
            '\n' | ';' | '&' | '|' | '(' | ')' => {
                flush(&mut tokens, &mut word, &mut dynamic, &mut in_word);
                tokens.push(Token::Separator);
            }
            '<' | '>' => {
                // `2>` and `&>`: the digits typed before belong to the operator.
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                flush(&mut tokens, &mut word, &mut dynamic, &mut in_word);
                i = redirection(&chars, i, &mut tokens);
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i = double_quoted(&chars, i + 1, place, (&mut word, &mut dynamic), nested);
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.get(i + 1) {
                    if *next != '\n' {
                        word.push(*next);
                    }
                    i += 1;
                }
            }
            '$' | '`' => {
                in_word = true;
                i = expand(&chars, i, place, &mut word, &mut dynamic, nested);
                continue;
            }
            '~' if !in_word => {
                in_word = true;
                match (&place.home, chars.get(i + 1)) {
                    (Some(home), None | Some('/' | ' ' | '\t' | ';' | '\n')) => {
                        word.push_str(&home.to_string_lossy());
                    }
                    _ => {
                        word.push('~');
                        dynamic = true;
                    }
                }
            }
            // `[` and `[[` standing alone are the test command, not a pattern.
            '[' if !in_word && test_command_at(&chars, i) > 0 => {
                let len = test_command_at(&chars, i);
                (in_word, i) = (true, i + len - 1);
                word.push_str(&"[["[..len]);
            }
            '*' | '?' | '[' => {
                in_word = true;
                word.push(c);
                dynamic = true;
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    flush(&mut tokens, &mut word, &mut dynamic, &mut in_word);
    tokens
}

/// The length of the test command (`[` or `[[`) that starts at `i` as a word of its own; 0
/// when none does.
fn test_command_at(chars: &[char], i: usize) -> usize {
    let ends_word = |at: usize| matches!(chars.get(at), None | Some(' ' | '\t' | '\n' | ';'));
    if ends_word(i + 1) {
        1
    } else if chars.get(i + 1) == Some(&'[') && ends_word(i + 2) {
        2
    } else {
        0
    }
}

/// Pushes the redirection operator at `i` (`<`, `>`, `>>`, `<<`, `>&`, ...); returns the index
/// of its last character.
fn redirection(chars: &[char], mut i: usize, tokens: &mut Vec<Token>) -> usize {
    let c = chars[i];
    if c == '<' && chars.get(i + 1) == Some(&'<') {
        // A here-document or here-string: its text is data on stdin.
        tokens.push(Token::Output);
        i += 1;
    } else if c == '<' {
        tokens.push(Token::Input);
    } else {
        tokens.push(Token::Output);
    }
    while matches!(chars.get(i + 1), Some('>' | '&' | '|')) {
        i += 1;
    }
    i
}

/// Reads the inside of a double-quoted string starting at `i` into `word` (expanding `$...`
/// and backticks); returns the index of the closing quote.
fn double_quoted(
    chars: &[char],
    mut i: usize,
    place: &CommandPlace,
    (word, dynamic): (&mut String, &mut bool),
    nested: &mut Vec<String>,
) -> usize {
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' && i + 1 < chars.len() {
            i += 1;
            word.push(chars[i]);
        } else if chars[i] == '$' || chars[i] == '`' {
            i = expand(chars, i, place, word, dynamic, nested) - 1;
        } else {
            word.push(chars[i]);
        }
        i += 1;
    }
    i
}

/// Expands the `$...` or backtick at `start`; returns the index after it.
fn expand(
    chars: &[char],
    start: usize,
    place: &CommandPlace,
    word: &mut String,
    dynamic: &mut bool,
    nested: &mut Vec<String>,
) -> usize {
    let until = |from: usize, open: char, close: char| -> usize {
        let mut depth = 1;
        let mut j = from;
        while j < chars.len() {
            if chars[j] == open && open != close {
                depth += 1;
            } else if chars[j] == close {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            j += 1;
        }
        chars.len()
    };
    if chars[start] == '`' {
        let end = until(start + 1, '`', '`');
        nested.push(chars[start + 1..end.min(chars.len())].iter().collect());
        *dynamic = true;
        return end + 1;
    }
    match chars.get(start + 1) {
        Some('(') => {
            let end = until(start + 2, '(', ')');
            nested.push(chars[start + 2..end.min(chars.len())].iter().collect());
            *dynamic = true;
            end + 1
        }
        Some('{') => {
            let end = until(start + 2, '{', '}');
            let name: String = chars[start + 2..end.min(chars.len())].iter().collect();
            push_variable(&name, place, word, dynamic);
            end + 1
        }
        Some(c) if c.is_ascii_alphanumeric() || *c == '_' => {
            let mut j = start + 1;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            let name: String = chars[start + 1..j].iter().collect();
            push_variable(&name, place, word, dynamic);
            j
        }
        Some(_) => {
            *dynamic = true;
            start + 2
        }
        None => {
            word.push('$');
            start + 1
        }
    }
}

fn push_variable(name: &str, place: &CommandPlace, word: &mut String, dynamic: &mut bool) {
    match name {
        "CLAUDE_PROJECT_DIR" | "DSH_PROJECT_DIR" | "PWD" => {
            word.push_str(&place.cwd.to_string_lossy());
        }
        "HOME" if place.home.is_some() => {
            if let Some(home) = &place.home {
                word.push_str(&home.to_string_lossy());
            }
        }
        _ => *dynamic = true,
    }
}

/// The files the shell text `command` runs (see the module documentation).
pub fn scripts_of_shell(command: &str, place: &CommandPlace) -> CommandScripts {
    let mut out = CommandScripts::default();
    shell_into(command, place, &mut out, 0);
    let mut nested = Vec::new();
    // Every word but the targets of output redirections (`>> /tmp/log` is written, not run).
    let mut words: Vec<(String, bool)> = Vec::new();
    let mut written = false;
    for token in tokenize(command, place, &mut nested) {
        match token {
            Token::Word { text, dynamic } if !written => words.push((text, dynamic)),
            Token::Output => {
                written = true;
                continue;
            }
            _ => {}
        }
        written = false;
    }
    every_file_named(&words, place, &mut out);
    for inner in &nested {
        let inner = scripts_of_shell(inner, place);
        out.files.extend(inner.files);
        out.unknown.extend(inner.unknown);
    }
    out.files.sort();
    out.files.dedup();
    out
}

/// The safety net under the shape-by-shape analysis above (which an attacker beat with
/// wrappers it did not know: `{ cd tools; ./check.sh; }`, `env -C tools ./check.sh`,
/// `timeout -s KILL 5 tools/check.sh`): every static word that names an existing file that
/// could be run, from the working directory or from any directory the command may change to
/// (`cd`, `pushd`, `-C`, `--chdir`, `--directory`), counts as a file the command runs. A file
/// could be run when it is executable, has a script's extension, or follows an interpreter's
/// name anywhere in the command; data a hook merely names (`touch log`) is not pinned, so its
/// changes do not void the trust. A directory change to a target only the shell knows makes
/// the command unknown.
fn every_file_named(words: &[(String, bool)], place: &CommandPlace, out: &mut CommandScripts) {
    let mut dirs = vec![place.cwd.clone()];
    for (at, (word, dynamic)) in words.iter().enumerate() {
        // A pattern names files only the shell knows (`tools/chec?.sh`): refused rather than
        // guessed (third adversarial review). Brace expansions are expanded below.
        if *dynamic && word.contains(['*', '?', '[']) {
            out.unknown.push(word.clone());
        }
        // The text of a shell started further along (`runuser -u x -- sh -c '...'`).
        if program_is(word, SHELLS) {
            if let Some(at_c) = words[at + 1..].iter().position(|(w, _)| w == "-c") {
                match shell_text_after(&words[at + 2 + at_c..]) {
                    Some((text, false)) => {
                        let inner = scripts_of_shell(text, place);
                        out.files.extend(inner.files);
                        out.unknown.extend(inner.unknown);
                    }
                    Some((text, true)) => out.unknown.push(text.clone()),
                    None => {}
                }
            }
        }
        let inline = word
            .strip_prefix("--chdir=")
            .or_else(|| word.strip_prefix("--directory="))
            .or_else(|| word.strip_prefix("--wd="))
            .or_else(|| word.strip_prefix("--working-directory="));
        let target = match word.as_str() {
            "cd"
            | "pushd"
            | "-C"
            | "--chdir"
            | "--directory"
            | "--wd"
            | "-D"
            | "--working-directory" => words.get(at + 1),
            _ => None,
        };
        match (inline, target) {
            (Some(dir), _) => dirs.push(absolute(&place.cwd, Path::new(dir))),
            (None, Some((dir, false))) if !dir.starts_with('-') => {
                let base = dirs.last().cloned().unwrap_or_else(|| place.cwd.clone());
                dirs.push(absolute(&place.cwd, Path::new(dir)));
                dirs.push(absolute(&base, Path::new(dir)));
            }
            (None, Some((dir, true))) => out.unknown.push(format!("{word} {dir}")),
            _ => {}
        }
    }
    let mut after_interpreter = false;
    for (word, dynamic) in words {
        let skip = *dynamic || word.is_empty() || word.starts_with('-') || word.contains('=');
        let interpreted = std::mem::replace(&mut after_interpreter, is_interpreter(word));
        if skip {
            after_interpreter |= interpreted && word.starts_with('-');
            continue;
        }
        // `tools/check{.sh,}` names `tools/check.sh` to the shell (third adversarial review).
        for spelled in brace_expansions(word) {
            for dir in &dirs {
                let candidate = absolute(dir, Path::new(&spelled));
                if runnable(&candidate, interpreted) {
                    out.files.push(candidate);
                }
            }
        }
    }
}

/// `word` and what the shell's brace expansion makes of it (`a{b,c}d` also gives `abd` and
/// `acd`), at most 64 spellings. Quoted braces (JSON in an `echo`) give names that match no
/// file, which is harmless here.
fn brace_expansions(word: &str) -> Vec<String> {
    let mut done = vec![word.to_string()];
    let mut pending = vec![word.to_string()];
    while let Some(current) = pending.pop() {
        let Some(open) = current.find('{') else {
            continue;
        };
        let Some(close) = current[open..].find('}').map(|at| open + at) else {
            continue;
        };
        let inside = &current[open + 1..close];
        if !inside.contains(',') {
            continue;
        }
        for alternative in inside.split(',') {
            if done.len() >= 64 {
                return done;
            }
            let spelled = format!("{}{alternative}{}", &current[..open], &current[close + 1..]);
            if !done.contains(&spelled) {
                done.push(spelled.clone());
                pending.push(spelled);
            }
        }
    }
    done
}

/// Whether `word` names an interpreter that runs the file named after it.
fn is_interpreter(word: &str) -> bool {
    program_is(word, INTERPRETERS)
}

/// Whether the program `word` names (a path or a bare name) is one of `list`, also with a
/// version after it (`python3.12`, `bash5`).
fn program_is(word: &str, list: &[&str]) -> bool {
    let name = Path::new(word)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    list.contains(&name.as_str()) || list.contains(&base)
}

/// Extensions of files an interpreter runs.
const SCRIPT_EXTENSIONS: &[&str] = &[
    "sh", "bash", "zsh", "ksh", "fish", "py", "pl", "rb", "js", "mjs", "cjs", "ts", "php", "lua",
    "tcl", "awk", "sed",
];

/// Whether `path` is an existing file that could be run: executable, a script by its
/// extension, or named right after an interpreter (`interpreted`).
fn runnable(path: &Path, interpreted: bool) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if meta.is_dir() {
        return false;
    }
    let script = path
        .extension()
        .is_some_and(|ext| SCRIPT_EXTENSIONS.contains(&ext.to_string_lossy().as_ref()));
    #[cfg(unix)]
    let executable = {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    };
    #[cfg(not(unix))]
    let executable = false;
    interpreted || script || executable
}

fn shell_into(command: &str, place: &CommandPlace, out: &mut CommandScripts, depth: usize) {
    if depth > 8 {
        out.unknown.push(command.to_string());
        return;
    }
    let mut nested = Vec::new();
    let tokens = tokenize(command, place, &mut nested);
    let mut words: Vec<(String, bool)> = Vec::new();
    let mut pending: Option<&Token> = None;
    let mut piped = false;
    // `cd tools && ./check.sh` runs `tools/check.sh`: later relative paths follow the `cd`.
    // A subshell's `(cd x; ...)` ends with it, which is not tracked: a `cd` there is unknown.
    let mut here = place.clone();
    let in_subshell = command
        .char_indices()
        .any(|(at, c)| c == '(' && !command[..at].ends_with('$'));
    for token in tokens.iter().chain(std::iter::once(&Token::Separator)) {
        match token {
            Token::Separator | Token::Pipe => {
                if !change_directory(&words, in_subshell, &mut here, out) {
                    simple_command(&words, piped, &here, out, depth);
                }
                words.clear();
                piped = *token == Token::Pipe;
            }
            Token::Input | Token::Output => pending = Some(token),
            Token::Word { text, dynamic } => match pending.take() {
                Some(Token::Input) => {
                    if *dynamic {
                        out.unknown.push(text.clone());
                    } else {
                        out.files.push(absolute(&here.cwd, Path::new(text)));
                    }
                }
                Some(_) => {}
                None => words.push((text.clone(), *dynamic)),
            },
        }
    }
    for inner in nested {
        shell_into(&inner, place, out, depth + 1);
    }
}

/// Follows a `cd DIR` (or `pushd DIR`) in `words`: later commands resolve relative paths from
/// there. A directory change dsh cannot follow (a dynamic target, `cd -`, `popd`, or one in a
/// subshell, whose end dsh does not track) makes the command unknown, so it is refused rather
/// than checked against the wrong files. True when `words` changed (or tried to change) the
/// directory.
fn change_directory(
    words: &[(String, bool)],
    in_subshell: bool,
    here: &mut CommandPlace,
    out: &mut CommandScripts,
) -> bool {
    let Some(((program, _), args)) = words.split_first() else {
        return false;
    };
    if !matches!(program.as_str(), "cd" | "pushd" | "popd") {
        return false;
    }
    match (program.as_str(), args.first()) {
        ("popd", _) => out.unknown.push("popd".into()),
        (_, Some((dir, false))) if !in_subshell && dir != "-" => {
            here.cwd = absolute(&here.cwd, Path::new(dir));
        }
        (_, None) if !in_subshell && here.home.is_some() => {
            here.cwd = here.home.clone().unwrap_or_default();
        }
        (_, target) => out.unknown.push(format!(
            "{program} {}",
            target.map(|(d, _)| d.as_str()).unwrap_or_default()
        )),
    }
    true
}

/// The files one simple command (`words`, after quote removal) runs.
///
/// `piped`: its standard input is the previous command's output, so an interpreter given no
/// script reads its program from there (`cat x.sh | sh`), which dsh cannot check.
fn simple_command(
    words: &[(String, bool)],
    piped: bool,
    place: &CommandPlace,
    out: &mut CommandScripts,
    depth: usize,
) {
    let mut rest = words;
    let mut piped = piped;
    // Assignments and wrappers before the program (`FOO=1 exec env -i nice ./x`).
    while let Some(((word, dynamic), tail)) = rest.split_first() {
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if let Some((name, value)) = word.split_once('=').filter(|_| assignment) {
            if CODE_VARIABLES.contains(&name) {
                // `BASH_ENV=./x.sh bash -c ...`: the value is a file the program runs.
                for file in value.split(':').filter(|f| !f.is_empty()) {
                    script_word(file, *dynamic, place, out);
                }
            }
        }
        let option_of_wrapper = word.starts_with('-') && word.len() > 1;
        // The duration of `timeout 5`, the niceness of `nice -n 5`, the lock of `flock f`.
        let before = words.len() - rest.len();
        let argument_of_wrapper = before > 0
            && (word.starts_with(|c: char| c.is_ascii_digit())
                && word
                    .chars()
                    .all(|c| c.is_ascii_digit() || ".smhd".contains(c))
                || matches!(words[before - 1].0.as_str(), "flock" | "-n"));
        if word == "xargs" {
            // Its command gets arguments read from its input.
            piped = true;
        }
        if assignment
            || WRAPPERS.contains(&word.as_str())
            || option_of_wrapper
            || argument_of_wrapper
        {
            rest = tail;
        } else {
            break;
        }
    }
    let Some(((program, dynamic), args)) = rest.split_first() else {
        return;
    };
    if *dynamic {
        out.unknown.push(program.clone());
        return;
    }
    if program == "." || program == "source" {
        match args.first() {
            Some((script, dynamic)) => script_word(script, *dynamic, place, out),
            None => out.unknown.push(program.clone()),
        }
        return;
    }
    if program == "eval" || program.contains(char::is_whitespace) {
        shell_words(program, args, place, out, depth);
        return;
    }
    let program_path = resolve_program(program, place);
    if let Some(path) = &program_path {
        out.files.push(path.clone());
    }
    let is = |list: &[&str]| program_is(program, list);
    if is(FILE_OPTION_ONLY) {
        if let Some(i) = args.iter().position(|(a, _)| a == "-f" || a == "--file") {
            if let Some((script, dynamic)) = args.get(i + 1) {
                script_word(script, *dynamic, place, out);
            }
        }
        return;
    }
    if !is(INTERPRETERS) {
        return;
    }
    let runner = is(&["deno", "bun"]);
    interpreter_args(args, (is(SHELLS), runner), piped, place, out, depth);
}

/// Shell text made of words (`eval ...`), or one word holding a whole command line
/// (`env -S "sh x.sh"`): analysed as shell text, or unknown when it is not static.
fn shell_words(
    program: &str,
    args: &[(String, bool)],
    place: &CommandPlace,
    out: &mut CommandScripts,
    depth: usize,
) {
    let mut all: Vec<&str> = Vec::new();
    if program != "eval" {
        all.push(program);
    }
    all.extend(args.iter().map(|(w, _)| w.as_str()));
    let text = all.join(" ");
    if args.iter().any(|(_, dynamic)| *dynamic) {
        out.unknown.push(text);
    } else {
        shell_into(&text, place, out, depth + 1);
    }
}

/// The script an interpreter's `args` name (see [`simple_command`]).
///
/// `(shell, runner)`: a shell (`-c` takes shell text), a runner whose `run` subcommand comes
/// before the script (`deno run x.ts`).
fn interpreter_args(
    args: &[(String, bool)],
    (shell, runner): (bool, bool),
    piped: bool,
    place: &CommandPlace,
    out: &mut CommandScripts,
    depth: usize,
) {
    let mut i = 0;
    while i < args.len() {
        let (arg, dynamic) = &args[i];
        if shell
            && (arg == "-c"
                || (arg.starts_with('-') && !arg.starts_with("--") && arg.ends_with('c')))
        {
            // `bash -c -- TEXT`, `bash -c -e TEXT`: the shell reads options after `-c` too,
            // and its text is the first word that is not one (third adversarial review).
            let text = shell_text_after(&args[i + 1..]);
            match text {
                Some((text, false)) => shell_into(text, place, out, depth + 1),
                Some((text, true)) => out.unknown.push(text.clone()),
                None => out.unknown.push(arg.clone()),
            }
            return;
        }
        if matches!(arg.as_str(), "-o" | "-O" | "+o" | "+O") {
            i += 2;
            continue;
        }
        if !shell && INLINE_CODE_OPTIONS.contains(&arg.as_str()) {
            // Inline code or a module: no script file (docs/SECURITY.md says what the
            // interpreter's own lookups in the working directory mean).
            return;
        }
        if arg.starts_with('-') || arg.starts_with('+') {
            i += 1;
            continue;
        }
        if runner && arg == "run" && i == first_plain(args) {
            // `deno run x.ts`, `bun run x.js`: the subcommand, then the script.
            i += 1;
            continue;
        }
        script_word(arg, *dynamic, place, out);
        return;
    }
    if piped {
        out.unknown.push("a program read from a pipe".to_string());
    }
}

/// The shell text among the words after `-c`: the first that is not an option (`-e`, `+x`,
/// `--`; `-o NAME` and `-O NAME` take the next word).
fn shell_text_after(words: &[(String, bool)]) -> Option<&(String, bool)> {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        match word.0.as_str() {
            "-o" | "-O" | "+o" | "+O" => i += 2,
            w if w.starts_with('-') || w.starts_with('+') => i += 1,
            _ => return Some(word),
        }
    }
    None
}

/// The index of the first argument that is not an option.
fn first_plain(args: &[(String, bool)]) -> usize {
    args.iter()
        .position(|(a, _)| !a.starts_with('-') && !a.starts_with('+'))
        .unwrap_or(args.len())
}

fn script_word(word: &str, dynamic: bool, place: &CommandPlace, out: &mut CommandScripts) {
    if dynamic {
        out.unknown.push(word.to_string());
    } else {
        out.files.push(absolute(&place.cwd, Path::new(word)));
    }
}

/// The files an MCP server started as `program args...` in `place` runs.
pub fn scripts_of_argv(program: &str, args: &[String], place: &CommandPlace) -> CommandScripts {
    let mut out = CommandScripts::default();
    let mut words = vec![(program.to_string(), false)];
    words.extend(args.iter().map(|a| (a.clone(), false)));
    simple_command(&words, false, place, &mut out, 0);
    every_file_named(&words, place, &mut out);
    out.files.sort();
    out.files.dedup();
    out
}

/// The file `program` names: a path when it holds a `/`, else the first match on `PATH`
/// (relative and empty `PATH` entries count from the working directory, as the shell does).
fn resolve_program(program: &str, place: &CommandPlace) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(absolute(&place.cwd, Path::new(program)));
    }
    let path = place.path.as_ref()?;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            place.cwd.clone()
        } else {
            absolute(&place.cwd, &dir)
        };
        let candidate = dir.join(program);
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    None
}

/// `path` made absolute against `base`, with `.` and `..` removed lexically.
fn absolute(base: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `path` with its longest existing ancestor resolved (symlinks followed).
fn real(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let mut rest = Vec::new();
    let mut cur = path.to_path_buf();
    while let Some(parent) = cur.parent().map(Path::to_path_buf) {
        if let Some(name) = cur.file_name() {
            rest.push(name.to_os_string());
        }
        if let Ok(mut real) = std::fs::canonicalize(&parent) {
            for name in rest.iter().rev() {
                real.push(name);
            }
            return real;
        }
        cur = parent;
    }
    path.to_path_buf()
}

/// The roots the model can write under `workspace-write`: the workspace, the working directory,
/// the directories the user added (`extra`: `--add-dir`, ACP `additionalDirectories`) and the
/// temp directories (`$TMPDIR`, `/tmp`, `/var/tmp`, `/dev/shm`), as given and resolved.
pub fn writable_roots(workspace: &Path, cwd: &Path, extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let fixed = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
    ];
    let all = [workspace.to_path_buf(), cwd.to_path_buf()]
        .into_iter()
        .chain(extra.iter().cloned())
        .chain(fixed);
    for root in all {
        for form in [absolute(Path::new("/"), &root), real(&root)] {
            if !roots.contains(&form) {
                roots.push(form);
            }
        }
    }
    roots
}

/// True when `path` lies in a root the model can write (see [`writable_roots`]): its own
/// location, or where its symlinks lead; except inside `home` (`$DSH_HOME`, which the sandbox
/// hides from confined commands wherever it is, docs/SECURITY.md "dsh's own environment").
pub fn model_writable(path: &Path, roots: &[PathBuf], home: Option<&Path>) -> bool {
    let lexical = absolute(Path::new("/"), path);
    let resolved = real(&lexical);
    if let Some(home) = home {
        let homes = [absolute(Path::new("/"), home), real(home)];
        if homes
            .iter()
            .any(|h| lexical.starts_with(h) && resolved.starts_with(h))
        {
            return false;
        }
    }
    roots
        .iter()
        .any(|root| lexical.starts_with(root) || resolved.starts_with(root))
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Runs only commands whose model-writable scripts still hold the bytes the user trusted.
///
/// `pins` are the scripts the trusted project settings named when the user trusted the
/// workspace, by resolved path, with the hash of their bytes then; a command that runs a
/// model-writable file which is not pinned (a user hook pointing into the workspace, a script
/// created after the trust), or whose bytes changed, is refused with a message saying what to
/// do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptGate {
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// The working directory commands run in.
    pub cwd: PathBuf,
    /// `$DSH_HOME`, out of the model's reach (see [`model_writable`]).
    pub home: Option<PathBuf>,
    /// Pinned scripts: resolved path -> `sha256:<hex>`.
    pub pins: BTreeMap<PathBuf, String>,
    /// The directories the session added as writable roots: scripts there are model-writable
    /// too.
    pub extra_roots: Vec<PathBuf>,
}

impl ScriptGate {
    /// The `PATH` hook commands and MCP servers run with: dsh's own without its empty,
    /// relative and model-writable entries, so that neither the command nor anything it
    /// starts finds a program the model planted (a `node_modules/.bin`, `.` or `/tmp/bin` on
    /// the user's `PATH`). `None` when dsh has no `PATH`.
    pub fn command_path(&self) -> Option<OsString> {
        let path = std::env::var_os("PATH")?;
        let roots = writable_roots(&self.workspace, &self.cwd, &self.extra_roots);
        let kept: Vec<PathBuf> = std::env::split_paths(&path)
            .filter(|dir| dir.is_absolute())
            .filter(|dir| !model_writable(dir, &roots, self.home.as_deref()))
            .collect();
        std::env::join_paths(kept).ok()
    }

    fn place(&self, cwd: &Path) -> CommandPlace {
        CommandPlace {
            path: self.command_path(),
            ..CommandPlace::new(cwd)
        }
    }

    /// Checks the hook command `command` (shell text); `Err` says why it must not run.
    pub fn check_shell(&self, command: &str) -> Result<(), String> {
        let place = self.place(&self.cwd);
        self.check(
            &scripts_of_shell(command, &place),
            &format!("hook command `{command}`"),
        )
    }

    /// Checks the MCP server command `program args...` run in `cwd` (its own, or the session's).
    pub fn check_argv(&self, program: &str, args: &[String], cwd: &Path) -> Result<(), String> {
        let place = self.place(cwd);
        self.check(
            &scripts_of_argv(program, args, &place),
            &format!("MCP server command `{program}`"),
        )
    }

    fn check(&self, scripts: &CommandScripts, what: &str) -> Result<(), String> {
        let roots = writable_roots(&self.workspace, &self.cwd, &self.extra_roots);
        if let Some(unknown) = scripts.unknown.first() {
            return Err(format!(
                "{what} runs `{unknown}`, which dsh cannot resolve before it runs (a variable or \
                 command substitution in a program or script position), so it cannot check that \
                 the model did not write it; not run. Write the script's path out in full, \
                 outside the workspace and the temp directories (e.g. ~/.dsh/hooks/)"
            ));
        }
        for file in &scripts.files {
            if !model_writable(file, &roots, self.home.as_deref()) {
                continue;
            }
            let resolved = real(file);
            let Some(pin) = self.pins.get(&resolved) else {
                return Err(format!(
                    "{what} runs {}, which lies where the model can write (the workspace or a \
                     temp directory) and was not pinned when you trusted this workspace; not \
                     run. Move the script outside the workspace and temp directories (e.g. \
                     ~/.dsh/hooks/), or, for a project's own hook or MCP server, review it and \
                     run `dsh trust`",
                    file.display()
                ));
            };
            let now = std::fs::read(&resolved).map(|bytes| sha256(&bytes));
            match now {
                Ok(now) if now == *pin => {}
                Ok(now) => {
                    return Err(format!(
                        "{what} runs {}, which changed since you trusted this workspace (pinned \
                         {pin}, now {now}); not run. Review the script and run `dsh trust` again",
                        file.display()
                    ))
                }
                Err(err) => {
                    return Err(format!(
                        "{what} runs {}, which cannot be read ({err}); not run. Review the \
                         script and run `dsh trust` again",
                        file.display()
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The commands of a project's settings: each hook `command` of `[hooks]` (TOML) or of a
/// `hooks.json`, and each MCP server's `command` with its `args` and `cwd`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProjectCommands {
    pub(crate) shell: Vec<String>,
    pub(crate) argv: Vec<(String, Vec<String>, Option<PathBuf>)>,
}

impl ProjectCommands {
    pub(crate) fn add_toml(&mut self, text: &str) {
        let Ok(table) = text.parse::<toml::Table>() else {
            return;
        };
        if let Some(hooks) = table.get("hooks") {
            toml_commands(hooks, &mut self.shell);
        }
        let servers = table
            .get("mcp")
            .and_then(|m| m.get("servers"))
            .and_then(toml::Value::as_table);
        for server in servers.into_iter().flat_map(|s| s.values()) {
            let Some(command) = server.get("command").and_then(toml::Value::as_str) else {
                continue;
            };
            let args = server
                .get("args")
                .and_then(toml::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(toml::Value::as_str)
                .map(str::to_string)
                .collect();
            let cwd = server
                .get("cwd")
                .and_then(toml::Value::as_str)
                .map(PathBuf::from);
            self.argv.push((command.to_string(), args, cwd));
        }
    }

    /// The servers of a `.mcp.json` (`mcpServers.<name>.command` and `args`).
    pub(crate) fn add_mcp_json(&mut self, text: &str) {
        let Ok((layer, _)) = crate::other_tools::mcp_json_layer("", text) else {
            return;
        };
        if let Ok(text) = toml::to_string(&layer) {
            self.add_toml(&text);
        }
    }

    pub(crate) fn add_json(&mut self, text: &str) {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
            json_commands(&value, &mut self.shell);
        }
    }

    /// Every file these commands run that the model can write, resolved, in a stable order.
    pub(crate) fn writable_scripts(
        &self,
        workspace: &Path,
        cwd: &Path,
        home: &Path,
    ) -> Vec<PathBuf> {
        let roots = writable_roots(workspace, cwd, &[]);
        let gate = ScriptGate {
            workspace: workspace.to_path_buf(),
            cwd: cwd.to_path_buf(),
            home: Some(home.to_path_buf()),
            pins: BTreeMap::new(),
            extra_roots: Vec::new(),
        };
        let place = gate.place(cwd);
        let mut files: Vec<PathBuf> = Vec::new();
        for command in &self.shell {
            files.extend(scripts_of_shell(command, &place).files);
        }
        for (program, args, own_cwd) in &self.argv {
            let place = gate.place(
                &own_cwd
                    .as_deref()
                    .map_or_else(|| cwd.to_path_buf(), |d| absolute(cwd, d)),
            );
            files.extend(scripts_of_argv(program, args, &place).files);
        }
        let mut out: Vec<PathBuf> = files
            .iter()
            .filter(|f| model_writable(f, &roots, Some(home)))
            .map(|f| real(f))
            .filter(|f| f.is_file())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn toml_commands(value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(table) => {
            for (key, inner) in table {
                match (key.as_str(), inner) {
                    ("command", toml::Value::String(command)) => out.push(command.clone()),
                    _ => toml_commands(inner, out),
                }
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|v| toml_commands(v, out)),
        _ => {}
    }
}

fn json_commands(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("command", serde_json::Value::String(command)) => out.push(command.clone()),
                    _ => json_commands(inner, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| json_commands(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(cwd: &Path) -> CommandPlace {
        CommandPlace {
            cwd: cwd.to_path_buf(),
            path: Some("/usr/bin:/bin".into()),
            home: Some(PathBuf::from("/home/u")),
        }
    }

    fn files(command: &str) -> CommandScripts {
        scripts_of_shell(command, &place(Path::new("/w")))
    }

    /// `cd tools && ./check.sh` runs `tools/check.sh`, not a decoy `./check.sh` (adversarial
    /// review of issue 38); a directory change dsh cannot follow makes the command unknown.
    #[test]
    fn scripts_after_a_cd_are_found_where_they_run() {
        let found = files("cd tools && ./check.sh");
        assert_eq!(
            found.files,
            vec![PathBuf::from("/w/tools/check.sh")],
            "{found:?}"
        );
        assert!(found.unknown.is_empty());
        let found = files("cd /opt/x; sh run.sh; cd ..; sh up.sh");
        assert!(
            found.files.contains(&PathBuf::from("/opt/x/run.sh")),
            "{found:?}"
        );
        assert!(
            found.files.contains(&PathBuf::from("/opt/up.sh")),
            "{found:?}"
        );
        for command in [
            "cd \"$(cat dir)\" && ./check.sh",
            "cd - && ./check.sh",
            "pushd tools; popd; ./check.sh",
            "(cd tools; ./check.sh)",
        ] {
            assert!(!files(command).unknown.is_empty(), "{command}");
        }
    }

    /// The second adversarial review of issue 38 hid the real script behind wrappers the
    /// shape analysis did not know; every existing file a command names, from its directory
    /// or one it may change to, is found all the same.
    #[test]
    fn files_behind_unknown_wrappers_are_found_by_the_safety_net() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("tools/check.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("check.sh"), "#!/bin/sh\n").unwrap();
        let real = root.join("tools/check.sh");
        for command in [
            "{ cd tools; ./check.sh; }",
            "env -C tools ./check.sh",
            "if cd tools; then ./check.sh; fi",
            "builtin cd tools && ./check.sh",
            "command cd tools && ./check.sh",
            "X=1 cd tools && ./check.sh",
            "timeout -s KILL 5 tools/check.sh",
            "stdbuf -o L tools/check.sh",
            "env -u FOO tools/check.sh",
            "exec -a name tools/check.sh",
            // Third adversarial review.
            "bash -c -- 'cd tools && ./check.sh'",
            "bash -c -e 'cd tools && ./check.sh'",
            "prlimit --cpu=30 tools/chec?.sh",
            "prlimit --cpu=30 tools/check{.sh,}",
            "/usr/sbin/runuser -u root -- sh -c 'cd tools && ./check.sh'",
            "unshare --wd=tools ./check.sh",
        ] {
            let found = scripts_of_shell(command, &place(&root));
            assert!(
                found.files.contains(&real) || !found.unknown.is_empty(),
                "{command}: {found:?}"
            );
        }
        // Data a hook names is not a script; a file an interpreter runs is, whatever its name.
        std::fs::write(root.join("tools/data"), "").unwrap();
        let touched = scripts_of_shell("touch tools/data", &place(&root));
        assert!(
            !touched.files.contains(&root.join("tools/data")),
            "{touched:?}"
        );
        let hidden = scripts_of_shell("timeout -s KILL 5 sh tools/data", &place(&root));
        assert!(
            hidden.files.contains(&root.join("tools/data")),
            "{hidden:?}"
        );
        // Output redirection targets are written, not run.
        std::fs::write(root.join("log"), "").unwrap();
        let logged = scripts_of_shell("jq . >> log", &place(&root));
        assert!(!logged.files.contains(&root.join("log")), "{logged:?}");
        let argv = scripts_of_argv(
            "env",
            &["-u".into(), "X".into(), "tools/check.sh".into()],
            &place(&root),
        );
        assert!(argv.files.contains(&real), "{argv:?}");
    }

    #[test]
    fn programs_scripts_and_sourced_files_are_found() {
        let found = files("./.dsh/check-command.sh");
        assert!(found
            .files
            .contains(&PathBuf::from("/w/.dsh/check-command.sh")));
        let found = files("sh scripts/pre.sh --flag");
        assert!(found.files.contains(&PathBuf::from("/w/scripts/pre.sh")));
        let found = files("FOO=1 exec python3 -u tools/x.py arg");
        assert!(found.files.contains(&PathBuf::from("/w/tools/x.py")));
        let found = files("bash -c '. ./lib.sh; run'");
        assert!(found.files.contains(&PathBuf::from("/w/lib.sh")));
        let found = files("true && source \"$CLAUDE_PROJECT_DIR\"/h.sh");
        assert!(found.files.contains(&PathBuf::from("/w/h.sh")));
        let found = files("bash < ./in.sh > /tmp/out.log");
        assert!(found.files.contains(&PathBuf::from("/w/in.sh")));
        assert!(!found.files.contains(&PathBuf::from("/tmp/out.log")));
        let found = files("echo $(./sub.sh) | jq .");
        assert!(found.files.contains(&PathBuf::from("/w/sub.sh")));
        let found = files("~/.dsh/hooks/ok.sh");
        assert_eq!(found.files, vec![PathBuf::from("/home/u/.dsh/hooks/ok.sh")]);
    }

    #[test]
    fn programs_that_only_the_shell_can_resolve_are_unknown() {
        assert!(!files("$X/run.sh").unknown.is_empty());
        assert!(!files("sh \"$(cat name)\"").unknown.is_empty());
        assert!(!files("eval_me=1 `which x`").unknown.is_empty());
        assert!(files("jq -r .tool_input.command >> /tmp/log")
            .unknown
            .is_empty());
        // `[` and `[[` are the test command, not a pattern; `[a]x.sh` is a pattern.
        assert!(files("if [ -f .stop_fired ]; then exit 0; fi")
            .unknown
            .is_empty());
        assert!(files("[[ -n \"$X\" ]] && echo y").unknown.is_empty());
        assert!(!files("sh [a]x.sh").unknown.is_empty());
    }

    /// Ways an attacker might hide the script of a hook from the check.
    #[test]
    fn indirect_ways_to_run_a_workspace_file_are_found_or_refused() {
        let found = files("env -S 'sh evil.sh'");
        assert!(
            found.files.contains(&PathBuf::from("/w/evil.sh")),
            "{found:?}"
        );
        let found = files("eval 'sh evil.sh'");
        assert!(
            found.files.contains(&PathBuf::from("/w/evil.sh")),
            "{found:?}"
        );
        assert!(!files("cat evil.sh | sh").unknown.is_empty());
        assert!(!files("cat evil.sh | python3 -").unknown.is_empty());
        assert!(!files("echo evil.sh | xargs sh").unknown.is_empty());
        assert!(!files("eval \"$(cat x)\"").unknown.is_empty());
        assert!(!files("source").unknown.is_empty());
        let found = files("awk -f prog.awk input");
        assert!(found.files.contains(&PathBuf::from("/w/prog.awk")));
        let found = files("sed -f edit.sed");
        assert!(found.files.contains(&PathBuf::from("/w/edit.sed")));
        let found = files("timeout 5 bash ./slow.sh");
        assert!(
            found.files.contains(&PathBuf::from("/w/slow.sh")),
            "{found:?}"
        );
        assert!(files("bash run").files.contains(&PathBuf::from("/w/run")));
        let found = files("deno run --allow-read main.ts");
        assert!(
            found.files.contains(&PathBuf::from("/w/main.ts")),
            "{found:?}"
        );
        let found = files("BASH_ENV=./env.sh bash -c true");
        assert!(
            found.files.contains(&PathBuf::from("/w/env.sh")),
            "{found:?}"
        );
        let found = files("LD_PRELOAD=/tmp/x.so git status");
        assert!(
            found.files.contains(&PathBuf::from("/tmp/x.so")),
            "{found:?}"
        );
        let found = files("nice -n 5 ./x.sh");
        assert!(found.files.contains(&PathBuf::from("/w/x.sh")), "{found:?}");
    }

    /// Inline code, program text and modules are not script files (no false refusals).
    #[test]
    fn inline_code_is_not_taken_for_a_script() {
        for command in [
            "awk '{print $1}' /tmp/x",
            "node -e 'console.log(1)'",
            "python3 -m json.tool",
            "python3 -c 'import sys'",
            "perl -e 'print 1'",
            "npx -y @modelcontextprotocol/server-everything",
            "jq -r .tool_input.command | grep -q rm && exit 2 || true",
        ] {
            let found = files(command);
            assert!(
                found.files.iter().all(|f| !f.starts_with("/w")) && found.unknown.is_empty(),
                "{command}: {found:?}"
            );
        }
    }

    /// A name looked up on `PATH` is found where the lookup finds it: a relative or
    /// workspace entry of the user's `PATH` names a workspace file; the gate's `PATH` drops
    /// such entries altogether.
    #[test]
    fn path_lookups_into_writable_places_are_seen_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(ws.join("bin")).unwrap();
        std::fs::write(ws.join("bin/check-command"), "#!/bin/sh\n").unwrap();
        let place = CommandPlace {
            cwd: ws.clone(),
            path: Some(format!("bin:{}:/usr/bin", ws.join("bin").display()).into()),
            home: None,
        };
        let found = scripts_of_shell("check-command --strict", &place);
        assert_eq!(found.files, vec![ws.join("bin/check-command")]);
        let gate = ScriptGate {
            workspace: ws.clone(),
            cwd: ws.clone(),
            home: None,
            pins: BTreeMap::new(),
            extra_roots: Vec::new(),
        };
        let kept = gate.command_path().unwrap_or_default();
        for dir in std::env::split_paths(&kept) {
            assert!(dir.is_absolute() && !dir.starts_with(&ws) && !dir.starts_with("/tmp"));
        }
    }

    #[test]
    fn writable_roots_cover_the_workspace_temp_dirs_and_symlinks_into_them() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        let roots = writable_roots(&ws, &ws, &[]);
        assert!(model_writable(&ws.join("a/b.sh"), &roots, None));
        assert!(model_writable(Path::new("/tmp/x.sh"), &roots, None));
        assert!(!model_writable(Path::new("/usr/bin/env"), &roots, None));
        let home = ws.join("home");
        assert!(!model_writable(
            &home.join("hooks/x.sh"),
            &roots,
            Some(&home)
        ));
        let outside = tempfile::tempdir_in("/root").or_else(|_| tempfile::tempdir_in("/var/lib"));
        if let Ok(outside) = outside {
            let link = outside.path().join("hook.sh");
            std::os::unix::fs::symlink(ws.join("real.sh"), &link).unwrap();
            std::fs::write(ws.join("real.sh"), "true").unwrap();
            assert!(
                model_writable(&link, &roots, None),
                "a symlink into the workspace counts"
            );
            let home_link = ws.join("home/hooks/y.sh");
            std::fs::create_dir_all(home_link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(ws.join("real.sh"), &home_link).unwrap();
            assert!(
                model_writable(&home_link, &roots, Some(&ws.join("home"))),
                "a symlink from the home into the workspace counts"
            );
        }
    }

    #[test]
    fn the_gate_runs_pinned_bytes_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(ws.join("pre.sh"), "echo ok").unwrap();
        let mut gate = ScriptGate {
            workspace: ws.clone(),
            cwd: ws.clone(),
            home: None,
            pins: BTreeMap::new(),
            extra_roots: Vec::new(),
        };
        let refused = gate.check_shell("sh pre.sh").unwrap_err();
        assert!(
            refused.contains("not pinned") || refused.contains("was not pinned"),
            "{refused}"
        );
        gate.pins.insert(ws.join("pre.sh"), sha256(b"echo ok"));
        gate.check_shell("sh pre.sh").unwrap();
        std::fs::write(ws.join("pre.sh"), "echo evil").unwrap();
        let refused = gate.check_shell("sh pre.sh").unwrap_err();
        assert!(refused.contains("changed since you trusted"), "{refused}");
        assert!(refused.contains("dsh trust"), "{refused}");
        gate.check_shell("jq . >/dev/null").unwrap();
        gate.check_argv("node", &["pre.sh".into()], &ws)
            .unwrap_err();
    }
}
