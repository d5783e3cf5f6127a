"""The webhook secrets of `askback inbox serve --webhook-secret-env`: each server's, as `URL=VAR`, or (deprecated)
secrets without their server, as `VAR` alone; and the receiver they make."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from askback.cli.output import UsageError

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from askback.runtime import Runtime

__all__ = ["WebhookSecrets", "webhook_secrets"]

# An environment variable's name as a shell writes it: what `--webhook-secret-env VAR` took before servers were named.
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DEPRECATED_VAR = (
    "askback inbox serve: --webhook-secret-env {var} is deprecated (it goes in the next minor release): name the "
    "server, --webhook-secret-env URL={var} (its MCP URL, as calls are made to it), so that an event resumes only "
    "calls to the server that signed it"
)


@dataclass(frozen=True)
class WebhookSecrets:
    """The secrets by server (`servers`), or the deprecated secrets given without their server (`unnamed`)."""

    servers: Mapping[str, Sequence[str]] = field(default_factory=dict, repr=False)
    unnamed: Sequence[str] = field(default=(), repr=False)

    def __bool__(self) -> bool:
        return bool(self.servers or self.unnamed)

    def receiver(self, runtime: Runtime, hosts: Sequence[str]) -> ASGIApp:
        """The runtime's webhook receiver for these secrets."""
        from askback.runtime.webhooks import webhook_receiver

        if not self.unnamed:
            return webhook_receiver(runtime, servers=self.servers, hosts=hosts)
        with warnings.catch_warnings():
            # Said on the command line already, in its own words (`DEPRECATED_VAR`).
            warnings.simplefilter("ignore", DeprecationWarning)
            return webhook_receiver(runtime, secrets=self.unnamed, hosts=hosts)


def _secrets_in(given: str, var: str) -> list[str]:
    found = [s for s in os.environ.get(var, "").split(",") if s.strip()]
    if not found:
        raise UsageError(f"--webhook-secret-env {given}: set {var} to the whsec_ secret(s)")
    return found


def webhook_secrets(given: Sequence[str]) -> WebhookSecrets:
    """What the `--webhook-secret-env` options say (`UsageError` naming the one to change). `VAR` alone, the form of
    the previous release, is taken with a deprecation line on stderr; mixed with `URL=VAR` it is refused."""
    servers: dict[str, list[str]] = {}
    unnamed: list[str] = []
    for one in given:
        if "=" not in one and _VAR.fullmatch(one):
            import typer

            typer.echo(DEPRECATED_VAR.format(var=one), err=True)
            unnamed.extend(_secrets_in(one, one))
            continue
        server, _, var = one.rpartition("=")
        if not server.startswith(("https://", "http://")) or not var:
            raise UsageError(
                f"--webhook-secret-env {one}: name the server whose events the secrets sign, as URL=VAR (its MCP "
                "URL, as calls are made to it): an event resumes only calls made to the server that signed it"
            )
        servers.setdefault(server, []).extend(_secrets_in(one, var))
    if servers and unnamed:
        raise UsageError(
            "--webhook-secret-env: give every server's secrets as URL=VAR; a VAR without its server (deprecated) "
            "cannot be told from the servers named beside it"
        )
    return WebhookSecrets(servers, tuple(unnamed))
