"""Frames between the engine, the fork server and a call's process.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON, an object (so its first
byte is "{"). Every channel is a file descriptor of its own (never stdout), so nothing a tool prints
can be taken for a frame. JSON escapes every line break, NUL and quote a string holds, so no string
inside a frame can end it or start another; a frame's length comes only from its header.

A `vfs` frame may carry bytes: its JSON says `"blob": n` and the n raw bytes follow the frame at once,
with no header of their own. They reach the reader's caller as `message["blob"]`, a bytes object.
Large write contents travel so, not as base64 inside the JSON (which the engine had to hold as text,
parsed text and bytes at once).

Strings may hold lone surrogates ("\ud800": JSON allows them, and a JS caller can send them). They
cannot be encoded as UTF-8, so a message holding one is sent with every non-ASCII character escaped
(ensure_ascii): both sides read such escapes back to exactly the same string.
"""

import json
import os
import struct

HEADER = struct.Struct(">I")
# The fork server's descriptors for frames from the engine and to it.
HOST_IN = 3
HOST_OUT = 4


class FrameError(Exception):
    """The other side broke the protocol: a header announcing more than the limit (or nothing), a body
    that does not start like a JSON object, a frame cut short, or one that is not a JSON object."""


# Made once: json.dumps given options builds a new encoder for every message (more than half of a small
# frame's encoding time, and each call's life encodes several frames).
TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def encode(message):
    text = TEXT.encode(message)
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: rare, so the common case keeps its UTF-8 (escaped, non-ASCII text would grow up to 6x).
        body = _ASCII.encode(message).encode("ascii")
    return HEADER.pack(len(body)) + body


def _show(data):
    """Bytes as a person reads them in an error: hex, and the printable ASCII they hold."""
    data = bytes(data)
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in data)
    return "%s %r" % (data.hex(" "), text)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(fd, message, blob=None):
    """Writes one frame; `blob` (bytes-like), when given, follows it raw and the frame says its length."""
    if blob is None:
        write_all(fd, encode(message))
        return
    write_all(fd, encode(dict(message, blob=len(blob))))
    write_all(fd, blob)


class Reader:
    """Splits bytes read from a non-blocking descriptor into frames, refusing any over `limit` bytes."""

    def __init__(self, limit):
        self.limit = limit
        self.buffer = bytearray()
        self.need = None
        # A frame whose blob is still being read, and how many bytes the blob has.
        self.carrying = None
        self.blob_need = 0

    def feed(self, data):
        """Adds bytes; returns the complete frames (dicts) they finish."""
        self.buffer += data
        frames = []
        while True:
            if self.carrying is not None:
                if len(self.buffer) < self.blob_need:
                    return frames
                self.carrying["blob"] = bytes(self.buffer[: self.blob_need])
                del self.buffer[: self.blob_need]
                frames.append(self.carrying)
                self.carrying = None
                continue
            if self.need is None:
                if len(self.buffer) < 4:
                    return frames
                (self.need,) = HEADER.unpack_from(self.buffer)
                header = bytes(self.buffer[:4])
                del self.buffer[:4]
                # Garbage (a JSON line, text, random bytes) read as a header is refused at once, not
                # waited on until it is "complete": a header of '{"t"' announces 2 GB.
                if self.need > self.limit or self.need < 2:
                    raise FrameError(
                        "a frame header announcing %d bytes (%s), not a frame of the protocol (a frame carries 2 to %d bytes)"
                        % (self.need, _show(header), self.limit)
                    )
            if self.buffer and self.buffer[0] != 0x7B:
                raise FrameError("a frame of %d bytes whose body starts with %s, not a JSON object" % (self.need, _show(self.buffer[:8])))
            if len(self.buffer) < self.need:
                return frames
            body = bytes(self.buffer[: self.need])
            del self.buffer[: self.need]
            self.need = None
            try:
                message = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as error:
                raise FrameError("a message that is not JSON (%s)" % type(error).__name__) from None
            if not isinstance(message, dict):
                raise FrameError("a message that is not a JSON object")
            if "blob" in message:
                size = message["blob"]
                if message.get("t") != "vfs" or type(size) is not int or size < 0 or size > self.limit:
                    raise FrameError("a frame announcing a blob it may not carry (%r on a %r frame)" % (size, message.get("t")))
                self.carrying, self.blob_need = message, size
                continue
            frames.append(message)

    @property
    def partial(self):
        """True when a frame has started but not finished."""
        return self.need is not None or self.carrying is not None or len(self.buffer) > 0


def read_frame(fd, reader):
    """Blocks until one whole frame has arrived on `fd`; None at end of file."""
    pending = getattr(reader, "pending", None)
    if pending:
        return pending.pop(0)
    while True:
        data = os.read(fd, 65536)
        if not data:
            return None
        frames = reader.feed(data)
        if frames:
            reader.pending = frames[1:]
            return frames[0]


def violation(schema, defs, value, at=""):
    """Where `value` strays from a JSON Schema of the protocol (runners/shared/protocol.schema.json), or
    None. Knows the keywords that file uses for these frames: $ref into $defs, oneOf, type, const,
    enum, required, properties, additionalProperties false, items, minimum. Used only when the engine
    turns protocol checking on (its tests); a frame is never refused because of it."""
    if schema is True:
        return None
    if "$ref" in schema:
        return violation(defs[schema["$ref"].split("/")[-1]], defs, value, at)
    if "oneOf" in schema:
        problems = [violation(option, defs, value, at) for option in schema["oneOf"]]
        matched = [p for p in problems if p is None]
        if len(matched) == 1:
            return None
        return "%s: matches %d of the alternatives (%s)" % (at or "/", len(matched), "; ".join(p for p in problems if p)[:300])
    kind = schema.get("type")
    if kind is not None and not _is_type(kind, value):
        return "%s: is not of type %s" % (at or "/", kind)
    if "const" in schema and not _same(value, schema["const"]):
        return "%s: must be %r" % (at or "/", schema["const"])
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        return "%s: must be one of %r" % (at or "/", schema["enum"])
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        return "%s: must be at least %r" % (at or "/", schema["minimum"])
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                return "%s/%s: is required" % (at, key)
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                problem = violation(properties[key], defs, item, "%s/%s" % (at, key))
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                return "%s/%s: is not an allowed property" % (at, key)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problem = violation(schema["items"], defs, item, "%s/%d" % (at, i))
            if problem:
                return problem
    return None


def _is_type(kind, value):
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def _same(a, b):
    return type(a) is type(b) and a == b
