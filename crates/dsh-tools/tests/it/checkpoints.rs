//! Workspace checkpoints (docs/rewind.md): what a checkpoint records and leaves out, the stat
//! cache, and a restore against real files, including links planted where a folder was and
//! files the store does not hold.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use dsh_tools::{CheckpointError, CheckpointLimits, CheckpointStore, GatePolicy};

struct Area {
    _temp: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
}

fn area() -> Area {
    let temp = tempfile::tempdir_in(crate::common::scratch_parent()).unwrap();
    let base = temp.path().canonicalize().unwrap();
    let (home, ws, outside) = (base.join("home"), base.join("ws"), base.join("outside"));
    for dir in [&home, &ws, &outside] {
        std::fs::create_dir_all(dir).unwrap();
    }
    Area {
        _temp: temp,
        home,
        ws,
        outside,
    }
}

fn store(area: &Area, limits: CheckpointLimits) -> CheckpointStore {
    let gate = GatePolicy::new(&area.ws).with_dsh_home(&area.home);
    CheckpointStore::new(&area.home, &area.ws, gate, limits)
}

fn put(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Every entry below `root`: path -> what it is (content and mode, link target, folder).
fn listing(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else {
                format!(
                    "file {:o} {}",
                    meta.permissions().mode() & 0o777,
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap())
                )
            };
            out.insert(rel, what);
        }
    }
    out
}

