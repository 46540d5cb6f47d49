"""The sandbox bubblewrap would build, built by the fork server itself (the `unshare` isolation tier).

For machines that allow namespaces but have no bubblewrap. Before anything else, the server unshares
a mount, network, IPC, UTS and PID namespace (and a user namespace when it is not root, mapping itself
to uid 0 in it), goes on as PID 1 of the new PID namespace, makes every mount private, builds a new root on a tmpfs holding read-only binds of
only what the interpreter needs (the layout the engine sends: runners/python/isolation.ts), a
minimal /dev and a /proc, and pivots into it, detaching the host's tree. From then on it is the same
server as under bubblewrap: per call, a PID and mount namespace of its own (arium_child.py).
"""

import ctypes
import os
import platform
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
DEVICES = ("null", "zero", "full", "random", "urandom")

libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, "%s: %s" % (what, os.strerror(code)))


def _mount(source, target, fstype, flags, data=None):
    encode = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    _check(libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)), "mount %s" % target)


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _bind(source, target, is_dir, read_only=True):
    if is_dir:
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def enter(layout, new_root):
    """Unshares, builds the view described by `layout` under `new_root` (an empty folder) and pivots into it."""
    number = PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(0, "pivot_root: no system call number for %s" % platform.machine())
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    if uid != 0:
        flags |= CLONE_NEWUSER
    _check(libc.unshare(flags), "unshare")
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", "0 %d 1" % uid)
        _write("/proc/self/gid_map", "0 %d 1" % gid)
    # The server goes on as PID 1 of a PID namespace of its own (so it may make one per call, and
    # everything dies with it); this process only waits for it and passes its end on to the engine.
    pid = os.fork()
    if pid != 0:
        for fd in (3, 4):
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    inside = lambda path: os.path.join(new_root, path.lstrip("/"))  # noqa: E731
    for target, path in layout["symlinks"]:
        os.makedirs(os.path.dirname(inside(path)), 0o755, exist_ok=True)
        os.symlink(target, inside(path))
    for path in layout["dirs"]:
        os.makedirs(inside(path), 0o755, exist_ok=True)
        os.chmod(inside(path), 0o755)
    for path in layout["files"]:
        _bind(path, inside(path), False)
    for source, path in layout["binds"]:
        _bind(source, inside(path), True)
    for name in DEVICES:
        _bind("/dev/" + name, inside("/dev/" + name), False, read_only=False)  # as bubblewrap's --dev
    os.makedirs(inside("/tmp"), 0o1777, exist_ok=True)
    # A /proc of the server's own PID namespace: mounted while the host's is still visible (the kernel
    # lets a user namespace mount one only then); each call mounts its own over it.
    os.makedirs(inside("/proc"), 0o555, exist_ok=True)
    _mount("proc", inside("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(new_root)
    _check(libc.syscall(number, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")
