"""`askback serve MODULE:ATTR`: serve an askback server with uvicorn, and the loading of `MODULE:ATTR` targets.

`serve` checks its options, binds its address (`askback.cli.listen`), imports the target and prepares the database
once in this process, then listens, says where it serves, and hands the listening sockets to uvicorn, which calls
`app_factory` in its one process or in every worker process; the target and the options reach the workers through
environment variables. Routes beside `/mcp` come from the target itself: `build_app` serves its `mounts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import UsageError, reports_errors
from askback.cli.targets import load_object
from askback.core.addresses import is_loopback
from askback.errors import ConfigurationError

if TYPE_CHECKING:
    from askback.identity import ResourceServer
    from askback.server import Askback
    from askback.store import Store

__all__ = ["app_factory", "load_object", "load_target", "register"]

_TARGET_ENV = "ASKBACK_SERVE_TARGET"
_HOST_ENV = "ASKBACK_SERVE_HOST"
_LOG_ENV = "ASKBACK_SERVE_LOG"
_VERIFIER_ENV = "ASKBACK_SERVE_VERIFIER"
# `--expose` reaches the target (imported here and in every worker) as the setting it overrides.
_EXPOSE_ENV = "ASKBACK_EXPOSE"
_HOSTS_ENV = "ASKBACK_ALLOWED_HOSTS"
_DATABASE_ENV = "ASKBACK_DATABASE_URL"
_EXPOSURES = ("direct", "meta", "both")
# `--auth-*` options reach the workers as the variables `askback.identity` reads.
_AUTH_ENV = {
    "issuer": "ASKBACK_AUTH_ISSUER",
    "audience": "ASKBACK_AUTH_AUDIENCE",
    "principal_claim": "ASKBACK_AUTH_PRINCIPAL_CLAIM",
}


def load_target(target: str) -> Askback:
    """Import `MODULE:ATTR` and return the `Askback` server it names."""
    from askback.server import Askback

    server = load_object(target, "an askback server", Askback)
    if not isinstance(server, Askback):
        raise ConfigurationError(f"{target!r} is not an askback.Askback server (got {type(server).__name__})")
    return server


def app_factory() -> Any:
    """The ASGI app for one worker of `askback serve` (uvicorn calls this in every worker process)."""
    from askback.cli import logs
    from askback.server.http import build_app

    # The format the parent resolved: `auto` was decided once, on the stderr every process shares.
    level, _, fmt = os.environ.get(_LOG_ENV, "info:json").partition(":")
    logs.configure(level, "text" if fmt == "text" else "json")
    target = os.environ[_TARGET_ENV]
    verifier = os.environ.get(_VERIFIER_ENV)
    server = load_target(target)
    add_webhooks(server)
    resource = resource_server()
    if resource is not None:
        start_with(server, resource)
    app = build_app(
        server,
        host=os.environ.get(_HOST_ENV, "127.0.0.1"),
        token_verifier=load_object(verifier, "a token verifier") if verifier else None,
        bearer=resource,
        mounts=resource.mounts if resource is not None else (),
    )
    close_on_stop(app.state.listen_streams.close)
    return app


def close_on_stop(close: Callable[[], None]) -> None:
    """Call `close` in this event loop as soon as the process is told to stop (SIGTERM, SIGINT), beside uvicorn's own
    handling of the signal, which then waits for the connections still open: listen streams are closed before that
    wait, rather than cancelled at its end. Called while uvicorn's handlers are installed (it loads the app under
    them), in the event loop's thread."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if callable(previous):
            signal.signal(sig, _chained(previous, lambda: loop.call_soon_threadsafe(close)))


def _chained(
    previous: Callable[[int, FrameType | None], Any], then: Callable[[], object]
) -> Callable[[int, FrameType | None], None]:
    def stopping(number: int, frame: FrameType | None) -> None:
        previous(number, frame)
        then()

    return stopping


def add_webhooks(server: Askback) -> None:
    """Deliver the webhooks `ASKBACK_WEBHOOKS` names from `server`, unless it already does (its own extension, or an
    earlier call in this process)."""
    if not os.environ.get("ASKBACK_WEBHOOKS"):
        return
    from askback.webhooks import Webhooks

    if not any(isinstance(extension, Webhooks) for extension in server.extensions):
        server.extend(Webhooks.from_settings())


