"""How the fork server's zygote forks: what the server loads before it forks (preload_asyncio), and
fork(2) without CPython's fork hooks where they have nothing to repair (bare_fork)."""

import ctypes
import os
import sys


CLONE_NEWPID = 0x20000000


def preload_asyncio(no_network):
    """asyncio, loaded once here: a call's process imports it only for an async tool, and importing it
    there would cost each such call about 35 ms. Nothing else is loaded for tools: every module the
    server holds makes each call's fork and exit slower (page tables to copy, pages to unmap). Where
    calls have no network (namespaces), asyncio is loaded without its TLS support: `ssl` maps libssl
    and libcrypto (6 MB) into every call's process for connections a call cannot make. A tool that
    imports ssl itself still gets it."""
    if not no_network:
        # Imported for its side effect (loaded into this process), never used here by name.
        import asyncio  # noqa: F401  # pyright: ignore[reportUnusedImport]

        return
    saved = sys.modules.get("ssl")
    # `import ssl` raises ImportError, which asyncio expects where there is no ssl. None in sys.modules is
    # the import system's documented way to block a module; typeshed types the values as ModuleType only.
    sys.modules["ssl"] = None  # pyright: ignore[reportArgumentType]
    try:
        import asyncio  # noqa: F401
    finally:
        if saved is None:
            del sys.modules["ssl"]
        else:
            sys.modules["ssl"] = saved


# The CPython versions whose fork hooks bare_fork_problem was checked against (the runner's tests ran
# with each), first and last.
BARE_FORK_PYTHONS = ((3, 9), (3, 13))


def bare_fork_problem():
    """Why the zygote must fork through os.fork, or None when it may call fork(2) directly.

    os.fork runs CPython's fork hooks around the system call. In the child they repair what threads
    that vanished with the fork could have left (the GIL, the import lock, other thread states) and
    run the Python at-fork handlers (threading, logging and concurrent.futures renew their locks;
    random reseeds). In a process with one thread nothing needs repair, and that work is most of what
    a call's process that does little else pays for: with threading and logging loaded, about 180
    pages written in the child (each a copy-on-write fault), and twice the CPU of a child that exits
    at once (1.0 against 0.5 ms, 400 forks of a process holding what the server holds). random, the
    one handler whose effect a tool could see, is reseeded in the child (bare_fork); what else
    differs is cosmetic (threading.main_thread().native_id keeps the zygote's thread id, while
    threading.get_native_id() asks the kernel). Limited to the CPython versions the runner's tests
    were run with; anything else forks through os.fork."""
    if sys.implementation.name != "cpython" or not (BARE_FORK_PYTHONS[0] <= sys.version_info[:2] <= BARE_FORK_PYTHONS[1]):
        return "not CPython %d.%d-%d.%d" % (BARE_FORK_PYTHONS[0] + BARE_FORK_PYTHONS[1])
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return "a free-threaded build"
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return "/proc/self/task cannot be read to count threads"
    if threads != 1:
        return "%d threads" % threads
    return None


# A PyDLL function keeps the GIL while it runs, so the child's one thread holds it, as after os.fork.
_fork = ctypes.PyDLL(None, use_errno=True).fork


def bare_fork(reseed=True):
    """fork(2) without CPython's hooks (only where bare_fork_problem finds none needed). The child
    reseeds random, the one hook whose effect a tool could see (`reseed` is for the test that shows
    why). A failure raises the OSError os.fork would."""
    pid = _fork()
    if pid < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    if pid == 0 and reseed:
        random = sys.modules.get("random")
        if random is not None:
            random.seed()  # otherwise every call's process would draw the zygote's sequence
    return pid
