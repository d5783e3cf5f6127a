"""The `askback` command: serve a server, run the demo, make keys, read the audit trail, migrate the database, lint
and check MCP servers.

One Typer app (`askback.cli.root`), one module per command group (`serve`, `keys`, `db`, `audit`, `demo`, `lint`,
`check`), and one error boundary (`askback.cli.output.reports_errors`).
"""

from __future__ import annotations

from askback.cli.root import app, main

__all__ = ["app", "main"]
