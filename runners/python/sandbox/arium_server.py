# Over 500 lines: one Server, an event loop whose handlers share its tables of calls and processes.
"""The Python fork server: started once (inside bubblewrap where the host has it), it forks a fresh,
confined process per call and never runs or compiles tool code itself.

    python -I -B arium_server.py '<config JSON>'

fd 3 carries frames from the engine, fd 4 frames to it (arium_proto). The server keeps a few call
processes forked ahead of time (arium_child.py): each one, with namespaces, is PID 1 of a PID
namespace of its own and has a mount namespace of its own, has confined itself (fresh /tmp and
/proc, an unprivileged uid or no capabilities, seccomp) and waits for one job on a socket only it
holds. A job sets its resource limits and runs the tool; the socket then carries its reply, its logs
and its VFS requests, which the server relays to the engine; stdout and stderr are pipes.

The call processes are not forked by the server itself but by its zygote (arium_zygote.py): a process the server forks
once, before it reads anything from the engine, and gives nothing afterwards but orders to fork. A
call's process is a copy of the zygote, so it holds nothing of any other call — no job, no input, no
VFS data relayed for another call, not even freed memory that once held them — whereas a copy of the
server would hold everything the server was relaying at that moment (a tool could walk its frames to
the server's calls, or read its own memory). The zygote reports each exit of its children.

Neither the server nor the zygote compiles tool code. With namespaces the zygote forks, once per
version of a tool's file, a compile process confined like a call's process, which sends back the
tool's compiled code (marshalled); the zygote hands those bytes to the call processes it forks, so
that each of them does not compile the tool again (see Zygote.refresh_code).

When a call ends (a reply, a kill from the engine, the server's own deadline, or the process dying)
the server kills the call's process (PID 1: every process the tool started dies with the namespace)
and answers the engine only after it has reaped it, so nothing of the call is left running.
"""

import collections
import gc
import importlib
import json
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
import arium_confine  # noqa: E402
import arium_proto  # noqa: E402
from arium_fork import preload_asyncio  # noqa: E402
from arium_zygote import Zygote  # noqa: E402


HOST_IN = arium_proto.HOST_IN
HOST_OUT = arium_proto.HOST_OUT
MAX_HOST_FRAME = 1024 * 1024 * 1024
VFS_OPS = {"read", "write", "list", "stat", "exists", "delete", "mkdir", "move"}
LOG_LEVELS = {"log", "info", "warn", "error"}
# Refused attempts a call's process may report (each one a SecurityEvent), and the length of each.
MAX_INTRUSIONS = 16
MAX_INTRUSION_CHARS = 300
# After the engine's deadline has passed, how long the server waits before killing the call itself.
DEADLINE_GRACE_S = 1.0
# Above any descriptor the server holds (arium_confine.close_from closes up to it in one system call).
MAX_FD = 1 << 20
# After the zygote could not fork, how long before it is asked again (a fork that fails, for lack of
# memory or processes, would otherwise be retried in a loop).
FORK_RETRY_S = 0.1
# Tools whose code a warm process makes ready while it waits for its job: the ones called last. Any
# more, and every call's process would pay for tools it is not given (without namespaces it compiles
# them itself: a folder with one large tool, 2 ms to compile, cost that much CPU per call of any tool).
WARM_COMPILED = 2


class Proc:
    """A call's process: forked ahead of time, then given one job."""

    def __init__(self, pid, sock, out_r, err_r, uid_slot, uid, workdir):
        self.pid = pid
        self.sock = sock
        self.pipes = {out_r: "stdout", err_r: "stderr"}
        self.uid_slot = uid_slot
        self.uid = uid
        self.workdir = workdir
        self.pidfd: "int | None" = None
        self.status: "int | None" = None
        self.call: "Call | None" = None


class Call:
    def __init__(self, job, proc):
        self.job = job
        self.id = job["id"]
        self.proc = proc
        self.reader: "arium_proto.Reader | None" = None
        self.reply: "dict[str, object] | None" = None
        self.failure: "dict[str, str] | None" = None
        self.killed_by: "str | None" = None
        self.logs = []
        # What the tool tried and was refused (running a program without sys.exec), as its process said.
        self.intrusions = []
        self.log_bytes = 0
        self.dropped = 0
        self.partial = {}
        self.deadline = time.monotonic() + job["limits"]["timeout_ms"] / 1000 + DEADLINE_GRACE_S
        self.started = time.monotonic()
        # Frames on their way to the call's process (its socket does not block: a frame larger than the
        # socket's buffer goes out as the process reads), and whether the server waits to write more.
        self.outbox = collections.deque()
        self.writing = False


