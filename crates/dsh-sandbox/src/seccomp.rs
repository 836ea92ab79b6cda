//! The seccomp filter every confined command runs under (docs/SECURITY.md, "Process
//! sandbox"): system calls that would let a process leave or widen its sandbox, reach other
//! processes, or inject input into a terminal fail with `EPERM`, whatever the caller's
//! privileges. bubblewrap loads it (`--add-seccomp-fd`) just before it executes the command;
//! the Landlock path installs it in the child before `exec` (with extra rules, see
//! [`Profile::Landlock`]).
//!
//! Denied with `EPERM` (both profiles):
//! * mounting and namespaces: `mount`, `umount2`, `pivot_root`, `chroot`, `unshare`, `setns`,
//!   the new mount API (`fsopen`, `fsconfig`, `fsmount`, `fspick`, `move_mount`, `open_tree`,
//!   `mount_setattr`), and `clone` with any `CLONE_NEW*` flag;
//! * other processes and the kernel: `ptrace`, `process_vm_readv`, `process_vm_writev`,
//!   `pidfd_getfd`, `process_madvise`, `kexec_load`, `kexec_file_load`, `bpf`,
//!   `perf_event_open`, `keyctl`, `add_key`, `request_key`, `open_by_handle_at`;
//! * terminals: `ioctl` with `TIOCSTI` or `TIOCLINUX`;
//! * raw network access: `socket(AF_PACKET, ..)` and `socket(domain, SOCK_RAW, ..)` for every
//!   domain but `AF_NETLINK` (netlink sockets are always `SOCK_RAW`; the C library uses them to
//!   list interfaces, and they cannot craft packets);
//! * set-user-ID and set-group-ID files (docs/SECURITY.md, "No real root in the sandbox"): every
//!   `chmod` call (`chmod`, `fchmod`, `fchmodat`, `fchmodat2`) whose mode carries `S_ISUID` or
//!   `S_ISGID`, and every call that creates a file with such a mode (`open`/`openat`/`creat`
//!   with `O_CREAT` or `O_TMPFILE`, `mknod`/`mknodat`). A root-owned set-user-ID copy of a shell
//!   left in the workspace would give whoever runs it later root; the sandbox's own mounts are
//!   `nosuid`, but the file would be run outside them;
//! * `io_uring_setup`, `io_uring_enter`, `io_uring_register`: the operations of a ring are not
//!   system calls, so no filter sees them (a ring could open sockets or files past the rules).
//!
//! `openat2` fails with `ENOSYS` (its mode lives in memory a filter cannot read; callers fall
//! back to `openat`, whose mode the filter checks), like `clone3` below.
//!
//! Without network ([`Network::Off`]), `socket` fails with `EPERM` for every address family but
//! `AF_UNIX` and `AF_NETLINK`; under bubblewrap, which gives the command a network namespace of
//! its own with only a loopback interface, `AF_INET` and `AF_INET6` stay allowed (they reach
//! nothing but the sandbox's own loopback), and families no network namespace confines
//! (`AF_VSOCK` to the hypervisor, ...) fail.
//!
//! `clone3` fails with `ENOSYS`: its flags live in memory a filter cannot read, and `ENOSYS`
//! makes the C library fall back to `clone`, whose flags the filter checks. On x86-64 every x32
//! system call (number with bit 30 set) fails with `ENOSYS` too, so the numbers above cannot be
//! dodged through the x32 table; a system call of another architecture (32-bit `int 0x80`)
//! kills the process, as the filter cannot vouch for its numbers.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

/// Which rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    /// The common rules (bubblewrap: its read-only binds already stop metadata changes).
    Common,
    /// The common rules plus, because Landlock does not govern file metadata: every `chown`
    /// and every `setxattr`/`removexattr` call fails with `EPERM`.
    Landlock,
}

/// Whether confined commands may reach the network (docs/SECURITY.md, "Network").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Network {
    /// No rule about address families.
    On,
    /// `socket` refused for every family that could leave the sandbox (see the module docs).
    Off,
}

/// `setxattrat(2)` and `removexattrat(2)` (Linux 6.13): the same number on every architecture.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// `CLONE_NEW*` flags that `clone` may not carry.
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// The low four bits of `socket`'s type argument hold the type (`SOCK_TYPE_MASK` in the
/// kernel); the others are `SOCK_NONBLOCK` / `SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u64 = 0xf;

