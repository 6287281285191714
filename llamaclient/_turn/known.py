"""What a client has learnt about its server, shared by all of its turns. Pure data: the
turns read and write it; the driver only hands it over."""

from __future__ import annotations

from .._types.server import Modalities

__all__ = ["Known"]


class Known:
    """Facts learnt once per client (None: not learnt yet).

    - ``resume``: the server has resumable streams (``GET /v1/stream`` answered, or the
      lookup route said so); False once a 404, 405 or 501 showed it has none.
    - ``router``: ``GET /models`` came from a llama-server router; False: a plain server,
      or one without ``/models``.
    - ``media_known``/``modalities``: ``/props`` was asked for the input modalities (None
      modalities: it could not say, so nothing is checked).
    - ``reasoning_effort``: the chat template renders ``reasoning_effort`` (``/props``'
      ``chat_template_caps``; None: not said).
    - ``n_ctx``: a slot's context, from ``/props`` (the pre-flight's limit; 0: not known).
    - ``input_tokens``: the server counts a chat's prompt itself
      (``/v1/chat/completions/input_tokens``); False: an older build, so ``/apply-template``
      then ``/tokenize``.
    - ``proxy``: the proxy between the client and the server, as its answers name it
      (``"LiteLLM 1.108.7"``; None: none seen). Once set, nothing is resumed.
    """

    __slots__ = (
        "input_tokens",
        "media_known",
        "modalities",
        "n_ctx",
        "proxy",
        "reasoning_effort",
        "resume",
        "router",
    )

    def __init__(self) -> None:
        self.resume: bool | None = None
        self.router: bool | None = None
        self.media_known = False
        self.modalities: Modalities | None = None
        self.n_ctx = 0
        self.input_tokens: bool | None = None
        self.reasoning_effort: bool | None = None  # the template renders reasoning_effort
        self.proxy: str | None = None
