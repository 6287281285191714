"""What one chat stream needs from its client, and nothing more: the endpoint, the slot gate,
the attempts that get a streaming response, and the thinking budget."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from .._transports.base import Response
from .._types.config import Config
from .._types.events import ChatEvent
from .._types.messages import media_kinds
from .._types.request import ChatRequest
from .attempts import CHAT_PATH, attempts
from .budget import ThinkingBudget
from .endpoint import Endpoint
from .media import MediaCheck
from .models import ModelGate
from .resume import Resumer, ResumeSupport, new_conversation_id
from .slots import SlotGate, Ticket

__all__ = ["ChatPolicies"]


class ChatPolicies:
    """The policies of one client, shared by its streams."""

    __slots__ = ("config", "endpoint", "media", "models", "resume_support", "slots")

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.config: Config = endpoint.config
        self.slots = SlotGate(endpoint)
        self.resume_support = ResumeSupport()
        self.media = MediaCheck(endpoint)
        self.models = ModelGate(endpoint)

    def resumer(self, conversation_id: str | None = None) -> Resumer | None:
        """A new stream's resume bookkeeping (a fresh id unless given); None when resume is
        off in the config and no id is given."""
        if conversation_id is None:
            if not self.config.resume:
                return None
            conversation_id = new_conversation_id()
        return Resumer(self.endpoint, self.resume_support, conversation_id)

    def budget(self, request: ChatRequest) -> ThinkingBudget | None:
        return ThinkingBudget.for_request(self.endpoint, request.thinking_budget)

    async def check_inputs(self, request: ChatRequest) -> None:
        """``UnsupportedInputError`` when the request holds images or audio the server
        cannot take (its ``/props``, asked once per client); nothing is sent then."""
        await self.media.check(media_kinds(request.messages))

    async def open(
        self,
        request: ChatRequest,
        body: bytes,
        ticket: Ticket | None,
        resumer: Resumer | None,
    ) -> AsyncGenerator[list[ChatEvent] | Response, None]:
        """Yield waiting events, then the streaming Response (status < 300). The caller holds
        ``ticket`` (its place in the slot's line) until the stream ends. A router's model
        is made ready first (``ModelLoading``)."""
        model = request.model or self.config.model
        async with aclosing(self.models.ready(model, request.autoload)) as ready:
            async for loading in ready:
                yield [loading]
        if request.slot is not None and ticket is not None:
            entering = self.slots.enter(request.slot, ticket, wait=request.wait)
            async with aclosing(entering):
                async for event in entering:
                    yield [event]
        headers = None
        if resumer is not None:
            headers = {**self.endpoint.headers, "X-Conversation-Id": resumer.conversation_id}
        path = CHAT_PATH if request.autoload else f"{CHAT_PATH}?autoload=false"
        tries = attempts(self.endpoint, body, headers, resumer, path, model)
        async with aclosing(tries):
            async for item in tries:
                yield item

    async def read_all(self, response: Response) -> bytes:
        return await self.endpoint.read_all(response)
