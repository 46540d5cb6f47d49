"""The process of one call: confines itself, then runs the tool and sends back one reply.

Forked by the fork server's zygote (arium_server.py), so it starts with a clean copy of a process
that never ran tool code nor held anything of a call. Before the tool's first line runs it has: a PID
namespace of its own (it is PID 1, so when it exits every process the tool started dies with it), an
IPC namespace of its own, a read-only view of the sandbox's root and /dev, a fresh size-limited /tmp,
/dev/shm and /proc, resource limits, an unprivileged uid or no capabilities, no new privileges, a
seccomp filter (with namespaces: no socket but Unix ones) and, where the kernel has Landlock scopes,
abstract Unix sockets of its own (arium_confine.py does all of that).
The channel to the server is a socket only this call holds; nothing the tool sends on it reaches
any other call, and the server takes nothing from it but the tool's output, logs and VFS requests.
"""

import _thread
import base64
import errno
import marshal
import math
import os
import resource
import sys
import traceback

import arium_confine
import arium_proto
import arium_seccomp

MAX_SOURCE = 4 * 1024 * 1024

_compiled = {}


def load(entry, config):
    """Compiles a tool's module here, in the confined process (never in the server); cached while the file is unchanged."""
    path = os.path.join(config["tools_dir"], entry)
    # Not blocking: a FIFO put where the file was would hold the open until a writer came.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
        stat = os.fstat(handle.fileno())
        if stat.st_mode & 0o170000 != 0o100000:
            raise ValueError("%s is not a regular file" % entry)
        key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        cached = _compiled.get(entry)
        if cached and cached[0] == key:
            return cached[1]
        source = handle.read(MAX_SOURCE + 1)
    if len(source) > MAX_SOURCE:
        raise ValueError("%s is larger than the %d bytes a tool module may have" % (entry, MAX_SOURCE))
    code = compile(source, config["tools_prefix"] + entry, "exec", dont_inherit=True)
    _compiled[entry] = (key, code)
    return code


# Without namespaces, a warm process compiles ahead only tool files up to this size.
WARM_COMPILE_MAX_BYTES = 256 * 1024


def warm_up(entries, config, code):
    """While waiting for a job: make ready the code of the tools called last (their code only: nothing
    of a tool runs before its call, so a process holds nothing of any tool but the one it is given).
    With namespaces, that is the code the zygote has for them (`code`: entry -> (key, marshalled code
    or None), made by compile processes, see compile_main): a tool it has none for yet, or could not
    compile, is compiled at call time, by the call that needs it. Without namespaces (no compile
    processes) the process compiles them itself, unless a file is too large for that to be worth it
    for calls of other tools. `code` is emptied before the job is read."""
    for entry in entries:
        if config["namespaces"]:
            known = code.get(entry)
            if known is not None and known[1] is not None:
                try:
                    _compiled[entry] = (tuple(known[0]), marshal.loads(known[1]))
                except BaseException:
                    pass  # compiled at call time instead
            continue
        try:
            if os.stat(os.path.join(config["tools_dir"], entry)).st_size <= WARM_COMPILE_MAX_BYTES:
                load(entry, config)
        except BaseException:
            pass  # the call itself reports it
    code.clear()


# A compile process may use this much CPU and memory (beyond what it maps when it starts).
COMPILE_CPU_S = 2
COMPILE_MEMORY = 512 * 1024 * 1024
# Marshalled code larger than this is not kept by the zygote: each call's process compiles that tool.
MAX_CODE_BLOB = 2 * 1024 * 1024