#[test]
fn a_restore_puts_back_every_change_a_command_could_make() {
    let a = area();
    put(&a.ws, "src/main.rs", "fn main() {}\n");
    put(&a.ws, "src/lib/mod.rs", "pub mod x;\n");
    put(&a.ws, "README", "readme\n");
    put(&a.ws, "run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(a.ws.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    symlink("src/main.rs", a.ws.join("main-link")).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"odd-\xff-name");
    std::fs::write(a.ws.join(odd), "odd").unwrap();
    let before = listing(&a.ws);
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    assert_eq!(first.files, 6, "{first:?}");

    // What a turn's commands might do.
    put(&a.ws, "src/main.rs", "fn main() { changed() }\n");
    std::fs::remove_file(a.ws.join("README")).unwrap();
    std::fs::remove_dir_all(a.ws.join("src/lib")).unwrap();
    std::fs::write(a.ws.join("src/lib"), "now a file").unwrap();
    std::fs::set_permissions(a.ws.join("run.sh"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::remove_file(a.ws.join("main-link")).unwrap();
    std::fs::write(a.ws.join("main-link"), "now a file").unwrap();
    put(&a.ws, "new/deep/file.txt", "new");
    std::fs::remove_file(a.ws.join(odd)).unwrap();

    let plan = s.plan_restore(&first.tree).unwrap();
    assert!(!plan.is_empty());
    let report = s.restore(&plan).unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(listing(&a.ws), before);
    // Nothing to do the second time; the state before the restore is a checkpoint too.
    assert!(s.plan_restore(&first.tree).unwrap().is_empty());
    assert!(s.holds(&plan.before.tree));
    let back = s.plan_restore(&plan.before.tree).unwrap();
    s.restore(&back).unwrap();
    assert_eq!(
        std::fs::read_to_string(a.ws.join("src/main.rs")).unwrap(),
        "fn main() { changed() }\n"
    );
}

#[test]
fn ignored_protected_and_large_files_are_neither_kept_nor_touched() {
    let a = area();
    put(&a.ws, ".gitignore", "target/\n*.log\n");
    put(&a.ws, "target/out.bin", "build output");
    put(&a.ws, "x.log", "log");
    put(&a.ws, ".env", "API_TOKEN=s3cret-value-1234");
    put(&a.ws, ".dsh/config.toml", "model = \"x\"");
    put(&a.ws, ".git/config", "[core]");
    put(&a.ws, "big.dat", &"b".repeat(200));
    put(&a.ws, "kept.txt", "kept");
    let s = store(
        &a,
        CheckpointLimits {
            max_file_bytes: 100,
            max_files: 1000,
        },
    );
    let first = s.take().unwrap();
    // `.gitignore`, `kept.txt` and `big.dat` (named, not kept).
    assert_eq!((first.files, first.large), (3, 1), "{first:?}");
    // The secret's bytes are nowhere in the store, compressed or not.
    let mut all = Vec::new();
    for file in walk_files(s.dir()) {
        all.extend(std::fs::read(file).unwrap());
    }
    assert!(!all.windows(6).any(|w| w == b"s3cret"));

    for (rel, content) in [
        ("target/out.bin", "rebuilt"),
        ("x.log", "more log"),
        (".env", "API_TOKEN=rotated-value-5678"),
        (".dsh/config.toml", "model = \"y\""),
        (".git/config", "[core] changed"),
        ("big.dat", &"c".repeat(300)),
        ("kept.txt", "edited"),
    ] {
        put(&a.ws, rel, content);
    }
    let plan = s.plan_restore(&first.tree).unwrap();
    assert_eq!(plan.changed(), vec![PathBuf::from("kept.txt")]);
    assert_eq!(plan.kept.len(), 1, "{:?}", plan.kept);
    assert_eq!(plan.kept[0].0, PathBuf::from("big.dat"));
    s.restore(&plan).unwrap();
    assert_eq!(
        std::fs::read_to_string(a.ws.join("kept.txt")).unwrap(),
        "kept"
    );
    assert_eq!(
        std::fs::read_to_string(a.ws.join(".env")).unwrap(),
        "API_TOKEN=rotated-value-5678"
    );
    assert_eq!(
        std::fs::read_to_string(a.ws.join("target/out.bin")).unwrap(),
        "rebuilt"
    );
    assert_eq!(
        std::fs::read_to_string(a.ws.join("big.dat")).unwrap().len(),
        300
    );
    // A folder that still holds ignored files is left, its covered files deleted.
    put(&a.ws, "gen/a.txt", "a");
    let with_gen = s.take().unwrap();
    put(&a.ws, "gen/b.log", "ignored");
    let plan = s.plan_restore(&first.tree).unwrap();
    let report = s.restore(&plan).unwrap();
    assert_eq!(report.deleted, vec![PathBuf::from("gen/a.txt")]);
    assert!(a.ws.join("gen/b.log").exists());
    assert!(s.holds(&with_gen.tree));
}

fn walk_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn an_unchanged_workspace_is_checkpointed_from_the_stat_cache() {
    let a = area();
    for i in 0..50 {
        put(
            &a.ws,
            &format!("d{}/f{i}.txt", i % 5),
            &format!("content {i}"),
        );
    }
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    assert!(first.new_bytes > 0);
    // Files written within the last seconds are read again next time (their times could hide
    // a change); older ones are answered from the cache.
    let cache = s.dir().join("stat-cache");
    assert!(std::fs::metadata(&cache).unwrap().len() < 100);
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for file in walk_files(&a.ws) {
        std::fs::File::options()
            .write(true)
            .open(file)
            .unwrap()
            .set_modified(past)
            .unwrap();
    }
    let again = s.take().unwrap();
    assert_eq!(again.tree, first.tree);
    assert_eq!(again.new_bytes, 0);
    assert!(std::fs::metadata(&cache).unwrap().len() > 50 * 80);
    // The store is private.
    for path in [s.dir().to_path_buf(), s.dir().join("objects")] {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", path.display());
    }
    for file in walk_files(s.dir()) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }
    // A damaged cache only costs speed.
    std::fs::write(s.dir().join("stat-cache"), b"garbage").unwrap();
    assert_eq!(s.take().unwrap().tree, first.tree);
    // Too many files: no checkpoint, a clear error.
    let small = store(
        &a,
        CheckpointLimits {
            max_file_bytes: 1024,
            max_files: 10,
        },
    );
    let err = small.take().unwrap_err();
    assert_eq!(err, CheckpointError::TooManyFiles { limit: 10 });
    assert!(err.to_string().contains("max_files"), "{err}");
}

#[test]
fn a_restore_never_writes_through_a_link_planted_where_a_folder_was() {
    let a = area();
    put(&a.ws, "d/f.txt", "inside");
    put(&a.outside, "f.txt", "outside");
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    // The model swaps the folder for a link to a folder outside.
    std::fs::remove_dir_all(a.ws.join("d")).unwrap();
    symlink(&a.outside, a.ws.join("d")).unwrap();
    let plan = s.plan_restore(&first.tree).unwrap();
    let report = s.restore(&plan).unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(
        std::fs::read_to_string(a.outside.join("f.txt")).unwrap(),
        "outside"
    );
    assert!(!std::fs::symlink_metadata(a.ws.join("d"))
        .unwrap()
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(a.ws.join("d/f.txt")).unwrap(),
        "inside"
    );

    // A link put on a folder between the plan and the restore fails that file, and nothing
    // lands outside.
    put(&a.ws, "e/g.txt", "g");
    let second = s.take().unwrap();
    put(&a.ws, "e/g.txt", "changed");
    let plan = s.plan_restore(&second.tree).unwrap();
    std::fs::remove_dir_all(a.ws.join("e")).unwrap();
    symlink(&a.outside, a.ws.join("e")).unwrap();
    let report = s.restore(&plan).unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(!a.outside.join("g.txt").exists());
}

#[test]
fn a_checkpoint_the_store_does_not_hold_is_a_clear_error() {
    let a = area();
    put(&a.ws, "a", "a");
    let s = store(&a, CheckpointLimits::default());
    let taken = s.take().unwrap();
    let missing = "0".repeat(64);
    assert!(matches!(
        s.plan_restore(&missing),
        Err(CheckpointError::Missing(_))
    ));
    assert!(matches!(
        s.plan_restore("not-a-hash"),
        Err(CheckpointError::Missing(_))
    ));
    // A damaged object is refused, not restored.
    let objects = walk_files(&s.dir().join("objects"));
    for object in objects {
        std::fs::write(object, b"junk").unwrap();
    }
    assert!(!s.holds(&taken.tree));
    assert!(s.plan_restore(&taken.tree).is_err());
}

#[test]
fn as_root_another_users_private_file_is_neither_stored_nor_overwritten() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root");
        return;
    }
    let a = area();
    put(&a.ws, "mine.txt", "mine");
    put(&a.ws, "theirs.key", "their-private-key-material");
    let theirs = a.ws.join("theirs.key");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&theirs, PermissionsExt::from_mode(0o600)).unwrap();
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    assert_eq!(first.files, 1, "{first:?}");
    let mut all = Vec::new();
    for file in walk_files(s.dir()) {
        all.extend(std::fs::read(file).unwrap());
    }
    assert!(!all.windows(7).any(|w| w == b"private"));
    std::fs::write(&theirs, "rotated").unwrap();
    let plan = s.plan_restore(&first.tree).unwrap();
    s.restore(&plan).unwrap();
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "rotated");
}

