"""The life of an `Askback` app: its store opened on first use (created and migrated, for SQLite), the extensions it
was given started with it and then the application's own `on_start` hooks; at the end the `on_close` hooks, the
extensions in reverse, and the store. A start that fails closes what had started, and the store."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from askback.clock import Clock
from askback.db.migrate import Component
from askback.errors import AskbackError, ConfigurationError
from askback.extension import Extension, ExtensionContext
from askback.settings import Settings
from askback.store import Store

__all__ = ["Lifecycle"]

logger = logging.getLogger("askback")


class Lifecycle:
    """Opens and closes the store of the app `name`. `components` and `extensions` are read when it opens: the app
    may be given more extensions until then."""

    def __init__(
        self,
        name: str,
        *,
        settings: Settings,
        clock: Clock,
        components: Callable[[], tuple[Component, ...]],
        extensions: Callable[[], tuple[Extension, ...]],
    ) -> None:
        self.name = name
        self.settings = settings
        self.clock = clock
        self.components = components
        self.extensions = extensions
        self.on_start: list[Callable[[Store], Awaitable[None]]] = []
        self.on_close: list[Callable[[], Awaitable[None]]] = []
        self._store: Store | None = None
        self._lock: anyio.Lock | None = None
        self._started: list[Extension] = []

    @property
    def opened(self) -> Store | None:
        """The store when it is open, else `None`."""
        return self._store

    async def store(self) -> Store:
        """The store, opened (and started) on first use."""
        if self._store is not None:
            return self._store
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._store is None:
                store = await Store.open(self.settings.database_url, components=self.components())
                try:
                    await self._start_extensions(store)
                    for hook in self.on_start:
                        await hook(store)
                except BaseException:
                    await self._close_extensions(quietly=True)
                    await store.close()
                    raise
                self._store = store
        return self._store

    async def aclose(self) -> None:
        try:
            for hook in reversed(self.on_close):
                await hook()
            await self._close_extensions()
        finally:
            if self._store is not None:
                await self._store.close()
                self._store = None

    async def _start_extensions(self, store: Store) -> None:
        context = ExtensionContext(store=store, settings=self.settings, clock=self.clock)
        for extension in self.extensions():
            try:
                await extension.start(context)
            except AskbackError:
                raise
            except Exception as exc:
                raise ConfigurationError(
                    f"the extension {extension.name!r} could not start ({type(exc).__name__}; the cause is chained "
                    f"below), so the app {self.name!r} did not start and the extensions started before it were "
                    "closed. Fix what the cause names and start again."
                ) from exc
            self._started.append(extension)

    async def _close_extensions(self, *, quietly: bool = False) -> None:
        """Close the started extensions, the last started first; each is closed even when one before it fails. The
        first failure is raised after all are closed, unless `quietly` (a failed start, whose error is the one to
        raise)."""
        failure: BaseException | None = None
        while self._started:
            extension = self._started.pop()
            try:
                await extension.close()
            except Exception as exc:
                if quietly or failure is not None:
                    logger.exception("askback: the extension %r failed to close", extension.name)
                else:
                    failure = exc
        if failure is not None:
            raise failure