/// The terminal ioctls denied (libc's type for them differs between C libraries).
#[allow(clippy::unnecessary_cast)]
const TIOCSTI: u64 = libc::TIOCSTI as u64;
#[allow(clippy::unnecessary_cast)]
const TIOCLINUX: u64 = libc::TIOCLINUX as u64;

/// A compiled filter, ready to install or to hand to bubblewrap.
#[derive(Debug)]
pub(crate) struct Program {
    instructions: Vec<libc::sock_filter>,
    /// Where the compiled rules start, after the head.
    #[cfg(test)]
    rules_start: usize,
}

impl Program {
    /// The filter for `profile` and `network`, compiled once per process.
    pub(crate) fn get(profile: Profile, network: Network) -> Result<&'static Program, String> {
        static COMMON: OnceLock<Result<Program, String>> = OnceLock::new();
        static LANDLOCK: OnceLock<Result<Program, String>> = OnceLock::new();
        static COMMON_OFFLINE: OnceLock<Result<Program, String>> = OnceLock::new();
        static LANDLOCK_OFFLINE: OnceLock<Result<Program, String>> = OnceLock::new();
        let cell = match (profile, network) {
            (Profile::Common, Network::On) => &COMMON,
            (Profile::Landlock, Network::On) => &LANDLOCK,
            (Profile::Common, Network::Off) => &COMMON_OFFLINE,
            (Profile::Landlock, Network::Off) => &LANDLOCK_OFFLINE,
        };
        cell.get_or_init(|| compile(profile, network))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The number of BPF instructions.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.instructions.len()
    }

    /// The program as the raw bytes bubblewrap reads from `--add-seccomp-fd` (an array of
    /// `struct sock_filter`).
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.instructions.len() * 8);
        for ins in &self.instructions {
            out.extend_from_slice(&ins.code.to_ne_bytes());
            out.push(ins.jt);
            out.push(ins.jf);
            out.extend_from_slice(&ins.k.to_ne_bytes());
        }
        out
    }

    /// An anonymous in-memory file (close-on-exec) holding the program, positioned at its
    /// start, for bubblewrap's `--add-seccomp-fd`. The child must clear close-on-exec on it.
    pub(crate) fn memfd(&self) -> Result<OwnedFd, String> {
        let fail = |what: &str| format!("{what}: {}", io::Error::last_os_error());
        // SAFETY: the name is a NUL-terminated literal; the flags are valid.
        let raw = unsafe { libc::memfd_create(c"dsh-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(fail("cannot create the seccomp filter file"));
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let bytes = self.bytes();
        let mut written = 0;
        while written < bytes.len() {
            // SAFETY: the pointer and length describe the live `bytes` buffer past `written`.
            let n = unsafe {
                libc::write(
                    fd.as_raw_fd(),
                    bytes[written..].as_ptr().cast(),
                    bytes.len() - written,
                )
            };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(fail("cannot write the seccomp filter file"));
            }
            written += n as usize;
        }
        // SAFETY: lseek on a descriptor we own.
        if unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) } != 0 {
            return Err(fail("cannot rewind the seccomp filter file"));
        }
        Ok(fd)
    }

    /// Installs the program on the calling thread. Async-signal-safe (one system call on
    /// memory that already exists): meant for a `pre_exec` hook. Needs `no_new_privs` (or
    /// `CAP_SYS_ADMIN`) first.
    pub(crate) fn install(&self) -> io::Result<()> {
        let Ok(len) = u16::try_from(self.instructions.len()) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let prog = libc::sock_fprog {
            len,
            filter: self.instructions.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at `self.instructions`, which outlives the call; the kernel
        // copies the program and does not keep the pointer.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0 as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn arg(
    index: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, String> {
    SeccompCondition::new(index, len, op, value).map_err(|e| format!("bad seccomp condition: {e}"))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| format!("bad seccomp rule: {e}"))
}

fn target_arch() -> Result<(TargetArch, u32), String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok((TargetArch::x86_64, 62 | 0x8000_0000 | 0x4000_0000)),
        "aarch64" => Ok((TargetArch::aarch64, 183 | 0x8000_0000 | 0x4000_0000)),
        "riscv64" => Ok((TargetArch::riscv64, 243 | 0x8000_0000 | 0x4000_0000)),
        other => Err(format!(
            "no seccomp filter for the {other} architecture (supported: x86_64, aarch64, riscv64)"
        )),
    }
}

