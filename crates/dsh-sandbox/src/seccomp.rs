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
//!   `kexec_load`, `kexec_file_load`, `bpf`, `perf_event_open`, `keyctl`, `add_key`,
//!   `request_key`, `open_by_handle_at`;
//! * terminals: `ioctl` with `TIOCSTI` or `TIOCLINUX`;
//! * raw network access: `socket(AF_PACKET, ..)` and `socket(domain, SOCK_RAW, ..)` for every
//!   domain but `AF_NETLINK` (netlink sockets are always `SOCK_RAW`; the C library uses them to
//!   list interfaces, and they cannot craft packets).
//!
//! `clone3` fails with `ENOSYS`: its flags live in memory a filter cannot read, and `ENOSYS`
//! makes the C library fall back to `clone`, whose flags the filter checks. On x86-64 every x32
//! system call (number with bit 30 set) fails with `ENOSYS` too, so the numbers above cannot be
//! dodged through the x32 table; a system call of another architecture (32-bit `int 0x80`)
//! kills the process, as the filter cannot vouch for its numbers.

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
    /// and every `setxattr`/`removexattr` call, and `chmod` calls that would set the set-user-ID
    /// or set-group-ID bit, fail with `EPERM`.
    Landlock,
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
}

impl Program {
    /// The filter for `profile`, compiled once per process.
    pub(crate) fn get(profile: Profile) -> Result<&'static Program, String> {
        static COMMON: OnceLock<Result<Program, String>> = OnceLock::new();
        static LANDLOCK: OnceLock<Result<Program, String>> = OnceLock::new();
        let cell = match profile {
            Profile::Common => &COMMON,
            Profile::Landlock => &LANDLOCK,
        };
        cell.get_or_init(|| compile(profile))
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
        libc::SYS_kexec_load,
        SYS_KEXEC_FILE_LOAD,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_open_by_handle_at,
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

fn compile(profile: Profile) -> Result<Program, String> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::{Eq, MaskedEq, Ne};

    let (arch, audit_arch) = target_arch()?;
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = Default::default();
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
    rules.insert(
        libc::SYS_socket,
        vec![
            rule(vec![arg(0, Dword, Eq, libc::AF_PACKET as u64)?])?,
            rule(vec![
                arg(0, Dword, Ne, libc::AF_NETLINK as u64)?,
                arg(1, Dword, MaskedEq(SOCK_TYPE_MASK), libc::SOCK_RAW as u64)?,
            ])?,
        ],
    );
    if profile == Profile::Landlock {
        let special = [libc::S_ISUID as u64, libc::S_ISGID as u64];
        let mode_rules = |index: u8| {
            special
                .iter()
                .map(|&bit| rule(vec![arg(index, Dword, MaskedEq(bit), bit)?]))
                .collect::<Result<Vec<_>, _>>()
        };
        #[cfg(target_arch = "x86_64")]
        rules.insert(libc::SYS_chmod, mode_rules(1)?);
        rules.insert(libc::SYS_fchmod, mode_rules(1)?);
        rules.insert(libc::SYS_fchmodat, mode_rules(2)?);
        rules.insert(SYS_FCHMODAT2, mode_rules(2)?);
    }
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
    let mut instructions = prefix(audit_arch);
    instructions.extend(main.into_iter().map(|i| libc::sock_filter {
        code: i.code,
        jt: i.jt,
        jf: i.jf,
        k: i.k,
    }));
    if instructions.len() > usize::from(u16::MAX) {
        return Err("the seccomp filter is too long".to_string());
    }
    Ok(Program { instructions })
}

/// The hand-written head of the filter: for the native architecture, `clone3` and (on x86-64)
/// x32 system calls return `ENOSYS`; everything else falls through to the compiled rules
/// (whose own architecture check kills foreign-architecture calls).
fn prefix(audit_arch: u32) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const ARCH_OFFSET: u32 = 4;
    const NR_OFFSET: u32 = 0;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let x32_bit: u32 = if cfg!(target_arch = "x86_64") {
        0x4000_0000
    } else {
        // No x32 table elsewhere: compare against a number no system call has.
        u32::MAX
    };
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    vec![
        // 0: arch
        ins(LD_W_ABS, 0, 0, ARCH_OFFSET),
        // 1: foreign architecture -> skip to the compiled rules (instruction 6)
        ins(JEQ_K, 0, 4, audit_arch),
        // 2: number
        ins(LD_W_ABS, 0, 0, NR_OFFSET),
        // 3: x32 -> ENOSYS (5)
        ins(JGE_K, 1, 0, x32_bit),
        // 4: clone3 -> ENOSYS (5), else the compiled rules (6)
        ins(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        // 5:
        ins(RET_K, 0, 0, enosys),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn both_profiles_compile_and_landlock_has_more_rules() {
        let common = Program::get(Profile::Common).unwrap();
        let landlock = Program::get(Profile::Landlock).unwrap();
        assert!(common.len() > 30, "{}", common.len());
        assert!(landlock.len() > common.len());
        assert_eq!(common.bytes().len(), common.len() * 8);
    }

    #[test]
    fn the_filter_file_holds_the_program() {
        let program = Program::get(Profile::Common).unwrap();
        let fd = program.memfd().unwrap();
        let mut file = std::fs::File::from(fd);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        assert_eq!(bytes, program.bytes());
    }
}
