"""The package's exceptions: one root, and who is to blame (h11's split).

``FrameError``: bytes that do not decode. ``RemoteProtocolError``: the peer broke the protocol
(a bad frame, a command in the wrong state, an oversized frame); it carries the RabbitMQ
response code and the bytes to send before closing (a Close frame, or nothing when RabbitMQ
drops the socket at once). ``LocalProtocolError``: the caller asked for something the
protocol does not allow (an event in the wrong state or direction).
"""

from __future__ import annotations

__all__ = ["StreamProtocolError", "FrameError", "RemoteProtocolError", "LocalProtocolError"]


class StreamProtocolError(ValueError):
    """Root of every error of ``amqp_stream.streamproto``.

    ``code`` is the RabbitMQ response code that describes the fault (``None``: no code, the
    connection is just closed).
    """

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class FrameError(StreamProtocolError):
    """A frame that cannot be decoded (truncated, trailing bytes, unknown key or version)."""


class RemoteProtocolError(StreamProtocolError):
    """The peer broke the protocol; the connection is over.

    ``reply`` holds the bytes to write before closing the socket (RabbitMQ's Close frame once
    the connection is open, ``b""`` before: RabbitMQ then closes without a word).
    """

    def __init__(self, message: str, code: int | None = None, reply: bytes = b""):
        super().__init__(message, code)
        self.reply = reply


class LocalProtocolError(StreamProtocolError):
    """The caller tried to send something the protocol does not allow now."""
