"""`askback serve askback.demo.standalone:server`: the demo server with Demo Mail inside it, for a client of your own
(the MCP Inspector, `askback call`), without `askback demo`.

`askback demo` runs Demo Mail in a thread of its own process beside the demo server's workers. Here Demo Mail is
mounted in the demo server itself, at `/demo-mail`, so one command serves `/mcp` with `summarize_inbox` (and the
other demo tools), the hosted pages its link leads to, and the provider they send people to. Demo Mail keeps its
grants in memory, in the process that made them, and this process makes its client secret and, unless
`ASKBACK_VAULT_KEYS` is set, its vault key when it starts: serve it with one worker (the default). People reach it at
`ASKBACK_DEMO_PUBLIC_URL`, by default `http://127.0.0.1:8000`, `askback serve`'s own default address: set it when
serving on another port.
"""

from __future__ import annotations

import os
import secrets

from pydantic import SecretStr

from askback.accounts.vault import new_key
from askback.demo import build
from askback.demo.mail import PUBLIC_URL_ENV, SIGN_IN_SECRET_ENV, DemoMail, callback_url
from askback.demo.provider import DevProvider
from askback.extension import Mounted
from askback.server import Askback
from askback.server.auth import Open

__all__ = ["MAIL_PATH", "server"]

MAIL_PATH = "/demo-mail"
_DEFAULT_URL = "http://127.0.0.1:8000"


def standalone() -> Askback:
    """The demo server with Demo Mail mounted at `MAIL_PATH`, reached at `ASKBACK_DEMO_PUBLIC_URL`."""
    public_url = (os.environ.get(PUBLIC_URL_ENV) or _DEFAULT_URL).rstrip("/")
    client_secret = secrets.token_urlsafe(32)
    provider = DevProvider(
        issuer=f"{public_url}{MAIL_PATH}", client_secret=client_secret, redirect_uris=[callback_url(public_url)]
    )
    mail = DemoMail(
        issuer=provider.issuer,
        client_secret=SecretStr(client_secret),
        public_url=public_url,
        sign_in_secret=SecretStr(os.environ.get(SIGN_IN_SECRET_ENV) or secrets.token_urlsafe(32)),
    )
    # The vault's key, for this one process, when none is configured: the grants live no longer than Demo Mail's.
    os.environ.setdefault("ASKBACK_VAULT_KEYS", new_key())
    # Demo Mail checks who opens its pages itself, and the demo server's token requests carry its client secret.
    return build(mail=mail, mounts=[Mounted(MAIL_PATH, provider.app, auth=Open())])


server = standalone()
