"""Tokens: exchanging an authorization code, refreshing before expiry (single-flight across coroutines, processes
and instances), revoking, and using an account over HTTP without ever handing its token to the caller.

`TokenKeeper` is what the service, the hosted pages and tool handlers call; a handler gets a `ConnectedAccount`,
whose `http` client adds the credential to each request itself. Whether to use, refresh or give up on the credential
the database holds is one pure function, `decide`; the keeper does the I/O around it. Private modules behind
this face: `_policy` (the decision and the provider's answers, no I/O), `_rows` (the SQL: reads, the claim, the
writes), `_keeper` (`TokenKeeper`) and `_auth` (`ConnectedAccount` and its `httpx.Auth`).

Refreshing once. A provider that rotates refresh tokens (oidc-provider, Google, Microsoft...) accepts each one
once: a second refresh with the same token is `invalid_grant`, and reuse detection then revokes the whole grant. So
of all the callers that find an account's token expiring, in every process and instance, exactly one may call the
provider, and the others must take what it stored. And no database lock is held while the provider is asked: on
SQLite that would be the database's write lock, and every other writer in every process would wait for the provider.
So the one caller is chosen by a claim, a lease on the account's row:

1. an `anyio.Lock` per account id in this keeper, so that one coroutine per process goes on to the database (the
   others wait here, and find the fresh token when it is their turn);
2. the claim: one short transaction sets `refresh_owner` (a fresh random id) and `refresh_until` (now + `lease`, by
   the clock) on the account's row, only if nobody holds an unexpired claim and the row is still as the caller read
   it (status, sealed credential, failure count). On PostgreSQL the row is locked only for that UPDATE; on SQLite
   the write lock only for that transaction. Whoever's UPDATE changed the row won; the others read again;
3. the winner asks the provider with no transaction open (bounded by `provider_timeout`), then writes the outcome
   in a second short transaction: the rotated tokens, sealed (or EXPIRED / ERROR with the reason), through the
   status table, only over the very credential and status it read, and lets the claim go in the same transaction.
   A failure is written only while the claim is still the winner's (a holder that outlived its lease must not mark
   ERROR an account another holder is refreshing); rotated tokens are written as long as the credential is still
   the one read, since they are the only copy of the new refresh token;
4. everyone else (another instance, or another keeper in this process) who finds the account claimed waits on the
   claim, not on the database: it reads the account again every `poll` seconds (real time) until the claim is let
   go, and takes the new token it finds. A claim whose holder died ends at `refresh_until` (by the clock; two
   provider timeouts by default), and then the next caller takes it over.

After waiting, a caller decides again: if the account changed since the caller first looked (its latest lifecycle
event is not the one the caller saw) and now holds a fresh token (or, forced, another token than the one the
caller used), that is the answer and the provider is not called; if the change was a failed attempt (ERROR), the
caller shares that failure instead of trying again at once. A reconnect (`Accounts.change`, which takes no claim)
is never overwritten: every write of the keeper is conditional on the credential it read.

ERROR recovers by itself, without hammering a provider that is down. A refresh that fails for any reason but the
provider's refusal of the grant (`invalid_grant`: EXPIRED, the person must connect again) turns the account ERROR
and sets `retry_at`: `backoff.first` seconds after the first failure, doubling with each failure in a row, at most
`backoff.cap`. Until then every caller, in every instance, gets `ProviderError` 'unreachable' saying when the
provider is tried again, and the provider is not contacted; the first call after it refreshes, and a refresh that
works brings the account back to ACTIVE and clears the backoff.

It cannot deadlock: the in-process lock is always taken first, and no transaction is ever open while the keeper
waits for the provider or for another's claim.

From the claim to the outcome's write the keeper runs shielded from cancellation: a caller that goes away after the
provider rotated the refresh token must not drop the only copy of the new one, nor leave its claim behind.

Revoking takes the same claim, so that no refresh can store new tokens behind it.

Handing out a token that needs no refresh is one read of the account's row (status, sealed credential, version) and
one vault open; callers asking for one account at the same moment share the read.
"""

from __future__ import annotations

from askback.accounts.tokens._auth import ConnectedAccount
from askback.accounts.tokens._keeper import TokenKeeper
from askback.accounts.tokens._policy import (
    PROVIDER_TIMEOUT,
    Backoff,
    Held,
    Lapse,
    Refresh,
    RefuseToken,
    TokenSet,
    Use,
    decide,
    judge_token_response,
)

__all__ = [
    "PROVIDER_TIMEOUT",
    "Backoff",
    "ConnectedAccount",
    "Held",
    "Lapse",
    "Refresh",
    "RefuseToken",
    "TokenKeeper",
    "TokenSet",
    "Use",
    "decide",
    "judge_token_response",
]
