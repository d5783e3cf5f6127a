"""Demo Mail: a small OAuth 2.0 authorization server with a mailbox behind it, for `askback demo` and development.

`askback demo` starts one on loopback so that `summarize_inbox` shows the whole connected-account loop against a
provider that speaks real OAuth: the link, the sign-in and consent page, the callback, the retry. It never belongs
where users are real: it signs in whoever types a name, and keeps everything in memory until it stops.

Authlib does the OAuth 2.0 (RFC 6749): the authorization code grant, PKCE (RFC 7636, here S256 only and required),
refresh with rotation, client authentication, bearer token checks (RFC 6750). Authlib has no Starlette server
integration, so `_authlib` holds that glue and nothing of the protocol: a request is read (body included) before
Authlib sees it, because Authlib's server code is synchronous, and the `(status, body, headers)` Authlib returns
becomes a Starlette response. Around it: in-memory storage (`_storage`), one plain sign-in and consent page
(`_pages`), and the endpoints with the mailbox (`_app`).

- `GET /authorize`: the consent page for a valid request (an invalid one goes back to the client with the error, or,
  when the client or its redirect URI is unknown, gets a page saying so); `POST /authorize`: the person's answer.
- `POST /token`: authorization code (with its PKCE verifier) and refresh token grants.
- `GET /mail/messages`: the token's user's messages; 401 without a valid bearer token.
- `GET /.well-known/oauth-authorization-server`: the metadata (RFC 8414).
"""

from __future__ import annotations

from askback.demo.provider._app import DevProvider as DevProvider
from askback.demo.provider._app import mailbox as mailbox
from askback.demo.provider._app import serving_provider as serving_provider
from askback.demo.provider._storage import ACCESS_TOKEN_SECONDS as ACCESS_TOKEN_SECONDS
from askback.demo.provider._storage import AUTHORIZE_PATH as AUTHORIZE_PATH
from askback.demo.provider._storage import CLIENT_ID as CLIENT_ID
from askback.demo.provider._storage import CODE_SECONDS as CODE_SECONDS
from askback.demo.provider._storage import MAX_BODY_BYTES as MAX_BODY_BYTES
from askback.demo.provider._storage import MESSAGES_PATH as MESSAGES_PATH
from askback.demo.provider._storage import NAME as NAME
from askback.demo.provider._storage import PAGE_SECONDS as PAGE_SECONDS
from askback.demo.provider._storage import SCOPE as SCOPE
from askback.demo.provider._storage import TOKEN_PATH as TOKEN_PATH

__all__ = ["CLIENT_ID", "MESSAGES_PATH", "NAME", "SCOPE", "DevProvider", "serving_provider"]
