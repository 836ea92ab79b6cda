//! Path resolution for tools: relative paths against the session cwd, and the real path
//! (symlinks and `..` resolved by the file system) used for permission checks.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// How many symbolic links one resolution may follow before giving up (as `ELOOP` would).
const MAX_SYMLINK_HOPS: usize = 40;

/// `path` made absolute against `cwd` (no file system access, no normalisation).
pub fn absolutize(cwd: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// The real location a write to `path` would touch.
///
/// Works for paths that do not exist yet: every existing prefix is resolved through the file
/// system (symlinks followed, `..` applied to the real directory, as the kernel does), and the
/// missing tail is appended lexically. A dangling symlink resolves to where its target would be
/// created, so a link pointing outside the workspace is caught even before its target exists.
/// `path` must be absolute.
pub fn resolve_real_path(path: &Path) -> io::Result<PathBuf> {
    let mut hops = 0usize;
    resolve_inner(path, &mut hops, &mut |_| {})
}

/// [`resolve_real_path`], also calling `visit` with the path of every symbolic link met on the
/// way (the file gate refuses a chain that passes through a denied place, such as
/// `/dev/fd/3 -> /proc/self/fd/3`).
pub(crate) fn resolve_real_path_visiting(
    path: &Path,
    visit: &mut dyn FnMut(&Path),
) -> io::Result<PathBuf> {
    let mut hops = 0usize;
    resolve_inner(path, &mut hops, visit)
}

fn resolve_inner(
    path: &Path,
    hops: &mut usize,
    visit: &mut dyn FnMut(&Path),
) -> io::Result<PathBuf> {
    let mut current = PathBuf::from("/");
    // Once a component is missing, everything below it is missing too; we then only track
    // names lexically (a later `..` pops back into the existing part, which is re-checked).
    let components: Vec<Component<'_>> = path.components().collect();
    for component in components {
        match component {
            Component::Prefix(_) | Component::RootDir => current = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                let candidate = current.join(name);
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        visit(&candidate);
                        *hops += 1;
                        if *hops > MAX_SYMLINK_HOPS {
                            return Err(io::Error::other(format!(
                                "too many levels of symbolic links at {}",
                                candidate.display()
                            )));
                        }
                        let target = std::fs::read_link(&candidate).map_err(|err| {
                            if err.raw_os_error() == Some(libc::EINVAL) {
                                // It was a link a moment ago: something replaced it meanwhile.
                                io::Error::other(format!(
                                    "{} changed while the path was being resolved; retry",
                                    candidate.display()
                                ))
                            } else {
                                err
                            }
                        })?;
                        let target = if target.is_absolute() {
                            target
                        } else {
                            current.join(target)
                        };
                        current = resolve_inner(&target, hops, visit)?;
                    }
                    Ok(_) => current = candidate,
                    Err(err) if err.kind() == io::ErrorKind::NotFound => current = candidate,
                    Err(err) => return Err(err),
                }
            }
        }
    }
    Ok(current)
}

/// A display form of `path`: relative to `cwd` when inside it, absolute otherwise.
pub(crate) fn display_relative(cwd: &Path, path: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => path.display().to_string(),
    }
}

/// A sibling temp-file name for atomic replacement of `target`: `.dsh-tmp-<32 hex digits>`
/// (the names leftover cleanup looks for, see `builtin::beneath`).
pub(crate) fn temp_sibling(target: &Path) -> PathBuf {
    let name = OsString::from(format!(
        "{}{}",
        crate::builtin::TEMP_PREFIX,
        uuid::Uuid::new_v4().simple()
    ));
    target.with_file_name(name)
}

/// The root of `roots` that `real` lies in; the longest when several do (a cwd inside a temp
/// directory is its own root).
pub(crate) fn write_root_of(roots: &[PathBuf], real: &Path) -> Option<PathBuf> {
    roots
        .iter()
        .filter(|root| real.starts_with(root))
        .max_by_key(|root| root.as_os_str().len())
        .cloned()
}

/// The protected entry (docs/SECURITY.md, "Protected paths") that covers the real path `real`,
/// judged relative to the writable root of `roots` it lies in; `None` when it is outside every
/// root or not protected.
pub(crate) fn protected_write_target(roots: &[PathBuf], real: &Path) -> Option<PathBuf> {
    let root = write_root_of(roots, real)?;
    crate::protected::protected_entry(&root, real)
}

/// What a write to `path` (as a tool call gives it, relative to `cwd`) would touch when that is
/// protected: `(real path, protected entry)`, judged as `write`/`edit` judge it under
/// `workspace-write` with the writable roots `roots` (symlinks followed first, so `link/hooks/x`
/// with `link -> .git` is caught). `None` when the path is not protected, lies outside every
/// root, or cannot be resolved (the tool then reports why).
pub fn protected_write_path(
    cwd: &Path,
    roots: &[PathBuf],
    path: &str,
) -> Option<(PathBuf, PathBuf)> {
    if path.is_empty() {
        return None;
    }
    let real = resolve_real_path(&absolutize(cwd, path)).ok()?;
    let entry = protected_write_target(roots, &real)?;
    Some((real, entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn resolves_symlinks_dotdot_and_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let inside = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        symlink(&outside, inside.join("link")).unwrap();
        symlink(outside.join("nofile"), inside.join("dangling")).unwrap();

        assert_eq!(
            resolve_real_path(&inside.join("link/a.txt")).unwrap(),
            outside.join("a.txt")
        );
        assert_eq!(
            resolve_real_path(&inside.join("new/dir/../f")).unwrap(),
            inside.join("new/f")
        );
        assert_eq!(
            resolve_real_path(&inside.join("link/../ws/x")).unwrap(),
            inside.join("x")
        );
        assert_eq!(
            resolve_real_path(&inside.join("dangling")).unwrap(),
            outside.join("nofile")
        );
    }

    #[test]
    fn symlink_loops_fail() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        symlink(&b, &a).unwrap();
        symlink(&a, &b).unwrap();
        assert!(resolve_real_path(&a.join("x")).is_err());
    }
}
