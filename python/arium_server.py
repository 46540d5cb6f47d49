"""The Python fork server: started once (inside bubblewrap where the host has it), it forks a fresh,
confined process per call and never runs or compiles tool code itself.

    python -I -B arium_server.py '<config JSON>'

fd 3 carries frames from the engine, fd 4 frames to it (arium_proto). The server keeps a few call
processes forked ahead of time (arium_child.py): each one, with namespaces, is PID 1 of a PID
namespace of its own and has a mount namespace of its own, has confined itself (fresh /tmp and
/proc, an unprivileged uid or no capabilities, seccomp) and waits for one job on a socket only it
holds. A job sets its resource limits and runs the tool; the socket then carries its reply, its logs
and its VFS requests, which the server relays to the engine; stdout and stderr are pipes.

When a call ends (a reply, a kill from the engine, the server's own deadline, or the process dying)
the server kills the call's process (PID 1: every process the tool started dies with the namespace)
and answers the engine only after it has reaped it, so nothing of the call is left running.
"""

import gc
import os
import selectors
import shutil
import signal
import socket
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import arium_child  # noqa: E402
import arium_proto  # noqa: E402


CLONE_NEWPID = 0x20000000
HOST_IN = 3
HOST_OUT = 4
MAX_HOST_FRAME = 1024 * 1024 * 1024
VFS_OPS = {"read", "write", "list", "stat", "exists", "delete", "mkdir", "move"}
LOG_LEVELS = {"log", "info", "warn", "error"}
# After the engine's deadline has passed, how long the server waits before killing the call itself.
DEADLINE_GRACE_S = 1.0
# Above any descriptor the server holds (os.closerange uses close_range(2) where the kernel has it).
MAX_FD = 1 << 20
# Tools a warm process compiles while it waits for its job: the ones called last. Every compile is paid
# again in every call's process, so compiling each tool the engine knows made a folder with one large
# tool (2 ms to compile) cost that much CPU per call of any tool.
WARM_COMPILED = 2


def preload_asyncio(no_network):
    """asyncio, loaded once here: a call's process imports it only for an async tool, and importing it
    there would cost each such call about 35 ms. Nothing else is loaded for tools: every module the
    server holds makes each call's fork and exit slower (page tables to copy, pages to unmap). Where
    calls have no network (namespaces), asyncio is loaded without its TLS support: `ssl` maps libssl
    and libcrypto (6 MB) into every call's process for connections a call cannot make. A tool that
    imports ssl itself still gets it."""
    if not no_network:
        import asyncio  # noqa: F401

        return
    saved = sys.modules.get("ssl")
    sys.modules["ssl"] = None  # `import ssl` raises ImportError, which asyncio expects where there is no ssl
    try:
        import asyncio  # noqa: F401
    finally:
        if saved is None:
            del sys.modules["ssl"]
        else:
            sys.modules["ssl"] = saved


class Proc:
    """A call's process: forked ahead of time, then given one job."""

    def __init__(self, pid, sock, out_r, err_r, uid_slot, uid, workdir):
        self.pid = pid
        self.sock = sock
        self.pipes = {out_r: "stdout", err_r: "stderr"}
        self.uid_slot = uid_slot
        self.uid = uid
        self.workdir = workdir
        self.pidfd = None
        self.status = None
        self.call = None


class Call:
    def __init__(self, job, proc):
        self.job = job
        self.id = job["id"]
        self.proc = proc
        self.reader = None
        self.reply = None
        self.failure = None
        self.killed_by = None
        self.logs = []
        self.log_bytes = 0
        self.dropped = 0
        self.partial = {}
        self.deadline = time.monotonic() + job["limits"]["timeout_ms"] / 1000 + DEADLINE_GRACE_S
        self.started = time.monotonic()