/// `kexec_file_load`: the `libc` crate names it for x86_64 but not for aarch64 musl (the static
/// release build, docs/harbor.md "Release archives"); elsewhere the number is the one of the
/// kernel's generic system call table (`asm-generic/unistd.h`), which aarch64 uses.
#[cfg(target_arch = "x86_64")]
const SYS_KEXEC_FILE_LOAD: libc::c_long = libc::SYS_kexec_file_load;
#[cfg(not(target_arch = "x86_64"))]
const SYS_KEXEC_FILE_LOAD: libc::c_long = 294;
/// `fchmodat2` (Linux 6.6): the same number on every architecture; missing from `libc` for
/// aarch64 musl.
const SYS_FCHMODAT2: libc::c_long = 452;
/// `io_uring_setup`, `io_uring_enter`, `io_uring_register` (Linux 5.1) and `openat2` (5.6): the
/// same numbers on every architecture.
const SYS_IO_URING_SETUP: libc::c_long = 425;
const SYS_IO_URING_ENTER: libc::c_long = 426;
const SYS_IO_URING_REGISTER: libc::c_long = 427;
pub(crate) const SYS_OPENAT2: libc::c_long = 437;
/// `pidfd_getfd` (Linux 5.6) and `process_madvise` (5.10): another process's descriptors and
/// memory, like `ptrace`; the same numbers on every architecture.
const SYS_PIDFD_GETFD: libc::c_long = 438;
const SYS_PROCESS_MADVISE: libc::c_long = 440;
/// The kernel's `__O_TMPFILE` (without `O_DIRECTORY`): a file made with it gets the call's mode.
const O_TMPFILE_BIT: u64 = 0o20_000_000;

/// System calls denied whatever their arguments.
fn always_denied(profile: Profile) -> Vec<i64> {
    let mut list = vec![
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        SYS_PIDFD_GETFD,
        SYS_PROCESS_MADVISE,
        libc::SYS_kexec_load,
        SYS_KEXEC_FILE_LOAD,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_open_by_handle_at,
        SYS_IO_URING_SETUP,
        SYS_IO_URING_ENTER,
        SYS_IO_URING_REGISTER,
    ];
    if profile == Profile::Landlock {
        list.extend([
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            SYS_SETXATTRAT,
            SYS_REMOVEXATTRAT,
        ]);
        #[cfg(target_arch = "x86_64")]
        list.extend([libc::SYS_chown, libc::SYS_lchown]);
    }
    list
}

/// The rules of `profile` and `network`, by system call number.
fn rules(profile: Profile, network: Network) -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::{Eq, MaskedEq, Ne};

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in always_denied(profile) {
        rules.insert(nr, Vec::new());
    }
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| rule(vec![arg(0, Dword, MaskedEq(flag), flag)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![arg(1, Dword, Eq, TIOCSTI)?])?,
            rule(vec![arg(1, Dword, Eq, TIOCLINUX)?])?,
        ],
    );
    let mut socket_rules = vec![
        rule(vec![arg(0, Dword, Eq, libc::AF_PACKET as u64)?])?,
        rule(vec![
            arg(0, Dword, Ne, libc::AF_NETLINK as u64)?,
            arg(1, Dword, MaskedEq(SOCK_TYPE_MASK), libc::SOCK_RAW as u64)?,
        ])?,
    ];
    if network == Network::Off {
        let mut allowed = vec![libc::AF_UNIX, libc::AF_NETLINK];
        if profile == Profile::Common {
            // bubblewrap's own network namespace: IP reaches only its loopback.
            allowed.extend([libc::AF_INET, libc::AF_INET6]);
        }
        let others = allowed
            .into_iter()
            .map(|family| arg(0, Dword, Ne, family as u64))
            .collect::<Result<Vec<_>, _>>()?;
        socket_rules.push(rule(others)?);
    }
    rules.insert(libc::SYS_socket, socket_rules);
    set_id_rules(&mut rules)?;
    Ok(rules)
}