def compile_main(config, channel_fd, entry):
    """In a compile process: forked and confined like a call's process, but given a tool to compile
    instead of a job. It sends the tool's code, marshalled, to the zygote, which hands it to the call
    processes it forks (warm_up) so that each of them does not compile the tool again. No tool code runs
    here, so what it sends is what the compiler made of the file; the zygote never unmarshals it (it only
    passes the bytes on), and the server is not involved. Never returns."""
    try:
        # Not dumpable: no process of the same uid may open its memory (the zygote trusts what it sends).
        arium_confine.check(arium_confine.libc.prctl(arium_confine.PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
        resource.setrlimit(resource.RLIMIT_CPU, (COMPILE_CPU_S, COMPILE_CPU_S))
        budget = arium_confine.mapped_bytes() + COMPILE_MEMORY
        resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
        load(entry, config)
        key, code = _compiled[entry]
        marshalled = marshal.dumps(code)
        # Base64 in the JSON under a name of its own: "blob" announces raw bytes after a vfs frame
        # (arium_proto.py), and the zygote's reader refuses it on any other frame, this one included.
        if len(marshalled) > MAX_CODE_BLOB:
            message = {"t": "code", "key": list(key), "marshalled": None}
        else:
            message = {"t": "code", "key": list(key), "marshalled": base64.b64encode(marshalled).decode("ascii")}
    except BaseException as error:
        message = {"t": "code", "error": _describe(error)}
    try:
        arium_proto.send(channel_fd, message)
    finally:
        os._exit(0)


# Write contents from this size on follow their request as raw bytes (a blob), not base64 in the JSON.
BLOB_MIN = 64 * 1024


class VfsError(Exception):
    """A ctx.vfs operation the engine refused or could not do. `code` is the engine's error code."""

    def __init__(self, code, message, details=None):
        super().__init__(message)
        self.code = code
        self.details = details or {}
        # Set by the harness on the errors it raises: the seq of the request the engine refused.
        self._arium_seq: "int | None" = None


class _Channel:
    def __init__(self, fd, limit):
        self.fd = fd
        self.reader = arium_proto.Reader(limit)
        self.lock = _thread.allocate_lock()
        self.seq = 0

    def send(self, message):
        with self.lock:
            arium_proto.send(self.fd, message)

    def request(self, op, args, blob=None):
        with self.lock:
            self.seq += 1
            seq = self.seq
            arium_proto.send(self.fd, {"t": "vfs", "seq": seq, "op": op, "args": args}, blob)
            while True:
                reply = arium_proto.read_frame(self.fd, self.reader)
                if reply is None:
                    raise VfsError("CANCELLED", "The call has ended")
                if reply.get("seq") == seq:
                    break
        if reply.get("ok") is True:
            return reply.get("value")
        error = reply.get("error") or {}
        failure = VfsError(str(error.get("code", "INTERNAL")), str(error.get("message", "ctx.vfs failed")), error.get("details"))
        # Which request failed: if the tool lets this error escape, the engine ends the call with the code
        # it recorded for that request (a tool can change .code, but not what the engine said).
        failure._arium_seq = seq
        raise failure


class Vfs:
    """ctx.vfs: each method is a request to the engine, checked there against the tool's permissions."""

    def __init__(self, channel):
        self._channel = channel

    def read(self, path, encoding="utf8"):
        if encoding not in ("utf8", "bytes", "base64"):
            raise ValueError('encoding must be "utf8", "bytes" or "base64"')
        wire = "utf8" if encoding == "utf8" else "base64"
        value = self._channel.request("read", [path, {"encoding": wire}])
        return base64.b64decode(value) if encoding == "bytes" else value

    def write(self, path, content, append=False, exclusive=False, parents=True):
        blob = None
        if isinstance(content, (bytes, bytearray, memoryview)):
            blob = bytes(content)
            data, encoding = None, "base64"
        elif isinstance(content, str):
            data, encoding = content, "utf8"
            if len(content) >= BLOB_MIN:
                try:
                    # Stored as UTF-8 either way; text with a lone surrogate (not encodable) goes as JSON.
                    blob, data = content.encode("utf-8"), None
                except UnicodeEncodeError:
                    pass
        else:
            raise TypeError("content must be str or bytes, not %s" % type(content).__name__)
        if blob is not None and len(blob) < BLOB_MIN:
            data, blob = base64.b64encode(blob).decode("ascii"), None
        options = {"encoding": encoding, "append": bool(append), "exclusive": bool(exclusive), "parents": bool(parents)}
        return self._channel.request("write", [path, data, options], blob)

    def list(self, path="/", recursive=False, limit=1000):
        return self._channel.request("list", [path, {"recursive": bool(recursive), "limit": limit}])

    def stat(self, path):
        return self._channel.request("stat", [path])

    def exists(self, path):
        return self._channel.request("exists", [path])

    def delete(self, path, recursive=False):
        return self._channel.request("delete", [path, {"recursive": bool(recursive)}])

    def mkdir(self, path, parents=False):
        return self._channel.request("mkdir", [path, {"parents": bool(parents)}])

    def move(self, source, target, overwrite=False):
        return self._channel.request("move", [source, target, {"overwrite": bool(overwrite)}])


class Context:
    """The `ctx` a tool's run(input, ctx) receives."""

    VfsError = VfsError

    def __init__(self, channel, job):
        self._channel = channel
        self.vfs = Vfs(channel)
        self.tool = job["tool"]
        self.run_id = job["run_id"]
        self.trace_id = job["trace_id"]
        self.limits = dict(job["limits"])

    def log(self, *parts, level="info"):
        if level not in ("log", "info", "warn", "error"):
            level = "info"
        self._channel.send({"t": "log", "level": level, "message": " ".join(str(p) for p in parts)})


# The standard library's ways to run a program, as audit events (PEP 578): os.exec* and os.spawn* (in
# the forked child), os.posix_spawn*, os.system, subprocess (and os.popen, asyncio's subprocesses),
# pty.spawn. And the C library's, looked up through ctypes.
EXEC_EVENTS = frozenset({"os.exec", "os.posix_spawn", "os.system", "subprocess.Popen", "pty.spawn"})
EXEC_SYMBOLS = frozenset({"execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "execveat", "fexecve", "posix_spawn", "posix_spawnp", "system", "popen"})
MAX_INTRUSIONS = 16


def _exec_attempt(event, args):
    """What a tool tried to run, for the SecurityEvent (never its environment), or None for other events."""
    if event in EXEC_EVENTS:
        shown = args[1:2] if event == "subprocess.Popen" else args[:2]
    elif event.startswith("ctypes.dlsym") and len(args) > 1 and isinstance(args[1], str) and args[1] in EXEC_SYMBOLS:
        shown = ("ctypes", args[1])
    else:
        return None
    try:
        parts = [repr(part[:16] if isinstance(part, (list, tuple)) else part)[:200] for part in shown]
    except BaseException:  # a hostile __repr__ or __getitem__ in what the tool passed
        parts = []
    return " ".join([event] + parts)[:300]


# What the audit hook needs in a call's process whose tool may not run programs (forbid_exec): the
# call's channel, the process's pid, the message, and how many attempts were reported. None elsewhere:
# in the zygote, in compile processes, and in calls whose tool may run programs.
_refusal = None
_hooked = False


def _exec_hook(event, args, _events=EXEC_EVENTS):
    """The audit hook that refuses running programs. Added once, in the zygote (install_exec_hook), so
    that each call's process inherits it ready instead of making one: a hook made per call cost each
    call's process about 13 more pages copied after the fork (its closure, and code run there for the
    first time, which the interpreter rewrites as it specializes it). Every event of
    every process forked from the zygote passes through it, so the common case (not a way to run a
    program) is the first test, and is the path warmed in the zygote."""
    if event not in _events and event[:12] != "ctypes.dlsym":
        return
    refusal = _refusal
    if refusal is None:
        return
    attempt = _exec_attempt(event, args)
    if attempt is None:
        return
    channel, call_pid, message, reported = refusal
    if reported[0] < MAX_INTRUSIONS:
        reported[0] += 1
        frame = {"t": "intrusion", "operation": attempt}
        try:
            if os.getpid() == call_pid:
                channel.send(frame)
            else:
                arium_proto.send(channel.fd, frame)  # a forked child: its copy of the lock may be held forever
        except BaseException:
            pass
    raise PermissionError(errno.EPERM, "%s: %s" % (attempt.split(" ", 1)[0], message))


# Calls that make the interpreter specialize the hook's common path in the zygote, before any fork:
# its first runs write to its code object, which each call's process would otherwise copy.
WARM_HOOK_CALLS = 64


def install_exec_hook():
    """Adds the audit hook once, inactive until forbid_exec (audit hooks cannot be removed, and a fork
    keeps them)."""
    global _hooked
    if _hooked:
        return
    sys.addaudithook(_exec_hook)
    _hooked = True
    for _ in range(WARM_HOOK_CALLS):
        sys.audit("arium.warm")


def forbid_exec(channel, tool):
    """A call whose tool may not run programs (it does not declare sys.exec): execve and execveat fail
    in this process and all it starts (a seccomp filter, which nothing can lift), and every route of the
    standard library to them raises a PermissionError that says why, after the attempt is reported to
    the engine (a SecurityEvent; the audit hook, _exec_hook). Where there is no filter for this
    architecture, the refusal is the audit hook alone (ctypes could get past it there)."""
    global _refusal
    install_exec_hook()
    _refusal = (channel, os.getpid(), "running a program needs the sys.exec permission, which %s does not declare" % tool, [0])
    if arium_confine.NO_EXEC is not None:
        arium_seccomp.install(arium_confine.libc, arium_confine.NO_EXEC)


def _json_path(key):
    """A key as json.dumps writes it, escaped for a JSON pointer."""
    text = {True: "true", False: "false", None: "null"}[key] if isinstance(key, (bool, type(None))) else str(key)
    return text.replace("~", "~0").replace("/", "~1")


MAX_OUTPUT_DEPTH = 500


def json_problem(value, path="", on_path=None, depth=0):
    """Where `value` stops being JSON, for an output json.dumps refused: (JSON pointer, reason), or None."""
    if on_path is None:
        on_path = set()
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, "%r is not a JSON number" % float(value))
    if not isinstance(value, (dict, list, tuple)):
        return (path, "a value of type %s, which JSON has not" % type(value).__name__)
    if id(value) in on_path:
        return (path, "a cycle: the value contains itself")
    if depth >= MAX_OUTPUT_DEPTH:
        return (path, "nested deeper than %d levels" % MAX_OUTPUT_DEPTH)
    on_path.add(id(value))
    try:
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(value, dict):
                if isinstance(key, float) and not math.isfinite(key):
                    return (path, "the key %r is not a JSON number" % float(key))
                if not (key is None or isinstance(key, (str, int, float, bool))):
                    return (path, "a key of type %s (JSON keys are strings)" % type(key).__name__)
            found = json_problem(item, "%s/%s" % (path, _json_path(key)), on_path, depth + 1)
            if found is not None:
                return found
    finally:
        on_path.discard(id(value))
    return None


def _clean_traceback(error, tools_prefix):
    """The tool's own frames only, with paths relative to the tools folder."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(tools_prefix)]
    for frame in frames:
        frame.filename = frame.filename[len(tools_prefix) :]
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    text = "".join(lines)
    return text[-16384:]


def _describe(error):
    try:
        text = str(error)
    except BaseException:  # a hostile __str__
        text = ""
    name = type(error).__name__
    return "%s: %s" % (name, text) if text else name


def serve(config, channel_fd, entries, code):
    """Waits for the job, runs the tool and sends one reply; never returns."""
    channel = _Channel(channel_fd, config["max_frame"])
    tools_prefix = config["tools_prefix"]
    reply: "dict[str, object] | None" = None
    assert arium_confine.STDIO is not None, "prepare_zygote() runs in the zygote before any fork"
    sys.stdin, sys.stdout, sys.stderr = arium_confine.STDIO
    sys.path[0:0] = [config["tools_dir"]]
    warm_up(entries, config, code)
    mapped = arium_confine.mapped_bytes()
    message = arium_proto.read_frame(channel_fd, channel.reader)
    if message is None or message.get("t") != "job":
        os._exit(0)
    job = message["job"]
    root = job.get("root")
    if root:
        # A worker keeps each version of a tools folder in a folder of its own: the tool's imports and
        # the file names it is shown start there, as they start at the tools folder on the engine's machine.
        tools_prefix = "%s%s/" % (tools_prefix, root)
        sys.path[0:0] = [os.path.join(config["tools_dir"], root)]
    try:
        arium_confine.limit(job, config, mapped)
        if not job.get("exec"):
            forbid_exec(channel, job["tool"])
        code = load(job["entry"], config)
        # What else this process compiled ahead tells which tools were called last: not for tool code.
        _compiled.clear()
        module = {"__name__": job["module"], "__file__": job["filename"], "__builtins__": __builtins__}
        exec(code, module)
        entry = module.get("run")
        if not callable(entry):
            raise TypeError("the tool module defines no run(input, ctx) function")
        result = entry(job["input"], Context(channel, job))
        if _awaitable(result):
            import asyncio

            result = asyncio.run(_await(result))
        try:
            text = arium_proto.TEXT.encode(result)
        except (TypeError, ValueError, RecursionError) as error:
            reply = {"t": "error", "kind": "invalid_output", "message": _describe(error)}
            try:
                found = json_problem(result)
            except BaseException:  # a hostile container the walk could not go through
                found = None
            if found is not None:
                reply["pointer"], reply["reason"] = found
        else:
            if len(text) > job["limits"]["output_bytes"]:
                reply = {"t": "error", "kind": "output_limit", "message": "%d characters of JSON" % len(text)}
            else:
                reply = {"t": "result", "output": text}
    except MemoryError:
        reply = {"t": "error", "kind": "memory", "message": "MemoryError"}
    except VfsError as error:
        reply = {"t": "error", "kind": "vfs", "code": str(error.code), "message": str(error), "traceback": _clean_traceback(error, tools_prefix)}
        seq = getattr(error, "_arium_seq", None)
        if type(seq) is int:
            reply["seq"] = seq
    except BaseException as error:  # SystemExit and KeyboardInterrupt are tool failures too
        try:
            stack = _clean_traceback(error, tools_prefix)
        except BaseException:
            stack = ""
        reply = {"t": "error", "kind": "exception", "message": _describe(error).replace(tools_prefix, ""), "traceback": stack}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    try:
        channel.send(reply)
    except BaseException:
        os._exit(3)
    os._exit(0)


def _awaitable(value):
    """inspect.isawaitable without importing inspect: a coroutine, a generator-based coroutine, or an object with __await__."""
    kind = type(value)
    if kind.__name__ == "coroutine" or hasattr(kind, "__await__"):
        return True
    code = getattr(value, "gi_code", None)
    return kind.__name__ == "generator" and code is not None and bool(code.co_flags & 0x100)


async def _await(awaitable):
    return await awaitable
