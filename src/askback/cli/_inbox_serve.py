"""`askback inbox serve`: the web inbox over the agent runtime's store, for one person (`--user`), behind a proxy
that signs people in (`--user-header`), or for people signed in at an issuer (`--auth-issuer`); optionally also the
signed webhooks of servers whose calls wait for an account (`--webhook-secret-env`). Every option is checked before
anything is opened (`askback.cli._inbox_people`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from askback.cli._inbox_people import checked_serve_options, inbox_people
from askback.cli._runtime import DATABASE, TOKEN, TOKEN_SERVER, bearer, with_runtime

if TYPE_CHECKING:
    from askback.runtime import Runtime

__all__ = ["inbox_serve"]


def inbox_serve(
    database: Annotated[str | None, DATABASE] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    user: Annotated[
        str | None, typer.Option("--user", help="A one-person inbox: everyone who reaches it is NAME.")
    ] = None,
    user_header: Annotated[
        str | None,
        typer.Option(
            "--user-header",
            help=(
                "Behind a signing-in proxy: the request header naming the person. The inbox trusts that header as it "
                "comes, so only the proxy may reach the inbox, and the proxy must set (or remove) it on every request."
            ),
        ),
    ] = None,
    auth_issuer: Annotated[
        str | None,
        typer.Option(
            "--auth-issuer",
            help=(
                "People sign in with OpenID Connect at this issuer (with --auth-client-id; the client secret from "
                "ASKBACK_SIGNIN_CLIENT_SECRET, the session secret from ASKBACK_SESSION_SECRET, the public URL from "
                "ASKBACK_PUBLIC_URL, else http://HOST:PORT). Register {public URL}/auth/callback at the issuer."
            ),
        ),
    ] = None,
    auth_client_id: Annotated[
        str | None, typer.Option("--auth-client-id", help="The inbox's client id at the --auth-issuer.")
    ] = None,
    behind_proxy: Annotated[
        bool,
        typer.Option(
            "--behind-signing-in-proxy",
            help=(
                "With --user or --user-header on an address other machines reach (--host 0.0.0.0): only a proxy that "
                "signs people in reaches the inbox. Without it, such an inbox is refused."
            ),
        ),
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Resume a call once its round is answered.")
    ] = True,
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    webhook_secret_env: Annotated[
        list[str] | None,
        typer.Option(
            "--webhook-secret-env",
            metavar="URL=VAR",
            help=(
                "Also take the signed webhooks of the server at URL (its MCP URL, as calls are made to it) at "
                "/webhooks/askback: a call to it waiting for an account looks again when account.connected arrives. "
                "VAR holds the whsec_ secrets of that server's endpoint (comma-separated to rotate). Again for "
                "another server, with its own secrets."
            ),
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help=(
                "A further host name to answer (again for more), beside the loopback names, ASKBACK_PUBLIC_URL's host "
                "and ASKBACK_ALLOWED_HOSTS: the name a proxy forwards in Host. Other hosts are refused (421)."
            ),
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the web inbox: each person's pending questions, a form page per question, URL questions shown with
    their host and an explicit link (never fetched by the runtime), decline and cancel buttons."""
    import uvicorn

    from askback.cli import logs

    hooks, hosts = checked_serve_options(
        host, port, (user, user_header, auth_issuer, auth_client_id), behind_proxy, webhook_secret_env, allowed_host
    )
    headers = bearer(token, token_server, one_server=False)
    served_at = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    people = inbox_people(user, user_header, auth_issuer, auth_client_id, served_at)
    sign_in = people.sign_in

    # What a server wrote reaches the log (a refusal's text): escaped, one record a line, never a traceback's bytes raw.
    logs.configure("warning", "auto")

    async def work(runtime: Runtime) -> None:
        from starlette.routing import Route, Router

        from askback.extension import ExtensionContext
        from askback.runtime.inbox import inbox_app as build
        from askback.runtime.webhooks import RECEIVER_PATH

        if sign_in is not None:
            # Sessions live in the runtime's store, so signing out ends them for every inbox sharing it.
            await sign_in.start(ExtensionContext(store=runtime.store, settings=runtime.settings, clock=runtime.clock))
        app: Any = build(runtime, principal=people.principal, resume=resume, hosts=hosts)
        if hooks:
            receiver = hooks.receiver(runtime, hosts)
            # The inbox answers every other path, a line break in it too (a `Mount("/")` would leave that one bare).
            app = Router(routes=[Route(RECEIVER_PATH, receiver)], default=app, redirect_slashes=False)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", proxy_headers=False)
        if people.notice is not None:
            typer.echo(people.notice, err=True)
        typer.echo(f"askback inbox: {served_at}/", err=True)
        try:
            await uvicorn.Server(config).serve()
        finally:
            if sign_in is not None:
                await sign_in.close()

    with_runtime(database, work, headers=headers, components=() if sign_in is None else tuple(sign_in.migrations))
