"""One rule for "the same MCP server", shared by the runtime's webhook binding and the command line's token: a table
over plain URLs."""

from __future__ import annotations

import pytest

from askback.core.server_urls import same_server, server_endpoint


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("https://mcp.example.com/mcp", "HTTPS://MCP.Example.com/mcp/", True),
        ("https://mcp.example.com/mcp", "https://mcp.example.com:443/mcp", True),
        ("http://127.0.0.1/mcp", "http://127.0.0.1:80/mcp", True),
        (" https://mcp.example.com/mcp ", "https://mcp.example.com/mcp", True),
        ("https://mcp.example.com/mcp", "http://mcp.example.com/mcp", False),
        ("https://mcp.example.com/mcp", "https://mcp.example.com:8443/mcp", False),
        ("https://mcp.example.com/mcp", "https://mcp.example.com/MCP", False),
        ("https://mcp.example.com/mcp", "https://other.example.com/mcp", False),
        ("https://mcp.example.com:99999/mcp", "https://mcp.example.com/mcp", False),
    ],
)
def test_two_urls_name_one_server_only_when_scheme_host_port_and_path_agree(one: str, other: str, same: bool) -> None:
    assert same_server(one, other) is same
    assert same_server(other, one) is same


def test_a_url_that_cannot_be_read_compares_only_with_its_own_text() -> None:
    assert server_endpoint("https://h:bad/") == ("", "https://h:bad/", None, "")
    assert same_server("https://h:bad/", "https://h:bad/")
    assert not same_server("https://h:bad/", "https://h/")