def resource_server() -> ResourceServer | None:
    """The OAuth 2.1 resource server `ASKBACK_AUTH_*` configure (`--auth-issuer`...), or `None` without an issuer."""
    from askback.identity import ResourceServer, load_identity_settings
    from askback.settings import load_settings

    settings = load_identity_settings()
    if settings.issuer is None:
        return None
    return ResourceServer.from_settings(settings, public_url=load_settings().public_url)


def start_with(server: Askback, resource: ResourceServer) -> None:
    """Start and close `resource` with `server`, as the extension it is: it finds its issuer when the store opens
    (and says so in the log when it cannot), and closes its HTTP client when the app closes."""
    from askback.extension import ExtensionContext

    async def start(store: Store) -> None:
        await resource.start(ExtensionContext(store=store, settings=server.settings, clock=server.clock))

    server.on_start(start)
    server.on_close(resource.close)


def describe_check(server: Askback, resource: ResourceServer | None, token_verifier: str | None) -> str | None:
    """What will check the bearer tokens of `server`'s `/mcp`, in a few words; `None` when nothing will."""
    from askback.server.http import bearer_check

    if resource is not None:
        return resource.describe()
    if token_verifier is not None:
        return f"the token verifier {token_verifier}"
    check = bearer_check(server)
    return check.describe() if check is not None else None


def _http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/mcp" if ":" in host else f"http://{host}:{port}/mcp"


