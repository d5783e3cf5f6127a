"""How questions reach people: the renderers a runtime is configured with, and what each can show.

A renderer says which modes it can show (`modes`: form, url, both or none); the runtime declares to servers exactly
the union of its renderers' modes, so a server never sends a question nobody here can show (it answers -32021 or
takes its fallback instead). Interactive renderers (`ask`) answer while the call waits: a programmatic
`Callback`, or the terminal prompt (`askback.runtime.terminal`). The web inbox (`WebInbox`) is not interactive:
a parked question waits in the store until a person answers it there, in any process, any time before the
deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from askback.runtime.questions import Answer, Mode, ParkedQuestion

__all__ = ["Callback", "Interactive", "Renderer", "WebInbox", "declared_modes"]

_BOTH: frozenset[Mode] = frozenset({"form", "url"})


@runtime_checkable
class Renderer(Protocol):
    """Anything that can show questions of some modes to people."""

    @property
    def modes(self) -> frozenset[Mode]: ...


@runtime_checkable
class Interactive(Renderer, Protocol):
    """A renderer that answers while the call waits."""

    async def ask(self, question: ParkedQuestion) -> Answer: ...


@dataclass(frozen=True)
class Callback:
    """Answer questions with your own function: `Callback(fn, modes={"form"})`, `fn(question) -> Answer`."""

    fn: Callable[[ParkedQuestion], Awaitable[Answer]]
    modes: frozenset[Mode] = _BOTH

    async def ask(self, question: ParkedQuestion) -> Answer:
        return await self.fn(question)


@dataclass(frozen=True)
class WebInbox:
    """Questions wait in the store until a person answers them in the web inbox (`askback inbox serve`)."""

    modes: frozenset[Mode] = _BOTH


def declared_modes(renderers: Iterable[Renderer]) -> frozenset[Mode]:
    """The modes a runtime with these renderers declares: exactly what they can show together."""
    found: set[Mode] = set()
    for renderer in renderers:
        found |= set(renderer.modes)
    return frozenset(found)
