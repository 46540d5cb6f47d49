"""The fork server's zygote: the process that forks every call's process (see arium_server.py's
docstring for why the server does not fork them itself)."""

import base64
import json
import ctypes
import os
import selectors
import signal
import socket
import time

import arium_child
import arium_confine
import arium_proto
from arium_fork import CLONE_NEWPID, bare_fork, bare_fork_problem


# The reason sent with a compile-refused message is cut to this many characters.
MAX_REFUSAL_CHARS = 500


class Zygote:
    """Forks the call processes, on the server's orders (see arium_server.py's docstring). Forked from the
    server before the server read anything from the engine; afterwards it receives only fork orders (a
    uid, a working folder, the names of the tools to compile ahead), so the processes it forks hold
    nothing of any call. Each order is answered with the new process's socket, pipes and pidfd (passed
    as descriptors); each exit of a child with its wait status. It dies with the server."""

    def __init__(self, server, sock, server_pid):
        self.server = server
        self.config = server.config
        self.sock = sock
        self.server_pid = server_pid
        # entry -> (file key, marshalled code or None): see refresh_code.
        self.code = {}
        # Compile processes running: their socket -> what they compile; and their pids, which reap()
        # does not report to the server.
        self.compiling = {}
        self.compile_pids = set()
        self.selector = None
        self.bare_fork = False

    def main(self):
        arium_confine.libc.prctl(arium_confine.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self.server_pid:
            os._exit(0)  # the server died before the line above
        for fd in (arium_proto.HOST_IN, arium_proto.HOST_OUT):
            os.close(fd)
        self.server.selector.close()
        arium_confine.prepare_zygote(self.config)
        # Here, before any fork: every call's process inherits the hook (see arium_child._exec_hook).
        arium_child.install_exec_hook()
        self.bare_fork = bare_fork_problem() is None
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock.fileno(), selectors.EVENT_READ, "orders")
        self.selector.register(wake_r, selectors.EVENT_READ, "children")
        while True:
            for key, _ in self.selector.select(self.compile_timeout()):
                if key.data == "children":
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                if key.data == "compile":
                    self.on_compile(key.fd)
                    continue
                data = self.sock.recv(65536)
                if not data:
                    os._exit(0)  # the server is gone
                self.order(json.loads(data))

    def send(self, message, fds=()):
        socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))

    def order(self, order):
        entries = order.get("entries") or []
        self.refresh_code(entries, order.get("uid"))
        try:
            pid, fds = self.fork(order.get("uid"), order.get("workdir"), entries)
        except OSError as error:
            self.send({"t": "fork-error", "seq": order["seq"], "message": arium_child._describe(error)})
            return
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        fds = fds + ([pidfd] if pidfd is not None else [])
        try:
            self.send({"t": "forked", "seq": order["seq"], "pid": pid}, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def refresh_code(self, entries, uid):
        """Keeps the code of the tools the server names (the ones called last), made by compile
        processes, for the call processes to come (see arium_child.compile_main). A tool whose file
        changed is compiled again. Compiling never holds up a fork: until a tool's code has come back,
        the call processes forked compile it themselves. A tool that cannot be compiled, or not within
        the engine's compile wait (config compile_wait_s; the zygote then kills the compile process), is
        kept as None (each call process compiles it, and its call reports why) until its file changes.
        Only with namespaces: there a compile process shares nothing with the calls (with rlimits only,
        a call of the same user could reach into it)."""
        if not self.config["namespaces"]:
            return
        for entry in list(self.code):
            if entry not in entries:
                del self.code[entry]
        compiling = {job["entry"]: job["key"] for job in self.compiling.values()}
        for entry in entries:
            try:
                stat = os.stat(os.path.join(self.config["tools_dir"], entry))
            except (OSError, ValueError, TypeError):
                self.code.pop(entry, None)
                continue
            key = [stat.st_mtime_ns, stat.st_size, stat.st_ino]
            known = self.code.get(entry)
            if (known is None or known[0] != key) and compiling.get(entry) != key:
                self.start_compile(entry, key, uid)

    def start_compile(self, entry, key, uid):
        """Forks a compile process for one tool; its answer arrives in on_compile."""
        assert self.selector is not None, "main() makes the selector before the first order"
        try:
            pid, fds = self.fork(uid, None, [entry], compile_only=True)
        except OSError:
            return  # out of processes or memory for now: tried again with the next order
        sock, out_r, err_r = fds
        os.close(out_r)
        os.close(err_r)
        os.set_blocking(sock, False)
        self.compiling[sock] = {
            "entry": entry,
            "key": key,
            "pid": pid,
            "reader": arium_proto.Reader(arium_child.MAX_CODE_BLOB * 2),
            "deadline": time.monotonic() + self.config["compile_wait_s"],
        }
        self.compile_pids.add(pid)
        self.selector.register(sock, selectors.EVENT_READ, "compile")

    def on_compile(self, sock):
        """Reads what a compile process sent; ends it once its one frame is whole, or it closed or broke it."""
        job = self.compiling.get(sock)
        while job is not None:
            try:
                data = os.read(sock, 1 << 20)
            except BlockingIOError:
                return  # more to come
            except OSError:
                data = b""
            try:
                frames = job["reader"].feed(data) if data else None
            except arium_proto.FrameError as error:
                self.end_compile(sock, None, "its frame was refused: %s" % error)
                return
            if frames != []:
                self.end_compile(sock, frames[0] if frames else None)
                return

    def end_compile(self, sock, message, refused=None):
        """Keeps what a compile process sent (or None when it sent nothing, or nothing usable) and kills
        it. A frame that came but cannot be used (`refused`, or one of another shape) is a fault of the
        harness, never of the tool: each call of that tool then compiles it again, which costs every
        call and shows nowhere else, so it is reported to the server (compile_refused)."""
        assert self.selector is not None, "compile processes are started only once main() made the selector"
        job = self.compiling.pop(sock)
        self.selector.unregister(sock)
        os.close(sock)
        try:
            os.kill(job["pid"], signal.SIGKILL)  # reaped in reap()
        except OSError:
            pass
        code = (job["key"], None)
        if isinstance(message, dict) and isinstance(message.get("marshalled"), str) and isinstance(message.get("key"), list):
            try:
                code = (message["key"], base64.b64decode(message["marshalled"], validate=True))
            except ValueError as error:
                refused = "its code is not base64: %s" % error
        elif isinstance(message, dict) and message.get("t") == "code" and ("error" in message or message.get("marshalled", 0) is None):
            pass  # the tool does not compile (its calls say why), or its code is too large to keep
        elif message is not None:
            refused = "a frame of another shape (keys %s)" % ", ".join(sorted(map(str, message)))
        self.code[job["entry"]] = code
        if refused is not None:
            self.compile_refused(job["entry"], refused)

    def compile_refused(self, entry, why):
        """Tells the server that a compile process's answer could not be used (see end_compile)."""
        try:
            self.send({"t": "compile-refused", "entry": entry, "message": why[:MAX_REFUSAL_CHARS]})
        except OSError:
            pass  # the server is gone: the zygote exits at its next read

    def compile_timeout(self):
        """Seconds until the next compile process's deadline (None: none runs); ends those past it."""
        now = time.monotonic()
        for sock, job in list(self.compiling.items()):
            if job["deadline"] <= now:
                self.end_compile(sock, None)
        if not self.compiling:
            return None
        return max(0.0, min(job["deadline"] for job in self.compiling.values()) - now)

    def fork(self, uid, workdir, entries, compile_only=False):
        """One call process (or compile process): its socket and pipes, then, with namespaces, PID 1 of a PID namespace of its own."""
        parent_sock, child_sock = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        namespaces = self.config["namespaces"]
        try:
            if namespaces and arium_confine.libc.unshare(CLONE_NEWPID) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
            try:
                pid = bare_fork() if self.bare_fork else os.fork()
            except BaseException:
                if namespaces:
                    arium_confine.libc.setns(self.server.pidns, CLONE_NEWPID)
                raise
        except BaseException:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            parent_sock.close()
            child_sock.close()
            raise
        if pid != 0 and namespaces and arium_confine.libc.setns(self.server.pidns, CLONE_NEWPID) != 0:
            # Back to our own namespace for the next order; without it the next unshare would fail.
            error = OSError(ctypes.get_errno(), "setns back to the zygote's PID namespace")
            os.kill(pid, signal.SIGKILL)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            parent_sock.close()
            child_sock.close()
            raise error
        if pid == 0:
            self.server.child_main(child_sock.fileno(), out_w, err_w, uid, workdir, entries, self.code, compile_only)
        os.close(out_w)
        os.close(err_w)
        child_sock.close()
        return pid, [parent_sock.detach(), out_r, err_r]

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.compile_pids:
                self.compile_pids.discard(pid)
                for sock, job in list(self.compiling.items()):
                    if job["pid"] == pid:
                        self.on_compile(sock)  # what it sent before it died: all of it is readable now
                        if sock in self.compiling:
                            self.end_compile(sock, None)
                continue
            self.send({"t": "exit", "pid": pid, "status": status})