/// Attack: a file the checkpoint of the files now leaves out (ignored since, another user's
/// private file, a FIFO) but that the older checkpoint holds must not be overwritten by the
/// restore: nothing in the store says what it holds now, and the "changed outside dsh" check
/// cannot see it either.
#[test]
fn a_restore_never_overwrites_a_file_the_checkpoint_of_now_left_out() {
    let a = area();
    put(&a.ws, "notes.local", "v1");
    put(&a.ws, "cache/data.txt", "v1");
    put(&a.ws, "pipe", "was a file");
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    // The model ignores them; the user then keeps work there, which no checkpoint sees.
    put(&a.ws, ".gitignore", "*.local\ncache/\n");
    put(&a.ws, "notes.local", "the user's own notes");
    put(&a.ws, "cache/data.txt", "the user's own data");
    std::fs::remove_file(a.ws.join("pipe")).unwrap();
    let fifo = std::ffi::CString::new(a.ws.join("pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let end = s.take().unwrap();
    // Nothing the checkpoints can see changed between the turn's end and now.
    assert!(s
        .changed_between(&end.tree, &s.take().unwrap().tree)
        .unwrap()
        .is_empty());
    let plan = s.plan_restore(&first.tree).unwrap();
    let report = s.restore(&plan).unwrap();
    assert_eq!(
        std::fs::read_to_string(a.ws.join("notes.local")).unwrap(),
        "the user's own notes",
        "{report:?}"
    );
    assert_eq!(
        std::fs::read_to_string(a.ws.join("cache/data.txt")).unwrap(),
        "the user's own data"
    );
    assert!(std::fs::symlink_metadata(a.ws.join("pipe"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(!a.ws.join(".gitignore").exists());
    let failed: Vec<_> = report.failed.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(
        failed,
        vec![
            PathBuf::from("cache/data.txt"),
            PathBuf::from("notes.local"),
            PathBuf::from("pipe")
        ],
        "{report:?}"
    );
    assert!(report.failed[0].1.contains("no checkpoint"), "{report:?}");
}

/// Attack (as root): a file that was the user's at the turn's start and is another user's
/// private file now is not overwritten with the old content.
#[test]
fn as_root_a_file_that_became_another_users_private_file_is_not_overwritten() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root");
        return;
    }
    let a = area();
    put(&a.ws, "shared.txt", "v1");
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    let path = a.ws.join("shared.txt");
    std::fs::write(&path, "their private content").unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).unwrap();
    let plan = s.plan_restore(&first.tree).unwrap();
    let report = s.restore(&plan).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "their private content",
        "{report:?}"
    );
    assert_eq!(report.failed.len(), 1, "{report:?}");
}

/// Attack: a folder that became shaped like a git directory since the checkpoint does not get
/// the checkpoint's `hooks` or `config` written into it.
#[test]
fn a_restore_writes_nothing_into_a_folder_shaped_like_a_git_directory_now() {
    let a = area();
    put(&a.ws, "repo/HEAD", "ref: refs/heads/main\n");
    put(&a.ws, "repo/hooks/post-checkout", "#!/bin/sh\necho pwned\n");
    put(
        &a.ws,
        "repo/config",
        "[core]\n\tfsmonitor = ./hooks/post-checkout\n",
    );
    let s = store(&a, CheckpointLimits::default());
    let first = s.take().unwrap();
    // Now it is a repository (HEAD and objects/), without those files.
    std::fs::remove_dir_all(a.ws.join("repo/hooks")).unwrap();
    std::fs::remove_file(a.ws.join("repo/config")).unwrap();
    std::fs::create_dir_all(a.ws.join("repo/objects")).unwrap();
    let plan = s.plan_restore(&first.tree).unwrap();
    let report = s.restore(&plan).unwrap();
    assert!(!a.ws.join("repo/hooks").exists(), "{report:?}");
    assert!(!a.ws.join("repo/config").exists(), "{report:?}");
    assert_eq!(report.failed.len(), 2, "{report:?}");
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
        0,
        "{}",
        path.display()
    );
}

