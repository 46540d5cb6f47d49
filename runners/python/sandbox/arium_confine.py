"""How a call's process is confined: what the zygote readies once (prepare_zygote: the call's stdio,
its seccomp filters, its Landlock ruleset), and what each call's process applies to itself before the
tool's first line (confine: namespaces' mounts, a read-only root, capabilities dropped, no new
privileges, seccomp, Landlock) and as its job starts (limit: resource limits). arium_child.py runs the
tool in the process confined so."""

import ctypes
import errno
import io
import os
import platform
import resource
import signal

import arium_seccomp

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_RELATIME = 0x200000
MS_PRIVATE = 0x40000
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS_LOCKED and their locks
SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
# System calls made by number (Python has no wrapper for them): the numbers are the same on x86_64
# and aarch64 (asm-generic); elsewhere they are not made (KNOWN_SYSCALLS).
SYSCALL_MACHINES = ("x86_64", "aarch64")
KNOWN_SYSCALLS = platform.machine() in SYSCALL_MACHINES
# close_range(2), Linux 5.9.
SYS_CLOSE_RANGE = 436
# Landlock (include/uapi/linux/landlock.h); scopes came with ABI 6 (Linux 6.12).
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_ABI_SCOPES = 6
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 0x1
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000

libc = ctypes.CDLL(None, use_errno=True)


def check(result, what):
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, "%s: %s" % (what, os.strerror(code)))


def _mount(source, target, fstype, flags, data):
    check(
        libc.mount(
            source and source.encode(), target.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags), data and data.encode()
        ),
        "mount %s" % target,
    )


class _LandlockAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities():
    """No capability left, none to regain: securebits, then all three sets (the bounding and ambient
    sets are empty already: the zygote emptied them, see prepare_zygote)."""
    if _BOUNDING_ERROR is not None:
        raise _BOUNDING_ERROR
    check(libc.prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN, 0, 0, 0), "prctl(PR_SET_SECUREBITS)")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    check(libc.capset(ctypes.byref(header), data), "capset")


def _remount_readonly(path):
    """Makes a mount read-only in this mount namespace only, keeping the flags it has (in a user
    namespace a remount that dropped nosuid, nodev, noexec or an atime flag would be refused)."""
    flags = os.statvfs(path).f_flag
    keep = MS_REMOUNT | MS_BIND | MS_RDONLY
    for st_flag, ms_flag in (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (os.ST_RELATIME, MS_RELATIME),
    ):
        if flags & st_flag:
            keep |= ms_flag
    _mount(None, path, None, keep, None)


def prepare_zygote(config):
    """What every call's process would otherwise do the same way after its fork, done once in the zygote
    (whose copies they are): each step in a call's process touches objects the fork shares, and every
    page it writes is copied (a step of a few µs costs tens of µs in page faults there). Only state that
    holds nothing of any call, and that the zygote itself does not need, is set here."""
    global STDIO, _SECCOMP, NO_EXEC, _BOUNDING_ERROR, _LANDLOCK
    # The capability bounding set limits what an exec can gain: the zygote never execs, and its effective
    # capabilities (to make PID namespaces) stay. Emptied here, it is empty in every call's process; if
    # it cannot be, each call's process fails to confine itself with this reason.
    if os.getuid() == 0:
        try:
            for cap in range(64):
                if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
                    check(-1, "prctl(PR_CAPBSET_DROP)")
        except OSError as error:
            _BOUNDING_ERROR = error
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    # The environment a call sees (HOME and TMPDIR are set per call: its working folder).
    os.environ.clear()
    os.environ.update({"LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"})
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    # A call's stdio, over the descriptors each call's process puts at 0, 1 and 2 after its fork.
    STDIO = (
        io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"),
        io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True),
        io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True),
    )
    if config["seccomp"]:
        _SECCOMP = arium_seccomp.prepare(arium_seccomp.program(unix_sockets_only=config["namespaces"]))
        NO_EXEC = arium_seccomp.prepare(arium_seccomp.exec_program())
    if config["namespaces"] and landlock_abi() >= LANDLOCK_ABI_SCOPES:
        attr = _LandlockAttr(0, 0, LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)
        _LANDLOCK = (attr, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))


