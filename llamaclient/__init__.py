"""llamaclient: the asyncio streaming client for llama.cpp's llama-server."""

from ._arguments.stream import ArgumentStream, FieldHandle, FieldText
from ._client import Client
from ._protocol.assembler import Assembler
from ._protocol.body import build_body
from ._stream import ChatStream
from ._transports.base import Response, Transport, TransportError
from ._types.completion import Completion, FinishReason, Timings, Usage
from ._types.config import Config
from ._types.errors import (
    BusyError,
    ConnectError,
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    LoadTimeoutError,
    OutputError,
    ProtocolError,
    ResumeError,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    WaitTimeoutError,
)
from ._types.events import (
    ArgumentDelta,
    ChatEvent,
    Content,
    OutputDelta,
    Progress,
    Queued,
    Reasoning,
    Resuming,
    Retrying,
    ThinkingCapped,
    ToolCallDelta,
    ToolCallDone,
    Waiting,
)
from ._types.messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from ._types.request import ChatRequest

__version__ = "0.1.0"

__all__ = [
    "ArgumentDelta",
    "ArgumentStream",
    "Assembler",
    "AssistantMessage",
    "BusyError",
    "ChatEvent",
    "ChatMessage",
    "ChatRequest",
    "ChatStream",
    "Client",
    "Completion",
    "Config",
    "ConnectError",
    "Content",
    "ContextOverflowError",
    "FieldHandle",
    "FieldText",
    "FinishReason",
    "HTTPStatusError",
    "InferError",
    "LoadTimeoutError",
    "OutputDelta",
    "OutputError",
    "Progress",
    "ProtocolError",
    "Queued",
    "Reasoning",
    "Response",
    "ResumeError",
    "Resuming",
    "Retrying",
    "ServerError",
    "StalledError",
    "StreamClosedEarlyError",
    "SystemMessage",
    "ThinkingCapped",
    "ThinkingOverrunError",
    "Timings",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDone",
    "ToolMessage",
    "ToolSchema",
    "Transport",
    "TransportError",
    "Usage",
    "UserMessage",
    "WaitTimeoutError",
    "Waiting",
    "__version__",
    "build_body",
]
