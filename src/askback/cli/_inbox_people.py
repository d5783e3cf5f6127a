"""Who opens a page of `askback inbox serve`: the one `--user`, the `--user-header` a signing-in proxy sets, or people
signed in at `--auth-issuer` with OpenID Connect; and whether that may be served on the address asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from askback.cli._inbox_webhooks import WebhookSecrets
    from askback.identity import PeopleSignIn

__all__ = ["InboxPeople", "check_reachable", "checked_serve_options", "inbox_people"]


@dataclass(frozen=True)
class InboxPeople:
    """`principal` names who opens a page; `sign_in` is the people's sign-in behind it (started with the inbox's
    store), if any; `notice` is a line to print once the inbox starts."""

    principal: Any
    sign_in: PeopleSignIn | None = None
    notice: str | None = None


def check_reachable(host: str, *, signs_in: bool, behind_proxy: bool) -> None:
    """Refuse (`UsageError`, before anything is bound) an inbox that nobody signs in to on an address other machines
    reach: `--user` makes everyone who reaches it that person, and `--user-header` trusts a header anyone can send,
    unless `behind_proxy` says only a proxy that signs people in reaches it."""
    from askback.cli.output import UsageError
    from askback.core.addresses import is_loopback

    if behind_proxy and signs_in:
        raise UsageError("--behind-signing-in-proxy goes with --user or --user-header, not with --auth-issuer")
    if signs_in or behind_proxy or is_loopback(host):
        return
    raise UsageError(
        f"refusing to serve the inbox on {host}, which other machines reach, with nobody signed in: sign people in "
        "with --auth-issuer URL --auth-client-id ID, serve on 127.0.0.1, or pass --behind-signing-in-proxy when only "
        "a proxy that signs people in reaches the inbox"
    )


def checked_serve_options(
    host: str,
    port: int,
    who: tuple[str | None, str | None, str | None, str | None],
    behind_proxy: bool,
    webhook_secret_env: list[str] | None,
    allowed_host: list[str] | None,
) -> tuple[WebhookSecrets, list[str]]:
    """The options of `askback inbox serve` checked before anything is opened (`UsageError` naming the one to
    change): `who` is (--user, --user-header, --auth-issuer, --auth-client-id). The webhook secrets by server and
    the further hosts to answer."""
    from askback.cli._inbox_webhooks import webhook_secrets
    from askback.cli.output import UsageError

    user, user_header, auth_issuer, auth_client_id = who
    if sum(given is not None for given in (user, user_header, auth_issuer)) != 1:
        raise UsageError(
            "say who answers, one way: --user NAME (one person), --user-header HEADER (behind a signing-in proxy) "
            "or --auth-issuer URL (people sign in there, with --auth-client-id)"
        )
    if (auth_issuer is None) != (auth_client_id is None):
        raise UsageError("--auth-issuer and --auth-client-id go together: give both, or neither")
    if not 0 < port < 65536:
        raise UsageError(f"--port {port} is not a TCP port")
    check_reachable(host, signs_in=auth_issuer is not None, behind_proxy=behind_proxy)
    hooks = webhook_secrets(webhook_secret_env or ())
    hosts = list(allowed_host or ())
    if hosts:
        from askback.web.asgi import AllowedHosts

        try:
            AllowedHosts.of(hosts)
        except ValueError as exc:
            raise UsageError(f"--allowed-host: {exc}") from None
    return hooks, hosts


def inbox_people(
    user: str | None, user_header: str | None, issuer: str | None, client_id: str | None, served_at: str
) -> InboxPeople:
    """Who opens an inbox page: the one `--user`, the `--user-header` a proxy sets, or people signed in at
    `--auth-issuer` (`askback.identity.PeopleSignIn`, its settings read as `askback.identity.SignInSettings` reads
    them for every sign-in). Everything is checked here, before anything is said."""
    from starlette.requests import Request

    if issuer is not None and client_id is not None:
        from askback.identity import PeopleSignIn, SignInSettings

        # The same settings, read the same way, as the hosted pages' sign-in; only the issuer and client id come from
        # the options, the base URL is where the inbox serves unless ASKBACK_PUBLIC_URL says otherwise, and a missing
        # session secret is made here (with a notice once the inbox starts).
        settings = SignInSettings.from_environ(
            issuer=issuer, client_id=client_id, served_at=served_at, make_session_secret=True
        )
        notice = None
        if settings.session_secret_made:
            notice = (
                "askback inbox: ASKBACK_SESSION_SECRET is not set, so a session secret was made at start-up: "
                "everyone's sign-in ends when the inbox restarts"
            )
        sign_in = PeopleSignIn.of(settings)
        return InboxPeople(sign_in, sign_in, notice)

    def named(request: Request) -> str | None:
        if user is not None:
            return user
        assert user_header is not None
        return request.headers.get(user_header) or None

    return InboxPeople(named)