@reports_errors
def serve(
    target: Annotated[str, typer.Argument(help="MODULE:ATTR of an askback.Askback server, e.g. askback.demo:server")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on, 1 to 65535.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    database: Annotated[str | None, typer.Option("--database", help=DATABASE_HELP, show_default=False)] = None,
    log_level: Annotated[str, typer.Option(help="Level of askback's logs (the audit lines are info).")] = "info",
    log_format: Annotated[
        str | None,
        typer.Option(
            help="auto (text on a terminal, JSON otherwise), json (one object per line) or text; "
            "default ASKBACK_LOG_FORMAT, else auto.",
            show_default=False,
        ),
    ] = None,
    token_verifier: Annotated[
        str | None, typer.Option(help="MODULE:ATTR of a token verifier; requests without a valid token get 401.")
    ] = None,
    auth_issuer: Annotated[
        str | None,
        typer.Option(
            help="The OAuth 2.1 authorization server whose access tokens /mcp accepts (default ASKBACK_AUTH_ISSUER).",
            show_default=False,
        ),
    ] = None,
    auth_audience: Annotated[
        str | None,
        typer.Option(
            help="The audience those tokens must name: this server's /mcp URL (default ASKBACK_AUTH_AUDIENCE).",
            show_default=False,
        ),
    ] = None,
    auth_principal_claim: Annotated[
        str | None,
        typer.Option(
            help="The token claim naming the user (default ASKBACK_AUTH_PRINCIPAL_CLAIM, else sub).", show_default=False
        ),
    ] = None,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="Serve a non-loopback address without any token check: every caller is anonymous.",
        ),
    ] = False,
    graceful_timeout: Annotated[
        int, typer.Option(min=1, help="Seconds a stopping instance lets running calls finish.")
    ] = 30,
    expose: Annotated[
        str | None,
        typer.Option(
            help="direct (each tool), meta (five meta-tools over the tools: docs/meta.md) or both; "
            "default ASKBACK_EXPOSE, else direct.",
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A further host name to answer (again for more), beside the loopback names, the public URL's "
            "host and ASKBACK_ALLOWED_HOSTS: the name a load balancer or proxy forwards in Host.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve TARGET over Streamable HTTP at /mcp (MCP 2026-07-28 statelessly, and 2025-11-25 sessions), with /healthz,
    /readyz and the routes TARGET mounts itself (its `mounts`)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from askback.cli import listen, logs
    from askback.cli.db import run_with_database

    if not 1 <= port <= 65535:
        raise UsageError(f"--port is a TCP port, 1 to 65535, not {port}")
    if database is not None:
        # As the setting it overrides, for this process and every worker, before the target is imported.
        os.environ[_DATABASE_ENV] = database
    if log_format is None:
        from askback.settings import load_settings

        log_format = load_settings().log_format
    chosen = logs.parse_format(log_format)
    if chosen is None:
        raise UsageError("--log-format is auto, json or text")
    if log_level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise UsageError("--log-level is one of debug, info, warning, error, critical")
    if expose is not None and expose not in _EXPOSURES:
        raise UsageError("--expose is direct, meta or both")
    fmt = logs.resolve(chosen, sys.stderr)
    # Bound before anything is imported or logged: an address that cannot be had is the one line printed.
    with listen.bound(host, port) as sockets:
        logs.configure(log_level, fmt)
        os.environ[_LOG_ENV] = f"{log_level}:{fmt}"
        if allowed_host:
            # As the setting it adds to, for this process and every worker; checked here, before anything starts.
            hosts = [os.environ.get(_HOSTS_ENV, ""), *allowed_host]
            os.environ[_HOSTS_ENV] = ",".join(h for h in hosts if h.strip())
            from askback.settings import load_settings

            load_settings()
        if expose is not None:
            # Before anything is imported (the target, or a token verifier in its module): an `Askback(...)` reads
            # the setting when it is made, here and in every worker.
            os.environ[_EXPOSE_ENV] = expose
        given = {"issuer": auth_issuer, "audience": auth_audience, "principal_claim": auth_principal_claim}
        for name, value in given.items():
            if value is not None:
                os.environ[_AUTH_ENV[name]] = value
        resource = resource_server()
        if resource is not None and token_verifier is not None:
            raise UsageError("give either --auth-issuer (ASKBACK_AUTH_ISSUER) or --token-verifier, not both")
        if resource is not None and resource.resource_url is None and not is_loopback(host):
            raise UsageError(
                f"refusing to serve {host} with --auth-issuer but no ASKBACK_AUTH_RESOURCE: set it to the URL "
                "clients reach /mcp at (https://askback.example.com/mcp), which the resource metadata and every 401 name"
            )
        if token_verifier is not None:
            load_object(token_verifier, "a token verifier")
            os.environ[_VERIFIER_ENV] = token_verifier
        server = load_target(target)
        add_webhooks(server)
        server.check_workers(workers)
        check = describe_check(server, resource, token_verifier)
        # Demo tokens let anyone be anyone: on a reachable address they are no check at all.
        demo_only = resource is None and token_verifier is None and server.ports.bearer is None
        if (check is None or demo_only) and not is_loopback(host) and not allow_anonymous:
            raise UsageError(
                f"refusing to serve {host} without checking tokens: pass --auth-issuer URL --auth-audience "
                "AUD (or --token-verifier MODULE:ATTR), or --allow-anonymous to serve everyone as anonymous"
            )

        async def prepare() -> str:
            # Migrate (SQLite) or check (PostgreSQL) once here, before any worker takes a request.
            async with server.running():
                return (await server.store()).database.safe_url

        database = run_with_database(server.settings.database_url, prepare)
        config = uvicorn.Config(
            "askback.cli.serve:app_factory",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            log_config=None,
            timeout_graceful_shutdown=graceful_timeout,
            # askback names itself from its configuration (ASKBACK_PUBLIC_URL), never from what a client forwards.
            proxy_headers=False,
        )
        # From here a connection waits in the backlog until a worker takes it, so the URL announced below answers.
        listen.listen(sockets, host, port, config.backlog)
        log = logging.getLogger("askback.serve")
        url = _http_url(host, port)
        log.info(
            "askback serving %s at %s with %s; database %s",
            target,
            url,
            "1 worker" if workers == 1 else f"{workers} workers",
            database,
            extra={"url": url, "workers": workers, "database": database},
        )
        if check is not None:
            log.info("askback: bearer tokens of /mcp are checked by %s", check, extra={"verifier": check})
        if check is not None and demo_only and not is_loopback(host):
            log.warning(
                "askback: demo tokens on %s, reachable from other machines: anyone can be anyone. Pass "
                "--auth-issuer URL --auth-audience AUD where users are real.",
                host,
            )
        elif check is None:
            log.warning(
                "askback: no token check (--auth-issuer, --token-verifier), so requests are not authenticated and "
                "state then binds to no user: anyone holding a pending requestState can answer it. Pass "
                "--auth-issuer URL --auth-audience AUD where users are real."
            )
        os.environ[_TARGET_ENV] = target
        os.environ[_HOST_ENV] = host
        if workers > 1:
            with contextlib.suppress(KeyboardInterrupt):
                Multiprocess(config, sockets=sockets).run()
            return
        # An app whose own start-up (lifespan) fails is logged and ended by uvicorn itself, with its status 3.
        with contextlib.suppress(KeyboardInterrupt):
            uvicorn.Server(config).run(sockets=sockets)


def register(app: typer.Typer) -> None:
    """Add `serve` to `app`."""
    app.command("serve")(serve)
