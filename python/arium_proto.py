"""Frames between the engine, the fork server and a call's process.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Every channel is a file
descriptor of its own (never stdout), so nothing a tool prints can be taken for a frame.
"""

import json
import os
import struct

HEADER = struct.Struct(">I")


class FrameError(Exception):
    """The other side broke the protocol: a frame too large, cut short, or not a JSON object."""


def encode(message):
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return HEADER.pack(len(body)) + body


def write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(fd, message):
    write_all(fd, encode(message))


class Reader:
    """Splits bytes read from a non-blocking descriptor into frames, refusing any over `limit` bytes."""

    def __init__(self, limit):
        self.limit = limit
        self.buffer = bytearray()
        self.need = None

    def feed(self, data):
        """Adds bytes; returns the complete frames (dicts) they finish."""
        self.buffer += data
        frames = []
        while True:
            if self.need is None:
                if len(self.buffer) < 4:
                    return frames
                (self.need,) = HEADER.unpack_from(self.buffer)
                del self.buffer[:4]
                if self.need > self.limit:
                    raise FrameError("a message of %d bytes, more than the %d allowed" % (self.need, self.limit))
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
            frames.append(message)

    @property
    def partial(self):
        """True when a frame has started but not finished."""
        return self.need is not None or len(self.buffer) > 0


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