def close_from(low, high):
    """Closes descriptors low to high - 1 with one close_range(2) where the kernel has it:
    os.closerange makes that call itself only from CPython 3.10 on; before, it closes each number in
    turn (a million system calls, half a second of CPU, in every call's process)."""
    if high <= low:
        return
    if KNOWN_SYSCALLS and libc.syscall(SYS_CLOSE_RANGE, ctypes.c_uint(low), ctypes.c_uint(high - 1), ctypes.c_uint(0)) == 0:
        return
    os.closerange(low, high)


def landlock_abi():
    """The Landlock ABI version this kernel offers; 0 without Landlock."""
    if not KNOWN_SYSCALLS:
        return 0
    version = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(version, 0)


def _scope_abstract_sockets(landlock):
    """A Landlock domain of this call's own that scopes abstract Unix sockets: the call (and what it
    starts) can connect or send only to abstract sockets bound inside it, and no other call can reach
    its own. They are otherwise shared by every call running at the same time in the fork server's
    network namespace (a network namespace per call would cost about 1 ms of CPU per call)."""
    _, attr, size, no_flags = landlock
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, size, no_flags)
    if fd < 0:
        check(-1, "landlock_create_ruleset")
    try:
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        check(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, no_flags), "landlock_restrict_self")
    finally:
        os.close(fd)


def make_root_readonly():
    """In the fork server, with namespaces: the sandbox's root and /dev, shared by all its calls, become
    read-only (each call's mount namespace is a copy), or a call whose uid owns them (uid 0 of a user
    namespace, when the engine is not root) could leave files there for the next call. What a call
    may write is its own: /tmp and /dev/shm, mounted fresh in each call's process."""
    _remount_readonly("/")
    if os.path.ismount("/dev"):
        _remount_readonly("/dev")


def confine(config, uid, workdir):
    """Everything between the fork and the job that does not depend on it. Raises OSError when a step fails."""
    if config["namespaces"]:
        # A mount namespace of its own: its /tmp and /proc are seen by no other call. An IPC namespace of
        # its own: SysV shared memory, semaphores and message queues (and POSIX queues) it creates die
        # with it instead of waiting, in the server's namespace, for the next call to read them.
        check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        # The root and /dev are read-only already (make_root_readonly); /tmp and /dev/shm are this call's.
        tmp_options = "size=%dk,nr_inodes=%d,mode=1777" % (config["tmp_kb"], config["tmp_inodes"])
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp_options)
        if os.path.isdir("/dev/shm"):
            _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp_options)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        workdir = "/tmp"
    os.chdir(workdir)
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if uid is not None:
        # Real root here: an unprivileged uid of this call's own, so RLIMIT_NPROC counts only its
        # processes (the bounding set is empty already: prepare_zygote).
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif config["namespaces"]:
        _drop_capabilities()
    if config["seccomp"]:
        arium_seccomp.install(libc, _SECCOMP)
    if _LANDLOCK is not None:
        _scope_abstract_sockets(_LANDLOCK)


def mapped_bytes():
    """What the process maps now (the interpreter, its libraries, its heap)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        return int(os.read(fd, 256).split()[0]) * resource.getpagesize()
    finally:
        os.close(fd)


def limit(job, config, mapped):
    """The resource limits of this job (lowering a limit needs no privilege)."""
    limits = job["limits"]
    nproc = config["processes"] if config.get("uid_base") is not None else config.get("nproc")
    for name, value in (
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NOFILE", config["open_files"]),
        ("RLIMIT_FSIZE", config["file_bytes"]),
        ("RLIMIT_CPU", max(1, -(-limits["timeout_ms"] // 1000) + 1)),
        ("RLIMIT_NPROC", nproc),
    ):
        if value:
            resource.setrlimit(getattr(resource, name), (value, value))
    # Address space: what the process already maps (the interpreter, its libraries) plus memory_mb.
    budget = mapped + limits["memory_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (budget, budget))



# Set by prepare_zygote: a call's stdin, stdout and stderr, its seccomp filter ready to load, and its
# Landlock ruleset with the arguments to make it (None where the kernel cannot scope abstract sockets,
# or without namespaces).
STDIO = None
_SECCOMP = None
NO_EXEC = None
_BOUNDING_ERROR = None
_LANDLOCK = None