/// The rules against set-user-ID and set-group-ID files: a `chmod` whose mode (argument
/// `index`) carries either bit, and a call that creates a file with such a mode.
fn set_id_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), String> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::MaskedEq;

    let special = [libc::S_ISUID as u64, libc::S_ISGID as u64];
    let mode_rules = |index: u8| {
        special
            .iter()
            .map(|&bit| rule(vec![arg(index, Dword, MaskedEq(bit), bit)?]))
            .collect::<Result<Vec<_>, _>>()
    };
    // `open`-like calls: only when the flags (argument `flags`) create a file.
    let create_rules = |flags: u8, mode: u8| {
        let mut out = Vec::new();
        for creates in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
            for &bit in &special {
                out.push(rule(vec![
                    arg(flags, Dword, MaskedEq(creates), creates)?,
                    arg(mode, Dword, MaskedEq(bit), bit)?,
                ])?);
            }
        }
        Ok::<_, String>(out)
    };
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_chmod, mode_rules(1)?);
        rules.insert(libc::SYS_open, create_rules(1, 2)?);
        rules.insert(libc::SYS_creat, mode_rules(1)?);
        rules.insert(libc::SYS_mknod, mode_rules(1)?);
    }
    rules.insert(libc::SYS_fchmod, mode_rules(1)?);
    rules.insert(libc::SYS_fchmodat, mode_rules(2)?);
    rules.insert(SYS_FCHMODAT2, mode_rules(2)?);
    rules.insert(libc::SYS_openat, create_rules(2, 3)?);
    rules.insert(libc::SYS_mknodat, mode_rules(2)?);
    Ok(())
}

fn compile(profile: Profile, network: Network) -> Result<Program, String> {
    let (arch, audit_arch) = target_arch()?;
    let rules = rules(profile, network)?;
    // The numbers that have rules, for the search in front of the compiled rules.
    let ruled: Vec<u32> = rules
        .keys()
        .map(|&nr| u32::try_from(nr).map_err(|_| format!("system call number {nr} out of range")))
        .collect::<Result<_, _>>()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    let main: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e| format!("cannot compile the seccomp filter: {e}"))?;
    let mut instructions = head(audit_arch, &ruled)?;
    #[cfg(test)]
    let rules_start = instructions.len();
    instructions.extend(main.into_iter().map(|i| ins(i.code, i.jt, i.jf, i.k)));
    if instructions.len() > usize::from(u16::MAX) {
        return Err("the seccomp filter is too long".to_string());
    }
    Ok(Program {
        instructions,
        #[cfg(test)]
        rules_start,
    })
}

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// Offsets in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

/// Where a jump of the head goes.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The next instruction.
    Next,
    /// An instruction of the head.
    At(usize),
    /// `RET ALLOW`.
    Allow,
    /// `RET ENOSYS`.
    Enosys,
    /// The first instruction of the compiled rules.
    Rules,
}

/// An instruction of the head whose jumps are resolved once the head's length is known.
#[derive(Debug)]
struct Pending {
    code: u16,
    jt: Target,
    jf: Target,
    k: u32,
}

fn op(code: u16, jt: Target, jf: Target, k: u32) -> Pending {
    Pending { code, jt, jf, k }
}