def relocate(host, path):
    """A pinned environment, started from its host folder and now shown at `path` (the unshare tier
    pivots after the interpreter has set itself up): its import path, prefix and executable moved there."""

    def moved(value):
        return path + value[len(host):] if value == host or value.startswith(host + "/") else value

    sys.path[:] = [moved(p) for p in sys.path]
    sys.prefix, sys.exec_prefix, sys.executable = moved(sys.prefix), moved(sys.exec_prefix), moved(sys.executable)
    importlib.invalidate_caches()
    sys.path_importer_cache.clear()


class Server:
    def __init__(self, config):
        if config.get("unshare"):
            import arium_unshare

            arium_unshare.enter(config["unshare"]["layout"], config["unshare"]["root"])
            venv = config.get("venv")
            if venv:
                relocate(venv["host"], venv["path"])
        if config["namespaces"]:
            arium_confine.make_root_readonly()
        preload_asyncio(config["namespaces"])
        self.config = config
        # The protocol's schema for the frames with call processes, when the engine checks the protocol (tests).
        self.protocol = config.get("protocol")
        self.selector = selectors.DefaultSelector()
        self.calls = {}
        self.recent = {}
        self.warm = []
        # Fork orders the zygote has not answered yet: seq -> (uid_slot, uid, workdir).
        self.ordered = {}
        self.order_seq = 0
        # Jobs waiting for a call process (the zygote is forking one).
        self.queue = []
        self.zygote = None
        self.warm_error = None
        self.fork_failed_at = None
        self.procs = {}
        self.host_reader = arium_proto.Reader(MAX_HOST_FRAME)
        self.uid_note = None
        if config.get("uid_base") is not None:
            venv = config.get("venv")
            needed = (config["stdlib"], config["tools_dir"]) + ((venv["path"],) if venv else ())
            blocked = [p for p in needed if not self.world_readable(p)]
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

    def to_host(self, message, blob=None):
        arium_proto.send(HOST_OUT, message, blob)

    def on_host(self):
        try:
            data = os.read(HOST_IN, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self.running = False
            return
        for message in self.host_reader.feed(data):
            try:
                self.from_host(message)
            except Exception as error:
                # A fault of the server's own with one message must not stop the server and the calls it runs.
                traceback.print_exc()
                if message.get("t") != "call":
                    continue
                why = "the Python sandbox failed to start the call (%s)" % arium_child._describe(error)
                call = self.calls.get(message.get("id"))
                if call is not None:
                    call.failure = call.failure or {"code": "UNAVAILABLE", "message": why}
                    self.kill(call, "protocol")
                    self.maybe_finish(call)
                else:
                    self.queue = [job for job in self.queue if job is not message]
                    self.answer_unstarted(message.get("id"), "UNAVAILABLE", why)

    def from_host(self, message):
        kind = message.get("t")
        if kind == "call":
            self.start(message)
        elif kind == "vfs-reply":
            call = self.calls.get(message.get("id"))
            if call and call.proc.sock is not None:
                self.send_call(call, {k: message[k] for k in ("seq", "ok", "value", "error") if k in message})
        elif kind == "kill":
            call = self.calls.get(message.get("id"))
            if call:
                self.kill(call, "engine")
            else:
                self.unqueue(message.get("id"))
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
        """Keeps `warm` call processes waiting for a job, plus one per queued job (fewer while uids run short)."""
        if self.fork_failed_at is not None:
            if time.monotonic() - self.fork_failed_at < FORK_RETRY_S:
                return
            self.fork_failed_at = None
        while self.zygote is not None and len(self.warm) + len(self.ordered) < self.config["warm"] + len(self.queue):
            if self.config.get("uid_base") is not None and not self.free_slots:
                return
            self.order_fork()
            if self.fork_failed_at is not None:
                return

    def order_fork(self):
        """Asks the zygote for one more call process; it arrives in on_zygote."""
        uid_slot = uid = None
        if self.config.get("uid_base") is not None:
            uid_slot = self.free_slots.pop()
            uid = self.config["uid_base"] + uid_slot
        workdir = None
        if not self.config["namespaces"]:
            workdir = os.path.join(self.config["work_root"], "p-%d-%d" % (os.getpid(), time.monotonic_ns()))
        self.order_seq += 1
        seq = self.order_seq
        self.ordered[seq] = (uid_slot, uid, workdir)
        if workdir:
            try:
                os.mkdir(workdir, 0o700)
                if uid is not None:
                    os.chown(workdir, uid, uid)
            except OSError as error:
                self.forget_order(seq, "no working folder for a call: %s" % arium_child._describe(error))
                return
        assert self.zygote is not None, "fill() orders forks only while there is a zygote"
        try:
            self.zygote.send(json.dumps({"seq": seq, "uid": uid, "workdir": workdir, "entries": list(self.recent)}).encode())
        except OSError as error:
            # Gone (on_zygote reads its end of file) or not reading its orders: this one will not come.
            self.forget_order(seq, "the zygote took no order (%s)" % arium_child._describe(error))

    def forget_order(self, seq, why):
        """A fork order that will bring no process: its uid and work folder are free again."""
        uid_slot, _, workdir = self.ordered.pop(seq)
        if uid_slot is not None:
            self.free_slots.append(uid_slot)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        self.warm_error = why
        self.fork_failed_at = time.monotonic()

    def start_zygote(self):
        """Forks the zygote, before anything of any call is in this process (see the module's docstring)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server_pid = os.getpid()
        if os.fork() == 0:
            try:
                ours.close()
                Zygote(self, theirs, server_pid).main()
            finally:
                os._exit(1)
        theirs.close()
        ours.setblocking(False)
        self.zygote = ours
        self.selector.register(ours.fileno(), selectors.EVENT_READ, ("zygote", None))

    def on_zygote(self):
        assert self.zygote is not None, "its socket is registered only once start_zygote() set it"
        try:
            data, fds, _, _ = socket.recv_fds(self.zygote, 65536, 4)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        if not data:
            # Without its zygote the server cannot start calls (and must not fork them itself): stop.
            # The engine sees the server exit, fails what was running, and starts a new one.
            sys.stderr.write("arium_server: the zygote exited\n")
            self.running = False
            return
        message = json.loads(data)
        kind = message.get("t")
        if kind == "forked":
            uid_slot, uid, workdir = self.ordered.pop(message["seq"])
            proc = Proc(message["pid"], fds[0], fds[1], fds[2], uid_slot, uid, workdir)
            proc.pidfd = fds[3] if len(fds) > 3 else None
            self.procs[proc.pid] = proc
            for fd in (proc.sock, fds[1], fds[2]):
                os.set_blocking(fd, False)
            self.warm.append(proc)
            self.dispatch()
        elif kind == "fork-error":
            self.forget_order(message["seq"], message.get("message"))
            self.dispatch()
        elif kind == "compile-refused":
            # A fault of the harness that would otherwise only slow every call of the tool: the engine counts it (status()).
            self.to_host({"t": "compile-refused", "entry": str(message.get("entry")), "message": str(message.get("message"))})
        elif kind == "exit":
            proc = self.procs.get(message.get("pid"))
            if proc is not None and proc.status is None:
                proc.status = message.get("status", 0)
                self.reaped(proc)

    def child_main(self, child_fd, out_w, err_w, uid, workdir, entries, code, compile_only):
        """In the call's process (forked by the zygote): confine, wait for the job, run it. Or, in a
        compile process (`compile_only`), confined the same way: compile entries[0]. Never returns."""
        try:
            signal.set_wakeup_fd(-1)
            arium_confine.libc.prctl(arium_confine.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # Every descriptor but its own three: others' sockets and pipes, the engine's channel.
            low = 3
            for fd in sorted({child_fd, out_w, err_w}):
                arium_confine.close_from(low, fd)
                low = fd + 1
            arium_confine.close_from(low, MAX_FD)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (null, out_w, err_w):
                if fd > 2:
                    os.close(fd)
            if not self.config["namespaces"]:
                os.setsid()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the others are reset already (prepare_zygote)
            arium_confine.confine(self.config, uid, workdir)
        except BaseException as error:
            try:
                arium_proto.send(child_fd, {"t": "error", "kind": "sandbox", "message": arium_child._describe(error)})
            except BaseException:
                pass
            os._exit(2)
        if compile_only:
            arium_child.compile_main(self.config, child_fd, entries[0])
        arium_child.serve(self.config, child_fd, entries, code)

    # --- one call ------------------------------------------------------------------------------

    def start(self, job):
        job["filename"] = self.config["tools_prefix"] + str(job.get("entry"))
        self.remember(job.get("entry"))
        self.queue.append(job)
        self.dispatch()

    def dispatch(self):
        """Gives queued jobs to warm processes; a job no process can come for fails with BUSY."""
        while self.queue and self.warm:
            self.run_job(self.queue.pop(0), self.warm.pop(0))
        if not self.queue:
            return
        self.fill()
        if not self.ordered:
            why = self.warm_error or "every sandbox uid is in use"
            for job in self.queue:
                self.answer_unstarted(job["id"], "BUSY", "no call process could be started (%s); retry" % why)
            self.queue.clear()

    def unqueue(self, job_id):
        """The engine gave up on a job still waiting for its process: it never runs, and is answered now
        (the engine kills a server that owes an answer for long)."""
        for job in self.queue:
            if job["id"] == job_id:
                self.queue.remove(job)
                self.answer_unstarted(job_id, "CANCELLED", "the call was stopped before it started", killed="engine")
                return

    def answer_unstarted(self, job_id, code, message, **extra):
        """The answer for a job that never had a process: no logs, only the failure."""
        self.to_host({"t": "done", "id": job_id, "logs": [], "dropped": 0, **extra, "failure": {"code": code, "message": message}})

    def run_job(self, job, proc):
        call = Call(job, proc)
        proc.call = call
        self.calls[call.id] = call
        call.reader = arium_proto.Reader(self.frame_limit(job))
        self.selector.register(proc.sock, selectors.EVENT_READ, ("sock", call))
        for fd in proc.pipes:
            self.selector.register(fd, selectors.EVENT_READ, ("pipe", call))
        self.send_call(call, {"t": "job", "job": job})
        if proc.status is not None:
            self.maybe_finish(call)

    def frame_limit(self, job):
        """The largest frame a call's process may send: the configured bound, or more when the call's
        largest output needs it (its JSON inside a JSON string: 7 bytes for a control character)."""
        return max(self.config["max_frame"], 8 * job["limits"]["output_bytes"] + (1 << 20))

    def on_sock(self, call):
        if self.read_sock(call, final=False):
            self.maybe_finish(call)

    def send_call(self, call, message):
        """Queues a frame for the call's process and writes what its socket takes now. A write that does
        not block can take only part of a large frame (a job with a big input, the answer to a large
        read): the rest goes when the socket is writable again, never dropped and never blocking the
        server, whose other calls go on (a process that stops reading holds up only its own frames)."""
        if self.protocol is not None:
            self.observe("py.toChild", message)
        call.outbox.append(memoryview(arium_proto.encode(message)))
        self.flush_call(call)

    def observe(self, channel, message):
        """Checks a frame with a call process against the protocol's schema and tells the engine."""
        blob = message.get("blob")
        shown = dict(message, blob=len(blob)) if isinstance(blob, bytes) else message
        problem = arium_proto.violation({"$ref": "#/$defs/" + channel}, self.protocol, shown)
        kind = message.get("t", "reply" if "seq" in message else "?")
        self.to_host({"t": "protocol", "channel": channel, "kind": str(kind), "problem": problem})

    def flush_call(self, call):
        sock = call.proc.sock
        while call.outbox and sock is not None:
            head = call.outbox[0]
            try:
                written = os.write(sock, head[: 1 << 20])
            except BlockingIOError:
                break
            except OSError:
                call.outbox.clear()  # the process is gone: its exit ends the call
                break
            if written == len(head):
                call.outbox.popleft()
            else:
                call.outbox[0] = head[written:]
        want = bool(call.outbox) and sock is not None
        if want != call.writing and sock is not None:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            try:
                self.selector.modify(sock, events, ("sock", call))
            except (KeyError, ValueError):
                return
            call.writing = want

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
                # Only the harness writes frames here; anything else (a tool writing to the socket) is
                # garbage, a broken protocol: TOOL_ERROR, whatever size its "header" announces.
                call.failure = call.failure or {"code": "TOOL_ERROR", "message": "the tool's process broke the protocol on its channel: it sent %s" % error}
                self.kill(call, "protocol")
                frames = []
            for frame in frames:
                self.from_child(call, frame)
            if not final:
                return False
        return True

    def from_child(self, call, frame):
        if self.protocol is not None:
            self.observe("py.fromChild", frame)
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
                bad = {"seq": seq if isinstance(seq, int) else -1, "ok": False, "error": {"code": "INVALID_INPUT", "message": "unknown VFS request"}}
                self.send_call(call, bad)
                return
            # Bytes to write (a blob the reader checked) go on as they came, after the request.
            blob = frame.get("blob")
            self.to_host({"t": "vfs", "id": call.id, "seq": seq, "op": op, "args": args}, blob if isinstance(blob, bytes) else None)
        elif kind == "intrusion":
            operation = frame.get("operation")
            if isinstance(operation, str) and len(call.intrusions) < MAX_INTRUSIONS:
                call.intrusions.append(operation[:MAX_INTRUSION_CHARS])
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
        if call.job.get("stream_logs") is True:
            # A caller following the logs (an MCP client) hears each line now; otherwise they go with "done".
            self.to_host({"t": "log", "id": call.id, "level": level, "message": text})
        else:
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

    def reaped(self, proc):
        """The zygote reaped the call's process (and with it, with namespaces, every process it started)."""
        if proc.pidfd is not None:
            self.drop(proc.pidfd)
            proc.pidfd = None
        self.procs.pop(proc.pid, None)
        if not self.config["namespaces"]:
            self.sweep(proc)
        if proc.call is None:
            # A warm process died before its job (its confinement failed): keep the reason for status.
            if proc in self.warm:
                self.warm.remove(proc)
            self.release(proc)
            return
        call = proc.call
        if call.id not in self.calls:
            self.release(proc)  # answered early (see from_child): only the clean-up was left
            return
        # Nothing of the call runs any more: read what it left in its pipes and socket, then stop.
        for fd in list(proc.pipes):
            self.drain(fd, call)
        if proc.sock is not None:
            self.read_sock(call, final=True)
        self.maybe_finish(call)

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
                if proc.pidfd is not None:
                    signal.pidfd_send_signal(proc.pidfd, signal.SIGKILL)
                else:
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
        if call.intrusions:
            message["intrusions"] = call.intrusions
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

    def serve(self):
        # What the server holds now is shared by every call process: frozen, a collection there never
        # writes to it, so those pages stay shared instead of being copied in each call.
        gc.freeze()
        self.start_zygote()
        self.fill()
        ready = {"t": "ready", "python": "%d.%d.%d" % sys.version_info[:3], "pid": os.getpid(), "uid": os.getuid()}
        if self.uid_note:
            ready["uid_note"] = self.uid_note
        if self.config["namespaces"]:
            ready["landlock"] = arium_confine.landlock_abi()
        self.to_host(ready)
        while self.running:
            timeout = 0.25 if self.calls else None
            if self.fork_failed_at is not None:
                timeout = FORK_RETRY_S  # to order the warm processes again after the pause
            for key, mask in self.selector.select(timeout=timeout):
                kind, target = key.data
                if kind == "host":
                    self.on_host()
                    continue
                if kind == "zygote":
                    self.on_zygote()
                    continue
                # An event of this batch may be stale: handling an earlier one can have ended the call
                # and closed (or even reused) the descriptor.
                try:
                    if kind == "sock" and target.proc.sock == key.fd:
                        if mask & selectors.EVENT_WRITE:
                            self.flush_call(target)
                        if mask & selectors.EVENT_READ:
                            self.on_sock(target)
                    elif kind == "pipe" and key.fd in target.proc.pipes:
                        self.on_pipe(key.fd, target)
                except Exception:
                    # A fault of the server's own must not take the other calls down with it.
                    traceback.print_exc()
                    call = target if isinstance(target, Call) else target.call
                    if call is not None and call.id in self.calls:
                        call.failure = call.failure or {"code": "UNAVAILABLE", "message": "the Python sandbox failed while handling the call"}
                        self.kill(call, "protocol")
                        self.maybe_finish(call)
            if self.calls:
                self.tick()
            # The zygote forks while this process goes on relaying (it used to wait for calls that had not
            # replied yet, when forking blocked the server itself).
            self.fill()
        for proc in list(self.procs.values()):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass


def main():
    config = json.loads(sys.argv[1])
    # The engine ends the server by closing fd 3; signals from a terminal do not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    Server(config).serve()


if __name__ == "__main__":
    main()
