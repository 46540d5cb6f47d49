"""A seccomp filter for a call's process, built by hand (classic BPF, no libseccomp).

It refuses what a tool never needs and what would let it leave its sandbox: new namespaces (a nested
user namespace above all), mounts, ptrace and cross-process memory access, kernel keyrings, bpf,
perf, userfaultfd, io_uring, module loading and kexec. clone3 answers ENOSYS so the C library falls
back to clone, whose flags a classic filter can inspect. Any other architecture (a 32-bit syscall
from a 64-bit process, x32) kills the process. With `unix_sockets_only` (calls in a network
namespace without network), socket() and socketpair() refuse every family but AF_UNIX
(EAFNOSUPPORT): loopback and netlink sockets would otherwise be shared by the calls that run at the
same time in one fork server's network namespace.

exec_program() is a second filter, for a call whose tool may not run programs: no execve or execveat.

Syscall numbers: Linux arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
"""

import ctypes
import errno
import platform
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
RET_K = 0x06

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian: low word first)
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16

CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

ARCHES = {
    "x86_64": {
        "audit": 0xC000003E,
        "x32_bit": 0x40000000,
        "clone": 56,
        "clone3": 435,
        "exec": (59, 322),  # execve, execveat
        "socket": 41,
        "socketpair": 53,
        "deny": {
            "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "keyctl": 250, "add_key": 248,
            "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
            "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
            "open_by_handle_at": 304, "name_to_handle_at": 303, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
            "fsmount": 432, "fspick": 433, "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169,
            "acct": 163, "quotactl": 179, "lookup_dcookie": 212, "personality": 135,
        },
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "x32_bit": None,
        "clone": 220,
        "clone3": 435,
        "exec": (221, 281),  # execve, execveat
        "socket": 198,
        "socketpair": 199,
        "deny": {
            "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "keyctl": 219, "add_key": 217,
            "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "kexec_load": 104,
            "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
            "open_by_handle_at": 265, "name_to_handle_at": 264, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
            "fsmount": 432, "fspick": 433, "mount_setattr": 442, "swapon": 224, "swapoff": 225, "reboot": 142,
            "acct": 89, "quotactl": 60, "lookup_dcookie": 18, "personality": 92,
        },
    },
}


def _stmt(code, k):
    return struct.pack("=HBBI", code, 0, 0, k)


def _jump(code, k, jt, jf):
    return struct.pack("=HBBI", code, jt, jf, k)


AF_UNIX = 1


def program(machine=None, unix_sockets_only=False):
    """The filter for this machine's architecture, or None where it has no table here."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    out = [
        _stmt(LD_W_ABS, OFFSET_ARCH),
        _jump(JEQ_K, arch["audit"], 1, 0),
        _stmt(RET_K, RET_KILL_PROCESS),
        _stmt(LD_W_ABS, OFFSET_NR),
    ]
    if arch["x32_bit"] is not None:
        out += [_jump(JGE_K, arch["x32_bit"], 0, 1), _stmt(RET_K, RET_KILL_PROCESS)]
    for number in sorted(arch["deny"].values()):
        out += [_jump(JEQ_K, number, 0, 1), _stmt(RET_K, RET_ERRNO | errno.EPERM)]
    if unix_sockets_only:
        for name in ("socket", "socketpair"):
            out += [
                _jump(JEQ_K, arch[name], 0, 4),  # not this call: on with the number still loaded
                _stmt(LD_W_ABS, OFFSET_ARG0_LOW),  # the family
                _jump(JEQ_K, AF_UNIX, 1, 0),
                _stmt(RET_K, RET_ERRNO | errno.EAFNOSUPPORT),
                _stmt(RET_K, RET_ALLOW),
            ]
    out += [
        _jump(JEQ_K, arch["clone3"], 0, 1),
        _stmt(RET_K, RET_ERRNO | errno.ENOSYS),
        _jump(JEQ_K, arch["clone"], 0, 3),
        _stmt(LD_W_ABS, OFFSET_ARG0_LOW),
        _jump(JSET_K, CLONE_NAMESPACES, 0, 1),
        _stmt(RET_K, RET_ERRNO | errno.EPERM),
        _stmt(RET_K, RET_ALLOW),
    ]
    return b"".join(out)


def exec_program(machine=None):
    """A second filter, loaded in a call's process once its job is known, when the tool may not run
    programs (it does not declare sys.exec): execve and execveat fail with EPERM. Filters only add up,
    so the process can never lift it; the first filter (program()) already refuses other architectures.
    None where this architecture has no table here."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    execve, execveat = arch["exec"]
    return b"".join(
        [
            _stmt(LD_W_ABS, OFFSET_NR),
            _jump(JEQ_K, execve, 1, 0),
            _jump(JEQ_K, execveat, 0, 1),
            _stmt(RET_K, RET_ERRNO | errno.EPERM),
            _stmt(RET_K, RET_ALLOW),
        ]
    )


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def prepare(code):
    """The filter `code` (from program()) as the kernel takes it: made once, in the process that forks
    the ones that load it. None where there is no filter for this architecture."""
    if code is None:
        return None
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _Fprog(len(code) // 8, ctypes.addressof(buffer))
    return (buffer, prog, ctypes.byref(prog))


def install(libc, prepared):
    """Loads a filter from prepare() into this process and everything it starts. Returns False where
    there is none for this architecture."""
    if prepared is None:
        return False
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prepared[2], 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True