class Server:
    def __init__(self, config):
        if config.get("unshare"):
            import arium_unshare

            arium_unshare.enter(config["unshare"]["layout"], config["unshare"]["root"])
        preload_asyncio(config["namespaces"])
        self.config = config
        self.selector = selectors.DefaultSelector()
        self.calls = {}
        self.recent = {}
        self.warm = []
        self.procs = {}
        self.host_reader = arium_proto.Reader(MAX_HOST_FRAME)
        self.uid_note = None
        if config.get("uid_base") is not None:
            blocked = [p for p in (config["stdlib"], config["tools_dir"]) if not self.world_readable(p)]
            if blocked:
                # An unprivileged uid could not import the standard library or the tool's own modules.
                self.uid_note = "calls keep uid 0: %s is not readable by other users" % blocked[0]
                config["uid_base"] = None
        self.free_slots = list(range(config["uid_slots"] - 1, -1, -1)) if config.get("uid_base") is not None else []
        self.pidns = os.open("/proc/self/ns/pid", os.O_RDONLY) if config["namespaces"] else None
        self.running = True
        os.set_blocking(HOST_IN, False)
        self.selector.register(HOST_IN, selectors.EVENT_READ, ("host", None))

    @staticmethod
    def world_readable(path):
        """True when a uid with no claim on it can reach `path` (every folder above it searchable by others)."""
        path = os.path.abspath(path)
        while True:
            try:
                mode = os.stat(path).st_mode
            except OSError:
                return False
            if not mode & 0o001:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent

    # --- the engine's side ---------------------------------------------------------------------

    def to_host(self, message):
        arium_proto.send(HOST_OUT, message)

    def on_host(self):
        try:
            data = os.read(HOST_IN, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self.running = False
            return
        for message in self.host_reader.feed(data):
            kind = message.get("t")
            if kind == "call":
                self.start(message)
            elif kind == "vfs-reply":
                call = self.calls.get(message.get("id"))
                if call and call.proc.sock is not None:
                    try:
                        arium_proto.send(call.proc.sock, {k: message[k] for k in ("seq", "ok", "value", "error") if k in message})
                    except OSError:
                        pass
            elif kind == "kill":
                call = self.calls.get(message.get("id"))
                if call:
                    self.kill(call, "engine")
            elif kind == "forget":
                self.recent.pop(message.get("entry"), None)
            elif kind == "shutdown":
                self.running = False

    def remember(self, entry):
        """A tool was called: warm processes forked from now on compile it ahead (with the one called before)."""
        if isinstance(entry, str):
            self.recent.pop(entry, None)
            self.recent[entry] = True
            while len(self.recent) > WARM_COMPILED:
                self.recent.pop(next(iter(self.recent)))

    # --- call processes, forked ahead of time ----------------------------------------------------

    def fill(self):
        """Keeps `warm` call processes waiting for a job (fewer while uids run short)."""
        while len(self.warm) < self.config["warm"]:
            if self.config.get("uid_base") is not None and not self.free_slots:
                return
            try:
                self.warm.append(self.fork())
            except OSError as error:
                self.warm_error = arium_child._describe(error)
                return

    def fork(self):
        uid_slot = uid = None
        if self.config.get("uid_base") is not None:
            uid_slot = self.free_slots.pop()
            uid = self.config["uid_base"] + uid_slot
        workdir = None
        if not self.config["namespaces"]:
            workdir = os.path.join(self.config["work_root"], "p-%d-%d" % (os.getpid(), time.monotonic_ns()))
            os.mkdir(workdir, 0o700)
            if uid is not None:
                os.chown(workdir, uid, uid)
        parent_sock, child_sock = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if self.config["namespaces"]:
            # The next child is PID 1 of a new namespace; then back to ours for the one after.
            if arium_child.libc.unshare(CLONE_NEWPID) != 0:
                raise OSError(arium_child.ctypes.get_errno(), "unshare(CLONE_NEWPID)")
        try:
            pid = os.fork()
        except BaseException:
            if self.config["namespaces"]:
                arium_child.libc.setns(self.pidns, CLONE_NEWPID)
            raise
        if pid != 0 and self.config["namespaces"] and arium_child.libc.setns(self.pidns, CLONE_NEWPID) != 0:
            # Without this the next call's unshare would fail: say why now.
            raise OSError(arium_child.ctypes.get_errno(), "setns back to the server's PID namespace")
        if pid == 0:
            self.child_main(child_sock.fileno(), out_w, err_w, uid, workdir)
        os.close(out_w)
        os.close(err_w)
        child_sock.close()
        proc = Proc(pid, parent_sock.detach(), out_r, err_r, uid_slot, uid, workdir)
        self.procs[pid] = proc
        try:
            proc.pidfd = os.pidfd_open(pid)
            self.selector.register(proc.pidfd, selectors.EVENT_READ, ("exit", proc))
        except (AttributeError, OSError):
            proc.pidfd = None
        for fd in (proc.sock, out_r, err_r):
            os.set_blocking(fd, False)
        return proc

    def child_main(self, child_fd, out_w, err_w, uid, workdir):
        """In the call's process: confine, wait for the job, run it. Never returns."""
        try:
            arium_child.libc.prctl(arium_child.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # Every descriptor but its own three: others' sockets and pipes, the engine's channel.
            low = 3
            for fd in sorted({child_fd, out_w, err_w}):
                os.closerange(low, fd)
                low = fd + 1
            os.closerange(low, MAX_FD)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (null, out_w, err_w):
                if fd > 2:
                    os.close(fd)
            if not self.config["namespaces"]:
                os.setsid()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            arium_child.confine(self.config, uid, workdir)
        except BaseException as error:
            try:
                arium_proto.send(child_fd, {"t": "error", "kind": "sandbox", "message": arium_child._describe(error)})
            except BaseException:
                pass
            os._exit(2)
        arium_child.serve(self.config, child_fd, list(self.recent))

    # --- one call ------------------------------------------------------------------------------

    def start(self, job):
        job["filename"] = self.config["tools_prefix"] + str(job.get("entry"))
        self.remember(job.get("entry"))
        if not self.warm:
            self.fill()
        if not self.warm:
            why = getattr(self, "warm_error", None) or "every sandbox uid is in use"
            self.to_host({"t": "done", "id": job["id"], "logs": [], "dropped": 0, "failure": {"code": "BUSY", "message": "no call process could be started (%s); retry" % why}})
            return
        proc = self.warm.pop(0)
        call = Call(job, proc)
        proc.call = call
        self.calls[call.id] = call
        call.reader = arium_proto.Reader(self.config["max_frame"])
        self.selector.register(proc.sock, selectors.EVENT_READ, ("sock", call))
        for fd in proc.pipes:
            self.selector.register(fd, selectors.EVENT_READ, ("pipe", call))
        try:
            arium_proto.send(proc.sock, {"t": "job", "job": job})
        except OSError:
            pass  # the process is gone: its exit ends the call
        if proc.status is not None:
            self.maybe_finish(call)

    def on_sock(self, call):
        if self.read_sock(call, final=False):
            self.maybe_finish(call)

    def read_sock(self, call, final):
        """Reads what the call's process sent: once (`final` False: the socket is readable) or until end
        of file (it has exited). True when the socket is closed."""
        proc = call.proc
        while proc.sock is not None:
            try:
                data = os.read(proc.sock, 1 << 20)
            except BlockingIOError:
                if not final:
                    return False
                data = b""
            except OSError:
                data = b""
            if not data:
                if call.reader.partial and call.reply is None:
                    call.failure = call.failure or {"code": "TOOL_ERROR", "message": "the tool's process ended in the middle of its reply"}
                self.drop(proc.sock)
                proc.sock = None
                return True
            try:
                frames = call.reader.feed(data)
            except arium_proto.FrameError as error:
                code = "OUTPUT_LIMIT" if "allowed" in str(error) else "TOOL_ERROR"
                call.failure = call.failure or {"code": code, "message": "the tool's process sent %s" % error}
                self.kill(call, "protocol")
                frames = []
            for frame in frames:
                self.from_child(call, frame)
            if not final:
                return False
        return True

    def from_child(self, call, frame):
        kind = frame.get("t")
        if call.reply is not None or call.failure is not None:
            return
        if kind == "log":
            level = frame.get("level")
            message = frame.get("message")
            self.add_log(call, level if level in LOG_LEVELS else "info", message if isinstance(message, str) else repr(message))
        elif kind == "vfs":
            op, seq, args = frame.get("op"), frame.get("seq"), frame.get("args")
            if op not in VFS_OPS or not isinstance(seq, int) or not isinstance(args, list):
                try:
                    bad = {"seq": seq if isinstance(seq, int) else -1, "ok": False, "error": {"code": "INVALID_INPUT", "message": "unknown VFS request"}}
                    arium_proto.send(call.proc.sock, bad)
                except OSError:
                    pass
                return
            self.to_host({"t": "vfs", "id": call.id, "seq": seq, "op": op, "args": args})
        elif kind in ("result", "error"):
            call.reply = frame
            self.kill(call, None)
            if self.config["namespaces"] and self.alone(call.proc):
                # Killed, and it has no child (in its namespace every orphan is its child): nothing of the
                # call can act any more, so the engine gets the reply without waiting for the kernel to
                # tear the namespace down. What the tool printed before replying is in the pipes already.
                for fd in list(call.proc.pipes):
                    self.drain(fd, call, final=False)
                self.finish(call)

    def add_log(self, call, level, text):
        budget = call.job["log_bytes"] - call.log_bytes
        if budget <= 0:
            call.dropped += 1
            return
        size = len(text.encode("utf-8", "replace"))
        if size > budget:
            text = text.encode("utf-8", "replace")[:budget].decode("utf-8", "ignore") + "…"
            call.dropped += 1
        call.log_bytes += min(size, budget)
        call.logs.append({"level": level, "message": text})

    def on_pipe(self, fd, call):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.pipe_closed(fd, call)
            return self.maybe_finish(call)
        self.pipe_data(fd, call, data)

    def pipe_data(self, fd, call, data):
        if call.log_bytes >= call.job["log_bytes"]:
            call.dropped += data.count(b"\n")
            return
        stream = call.proc.pipes[fd]
        text = call.partial.pop(fd, b"") + data
        *lines, rest = text.split(b"\n")
        for line in lines:
            self.add_log(call, stream, line.decode("utf-8", "backslashreplace"))
        if len(rest) > 8192:
            self.add_log(call, stream, rest.decode("utf-8", "backslashreplace"))
        elif rest:
            call.partial[fd] = rest

    def pipe_closed(self, fd, call):
        rest = call.partial.pop(fd, b"")
        if rest:
            self.add_log(call, call.proc.pipes[fd], rest.decode("utf-8", "backslashreplace"))
        self.drop(fd)
        del call.proc.pipes[fd]

    def on_exit(self, proc):
        """The call's process is gone (and with it, with namespaces, every process it started)."""
        self.drop(proc.pidfd)
        proc.pidfd = None
        self.reap(proc)

    def reap(self, proc):
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = proc.pid, 0
        if pid == 0:
            return False
        proc.status = status
        self.procs.pop(proc.pid, None)
        if not self.config["namespaces"]:
            self.sweep(proc)
        if proc.call is None:
            # A warm process died before its job (its confinement failed): keep the reason for status.
            if proc in self.warm:
                self.warm.remove(proc)
            self.release(proc)
            return True
        call = proc.call
        if call.id not in self.calls:
            self.release(proc)  # answered early (see from_child): only the clean-up was left
            return True
        # Nothing of the call runs any more: read what it left in its pipes and socket, then stop.
        for fd in list(proc.pipes):
            self.drain(fd, call)
        if proc.sock is not None:
            self.read_sock(call, final=True)
        self.maybe_finish(call)
        return True

    def drain(self, fd, call, final=True):
        while fd in call.proc.pipes:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, OSError):
                if not final:
                    return
                data = b""  # a process outside the namespace (rlimits only) still holds it: stop waiting
            if not data:
                self.pipe_closed(fd, call)
                return
            self.pipe_data(fd, call, data)

    def drop(self, fd):
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def close_channels(self, proc):
        for fd in list(proc.pipes):
            self.drop(fd)
        proc.pipes.clear()
        if proc.sock is not None:
            self.drop(proc.sock)
            proc.sock = None

    def release(self, proc):
        """Everything of a process that is gone: its descriptors, and its uid for the next one."""
        self.close_channels(proc)
        if proc.uid_slot is not None:
            self.free_slots.append(proc.uid_slot)
            proc.uid_slot = None

    @staticmethod
    def alone(proc):
        """True when the call's process has no child process left (read after it was killed: it cannot fork)."""
        try:
            for tid in os.listdir("/proc/%d/task" % proc.pid):
                with open("/proc/%d/task/%s/children" % (proc.pid, tid)) as handle:
                    if handle.read().strip():
                        return False
        except OSError:
            return False
        return True

    def kill(self, call, why):
        if call.killed_by is None:
            call.killed_by = why or "done"
        proc = call.proc
        if proc.status is not None:
            return
        try:
            if self.config["namespaces"]:
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def sweep(self, proc):
        """Without a PID namespace: kill whatever still runs as the call's uid (setsid daemons too), and
        wait (briefly) until the call's process group is gone, so the engine answers after it."""
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.001)
        if proc.uid is not None:
            killer = os.fork()
            if killer == 0:
                try:
                    os.setresuid(proc.uid, proc.uid, proc.uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(killer, 0)
        if proc.workdir:
            shutil.rmtree(proc.workdir, ignore_errors=True)

    def maybe_finish(self, call):
        proc = call.proc
        if proc.status is not None and proc.sock is None and not proc.pipes and call.id in self.calls:
            self.finish(call)

    def finish(self, call):
        self.calls.pop(call.id, None)
        proc = call.proc
        if proc.status is not None:
            self.release(proc)
        else:
            self.close_channels(proc)  # answered before it was reaped: its uid is freed at the reap
        message = {"t": "done", "id": call.id, "logs": call.logs, "dropped": call.dropped, "ms": round((time.monotonic() - call.started) * 1000, 3)}
        status = proc.status
        if status is None:
            pass
        elif os.WIFSIGNALED(status):
            message["signal"] = os.WTERMSIG(status)
        elif os.WIFEXITED(status):
            message["exit"] = os.WEXITSTATUS(status)
        if call.killed_by in ("engine", "deadline"):
            message["killed"] = call.killed_by
        if call.failure is not None:
            message["failure"] = call.failure
        elif call.reply is not None:
            message["reply"] = call.reply
        self.to_host(message)

    def tick(self):
        now = time.monotonic()
        for call in list(self.calls.values()):
            if call.killed_by is None and now > call.deadline:
                self.kill(call, "deadline")
        # Without pidfds, exits are found by asking.
        for proc in list(self.procs.values()):
            if proc.pidfd is None:
                self.reap(proc)

    def serve(self):
        # What the server holds now is shared by every call process: frozen, a collection there never
        # writes to it, so those pages stay shared instead of being copied in each call.
        gc.freeze()
        self.fill()
        ready = {"t": "ready", "python": "%d.%d.%d" % sys.version_info[:3], "pid": os.getpid(), "uid": os.getuid()}
        if self.uid_note:
            ready["uid_note"] = self.uid_note
        self.to_host(ready)
        while self.running:
            polling = any(p.pidfd is None for p in self.procs.values())
            timeout = 0.01 if polling else (0.25 if self.calls else None)
            for key, _ in self.selector.select(timeout=timeout):
                kind, target = key.data
                if kind == "host":
                    self.on_host()
                    continue
                # An event of this batch may be stale: handling an earlier one can have ended the call
                # and closed (or even reused) the descriptor.
                try:
                    if kind == "sock" and target.proc.sock == key.fd:
                        self.on_sock(target)
                    elif kind == "pipe" and key.fd in target.proc.pipes:
                        self.on_pipe(key.fd, target)
                    elif kind == "exit" and target.pidfd == key.fd:
                        self.on_exit(target)
                except Exception:
                    # A fault of the server's own must not take the other calls down with it.
                    traceback.print_exc()
                    call = target if isinstance(target, Call) else target.call
                    if call is not None and call.id in self.calls:
                        call.failure = call.failure or {"code": "UNAVAILABLE", "message": "the Python sandbox failed while handling the call"}
                        self.kill(call, "protocol")
                        self.maybe_finish(call)
            if self.calls or polling:
                self.tick()
            # Forking costs the server about half a millisecond: not while a call waits on it for its reply.
            if not any(c.reply is None for c in self.calls.values()):
                self.fill()
        for proc in list(self.procs.values()):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass


def main():
    import json

    config = json.loads(sys.argv[1])
    # The engine ends the server by closing fd 3; signals from a terminal do not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    Server(config).serve()


if __name__ == "__main__":
    main()
