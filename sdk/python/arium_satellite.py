"""Arium satellites in Python: a process on a NATS bus that serves its own tools to Arium engines.

It speaks the protocol of src/satellite/wire.ts (README "NATS satellites"): it joins a queue group per
tool on ``arium.<deployment>.sat.tool.<tool>``, answers calls sent to its own node on
``arium.<deployment>.sat.node.<node_id>.<tool>``, and announces its tools, version and capacity in
heartbeats on ``arium.<deployment>.sat.hb``. An engine's ``nats`` provider offers those tools while
the heartbeats last.

It needs nothing but the standard library (Python 3.9+): it holds its own NATS client, of the few
protocol operations a satellite needs (CONNECT, PUB, SUB, UNSUB, MSG, PING, PONG), over one asyncio
TCP stream. It does not speak TLS; use a server on loopback or a private network, with a user and
password or a token.

    from arium_satellite import Satellite, tool

    @tool("add", {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                  "required": ["a", "b"]}, description="Adds two numbers")
    def add(args, ctx):
        return {"sum": args["a"] + args["b"]}

    Satellite("nats://127.0.0.1:4222", [add], deployment="default").run()
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Optional, Union
from urllib.parse import urlparse

__all__ = ["Satellite", "SatelliteError", "CallContext", "Tool", "tool", "NatsClient"]

PROTOCOL = 1
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NODE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEPLOYMENT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The codes a satellite may report (wire.ts SATELLITE_CODES); any other is taken as TOOL_ERROR.
CODES = {"TOOL_ERROR", "INVALID_INPUT", "NOT_FOUND", "BUSY", "UNAVAILABLE", "TIMEOUT", "CANCELLED", "OUTPUT_LIMIT", "INVALID_OUTPUT"}
# The defaults of src/limits.ts SATELLITE_LIMITS.
HEARTBEAT_MS = 1000
KEEPALIVE_MS = 500
CAPACITY = 16
QUEUE = 256
MAX_TOOLS = 256
DESCRIPTION_CHARS = 4096


class SatelliteError(Exception):
    """A call's failure with one of the codes a satellite may report, e.g. ``INVALID_INPUT``."""

    def __init__(self, code: str, message: str, details: Optional[Dict[str, Any]] = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


class NatsError(Exception):
    """The NATS server refused something (``-ERR``) or could not be reached."""


Callback = Callable[[str, Optional[str], bytes], None]


class NatsClient:
    """The NATS client protocol's core over one TCP stream: enough for a satellite, nothing more."""

    def __init__(self) -> None:
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._subs: Dict[int, Callback] = {}
        self._next_sid = 1
        self._pongs: List[asyncio.Future[None]] = []
        self._loop_task: Optional[asyncio.Task[None]] = None
        self.max_payload = 1024 * 1024
        self.closed = asyncio.Event()
        self.error: Optional[str] = None

    async def connect(self, url: str, name: str, user: Optional[str] = None, password: Optional[str] = None,
                      token: Optional[str] = None, timeout: float = 5.0) -> None:
        parsed = urlparse(url if "://" in url else "nats://" + url)
        if parsed.scheme not in ("nats", ""):
            raise NatsError(f"{url}: this client speaks nats:// only (no TLS)")
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 4222
        try:
            self._reader, self._writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (OSError, asyncio.TimeoutError) as error:
            raise NatsError(f"Could not connect to the NATS server at {url}: {error}") from error
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        line = await asyncio.wait_for(self._reader.readline(), timeout)
        if not line.startswith(b"INFO "):
            raise NatsError(f"{url} did not greet as a NATS server")
        info = json.loads(line[5:])
        self.max_payload = int(info.get("max_payload", self.max_payload))
        options: Dict[str, Any] = {"verbose": False, "pedantic": False, "lang": "python", "version": "arium-satellite",
                                   "protocol": 1, "name": name, "headers": False, "no_responders": False}
        if user is not None:
            options.update(user=user, **{"pass": password or ""})
        if token is not None:
            options["auth_token"] = token
        self._write(b"CONNECT " + json.dumps(options).encode() + b"\r\nPING\r\n")
        # The server answers the first PING with PONG once it accepted CONNECT, or with -ERR.
        answer = await asyncio.wait_for(self._reader.readline(), timeout)
        while answer.startswith(b"+OK") or answer.startswith(b"INFO "):
            answer = await asyncio.wait_for(self._reader.readline(), timeout)
        if not answer.startswith(b"PONG"):
            raise NatsError(f"The NATS server at {url} refused the connection: {answer.decode(errors='replace').strip()}")
        self._loop_task = asyncio.ensure_future(self._read_loop())

    def _write(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            raise NatsError("not connected to the NATS server")
        self._writer.write(data)

    def subscribe(self, subject: str, callback: Callback, queue: Optional[str] = None) -> int:
        sid = self._next_sid
        self._next_sid += 1
        self._subs[sid] = callback
        self._write(f"SUB {subject} {queue + ' ' if queue else ''}{sid}\r\n".encode())
        return sid

    def unsubscribe(self, sid: int) -> None:
        self._subs.pop(sid, None)
        if not self.closed.is_set():
            self._write(f"UNSUB {sid}\r\n".encode())

    def publish(self, subject: str, payload: bytes, reply: Optional[str] = None) -> None:
        if len(payload) > self.max_payload:
            raise NatsError(f"{len(payload)} bytes is past the server's max_payload of {self.max_payload}")
        head = f"PUB {subject} {reply + ' ' if reply else ''}{len(payload)}\r\n".encode()
        self._write(head + payload + b"\r\n")

    async def flush(self, timeout: float = 5.0) -> None:
        pong: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(pong)
        self._write(b"PING\r\n")
        await asyncio.wait_for(pong, timeout)

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                line = await reader.readline()
                if not line:
                    self.error = self.error or "the NATS server closed the connection"
                    return
                if line.startswith(b"MSG "):
                    parts = line[4:].split()
                    subject, sid = parts[0].decode(), int(parts[1])
                    reply = parts[2].decode() if len(parts) == 4 else None
                    size = int(parts[-1])
                    payload = (await reader.readexactly(size + 2))[:size]
                    callback = self._subs.get(sid)
                    if callback is not None:
                        callback(subject, reply, payload)
                elif line.startswith(b"PING"):
                    self._write(b"PONG\r\n")
                elif line.startswith(b"PONG"):
                    if self._pongs:
                        future = self._pongs.pop(0)
                        if not future.done():
                            future.set_result(None)
                elif line.startswith(b"-ERR"):
                    self.error = line.decode(errors="replace").strip()
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as error:
            self.error = f"lost the NATS server: {error}"
        finally:
            self.closed.set()

    async def close(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            try:
                await self.flush(1.0)
            except (asyncio.TimeoutError, NatsError, ConnectionError):
                pass
            self._writer.close()
        if self._loop_task is not None:
            self._loop_task.cancel()
        self.closed.set()


@dataclass
class CallContext:
    """What a handler is given besides its input."""

    node_id: str
    run_id: str
    trace_id: str
    timeout_ms: int
    _send: Callable[[Dict[str, Any]], None]
    cancelled: bool = False

    def log(self, level: str, message: str) -> None:
        """A log line the engine adds to the call's result (debug, info, warn or error)."""
        self._send({"t": "log", "level": level if level in ("debug", "info", "warn", "error") else "info", "message": str(message)})

    def progress(self, progress: float, total: Optional[float] = None, message: Optional[str] = None) -> None:
        note: Dict[str, Any] = {"t": "progress", "progress": progress}
        if total is not None:
            note["total"] = total
        if message is not None:
            note["message"] = message
        self._send(note)


Handler = Callable[[Any, CallContext], Union[Any, Awaitable[Any]]]


@dataclass
class Tool:
    name: str
    input_schema: Dict[str, Any]
    handler: Handler
    description: Optional[str] = None
    output_schema: Optional[Dict[str, Any]] = None

    def announced(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": self.name, "inputSchema": self.input_schema}
        if self.description is not None:
            out["description"] = self.description
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        return out


def tool(name: str, input_schema: Dict[str, Any], description: Optional[str] = None,
         output_schema: Optional[Dict[str, Any]] = None) -> Callable[[Handler], Tool]:
    """Makes a handler ``(input, ctx) -> result`` (plain or async) a Tool of that name and schema."""

    def wrap(handler: Handler) -> Tool:
        return Tool(name, input_schema, handler, description, output_schema)

    return wrap


@dataclass
class _Running:
    task: "asyncio.Task[Any]"
    ctx: CallContext


@dataclass
class Satellite:
    """Serves ``tools`` on the NATS server at ``servers`` (a URL, or several comma-separated: the first that answers)."""

    servers: str
    tools: List[Tool]
    deployment: str = "default"
    node_id: Optional[str] = None
    capacity: int = CAPACITY
    queue: int = QUEUE
    version: str = "0.0.0"
    heartbeat_ms: int = HEARTBEAT_MS
    keepalive_ms: int = KEEPALIVE_MS
    user: Optional[str] = None
    password: Optional[str] = None
    token: Optional[str] = None
    _nc: NatsClient = field(default_factory=NatsClient)
    _calls: Dict[str, _Running] = field(default_factory=dict)
    _sids: List[int] = field(default_factory=list)
    _leaving: bool = False
    _beats: Optional["asyncio.Task[None]"] = None
    _slots: Optional[asyncio.Semaphore] = None

    def __post_init__(self) -> None:
        if not DEPLOYMENT.match(self.deployment):
            raise ValueError(f'deployment "{self.deployment}" must be 1 to 64 letters, digits, "_" or "-"')
        if self.node_id is None:
            self.node_id = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40] + "-" + uuid.uuid4().hex[:8]
        if not NODE_ID.match(self.node_id):
            raise ValueError(f'node_id "{self.node_id}" must be 1 to 64 letters, digits, "_" or "-"')
        if not self.tools or len(self.tools) > MAX_TOOLS:
            raise ValueError(f"tools: give 1 to {MAX_TOOLS} tools (got {len(self.tools)})")
        seen = set()
        for i, t in enumerate(self.tools):
            if not isinstance(t, Tool):
                raise ValueError(f"tools[{i}] is not a Tool (make one with @tool(name, schema))")
            if not TOOL_NAME.match(t.name):
                raise ValueError(f'tools[{i}].name "{t.name}" must be 1 to 64 letters, digits, "_" or "-"')
            if t.name in seen:
                raise ValueError(f'tools[{i}].name "{t.name}" is given twice')
            if not isinstance(t.input_schema, dict):
                raise ValueError(f'tools[{i}] ("{t.name}"): input_schema must be a JSON Schema object')
            if t.description is not None and len(t.description) > DESCRIPTION_CHARS:
                raise ValueError(f'tools[{i}] ("{t.name}"): description is past {DESCRIPTION_CHARS} characters')
            seen.add(t.name)
        for name in ("capacity", "heartbeat_ms", "keepalive_ms"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a whole number, 1 or more")
        if not isinstance(self.queue, int) or self.queue < 0:
            raise ValueError("queue must be a whole number, 0 or more")

    def _subject(self, *tokens: str) -> str:
        return ".".join(("arium", self.deployment, "sat") + tokens)

    def heartbeat(self) -> Dict[str, Any]:
        beat: Dict[str, Any] = {
            "t": "hb", "v": PROTOCOL, "node_id": self.node_id, "version": self.version, "capacity": self.capacity,
            "in_flight": len(self._calls), "interval_ms": self.heartbeat_ms, "keepalive_ms": self.keepalive_ms,
            "tools": [t.announced() for t in self.tools], "sdk": "python",
        }
        if self._leaving:
            beat["leaving"] = True
        return beat

    def _beat(self) -> None:
        if not self._nc.closed.is_set():
            self._nc.publish(self._subject("hb"), json.dumps(self.heartbeat()).encode())

    async def start(self) -> None:
        """Connects and begins to serve; returns once the first heartbeat is out."""
        last: Optional[Exception] = None
        for url in self.servers.split(","):
            try:
                await self._nc.connect(url.strip(), f"arium satellite {self.node_id}", self.user, self.password, self.token)
                break
            except NatsError as error:
                last = error
        else:
            raise last or NatsError("no server given")
        node = str(self.node_id)
        for t in self.tools:
            serve = self._server(t)
            self._sids.append(self._nc.subscribe(self._subject("tool", t.name), serve, queue=f"arium-{self.deployment}-sat-{t.name}"))
            self._sids.append(self._nc.subscribe(self._subject("node", node, t.name), serve))
        self._sids.append(self._nc.subscribe(self._subject("ping"), lambda _s, _r, _p: self._beat()))
        self._nc.subscribe(self._subject("ctl", node), self._control)
        self._beat()
        await self._nc.flush()
        self._beats = asyncio.ensure_future(self._beat_loop())

    async def _beat_loop(self) -> None:
        while not self._leaving and not self._nc.closed.is_set():
            await asyncio.sleep(self.heartbeat_ms / 1000)
            self._beat()

    def _control(self, _subject: str, _reply: Optional[str], payload: bytes) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return
        call_id = message.get("id") if isinstance(message, dict) and message.get("t") == "cancel" else None
        running = self._calls.get(call_id) if isinstance(call_id, str) else None
        if running is not None:
            running.ctx.cancelled = True
            running.task.cancel()

    def _server(self, t: Tool) -> Callback:
        def serve(_subject: str, reply: Optional[str], payload: bytes) -> None:
            if reply is None:
                return
            try:
                call = json.loads(payload)
            except ValueError:
                call = None
            send = self._sender(reply)
            if not isinstance(call, dict) or call.get("t") != "call" or not isinstance(call.get("id"), str):
                send({"t": "done", "ok": False, "error": {"code": "INVALID_INPUT", "message": "not a call message of the satellite protocol"}})
                return
            if self._leaving:
                send({"t": "done", "ok": False, "error": {"code": "UNAVAILABLE", "message": f"satellite {self.node_id} is leaving"}})
                return
            if len(self._calls) >= self.capacity + self.queue:
                send({"t": "done", "ok": False, "error": {"code": "BUSY",
                      "message": f"satellite {self.node_id} runs {self.capacity} calls and has {self.queue} waiting"}})
                return
            send({"t": "accept", "node_id": self.node_id})
            given = call.get("timeout_ms")
            timeout = given if isinstance(given, int) and given > 0 else 60_000
            ctx = CallContext(str(self.node_id), str(call.get("run_id", "")), str(call.get("trace_id", "")), timeout, send)
            task = asyncio.ensure_future(self._run(t, call["id"], call.get("input"), ctx, send))
            self._calls[call["id"]] = _Running(task, ctx)

        return serve

    def _sender(self, reply: str) -> Callable[[Dict[str, Any]], None]:
        def send(message: Dict[str, Any]) -> None:
            if self._nc.closed.is_set():
                return
            try:
                data = json.dumps(message).encode()
            except (TypeError, ValueError) as error:
                data = json.dumps({"t": "done", "ok": False, "error": {"code": "INVALID_OUTPUT", "message": f"the result is not JSON: {error}"}}).encode()
            if len(data) > self._nc.max_payload:
                what = "result" if message.get("t") == "done" else f"{message.get('t')} message"
                data = json.dumps({"t": "done", "ok": False, "error": {"code": "OUTPUT_LIMIT",
                                   "message": f"the {what} is {len(data)} bytes, past the NATS server's max_payload of {self._nc.max_payload}"}}).encode()
            self._nc.publish(reply, data)

        return send

    async def _run(self, t: Tool, call_id: str, args: Any, ctx: CallContext, send: Callable[[Dict[str, Any]], None]) -> None:
        alive = asyncio.ensure_future(self._keepalive(send))
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        try:
            # Past its capacity a call waits for a slot (the engine hears its keepalives meanwhile).
            await self._slots.acquire()
        except asyncio.CancelledError:
            alive.cancel()
            self._calls.pop(call_id, None)
            send({"t": "done", "ok": False, "error": {"code": "CANCELLED", "message": "the call was cancelled by the engine"}})
            return
        try:
            if inspect.iscoroutinefunction(t.handler):
                work = t.handler(args, ctx)
            else:
                # A plain handler runs in a thread: heartbeats and keepalives go on while it works.
                work = asyncio.get_running_loop().run_in_executor(None, t.handler, args, ctx)
            data = await asyncio.wait_for(work, ctx.timeout_ms / 1000)  # type: ignore[arg-type]
            send({"t": "done", "ok": True, "data": data})
        except asyncio.CancelledError:
            send({"t": "done", "ok": False, "error": {"code": "CANCELLED", "message": "the call was cancelled by the engine"}})
        except asyncio.TimeoutError:
            send({"t": "done", "ok": False, "error": {"code": "TIMEOUT", "message": f"the call's {ctx.timeout_ms} ms are up"}})
        except SatelliteError as error:
            failure: Dict[str, Any] = {"code": error.code if error.code in CODES else "TOOL_ERROR", "message": error.message}
            if error.details is not None:
                failure["details"] = error.details
            send({"t": "done", "ok": False, "error": failure})
        except Exception as error:  # a handler's own failure is the call's result, not the satellite's end
            send({"t": "done", "ok": False, "error": {"code": "TOOL_ERROR", "message": f"{type(error).__name__}: {error}"}})
        finally:
            self._slots.release()
            alive.cancel()
            self._calls.pop(call_id, None)

    async def _keepalive(self, send: Callable[[Dict[str, Any]], None]) -> None:
        while True:
            await asyncio.sleep(self.keepalive_ms / 1000)
            send({"t": "alive"})

    async def close(self) -> None:
        """Takes no new calls, says it is leaving, lets the running calls finish, then disconnects."""
        if self._leaving:
            return
        self._leaving = True
        for sid in self._sids:
            self._nc.unsubscribe(sid)
        self._beat()
        if self._beats is not None:
            self._beats.cancel()
        running = [r.task for r in self._calls.values()]
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        await self._nc.close()

    async def serve_forever(self) -> None:
        """Starts, and serves until the connection is lost (then raises) or the task is cancelled (then closes)."""
        await self.start()
        try:
            await self._nc.closed.wait()
            if not self._leaving:
                raise NatsError(self._nc.error or "lost the NATS server")
        finally:
            await self.close()

    def run(self) -> None:
        """Serves until interrupted (Ctrl-C or SIGTERM), then closes."""
        import signal

        async def main() -> None:
            task = asyncio.ensure_future(self.serve_forever())
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, task.cancel)
            try:
                await task
            except asyncio.CancelledError:
                pass

        asyncio.run(main())

