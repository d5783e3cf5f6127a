"""The private SDK parts the runtime relies on (all in `askback/runtime/_sdk.py`) are still there and still behave
as the runtime expects. Each test fails loudly, naming what moved, when an `mcp` upgrade changes them."""

from __future__ import annotations

import inspect
from importlib.metadata import version
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.server.mcpserver import MCPServer

from askback.runtime._sdk import _narrow, _NarrowClient, declared_elicitation

pytestmark = [pytest.mark.anyio, pytest.mark.sdk_seam]


def test_the_runtime_runs_on_the_sdk_minor_it_was_written_for() -> None:
    assert version("mcp").startswith("2.3."), (
        f"mcp {version('mcp')} is installed: check askback/runtime/_sdk.py's private parts against it, then move "
        "the pin in pyproject.toml"
    )


def test_the_client_still_builds_its_session_in_an_overridable_method() -> None:
    method = getattr(Client, "_build_session", None)
    assert method is not None and inspect.iscoroutinefunction(method), "Client._build_session is gone"
    assert list(inspect.signature(method).parameters) == ["self", "exit_stack"], "Client._build_session changed"


def test_the_session_still_builds_its_capabilities_per_version_from_the_elicitation_callback() -> None:
    method = getattr(ClientSession, "_build_capabilities", None)
    assert method is not None, "ClientSession._build_capabilities is gone"
    assert list(inspect.signature(method).parameters) == ["self", "version"], "_build_capabilities changed"
    assert "elicitation" in mcp_types.ClientCapabilities.model_fields


@pytest.mark.parametrize(
    ("modes", "declared"),
    [
        (frozenset({"form"}), {"form": {}}),
        (frozenset({"url"}), {"url": {}}),
        (frozenset({"form", "url"}), {"form": {}, "url": {}}),
        (frozenset(), None),
    ],
)
async def test_a_narrowed_session_declares_exactly_the_runtimes_modes(
    modes: frozenset[Any], declared: dict[str, Any] | None
) -> None:
    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="cancel")

    async with _NarrowClient(
        MCPServer("probe"), modes=modes, tasks=True, mode="2026-07-28", elicitation_callback=elicit
    ) as client:
        caps = client.session._build_capabilities("2026-07-28")  # pyright: ignore[reportPrivateUsage]
        found = caps.model_dump(by_alias=True, mode="json", exclude_none=True).get("elicitation")
    assert found == declared
    wire = declared_elicitation(modes)
    assert (None if wire is None else wire.model_dump(by_alias=True, exclude_none=True)) == declared


@pytest.mark.parametrize("tasks", [True, False])
async def test_the_tasks_extension_is_declared_on_2026_07_28_unless_turned_off_and_never_on_2025_11_25(
    tasks: bool,
) -> None:
    async with _NarrowClient(MCPServer("probe"), modes=frozenset({"form"}), tasks=tasks, mode="2026-07-28") as client:
        modern = client.session._build_capabilities("2026-07-28")  # pyright: ignore[reportPrivateUsage]
        legacy = client.session._build_capabilities("2025-11-25")  # pyright: ignore[reportPrivateUsage]
    assert ("io.modelcontextprotocol/tasks" in (modern.extensions or {})) is tasks
    assert "io.modelcontextprotocol/tasks" not in (legacy.extensions or {})


async def test_without_narrowing_the_sdk_declares_both_modes_which_is_why_the_runtime_narrows() -> None:
    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="cancel")

    async with Client(MCPServer("probe"), mode="2026-07-28", elicitation_callback=elicit) as client:
        caps = client.session._build_capabilities("2026-07-28")  # pyright: ignore[reportPrivateUsage]
        assert caps.elicitation is not None and caps.elicitation.form is not None and caps.elicitation.url is not None
        _narrow(client.session, frozenset({"form"}), True)
        narrowed = client.session._build_capabilities("2026-07-28")  # pyright: ignore[reportPrivateUsage]
    assert narrowed.elicitation is not None and narrowed.elicitation.url is None


async def test_the_session_still_sends_every_request_through_its_dispatchers_raw_send() -> None:
    async with Client(MCPServer("probe"), mode="2026-07-28") as client:
        dispatcher = getattr(client.session, "_dispatcher", None)
        assert dispatcher is not None, "ClientSession._dispatcher is gone"
        send = getattr(dispatcher, "send_raw_request", None)
        assert send is not None and inspect.iscoroutinefunction(send), "the dispatcher's send_raw_request is gone"
        assert list(inspect.signature(send).parameters)[:3] == ["method", "params", "opts"]