/// The hand-written head of the filter. For the native architecture: `clone3` and (on x86-64)
/// x32 system calls return `ENOSYS`; a number without rules is allowed after a binary search
/// (a handful of comparisons); a number with rules goes on to the compiled rules. A call of
/// another architecture goes to the compiled rules at once, whose own architecture check
/// kills it.
///
/// Why the search: when a filter is installed, the kernel runs it for every system call number
/// of each architecture it serves, to cache the numbers it always allows. Over the compiled
/// rules alone (one comparison after another) that walk made up a third of the install, which
/// every `bash` call pays (docs/PERFORMANCE.md, "The seccomp filter's shape"). The verdicts are
/// those of the compiled rules either way (`the_search_keeps_every_verdict`).
fn head(audit_arch: u32, ruled: &[u32]) -> Result<Vec<libc::sock_filter>, String> {
    let x32_bit: u32 = if cfg!(target_arch = "x86_64") {
        0x4000_0000
    } else {
        // No x32 table elsewhere: compare against a number no system call has.
        u32::MAX
    };
    let mut code = vec![
        op(LD_W_ABS, Target::Next, Target::Next, ARCH_OFFSET),
        // Native: over the jump to the rules.
        op(JEQ_K, Target::At(3), Target::Next, audit_arch),
        op(JA, Target::Rules, Target::Rules, 0),
        op(LD_W_ABS, Target::Next, Target::Next, NR_OFFSET),
        op(JGE_K, Target::Enosys, Target::Next, x32_bit),
        op(JEQ_K, Target::Enosys, Target::Next, libc::SYS_clone3 as u32),
        op(JEQ_K, Target::Enosys, Target::Next, SYS_OPENAT2 as u32),
    ];
    let mut sorted = ruled.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    search(&mut code, &sorted);
    let allow = code.len();
    let enosys = allow + 1;
    let rules = allow + 2;
    let too_far = || "the seccomp filter's head has a jump too far".to_string();
    let mut out = Vec::with_capacity(rules);
    for (at, pending) in code.iter().enumerate() {
        let offset = |target: Target| {
            let to = match target {
                Target::Next => at + 1,
                Target::At(to) => to,
                Target::Allow => allow,
                Target::Enosys => enosys,
                Target::Rules => rules,
            };
            to.checked_sub(at + 1).ok_or_else(too_far)
        };
        let (jt, jf) = (offset(pending.jt)?, offset(pending.jf)?);
        if pending.code == JA {
            out.push(ins(JA, 0, 0, u32::try_from(jt).map_err(|_| too_far())?));
        } else {
            let short = |o: usize| u8::try_from(o).map_err(|_| too_far());
            out.push(ins(pending.code, short(jt)?, short(jf)?, pending.k));
        }
    }
    out.push(ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    out.push(ins(
        RET_K,
        0,
        0,
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
    ));
    Ok(out)
}

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Appends a binary search of the loaded number in `sorted`: found goes to the rules, not
/// found to `RET ALLOW`. Up to four numbers are compared one by one.
fn search(code: &mut Vec<Pending>, sorted: &[u32]) {
    if sorted.len() <= 4 {
        for (i, &nr) in sorted.iter().enumerate() {
            let missed = if i + 1 == sorted.len() {
                Target::Allow
            } else {
                Target::Next
            };
            code.push(op(JEQ_K, Target::Rules, missed, nr));
        }
        if sorted.is_empty() {
            code.push(op(JA, Target::Allow, Target::Allow, 0));
        }
        return;
    }
    let (low, high) = sorted.split_at(sorted.len() / 2);
    let fork = code.len();
    code.push(op(JGE_K, Target::Next, Target::Next, high[0]));
    search(code, low);
    code[fork].jt = Target::At(code.len());
    search(code, high);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// `struct seccomp_data` as the kernel hands it to a filter.
    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut bytes = [0u8; 64];
        bytes[0..4].copy_from_slice(&nr.to_ne_bytes());
        bytes[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, arg) in args.iter().enumerate() {
            bytes[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_ne_bytes());
        }
        bytes
    }

    /// Runs a classic BPF program over `data` (the instructions the filter uses); returns the
    /// verdict and the number of instructions run.
    fn run(program: &[libc::sock_filter], data: &[u8; 64]) -> (u32, usize) {
        const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
        const JGT_K: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
        let (mut pc, mut a, mut steps) = (0usize, 0u32, 0usize);
        loop {
            let i = program[pc];
            steps += 1;
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
            match i.code {
                LD_W_ABS => {
                    let at = i.k as usize;
                    a = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                ALU_AND_K => a &= i.k,
                JA => pc += i.k as usize,
                JEQ_K => pc += jump(a == i.k),
                JGE_K => pc += jump(a >= i.k),
                JGT_K => pc += jump(a > i.k),
                RET_K => return (i.k, steps),
                other => panic!("instruction {other:#x} not interpreted"),
            }
        }
    }

    /// The values the rules compare arguments with, and neighbours.
    fn argument_values() -> Vec<u64> {
        let mut values = vec![0, 1, 0x11, 0o777, 0o4755, 0o2755, 1 << 32];
        values.extend(NAMESPACE_FLAGS);
        values.extend(NAMESPACE_FLAGS.map(|flag| flag | 0x11));
        values.extend([TIOCSTI, TIOCLINUX, TIOCSTI | 1 << 32, 0x5401]);
        values.extend(
            [
                libc::AF_PACKET,
                libc::AF_NETLINK,
                libc::AF_INET,
                libc::AF_INET6,
                libc::AF_VSOCK,
                libc::AF_UNIX,
            ]
            .map(|v| v as u64),
        );
        values.extend(
            [
                libc::SOCK_RAW,
                libc::SOCK_STREAM,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            ]
            .map(|v| v as u64),
        );
        values.extend([libc::S_ISUID, libc::S_ISGID].map(u64::from));
        values
    }

    const ALL: [(Profile, Network); 4] = [
        (Profile::Common, Network::On),
        (Profile::Landlock, Network::On),
        (Profile::Common, Network::Off),
        (Profile::Landlock, Network::Off),
    ];

    fn ruled_numbers(profile: Profile, network: Network) -> Vec<u32> {
        rules(profile, network)
            .unwrap()
            .keys()
            .map(|&nr| nr as u32)
            .collect()
    }

    #[test]
    fn the_search_keeps_every_verdict() {
        let (_, native) = target_arch().unwrap();
        let x32_bit = if cfg!(target_arch = "x86_64") {
            0x4000_0000
        } else {
            u32::MAX
        };
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let enosys_numbers = [libc::SYS_clone3 as u32, SYS_OPENAT2 as u32];
        let values = argument_values();
        // One argument set: each value at each of the first three positions; then (for
        // `socket`, whose rule compares two arguments) every pair in the first two.
        let mut argument_sets = vec![[0u64; 6]];
        for &value in &values {
            for at in 0..3 {
                let mut args = [0u64; 6];
                args[at] = value;
                argument_sets.push(args);
            }
        }
        let singles = argument_sets.len();
        for &first in &values {
            for &second in &values {
                argument_sets.push([first, second, 0, 0, 0, 0]);
            }
        }
        let numbers: Vec<u32> = (0..1100)
            .chain((0..600).map(|nr| 0x4000_0000 + nr))
            .chain([0x8000_0000, u32::MAX])
            .collect();
        for (profile, network) in ALL {
            let program = Program::get(profile, network).unwrap();
            let (head, rules) = program.instructions.split_at(program.rules_start);
            assert!(!head.is_empty());
            for arch in [native, 0x4000_0003, 0xc000_00b7, 0] {
                for &nr in &numbers {
                    let sets = if nr == libc::SYS_socket as u32 {
                        &argument_sets[..]
                    } else {
                        &argument_sets[..singles]
                    };
                    for &args in sets {
                        let data = data(arch, nr, args);
                        let expected =
                            if arch == native && (nr >= x32_bit || enosys_numbers.contains(&nr)) {
                                enosys
                            } else {
                                run(rules, &data).0
                            };
                        let (verdict, _) = run(&program.instructions, &data);
                        assert_eq!(
                            verdict, expected,
                            "{profile:?} arch {arch:#x} nr {nr} args {args:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_number_without_rules_is_allowed_within_a_few_instructions() {
        let (_, native) = target_arch().unwrap();
        for (profile, network) in ALL {
            let program = Program::get(profile, network).unwrap();
            let ruled = ruled_numbers(profile, network);
            let mut longest = 0;
            for nr in (0..1100u32).filter(|nr| {
                !ruled.contains(nr) && *nr != libc::SYS_clone3 as u32 && *nr != SYS_OPENAT2 as u32
            }) {
                let (verdict, steps) = run(&program.instructions, &data(native, nr, [0; 6]));
                assert_eq!(verdict, libc::SECCOMP_RET_ALLOW, "{profile:?} nr {nr}");
                longest = longest.max(steps);
            }
            // 7 head instructions, a search of depth log2(rules / 4) and up to 4 comparisons.
            assert!(longest <= 17, "{profile:?}: {longest} instructions");
            let (_, rules) = program.instructions.split_at(program.rules_start);
            let (_, unsearched) = run(rules, &data(native, 999, [0; 6]));
            assert!(
                unsearched > 4 * longest,
                "{profile:?}: {unsearched} against {longest}"
            );
        }
    }

    #[test]
    fn both_profiles_compile_and_landlock_has_more_rules() {
        let common = Program::get(Profile::Common, Network::On).unwrap();
        let landlock = Program::get(Profile::Landlock, Network::On).unwrap();
        assert!(common.len() > 30, "{}", common.len());
        assert!(landlock.len() > common.len());
        assert_eq!(common.bytes().len(), common.len() * 8);
    }

    #[test]
    fn the_filter_file_holds_the_program() {
        let program = Program::get(Profile::Common, Network::On).unwrap();
        let fd = program.memfd().unwrap();
        let mut file = std::fs::File::from(fd);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        assert_eq!(bytes, program.bytes());
    }

    /// The verdict of the whole filter of `profile`/`network` for `nr` with `args`.
    fn verdict(profile: Profile, network: Network, nr: i64, args: [u64; 6]) -> u32 {
        let (_, native) = target_arch().unwrap();
        let program = Program::get(profile, network).unwrap();
        run(&program.instructions, &data(native, nr as u32, args)).0
    }

    #[test]
    fn set_id_modes_are_refused_by_both_profiles_and_other_modes_are_not() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        let creat = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
        let tmpfile = libc::O_TMPFILE as u64 | libc::O_RDWR as u64;
        for (profile, network) in ALL {
            let v = |nr: i64, args: [u64; 6]| verdict(profile, network, nr, args);
            for mode in [0o4755, 0o2755, 0o6777, 0o104755] {
                assert_eq!(v(libc::SYS_fchmod, [3, mode, 0, 0, 0, 0]), eperm);
                assert_eq!(v(libc::SYS_fchmodat, [3, 0, mode, 0, 0, 0]), eperm);
                assert_eq!(v(SYS_FCHMODAT2, [3, 0, mode, 0, 0, 0]), eperm);
                assert_eq!(v(libc::SYS_openat, [3, 0, creat, mode, 0, 0]), eperm);
                assert_eq!(v(libc::SYS_openat, [3, 0, tmpfile, mode, 0, 0]), eperm);
                assert_eq!(v(libc::SYS_mknodat, [3, 0, mode, 0, 0, 0]), eperm);
                // Without O_CREAT the mode argument means nothing.
                assert_eq!(v(libc::SYS_openat, [3, 0, 0, mode, 0, 0]), allow);
                #[cfg(target_arch = "x86_64")]
                {
                    assert_eq!(v(libc::SYS_chmod, [0, mode, 0, 0, 0, 0]), eperm);
                    assert_eq!(v(libc::SYS_open, [0, creat, mode, 0, 0, 0]), eperm);
                    assert_eq!(v(libc::SYS_creat, [0, mode, 0, 0, 0, 0]), eperm);
                    assert_eq!(v(libc::SYS_mknod, [0, mode, 0, 0, 0, 0]), eperm);
                }
            }
            for mode in [0o755, 0o1777, 0o644, 0o777] {
                assert_eq!(v(libc::SYS_fchmod, [3, mode, 0, 0, 0, 0]), allow);
                assert_eq!(v(libc::SYS_openat, [3, 0, creat, mode, 0, 0]), allow);
                assert_eq!(v(libc::SYS_mknodat, [3, 0, mode, 0, 0, 0]), allow);
            }
            for nr in [
                SYS_IO_URING_SETUP,
                SYS_IO_URING_ENTER,
                SYS_IO_URING_REGISTER,
            ] {
                assert_eq!(v(nr, [0; 6]), eperm, "{profile:?} io_uring {nr}");
            }
            let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
            assert_eq!(v(SYS_OPENAT2, [0; 6]), enosys);
        }
    }

    #[test]
    fn without_network_only_local_families_stay() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        let stream = libc::SOCK_STREAM as u64;
        let socket = |profile, network, family: i32| {
            verdict(
                profile,
                network,
                libc::SYS_socket,
                [family as u64, stream, 0, 0, 0, 0],
            )
        };
        for profile in [Profile::Common, Profile::Landlock] {
            for family in [libc::AF_INET, libc::AF_INET6, libc::AF_VSOCK, libc::AF_UNIX] {
                assert_eq!(socket(profile, Network::On, family), allow, "{family}");
            }
            assert_eq!(socket(profile, Network::Off, libc::AF_UNIX), allow);
            assert_eq!(socket(profile, Network::Off, libc::AF_NETLINK), allow);
            for family in [
                libc::AF_VSOCK,
                libc::AF_BLUETOOTH,
                libc::AF_TIPC,
                libc::AF_CAN,
            ] {
                assert_eq!(socket(profile, Network::Off, family), eperm, "{family}");
            }
        }
        // bubblewrap's network namespace has only its own loopback.
        for family in [libc::AF_INET, libc::AF_INET6] {
            assert_eq!(socket(Profile::Common, Network::Off, family), allow);
            assert_eq!(socket(Profile::Landlock, Network::Off, family), eperm);
        }
    }
}
