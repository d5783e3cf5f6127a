"""The statuses of a connected account and every change between them, in one table. No I/O.

```
              start                      connected
   (none) ───────────▶ PENDING ─────────────────────────▶ ACTIVE ◀──┐ refreshed, connected
                          │ failed                          │  │  └──┘
                          ▼                                 │  │
                        ERROR ◀──────── unreachable ────────┘  │ rejected
                          │  ▲                                 ▼
               refreshed, │  └──────── unreachable ──────── EXPIRED
               connected  │                                    │
                          ▼            revoked (from any)      │ connected
                        ACTIVE        ───────────────▶ REVOKED ┘ (reconnect: to ACTIVE)
```

- `PENDING`: an authorization link was issued; nothing is connected yet.
- `ACTIVE`: a credential is in the vault and usable.
- `EXPIRED`: the provider refused the refresh (`invalid_grant`): the person must connect again.
- `REVOKED`: the grant was revoked (by the person, the provider or `askback accounts revoke`); the credential is gone.
- `ERROR`: the provider could not be reached or answered unexpectedly; the reason is kept, and the next call that
  needs the token refreshes again (after a backoff, `askback.accounts.tokens`): `refreshed` brings it back.

A change that is not in the table is refused with `AccountStateError`, so no status ever claims what is not true
(an account never turns ACTIVE without a credential having been stored by `connected` or `refreshed`).
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from askback.errors import AccountStateError

__all__ = ["TRANSITIONS", "Event", "Status", "transition"]


class Status(StrEnum):
    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    EXPIRED = "EXPIRED"
    REVOKED = "REVOKED"
    ERROR = "ERROR"


class Event(StrEnum):
    START = "start"  # an authorization link is issued for an account that does not exist yet
    CONNECTED = "connected"  # the callback stored a grant, or an API key was stored (and validated)
    FAILED = "failed"  # the authorization came back with an error (access denied, bad code)
    REFRESHED = "refreshed"  # a refresh succeeded: a new access token is in the vault
    REJECTED = "rejected"  # the provider refused the refresh token (invalid_grant)
    UNREACHABLE = "unreachable"  # the provider could not be reached, or answered unexpectedly
    REVOKED = "revoked"  # the grant was revoked and the credential deleted


P, A, E, R, X = Status.PENDING, Status.ACTIVE, Status.EXPIRED, Status.REVOKED, Status.ERROR

TRANSITIONS: MappingProxyType[tuple[Status | None, Event], Status] = MappingProxyType(
    {
        (None, Event.START): P,
        (P, Event.CONNECTED): A,
        (P, Event.FAILED): X,
        (P, Event.REVOKED): R,
        (A, Event.CONNECTED): A,
        (A, Event.REFRESHED): A,
        (A, Event.REJECTED): E,
        (A, Event.UNREACHABLE): X,
        (A, Event.REVOKED): R,
        (E, Event.CONNECTED): A,
        (E, Event.REVOKED): R,
        (R, Event.CONNECTED): A,
        (X, Event.CONNECTED): A,
        (X, Event.REFRESHED): A,
        (X, Event.REJECTED): E,
        (X, Event.UNREACHABLE): X,
        (X, Event.REVOKED): R,
    }
)


def transition(current: Status | None, event: Event) -> Status:
    """The status an account in `current` (`None`: no account yet) goes to on `event`; `AccountStateError` when the
    table has no such change."""
    after = TRANSITIONS.get((current, event))
    if after is None:
        allowed = sorted(e.value for (s, e) in TRANSITIONS if s == current)
        where = "an account that does not exist yet" if current is None else f"an account in {current.value}"
        raise AccountStateError(
            f"{where} cannot take the event {event.value!r}; it can take: {', '.join(allowed) or 'nothing'}"
        )
    return after
