"""The webhooks' tests' fixtures: a receiver on loopback (`_hooks.receiving`) and a store on a real SQLite file with
the webhooks' tables."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from _hooks import Receiver, components, receiving

from askback.store import Store


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as state:
        yield state


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url, migrate=True, components=components())
    try:
        yield opened
    finally:
        await opened.close()
