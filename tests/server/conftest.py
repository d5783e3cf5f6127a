"""Fixtures shared by the server tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for raw JSON-RPC requests to a server under test."""
    async with httpx.AsyncClient(timeout=20) as client:
        yield client
