"""The keeper's decisions, with no I/O: the `TokenSet` a credential holds, what the database `Held`, the one
function `decide` that says whether to use, refresh or give up on it (`Use`, `Refresh`, `Lapse`, `RefuseToken`),
what a provider's token response means (`judge_token_response`), and the `Backoff` of an account in ERROR."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from askback.accounts.status import Status
from askback.errors import AccountStateError, AskbackError, ProviderError

# The longest one request to a provider may take, connecting included (`TokenKeeper(provider_timeout=...)`). A refresh
# claim lasts twice as long, so that only a holder that died loses it.
PROVIDER_TIMEOUT = 5.0


@dataclass(frozen=True)
class TokenSet:
    """What a token endpoint answered, as kept in the vault (sealed as a whole)."""

    access_token: str = field(repr=False)
    token_type: str = "Bearer"
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    scope: str | None = None

    def to_vault(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "scope": self.scope,
        }

    @classmethod
    def from_vault(cls, stored: dict[str, Any]) -> TokenSet:
        return cls(
            access_token=str(stored["access_token"]),
            token_type=str(stored.get("token_type") or "Bearer"),
            refresh_token=stored.get("refresh_token"),
            expires_at=stored.get("expires_at"),
            scope=stored.get("scope"),
        )

    @classmethod
    def from_response(cls, body: dict[str, Any], *, now: float, previous: TokenSet | None = None) -> TokenSet:
        """A token endpoint's JSON answer; a refresh answer without a new refresh token keeps the previous one."""
        expires_in = body.get("expires_in")
        return cls(
            access_token=str(body["access_token"]),
            token_type=str(body.get("token_type") or "Bearer"),
            refresh_token=body.get("refresh_token") or (previous.refresh_token if previous else None),
            expires_at=now + float(expires_in) if expires_in is not None else None,
            scope=body.get("scope") or (previous.scope if previous else None),
        )


# --- the decision (no I/O) ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """What the database holds for an account at one moment, its credential opened. `version` is the id of the
    account's latest lifecycle event: every status change, and so every credential written, moves it on."""

    status: Status
    reason: str | None
    tokens: TokenSet | None
    version: int
    sealed: str | None = field(default=None, repr=False, compare=False)
    """The credential as stored (the vault's ciphertext): a change is written only over this very one."""
    failures: int = 0
    """Refreshes that failed in a row (an account in ERROR)."""
    retry_at: float | None = None
    """An account in ERROR: the clock time before which its provider is not asked again (the backoff)."""
    claimed_until: float | None = None
    """When the refresh claim someone holds on the account expires; `None` when nobody holds one."""

    def claimed(self, now: float) -> bool:
        """Someone holds an unexpired refresh claim on the account: they are asking the provider now."""
        return self.claimed_until is not None and now < self.claimed_until


@dataclass(frozen=True)
class Use:
    """The held token is good: hand it out."""

    tokens: TokenSet
    kind: Literal["use"] = "use"


@dataclass(frozen=True)
class Refresh:
    """Call the provider with this refresh token (only while holding the account's refresh claim)."""

    tokens: TokenSet
    kind: Literal["refresh"] = "refresh"


@dataclass(frozen=True)
class Lapse:
    """The access token has expired and there is no refresh token: the account is EXPIRED."""

    kind: Literal["lapse"] = "lapse"


@dataclass(frozen=True)
class RefuseToken:
    """Nothing to hand out; raise `error`."""

    error: AskbackError
    kind: Literal["refuse"] = "refuse"


_USABLE = (Status.ACTIVE, Status.ERROR)


def decide(
    account_id: str, held: Held | None, *, seen: Held | None, now: float, leeway: float, force: bool
) -> Use | Refresh | Lapse | RefuseToken:
    """What to do with what the database `held` for an account, for a caller that first saw `seen` (`None` on the
    first look) at clock time `now`.

    A token expiring within `leeway` seconds is refreshed; so is one of an account in ERROR (a refresh is what brings
    it back), once its backoff (`retry_at`) has passed: before that, the provider is not asked. `force` (a resource
    answered 401) refreshes unless the held access token is no longer the one `seen`. When the account changed since
    `seen`, someone else acted while this caller waited: their fresh token is used, their failure (ERROR) shared,
    rather than calling the provider again."""
    if held is None:
        return RefuseToken(
            AccountStateError(f"There is no connected account {account_id!r}; connect the account first.")
        )
    if held.status not in _USABLE or held.tokens is None:
        return RefuseToken(_not_usable(account_id, held))
    tokens = held.tokens
    if seen is not None and held.version != seen.version:
        if held.status is Status.ERROR:
            return RefuseToken(_backing_off(account_id, held, now, shared=True))
        if force:
            if seen.tokens is None or tokens.access_token != seen.tokens.access_token:
                return Use(tokens)
        elif not _expired(tokens, now):
            # Someone refreshed (or reconnected) meanwhile: theirs is the newest token there is, even when it is
            # within the leeway already (a provider whose tokens live less than the leeway would otherwise be asked
            # once per waiting caller).
            return Use(tokens)
    elif not force and held.status is Status.ACTIVE and not _expiring(tokens, now, leeway):
        return Use(tokens)
    if tokens.refresh_token is None:
        return Lapse() if _expired(tokens, now) else Use(tokens)
    if held.status is Status.ERROR and held.retry_at is not None and now < held.retry_at:
        return RefuseToken(_backing_off(account_id, held, now, shared=False))
    return Refresh(tokens)


