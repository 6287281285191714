"""A griffe extension for the docs site: our docstrings use Sphinx roles
(``:class:`~llamaclient.Transport```, ``:meth:`feed```); mkdocstrings renders Markdown, where
they would show as literal ``:class:`` text. Each role becomes a code span of the name it
points at (the last component when the target starts with ``~``)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|data):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``:class:`~a.b.C``` → ```C```; ``:meth:`Completion.message``` → ```Completion.message```."""

    def code(match: re.Match[str]) -> str:
        short, target = match.groups()
        return f"`{target.rsplit('.', 1)[-1] if short else target}`"

    return ROLE.sub(code, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
