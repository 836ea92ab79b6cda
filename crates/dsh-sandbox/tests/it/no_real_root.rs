//! "No real root in the sandbox" (docs/SECURITY.md): as root, a confined command is still the
//! host's uid 0 to the kernel, so every check that looks at the uid rather than at capabilities
//! must be closed by the sandbox itself. Each test runs under bubblewrap and under Landlock only,
//! as root, and each attempt is first shown to work unconfined (the control), so a test cannot
//! pass because a tool is missing. No attempt changes the host: kernel settings are only opened
//! for writing (never written), and files are made in the test's own scratch folder.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use dsh_tools::PermissionPreset;

use crate::root_escapes::{python, require_root, Mechanism, Scratch};

/// Runs `command` unconfined (must print `ESCAPED`) and confined (must not), for `mechanism`.
async fn refused(s: &Scratch, mechanism: Mechanism, what: &str, command: &str) -> String {
    let free = s.free(command).await;
    assert!(
        free.contains("ESCAPED"),
        "{} / {what}: the unconfined control must succeed, or the attempt proves nothing: {free}",
        mechanism.name()
    );
    let confined = s.bash(command).await;
    assert!(
        !confined.contains("ESCAPED"),
        "{} / {what}: escaped: {confined}",
        mechanism.name()
    );
    confined
}

fn scratch(mechanism: Mechanism) -> Scratch {
    let sandbox = mechanism.sandbox(PermissionPreset::WorkspaceWrite);
    Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement())
}

/// Opens every file it can find for writing, without writing, and prints how many opened:
/// sysctls (`/proc/sys`), `/proc`'s own files (`sysrq-trigger`, ...), the process's files and
/// `/sys/kernel`. Opening changes nothing; a write would (`kernel.core_pattern` names a program
/// the kernel runs as real root on the next crash).
const WRITABLE_SWEEP: &str = r#"
import os
roots = ['/proc/sys', '/sys/kernel', '/sys/fs/cgroup']
files = [os.path.join('/proc', n) for n in os.listdir('/proc') if not n.isdigit()]
files += [os.path.join('/proc/self', n) for n in os.listdir('/proc/self')]
for root in roots:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ('tracing', 'debug')]
        if dirpath.count('/') > 5:
            dirnames[:] = []
        files += [os.path.join(dirpath, n) for n in filenames]
opened = []
for path in files:
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        continue
    os.close(fd)
    opened.append(path)
print('WRITABLE', len(opened), ' '.join(opened[:8]))
"#;

async fn kernel_settings_stay_closed(mechanism: Mechanism) {
    let s = scratch(mechanism);
    let sweep = python(WRITABLE_SWEEP);
    let free = s.free(&sweep).await;
    assert!(
        !free.contains("WRITABLE 0 "),
        "control: root must open kernel files for writing unconfined: {free}"
    );
    let confined = s.bash(&sweep).await;
    assert!(
        confined.contains("WRITABLE 0 "),
        "{}: a kernel setting or /proc file is writable as root: {confined}",
        mechanism.name()
    );
    let open_for_writing = |path: &str| {
        python(&format!(
            "import os\ntry:\n    os.close(os.open('{path}', os.O_WRONLY))\n    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e.errno)"
        ))
    };
    for path in [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/modprobe",
        "/proc/sys/vm/drop_caches",
        "/proc/sysrq-trigger",
        "/proc/self/root/proc/sys/kernel/core_pattern",
        "/proc/1/root/proc/sys/kernel/core_pattern",
    ] {
        if !Path::new(path).exists() {
            eprintln!("{path}: not on this kernel, not tried");
            continue;
        }
        refused(&s, mechanism, path, &open_for_writing(path)).await;
    }
    // sysfs and its control groups: read-only as well.
    let sys_write = "for f in /sys/kernel/profiling /sys/kernel/rcu_expedited /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/cgroup.procs; do [ -e $f ] && python3 -c \"import os,sys; os.close(os.open(sys.argv[1], os.O_WRONLY)); print('ESCAPED', sys.argv[1])\" $f 2>/dev/null; done; true";
    refused(&s, mechanism, "/sys files", sys_write).await;
}

