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
    ProtocolError,
    ResumeError,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    UnsupportedInputError,
    WaitTimeoutError,
)
from ._types.events import (
    ArgumentDelta,
    ChatEvent,
    Content,
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
    AudioPart,
    ChatMessage,
    ContentPart,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from ._types.openai import from_openai, to_openai
from ._types.request import ChatRequest
from ._types.server import GenerationSettings, Modalities, Props, Slot, TemplateCaps

__version__ = "0.1.0"

__all__ = [
    "ArgumentDelta",
    "ArgumentStream",
    "Assembler",
    "AssistantMessage",
    "AudioPart",
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
    "ContentPart",
    "ContextOverflowError",
    "FieldHandle",
    "FieldText",
    "FinishReason",
    "GenerationSettings",
    "HTTPStatusError",
    "ImagePart",
    "InferError",
    "LoadTimeoutError",
    "Modalities",
    "Progress",
    "Props",
    "ProtocolError",
    "Queued",
    "Reasoning",
    "Response",
    "ResumeError",
    "Resuming",
    "Retrying",
    "ServerError",
    "Slot",
    "StalledError",
    "StreamClosedEarlyError",
    "SystemMessage",
    "TemplateCaps",
    "TextPart",
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
    "UnsupportedInputError",
    "Usage",
    "UserMessage",
    "WaitTimeoutError",
    "Waiting",
    "__version__",
    "build_body",
    "from_openai",
    "to_openai",
]