/// Attack: a `.git` file (`gitdir: ...`) makes the walker open `<gitdir>/commondir` and then
/// `<commondir>/info/exclude` by path. A FIFO there must not hang the checkpoint (and with it
/// the turn's first request), nor a huge file flood it.
#[test]
fn a_git_file_pointing_at_a_fifo_does_not_hang_the_checkpoint() {
    let a = area();
    put(&a.ws, "kept.txt", "kept");
    put(&a.ws, "sub/file.txt", "x");
    put(
        &a.ws,
        "sub/.git",
        &format!("gitdir: {}\n", a.ws.join("g").display()),
    );
    std::fs::create_dir_all(a.ws.join("g")).unwrap();
    mkfifo(&a.ws.join("g/commondir"));
    put(
        &a.ws,
        "sub2/.git",
        &format!("gitdir: {}\n", a.ws.join("g2").display()),
    );
    put(
        &a.ws,
        "g2/commondir",
        &format!("{}\n", a.ws.join("c2").display()),
    );
    std::fs::create_dir_all(a.ws.join("c2/info")).unwrap();
    mkfifo(&a.ws.join("c2/info/exclude"));
    let s = store(&a, CheckpointLimits::default());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(s.take());
    });
    let taken = rx.recv_timeout(std::time::Duration::from_secs(20));
    if taken.is_err() {
        // Unblock the stuck walk so the test process can end, then fail.
        for fifo in [a.ws.join("g/commondir"), a.ws.join("c2/info/exclude")] {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(fifo);
        }
        panic!("the checkpoint hung on a FIFO named by a .git file");
    }
    let taken = taken.unwrap().unwrap();
    assert!(taken.files >= 1, "{taken:?}");
}