#[tokio::test]
async fn bubblewrap_as_root_writes_no_kernel_setting() {
    if require_root("bubblewrap_as_root_writes_no_kernel_setting") {
        kernel_settings_stay_closed(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_as_root_writes_no_kernel_setting() {
    if require_root("landlock_as_root_writes_no_kernel_setting") {
        kernel_settings_stay_closed(Mechanism::Landlock).await;
    }
}

/// Every way a file in the workspace could get the set-user-ID or set-group-ID bit, or file
/// capabilities: each prints `ESCAPED` when the bit is there.
fn set_id_attempts() -> Vec<(&'static str, String)> {
    let suid = |name: &str| format!("[ -u {name} ] && echo ESCAPED");
    vec![
        ("chmod 4755", format!("cp /bin/sh s1; chmod 4755 s1; {}", suid("s1"))),
        ("chmod u+s", format!("cp /bin/sh s2; chmod u+s s2; {}", suid("s2"))),
        ("chmod g+s", "cp /bin/sh s3; chmod g+s s3; [ -g s3 ] && echo ESCAPED".to_string()),
        ("install -m 4755", format!("install -m 4755 /bin/sh s4; {}", suid("s4"))),
        (
            "open(O_CREAT, 04755)",
            python("import os\nos.close(os.open('s5', os.O_CREAT | os.O_WRONLY, 0o4755))\nif os.stat('s5').st_mode & 0o4000: print('ESCAPED')"),
        ),
        (
            "mknod(S_IFREG | 04755)",
            python("import os, stat\nos.mknod('s6', stat.S_IFREG | 0o4755)\nif os.stat('s6').st_mode & 0o4000: print('ESCAPED')"),
        ),
        (
            "openat2 with mode 04755",
            python("import ctypes, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\nhow = struct.pack('QQQ', os.O_CREAT | os.O_WRONLY, 0o4755, 0)\nfd = libc.syscall(437, -100, b's7', how, len(how))\nif fd >= 0 and os.stat('s7').st_mode & 0o4000: print('ESCAPED')\nelse: print('refused', ctypes.get_errno())"),
        ),
        (
            "O_TMPFILE with mode 04755, then linked",
            python("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o4755)\nlibc.linkat(-100, b'/proc/self/fd/%d' % fd, -100, b's8', 0x400)\nif os.stat('s8').st_mode & 0o4000: print('ESCAPED')"),
        ),
        (
            "tar -p of a set-user-ID member",
            format!("mkdir -p t && tar -xpf suid.tar -C t; {}", suid("t/member")),
        ),
        (
            "file capabilities (security.capability)",
            python("import os, struct, shutil\nshutil.copy('/bin/sh', 's9')\nos.setxattr('s9', 'security.capability', struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0))\nprint('ESCAPED')"),
        ),
    ]
}

/// A tar archive holding one root-owned `member` with mode 04755.
fn write_suid_tar(path: &Path) {
    let script = format!(
        "import tarfile, io\nwith tarfile.open('{}', 'w') as t:\n    info = tarfile.TarInfo('member')\n    info.mode = 0o4755\n    data = b'#!/bin/sh\\nid\\n'\n    info.size = len(data)\n    t.addfile(info, io.BytesIO(data))",
        path.display()
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Files below `dir` with a set-id bit or a `security.capability` attribute.
fn privileged_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            if meta.mode() & 0o6000 != 0 {
                found.push(format!("{} mode {:o}", path.display(), meta.mode()));
            }
            let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a size query (null buffer, size 0) on a NUL-terminated path.
            let size = unsafe {
                libc::lgetxattr(
                    c_path.as_ptr(),
                    c"security.capability".as_ptr(),
                    std::ptr::null_mut(),
                    0,
                )
            };
            if size >= 0 {
                found.push(format!("{} has file capabilities", path.display()));
            }
        }
    }
    found
}

async fn no_set_id_file_is_made(mechanism: Mechanism) {
    let s = scratch(mechanism);
    let control = s.real.join("control");
    for (what, command) in set_id_attempts() {
        // The control runs in a folder of its own, so the confined run starts clean.
        let _ = std::fs::remove_dir_all(&control);
        std::fs::create_dir(&control).unwrap();
        write_suid_tar(&control.join("suid.tar"));
        write_suid_tar(&s.cwd.join("suid.tar"));
        let free = s
            .free(&format!("cd {}\n{command}", control.display()))
            .await;
        assert!(
            free.contains("ESCAPED"),
            "{} / {what}: the unconfined control must succeed: {free}",
            mechanism.name()
        );
        let confined = s.bash(&command).await;
        assert!(
            !confined.contains("ESCAPED"),
            "{} / {what}: made a privileged file: {confined}",
            mechanism.name()
        );
        let found = privileged_files(&s.cwd);
        assert!(
            found.is_empty(),
            "{} / {what}: privileged files in the workspace: {found:?}\n{confined}",
            mechanism.name()
        );
    }
    // Ordinary modes still work, also the sticky bit and executables.
    let plain = s
        .bash("cp /bin/sh ok && chmod 755 ok && mkdir d && chmod 1777 d && stat -c %a ok d")
        .await;
    assert_eq!(plain, "755\n1777\n", "{}", mechanism.name());
}

#[tokio::test]
async fn bubblewrap_as_root_makes_no_set_id_file() {
    if require_root("bubblewrap_as_root_makes_no_set_id_file") {
        no_set_id_file_is_made(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_as_root_makes_no_set_id_file() {
    if require_root("landlock_as_root_makes_no_set_id_file") {
        no_set_id_file_is_made(Mechanism::Landlock).await;
    }
}

/// The mount options of the mount at `point` as the command sees them (fields 6 and 11 of
/// `/proc/self/mountinfo`: per-mount and super-block options), from `mountinfo`.
fn mount_options(mountinfo: &str, point: &str) -> Option<String> {
    mountinfo
        .lines()
        .rfind(|line| line.split(' ').nth(4) == Some(point))
        .map(|line| line.split(' ').nth(5).unwrap_or("").to_string())
}

async fn privilege_stays_dropped(mechanism: Mechanism) {
    let s = scratch(mechanism);
    // A binary with file capabilities planted outside the sandbox (as the user could have):
    // it gives a confined command nothing either.
    let capped = s.cwd.join("capped");
    std::fs::copy("/bin/cat", &capped).unwrap();
    std::fs::set_permissions(&capped, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c_path = std::ffi::CString::new(capped.as_os_str().as_encoded_bytes()).unwrap();
    // Permitted + effective CAP_DAC_OVERRIDE (1) and CAP_SYS_ADMIN (21), revision 2.
    let caps: [u32; 5] = [0x0200_0001, 1 << 1 | 1 << 21, 0, 0, 0];
    // SAFETY: setxattr with a NUL-terminated path and name and a live 20-byte buffer.
    let rc = unsafe {
        libc::setxattr(
            c_path.as_ptr(),
            c"security.capability".as_ptr(),
            caps.as_ptr().cast(),
            std::mem::size_of_val(&caps),
            0,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let shown = s
        .bash("./capped /proc/self/status | grep -E '^(Cap|NoNewPrivs|Seccomp:)'; grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
        .await;
    for field in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            shown
                .matches(&format!("{field}:\t0000000000000000"))
                .count(),
            2,
            "{}: {field} not empty (plain or through file capabilities): {shown}",
            mechanism.name()
        );
    }
    assert_eq!(shown.matches("NoNewPrivs:\t1").count(), 2, "{shown}");
    // No way back: no_new_privs cannot be cleared, no ambient capability raised, no capability
    // set changed, and securebits stay (root: locked).
    let back = s
        .bash(&python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nPR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, PR_SET_SECUREBITS = 38, 47, 2, 28\nfor name, args in [('no_new_privs 0', (PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0)), ('ambient raise', (PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 21, 0, 0)), ('securebits 0', (PR_SET_SECUREBITS, 0, 0, 0, 0))]:\n    if libc.prctl(*args) == 0:\n        print('ESCAPED', name)\n    else:\n        print('refused', name, ctypes.get_errno())"))
        .await;
    assert!(!back.contains("ESCAPED"), "{}: {back}", mechanism.name());
    assert_eq!(back.matches("refused").count(), 3, "{back}");
    // Mounts: the workspace is nosuid and nodev; /proc and /sys are read-only.
    let mountinfo = s.bash("cat /proc/self/mountinfo").await;
    let ws = s.cwd.display().to_string();
    let options = mount_options(&mountinfo, &ws).unwrap_or_else(|| {
        panic!(
            "{}: the workspace is no mount of its own: {mountinfo}",
            mechanism.name()
        )
    });
    for flag in ["rw", "nosuid", "nodev"] {
        assert!(
            options.split(',').any(|o| o == flag),
            "{}: workspace mount without {flag}: {options}",
            mechanism.name()
        );
    }
    for point in ["/proc", "/sys"] {
        let options = mount_options(&mountinfo, point).unwrap_or_default();
        assert!(
            options.split(',').any(|o| o == "ro"),
            "{}: {point} is not read-only: {options}\n{mountinfo}",
            mechanism.name()
        );
    }
}

#[tokio::test]
async fn bubblewrap_as_root_keeps_no_privilege() {
    if require_root("bubblewrap_as_root_keeps_no_privilege") {
        privilege_stays_dropped(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_as_root_keeps_no_privilege() {
    if require_root("landlock_as_root_keeps_no_privilege") {
        privilege_stays_dropped(Mechanism::Landlock).await;
    }
}

/// Kernel interfaces an attacker would try next; each prints `ESCAPED` on success.
fn kernel_attempts(s: &Scratch, shm_key: i32) -> Vec<(&'static str, String)> {
    let out = s.outside.display();
    // The test process plays dsh: its root is the host's, reachable only through
    // `/proc/<pid>/root` (ptrace-mode access to it).
    let dsh = std::process::id();
    vec![
        (
            "io_uring_setup",
            python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nparams = ctypes.create_string_buffer(120)\nfd = libc.syscall(425, 4, params)\nprint('ESCAPED' if fd >= 0 else 'refused %d' % ctypes.get_errno())"),
        ),
        (
            "keyctl (session keyring)",
            python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = libc.syscall(250, 0, -3, 1)\nprint('ESCAPED' if rc >= 0 else 'refused %d' % ctypes.get_errno())"),
        ),
        (
            "perf_event_open",
            python("import ctypes, struct\nlibc = ctypes.CDLL(None, use_errno=True)\nattr = struct.pack('IIQ', 1, 128, 0) + bytes(112)\nfd = libc.syscall(298, attr, 0, -1, -1, 0)\nprint('ESCAPED' if fd >= 0 else 'refused %d' % ctypes.get_errno())"),
        ),
        (
            "mknod of /dev/mem's device",
            "mknod mem c 1 1 && echo ESCAPED; rm -f mem".to_string(),
        ),
        (
            "a block device of the host",
            "for d in /sys/block/*; do n=${d##*/}; for p in /dev/$n /proc/self/root/dev/$n /dev/fd/../../../dev/$n; do [ -b $p ] && head -c 512 $p > /dev/null 2>&1 && echo ESCAPED $p; done; done; true".to_string(),
        ),
        (
            "write through /proc/<dsh>/root",
            format!("echo x > /proc/{dsh}/root{out}/via-dsh && echo ESCAPED"),
        ),
        (
            "take a sibling's descriptor (pidfd_getfd)",
            python("import ctypes, os, subprocess\nlibc = ctypes.CDLL(None, use_errno=True)\nchild = subprocess.Popen(['sleep', '30'])\npidfd = libc.syscall(434, child.pid, 0)\nfd = libc.syscall(438, pidfd, 0, 0) if pidfd >= 0 else -1\nprint('ESCAPED' if fd >= 0 else 'refused %d' % ctypes.get_errno())\nchild.kill()"),
        ),
        (
            "a System V shared memory segment of the host's root",
            python(&format!("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\nid = libc.shmget({shm_key}, 0, 0)\nif id >= 0:\n    at = libc.shmat(id, None, 0)\n    if at not in (None, ctypes.c_void_p(-1).value) and ctypes.string_at(at, 6) == b'SECRET':\n        print('ESCAPED')\nprint('refused', ctypes.get_errno())")),
        ),
        (
            "read dsh's environment and memory as the same uid",
            format!("head -c 1 /proc/{dsh}/environ > /dev/null && echo ESCAPED environ; python3 -c \"open('/proc/{dsh}/mem', 'rb')\" && echo ESCAPED mem"),
        ),
        (
            "write through /proc/self/root",
            format!("echo x > /proc/self/root{out}/via-self && echo ESCAPED"),
        ),
        (
            "reopen a read-only descriptor for writing through /proc/self/fd",
            format!("echo old > {out}/../reopen 2>/dev/null; exec 3< {out}/../reopen; echo x > /proc/self/fd/3 && echo ESCAPED"),
        ),
        (
            "unshare a user namespace and map root",
            python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nif libc.unshare(0x10000000 | 0x20000) == 0:\n    print('ESCAPED')\nelse:\n    print('refused', ctypes.get_errno())"),
        ),
    ]
}

/// The key of a System V segment the test (root, mode 0600) holds for the run, one per
/// mechanism (their tests run at the same time).
fn shm_key(mechanism: Mechanism) -> i32 {
    match mechanism {
        Mechanism::Bubblewrap => 0x0d5e_0038,
        Mechanism::Landlock => 0x0d5e_0039,
    }
}

/// A root-owned `0600` System V segment holding `SECRET`, removed when dropped.
struct HostSegment(i32);

impl HostSegment {
    fn new(key: i32) -> Self {
        // SAFETY: shmget/shmat/memcpy on a segment this test made, of the size asked for.
        unsafe {
            let id = libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600);
            assert!(id >= 0, "{}", std::io::Error::last_os_error());
            let at = libc::shmat(id, std::ptr::null(), 0);
            assert_ne!(at as isize, -1, "{}", std::io::Error::last_os_error());
            std::ptr::copy_nonoverlapping(b"SECRET".as_ptr(), at.cast::<u8>(), 6);
            libc::shmdt(at);
            HostSegment(id)
        }
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        // SAFETY: removes the segment this value made.
        unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

async fn kernel_interfaces_stay_closed(mechanism: Mechanism) {
    use std::os::linux::net::SocketAddrExt;
    let s = scratch(mechanism);
    let _segment = HostSegment::new(shm_key(mechanism));
    // An abstract Unix socket of the host (as a root daemon would listen on), accepting for
    // the rest of the test.
    let name = format!("dsh-abstract-{}-{}", std::process::id(), mechanism.name());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let mut attempts = kernel_attempts(&s, shm_key(mechanism));
    attempts.push((
        "connect to an abstract Unix socket of the host",
        python(&format!("import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0{name}')\n    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e.errno)")),
    ));
    for (what, command) in attempts {
        refused(&s, mechanism, what, &command).await;
        let names: Vec<_> = std::fs::read_dir(&s.outside).unwrap().collect();
        // The controls write there; clear it so each confined run is judged alone.
        for entry in names {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
}

#[tokio::test]
async fn bubblewrap_as_root_blocks_kernel_interfaces() {
    if require_root("bubblewrap_as_root_blocks_kernel_interfaces") {
        kernel_interfaces_stay_closed(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_as_root_blocks_kernel_interfaces() {
    if require_root("landlock_as_root_blocks_kernel_interfaces") {
        kernel_interfaces_stay_closed(Mechanism::Landlock).await;
    }
}

/// `[sandbox] network = "off"` (`ToolContext::with_network(false)`): no connection leaves the
/// sandbox, on either mechanism; an approved call (`network: true`) gets it back.
async fn network_off_is_enforced(mechanism: Mechanism) {
    let s = scratch(mechanism);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        // Accept the control's and the approved call's connection (and any escape).
        let mut accepted = 0;
        listener.set_nonblocking(false).unwrap();
        while accepted < 2 {
            if listener.accept().is_err() {
                break;
            }
            accepted += 1;
        }
    });
    let connect = python(&format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e.errno)"
    ));
    let offline = s.confined.clone().with_network(false);
    let shown = s.run(&offline, &connect).await;
    assert!(
        !shown.contains("ESCAPED"),
        "{}: reached the host's network: {shown}",
        mechanism.name()
    );
    let others = python("import socket\nfor family in (socket.AF_VSOCK, socket.AF_PACKET):\n    try:\n        socket.socket(family, socket.SOCK_STREAM if family == socket.AF_VSOCK else socket.SOCK_RAW)\n        print('ESCAPED', family)\n    except OSError as e:\n        print('refused', e.errno)");
    let shown = s.run(&offline, &others).await;
    assert!(!shown.contains("ESCAPED"), "{}: {shown}", mechanism.name());
    // Unix sockets and files still work.
    let local = s
        .run(
            &offline,
            &python("import socket\na, b = socket.socketpair()\na.send(b'ok')\nprint(b.recv(2).decode())"),
        )
        .await;
    assert_eq!(local, "ok\n", "{}", mechanism.name());
    // The same connection with the network on: the session's default, and what an approved
    // call gets.
    let online = s.run(&s.confined, &connect).await;
    assert!(online.contains("ESCAPED"), "{}: {online}", mechanism.name());
    let approved = offline.clone().with_approval(true);
    let args = serde_json::json!({"command": connect, "description": "approved", "network": true});
    let shown = text_of(
        &dsh_tools::ToolRegistry::with_builtins()
            .invoke("bash", &args.to_string(), &approved)
            .await,
    );
    assert!(shown.contains("ESCAPED"), "{}: {shown}", mechanism.name());
    // Without the approval the argument alone changes nothing.
    let shown = text_of(
        &dsh_tools::ToolRegistry::with_builtins()
            .invoke("bash", &args.to_string(), &offline)
            .await,
    );
    assert!(!shown.contains("ESCAPED"), "{}: {shown}", mechanism.name());
    drop(accept);
}

fn text_of(result: &Result<dsh_tools::ToolOutput, dsh_tools::ToolError>) -> String {
    match result {
        Ok(out) => out.text_content(),
        Err(err) => err.result_text(),
    }
}

#[tokio::test]
async fn bubblewrap_without_network_reaches_nothing() {
    if require_root("bubblewrap_without_network_reaches_nothing") {
        network_off_is_enforced(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_without_network_reaches_nothing() {
    if require_root("landlock_without_network_reaches_nothing") {
        network_off_is_enforced(Mechanism::Landlock).await;
    }
}
