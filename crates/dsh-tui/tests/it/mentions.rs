//! `@` mentions (docs/tui.md, "File mentions"): the finder popup over a real workspace
//! (.gitignore and hidden files respected, keys, insertion, drawing) and the attachments a sent
//! message carries (contents, caps and their notes, folders, refusals, the image hook).

use std::path::Path;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use dsh_tui::finder::{score, FileIndex, Finder};
use dsh_tui::mentions::{
    attach, is_image, mentioned_paths, typed_text, user_message, MAX_FILE_LINES,
};
use dsh_tui::{Action, App, StatusInfo};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (path, content) in [
        ("src/main.rs", "fn main() {}\n"),
        ("src/lib.rs", "pub fn lib() {}\n"),
        ("docs/guide.md", "# Guide\n"),
        ("target/debug/junk.rs", "ignored\n"),
        (".hidden/secret.rs", "hidden\n"),
        (".gitignore", "target/\n"),
        ("README.md", "readme\n"),
    ] {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    dir
}

fn app_in(root: &Path) -> App {
    let mut app = App::new(StatusInfo::default());
    app.loading = false;
    app.finder = Finder::new(root);
    app
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn type_text(app: &mut App, text: &str) -> Vec<Action> {
    let mut actions = Vec::new();
    for c in text.chars() {
        actions.extend(app.on_key(key(KeyCode::Char(c))));
    }
    actions
}

/// Waits for the walk of the finder's index to finish.
fn listed(app: &mut App) {
    app.finder.index.start();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !app.finder.index.done() {
        assert!(
            Instant::now() < deadline,
            "the workspace walk did not finish"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Finder::refresh(app);
}

#[test]
fn the_index_respects_gitignore_and_hidden_files() {
    let dir = workspace();
    let index = FileIndex::new(dir.path());
    index.start();
    while !index.done() {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Fewer entries than the popup shows: an empty query lists them all.
    let mut all = index.search("");
    all.sort();
    assert_eq!(
        all,
        [
            "README.md",
            "docs/",
            "docs/guide.md",
            "src/",
            "src/lib.rs",
            "src/main.rs"
        ],
        "target/ is ignored by .gitignore, .hidden/ and .gitignore are hidden"
    );
    assert_eq!(index.len(), 6);
}

#[test]
fn fuzzy_scores_prefer_names_and_runs() {
    assert!(score("xyz", "src/main.rs").is_none());
    let name = score("main", "src/main.rs").unwrap();
    let scattered = score("main", "src/mod/a/in.rs").unwrap();
    assert!(name > scattered);
    assert!(score("MAIN", "src/main.rs").is_some(), "case-insensitive");
    assert!(score("lib", "src/lib.rs").unwrap() > score("lib", "src/deep/er/lib.rs").unwrap());
}

#[test]
fn typing_at_opens_the_finder_and_enter_inserts_the_path() {
    let dir = workspace();
    let mut app = app_in(dir.path());
    type_text(&mut app, "look at @");
    listed(&mut app);
    assert!(
        !app.finder.matches.is_empty(),
        "an empty query lists entries"
    );
    type_text(&mut app, "mai");
    Finder::refresh(&mut app);
    assert_eq!(app.finder.matches[0], "src/main.rs");
    // Enter inserts instead of sending.
    let actions = app.on_key(key(KeyCode::Enter));
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(app.composer.text(), "look at @src/main.rs ");
    Finder::refresh(&mut app);
    assert!(
        app.finder.matches.is_empty(),
        "the popup closed after a file"
    );
    // Now Enter sends.
    let actions = app.on_key(key(KeyCode::Enter));
    assert_eq!(actions, vec![Action::Send("look at @src/main.rs ".into())]);
}

#[test]
fn arrows_choose_tab_inserts_esc_closes() {
    let dir = workspace();
    let mut app = app_in(dir.path());
    type_text(&mut app, "@");
    listed(&mut app);
    type_text(&mut app, "rs");
    Finder::refresh(&mut app);
    let second = app.finder.matches[1].clone();
    app.on_key(key(KeyCode::Down));
    assert_eq!(app.finder.selected, 1);
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.composer.text(), format!("@{second} "));
    // A folder keeps the finder open to go deeper.
    app.composer.set_text("");
    type_text(&mut app, "@sr");
    Finder::refresh(&mut app);
    assert_eq!(app.finder.matches[0], "src/");
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.composer.text(), "@src/");
    assert!(Finder::refresh(&mut app), "still open inside the folder");
    app.on_key(key(KeyCode::Esc));
    assert!(!Finder::refresh(&mut app), "Esc closed it");
    assert_eq!(app.composer.text(), "@src/", "Esc keeps the draft");
    type_text(&mut app, "l");
    assert!(Finder::refresh(&mut app), "typing reopens it");
}

#[test]
fn the_popup_is_drawn_above_the_composer() {
    let dir = workspace();
    let mut app = app_in(dir.path());
    type_text(&mut app, "@");
    listed(&mut app);
    type_text(&mut app, "guide");
    let mut terminal = Terminal::new(TestBackend::new(60, 16)).unwrap();
    terminal
        .draw(|f| dsh_tui::view::draw(f, &mut app, &mut Default::default()))
        .unwrap();
    let screen = terminal.backend().buffer().clone();
    let rows: Vec<String> = (0..16)
        .map(|y| (0..60).map(|x| screen[(x, y)].symbol()).collect::<String>())
        .collect();
    let title = rows
        .iter()
        .position(|r| r.contains("files · Tab/Enter insert"))
        .unwrap_or_else(|| panic!("no popup:\n{}", rows.join("\n")));
    assert!(rows[title + 1].contains("@docs/guide.md"), "{rows:#?}");
    let composer = rows.iter().position(|r| r.contains("@guide")).unwrap();
    assert!(composer > title + 1, "{rows:#?}");
}

#[test]
fn mentions_attach_contents_folders_and_say_what_was_left_out() {
    let dir = workspace();
    let root = dir.path();
    let long: String = (0..MAX_FILE_LINES + 50)
        .map(|i| format!("line {i}\n"))
        .collect();
    std::fs::write(root.join("long.txt"), &long).unwrap();
    std::fs::write(root.join("bin.dat"), b"a\0b").unwrap();
    std::fs::write(root.join(".env"), "DEEPSEEK_API_KEY=sk-secret\n").unwrap();
    std::fs::write(root.join("shot.PNG"), b"\x89PNG").unwrap();
    let text =
        "see @src/main.rs, @docs/ @long.txt @bin.dat @.env @missing.rs @../x @shot.PNG me@host";
    assert_eq!(
        mentioned_paths(text),
        [
            "src/main.rs",
            "docs/",
            "long.txt",
            "bin.dat",
            ".env",
            "missing.rs",
            "../x",
            "shot.PNG"
        ]
    );
    let a = attach(text, root);
    assert!(
        a.text.starts_with("Files the user mentioned with @"),
        "{}",
        a.text
    );
    assert!(
        a.text.contains(
            "<attached path=\"src/main.rs\" note=\"1 lines\">\nfn main() {}\n</attached>"
        ),
        "{}",
        a.text
    );
    assert!(
        a.text.contains(
            "<attached path=\"docs/\" note=\"folder, 1 entries\">\nguide.md\n</attached>"
        ),
        "{}",
        a.text
    );
    assert!(
        a.text.contains(&format!(
            "note=\"truncated: first {MAX_FILE_LINES} lines of"
        )),
        "{}",
        &a.text[..300]
    );
    assert!(!a.text.contains(&format!("line {MAX_FILE_LINES}\n")));
    assert!(
        !a.text.contains("sk-secret"),
        "a .env file must never be attached"
    );
    let skipped = a.skipped.join("\n");
    for want in [
        "@bin.dat: binary file",
        "@.env: may hold secrets",
        "@missing.rs:",
        "@../x: outside the working directory",
    ] {
        assert!(skipped.contains(want), "{want} missing in {skipped}");
    }
    assert_eq!(
        a.images,
        [std::fs::canonicalize(root.join("shot.PNG")).unwrap()]
    );
    assert!(is_image(Path::new("a.webp")) && !is_image(Path::new("a.rs")));

    // The message: typed text first, the attachments in a block of their own; the transcript
    // shows the typed text and a count.
    let (message, _) = user_message("explain @src/lib.rs", root);
    assert_eq!(message.content.len(), 2);
    assert_eq!(
        typed_text(&message),
        "explain @src/lib.rs\n(1 mention attached)"
    );
    let (plain, _) = user_message("no mentions here", root);
    assert_eq!(plain.content.len(), 1);
}

/// `@` mentions go through the file gate (docs/SECURITY.md, "The file gate"): a link out of the
/// working directory, a hard link to a denied file, a denied folder inside the workspace and a
/// FIFO are left out with the reason; nothing of the secret is attached, and nothing blocks.
#[test]
fn mentions_pass_the_file_gate() {
    let dir = workspace();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("id_ed25519");
    std::fs::write(&secret, "PRIVATE-KEY-MATERIAL\n").unwrap();
    std::os::unix::fs::symlink(&secret, root.join("readme.md")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", root.join("shadow.txt")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(root.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let started = Instant::now();
    let a = attach("@readme.md @shadow.txt @pipe", &root);
    assert!(started.elapsed() < Duration::from_secs(5), "a FIFO blocked");
    assert!(!a.text.contains("PRIVATE-KEY"), "{}", a.text);
    assert!(!a.text.contains("root:"), "{}", a.text);
    assert_eq!(a.skipped.len(), 3, "{:?}", a.skipped);
    assert!(
        a.skipped[0].contains("outside the working directory"),
        "{:?}",
        a.skipped
    );
}

/// The `@` finder's walk skips a folder whose ignore file is a FIFO or a link to `/dev/zero`
/// (reading it would hang the walk or fill memory) and lists the rest.
#[test]
fn the_finder_survives_hostile_ignore_files() {
    let dir = workspace();
    let root = dir.path();
    std::fs::create_dir_all(root.join("trap")).unwrap();
    std::fs::write(root.join("trap/hidden.rs"), "").unwrap();
    std::os::unix::fs::symlink("/dev/zero", root.join("trap/.gitignore")).unwrap();
    std::fs::create_dir_all(root.join("pipe")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(root.join("pipe/.ignore"))
        .status()
        .unwrap();
    assert!(made.success());
    let index = FileIndex::new(root);
    index.start();
    let started = Instant::now();
    while !index.done() {
        assert!(started.elapsed() < Duration::from_secs(20), "the walk hung");
        std::thread::sleep(Duration::from_millis(5));
    }
    let all = index.search("");
    assert!(all.iter().any(|p| p == "src/main.rs"), "{all:?}");
    assert!(!all.iter().any(|p| p.starts_with("trap/")), "{all:?}");
}

/// A PNG header of 1200x800: enough for the image check.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x04, 0xb0, 0x00, 0x00, 0x03, 0x20, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90,
];

/// Gives `path` to `nobody` (uid and gid 65534) with `mode`.
fn give_to_nobody(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Issue 38, adversarial review: as root, `@private` listed a folder `nobody` keeps to itself
/// (0700) and `@other.png` (nobody's, 0600) was attached and sent, while `read`, `read_image`
/// and `glob` refuse both (the `other-user` rule of the file gate). Mentions, typed image paths
/// and the finder now pass the same gate: neither is attached nor listed; root's own image
/// still is.
#[test]
fn as_root_another_users_private_files_are_neither_attached_nor_listed() {
    use std::os::unix::fs::MetadataExt;
    let dir = workspace();
    // What this process creates is its effective user's.
    if std::fs::metadata(dir.path()).unwrap().uid() != 0 {
        eprintln!("NOT RUN: needs root (CI runs as root)");
        return;
    }
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("private/deeper")).unwrap();
    std::fs::write(root.join("private/diary.txt"), "NOBODYS-DIARY\n").unwrap();
    give_to_nobody(&root.join("private"), 0o700);
    std::fs::write(root.join("other.png"), PNG).unwrap();
    give_to_nobody(&root.join("other.png"), 0o600);
    std::fs::write(root.join("mine.png"), PNG).unwrap();

    let text = "look at @private @private/diary.txt @other.png @mine.png";
    let (mut message, attached) = user_message(text, &root);
    assert!(!attached.text.contains("diary"), "{}", attached.text);
    assert!(!attached.text.contains("NOBODYS"), "{}", attached.text);
    let skipped = attached.skipped.join("\n");
    assert!(skipped.contains("@private: "), "{skipped}");
    assert!(skipped.contains("@private/diary.txt: "), "{skipped}");
    assert!(skipped.contains("other-user"), "{skipped}");
    let images = dsh_tui::attach::attach_images(&mut message, text, &attached.images, &root);
    assert_eq!(images.chips, ["[image: mine.png 1200x800]"], "{images:?}");
    let problems = images.problems.join("\n");
    assert!(
        problems.contains("other.png") && problems.contains("other-user"),
        "{problems}"
    );
    let image_blocks = message
        .content
        .iter()
        .filter(|block| matches!(block, dsh_llm::ContentBlock::Image { .. }))
        .count();
    assert_eq!(image_blocks, 1);

    // A typed (not mentioned) path passes the same gate.
    let typed = "compare other.png";
    let mut message = dsh_agent::new_user_message(typed);
    let images = dsh_tui::attach::attach_images(&mut message, typed, &[], &root);
    assert!(images.chips.is_empty(), "{images:?}");
    assert_eq!(message.content.len(), 1);

    // The finder does not enter the folder.
    let index = FileIndex::new(&root);
    index.start();
    let started = Instant::now();
    while !index.done() {
        assert!(started.elapsed() < Duration::from_secs(20), "the walk hung");
        std::thread::sleep(Duration::from_millis(5));
    }
    let all = index.search("");
    assert!(all.iter().any(|p| p == "src/main.rs"), "{all:?}");
    assert!(!all.iter().any(|p| p.starts_with("private")), "{all:?}");
}
