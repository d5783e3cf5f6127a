"""The loopback issuer the identity tests share: a fresh one for each test (a module that wants one for all its tests
defines its own, module-scoped)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _loopback_issuer import LoopbackIssuer, loopback_issuer


@pytest.fixture
def issuer() -> Iterator[LoopbackIssuer]:
    with loopback_issuer() as running:
        yield running
