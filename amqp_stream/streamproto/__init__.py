"""RabbitMQ's stream protocol (port 5552) without I/O: a codec and a server-side state machine.

Modelled on h11: ``frames`` turns bytes into frozen dataclasses and back, ``connection`` keeps
the handshake's states and splits the byte stream into frames (``receive_data`` /
``next_event`` / ``send``); sockets, authentication decisions and the broker's streams belong
to the adapter that drives it. This package imports nothing else of the project.
"""

from amqp_stream.streamproto.connection import NEED_DATA, PAUSED, ConnectionClosed, ServerConnection, State
from amqp_stream.streamproto.constants import (
    COMMAND_VERSIONS,
    DEFAULT_FRAME_MAX,
    DEFAULT_HEARTBEAT,
    DEFAULT_INITIAL_FRAME_MAX,
    RESPONSE_FLAG,
    Key,
    OffsetType,
    ResponseCode,
)
from amqp_stream.streamproto.errors import (
    FrameError,
    LocalProtocolError,
    RemoteProtocolError,
    StreamProtocolError,
)
from amqp_stream.streamproto.frames import *  # noqa: F403 (the frame classes)
from amqp_stream.streamproto.frames import __all__ as _frames_all

__all__ = [
    "ServerConnection", "State", "NEED_DATA", "PAUSED", "ConnectionClosed",
    "COMMAND_VERSIONS", "DEFAULT_FRAME_MAX", "DEFAULT_HEARTBEAT", "DEFAULT_INITIAL_FRAME_MAX",
    "RESPONSE_FLAG", "Key", "OffsetType", "ResponseCode",
    "StreamProtocolError", "FrameError", "RemoteProtocolError", "LocalProtocolError",
    *_frames_all,
]
