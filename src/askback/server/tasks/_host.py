"""What the tasks extension reads of the app it serves (an `Askback`), each part when it needs it: a protocol, so
that the extension and the app it is part of do not import each other."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from askback.clock import Clock
from askback.core.flow import AccountsPort
from askback.core.questions import Question
from askback.server._catalogue import Catalogue
from askback.server.round import RoundConfig
from askback.settings import Settings
from askback.store import Store

__all__ = ["TaskHost", "TaskSupport"]

TaskSupport = Literal["optional", "required"]


class TaskHost(Protocol):
    """The app's settings, clock, ids, tools and store, as the tasks extension reads them."""

    @property
    def settings(self) -> Settings: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def new_id(self) -> Callable[[], str]: ...

    @property
    def catalogue(self) -> Catalogue: ...

    @property
    def task_tools(self) -> Mapping[str, tuple[TaskSupport, tuple[Question[Any], ...]]]: ...

    @property
    def tool_scopes(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def accounts_port(self) -> Callable[[str | None], AccountsPort] | None: ...

    @property
    def round_config(self) -> RoundConfig: ...

    async def store(self) -> Store: ...
