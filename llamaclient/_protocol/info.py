"""``/props`` and ``/slots`` answers into typed structs. Pure."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from .._types.errors import ProtocolError
from .._types.server import Props, Slot

__all__ = ["metrics_from", "props_from", "slots_from"]

_Info = TypeVar("_Info", Props, Slot)


def props_from(raw: Any) -> Props:
    """The typed ``/props``; ``ProtocolError`` when a modelled field has the wrong type."""
    if not isinstance(raw, dict):
        raise ProtocolError("GET /props: the answer is not a JSON object", _shown(raw))
    return msgspec.structs.replace(_convert(raw, Props, "GET /props"), raw=raw)


def slots_from(raw: Any) -> list[Slot]:
    """The typed ``/slots``; ``ProtocolError`` when it is not a list of slot objects."""
    if not isinstance(raw, list) or not all(isinstance(entry, dict) for entry in raw):
        raise ProtocolError("GET /slots: the answer is not a list of objects", _shown(raw))
    return [msgspec.structs.replace(_convert(e, Slot, "GET /slots"), raw=e) for e in raw]


def _convert(raw: dict[str, Any], kind: type[_Info], where: str) -> _Info:
    data = raw if "raw" not in raw else {k: v for k, v in raw.items() if k != "raw"}
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"{where}: {exc}", _shown(raw)) from None


def _shown(raw: Any) -> str:
    return msgspec.json.encode(raw).decode("utf-8", "replace")


def metrics_from(data: bytes) -> dict[str, float]:
    """Prometheus text (``GET /metrics``): each sample's value by its name, labels and all
    as written (``name{label="x"}``); comments and lines that are not samples are skipped."""
    samples: dict[str, float] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        if not line or line.startswith("#"):
            continue
        end = line.rfind("}") + 1  # 0: no labels
        if end:
            name, rest = line[:end], line[end:]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        try:
            samples[name] = float(fields[0])
        except (ValueError, IndexError):
            continue
    return samples