def _backing_off(account_id: str, held: Held, now: float, *, shared: bool) -> ProviderError:
    why = (held.reason or "the provider could not be reached").rstrip(". ")
    if shared:
        head = f"Connected account {account_id!r} could not be refreshed just now, while this call waited ({why})."
    else:
        head = f"Connected account {account_id!r} is ERROR: its last refresh failed ({why})."
    if held.retry_at is not None and held.retry_at > now:
        tail = (
            f" Its provider is not asked again for {math.ceil(held.retry_at - now)} s, so nothing was sent for this "
            "call; the first call after that refreshes it."
        )
    else:
        tail = " Nothing was sent again for this call; the next call that needs it asks its provider again."
    return ProviderError(head + tail, reason="unreachable", retry_at=held.retry_at)


def _expiring(tokens: TokenSet, now: float, leeway: float) -> bool:
    return tokens.expires_at is not None and tokens.expires_at - now <= leeway


def _expired(tokens: TokenSet, now: float) -> bool:
    return tokens.expires_at is not None and now >= tokens.expires_at


def _not_usable(account_id: str, held: Held) -> AccountStateError:
    why = f" ({held.reason})" if held.reason else ""
    advice = {
        Status.PENDING: "it is not connected yet; the person must finish its authorization link first",
        Status.EXPIRED: "the provider no longer accepts its grant; the person must connect it again",
        Status.REVOKED: "its credential was deleted; the person must connect it again to use it",
    }.get(held.status, "it holds no credential; the person must connect it again")
    return AccountStateError(f"Connected account {account_id!r} is {held.status.value}{why}: {advice}.")


# --- provider answers (no I/O) --------------------------------------------------------------------------------------

# An OAuth error code is a short ASCII word (RFC 6749 §5.2); anything else a provider puts there is not repeated.
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def judge_token_response(status_code: int, body: bytes, *, provider: str, doing: str) -> dict[str, Any]:
    """A token endpoint's answer: its JSON object on success; `ProviderError` 'rejected' with the OAuth `error` code
    for a 4xx that carries one; 'unreachable' for anything else (a 5xx, a body that is not JSON, no access token).
    No message repeats the body, which may hold a token."""
    try:
        document = _json_object(body)
    except ValueError:
        raise ProviderError(
            f"The provider of {provider!r} answered HTTP {status_code} with a body that is not a JSON object when "
            f"asked to {doing}. Try again later; if it persists, check the connection's token_url.",
            reason="unreachable",
        ) from None
    if 200 <= status_code < 300:
        if isinstance(document.get("access_token"), str) and document["access_token"]:
            return document
        raise ProviderError(
            f"The provider of {provider!r} answered without an access token when asked to {doing}. Check that "
            "the connection's token_url is the provider's OAuth 2.0 token endpoint.",
            reason="unreachable",
        )
    error = document.get("error")
    if 400 <= status_code < 500 and isinstance(error, str):
        code = error if _ERROR_CODE.fullmatch(error) else None
        raise ProviderError(
            f"The provider of {provider!r} refused to {doing} ({code or 'an unreadable error code'}).",
            reason="rejected",
            error=code,
        )
    raise ProviderError(
        f"The provider of {provider!r} answered HTTP {status_code} when asked to {doing}. Try again later.",
        reason="unreachable",
    )


def _json_object(body: bytes) -> dict[str, Any]:
    document = json.loads(body)  # ValueError (JSONDecodeError, UnicodeDecodeError) when it is not JSON
    if not isinstance(document, dict):
        raise ValueError("not an object")
    return document


@dataclass(frozen=True)
class Backoff:
    """How long an account in ERROR waits before its provider is asked again: `first` seconds after the first
    refresh that failed, twice as long after each further failure in a row, never more than `cap` seconds."""

    first: float = 1.0
    cap: float = 300.0

    def delay(self, failures: int) -> float:
        """The wait after the `failures`-th failure in a row (the first is 1)."""
        return min(self.cap, self.first * 2.0 ** min(max(failures - 1, 0), 64))
