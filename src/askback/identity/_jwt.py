"""Checking a signed JWT: an access token (RFC 9068) for `/mcp`, or an ID token (OpenID Connect Core 3.1.3.7) for
the people sign-in.

The order matters. The header's `alg` is checked against the server's allow-list before anything is verified (the
allow-list is the server's, not the token's: never `none`, never an HMAC algorithm, whose "secret" would be the
issuer's public key). A token whose unverified `iss` names another issuer is refused there, before any key is
looked up, so it neither reaches that issuer nor spends a refetch of the trusted one. Then the signature, against the
issuer's key the `kid` names (`KeyCache`), through joserfc; then the claims, each refusal an `InvalidTokenError`
with a short reason and never the token. The claim checks are pure functions of the claims and the time.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from joserfc import jwt
from joserfc.errors import BadSignatureError, JoseError
from joserfc.jws import JWSRegistry, extract_compact

from askback.core.caller import (
    MAX_ACTORS,
    Caller,
    actors_of,
    checked_principal,
    checked_scopes,
    principal_of,
    split_scopes,
)
from askback.errors import InvalidTokenError

if TYPE_CHECKING:
    from askback.identity._keys import KeyCache

__all__ = [
    "ACCESS_TOKEN_TYPES",
    "DEFAULT_ALGORITHMS",
    "MAX_ACTORS",
    "actors_of",
    "caller_from_claims",
    "check_access_claims",
    "check_algorithms",
    "check_id_token_claims",
    "id_token_marks",
    "looks_like_jwt",
    "precheck_jwt",
    "scopes_of",
    "verify_id_token",
    "verify_jwt",
]

DEFAULT_ALGORITHMS: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA")
# RFC 9068 §2.1; a missing `typ` is accepted too, when the claims carry an access token's mark.
ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})
# Claims only an access token carries: RFC 9068's `client_id`, a scope (`scope`, Entra's `scp`) or app roles
# (`roles`). A token not typed `at+jwt` must carry one, since an ID token is otherwise an access token's shape.
ACCESS_TOKEN_CLAIMS = ("client_id", "scope", "scp", "roles")
# Claims only an ID token carries (OpenID Connect Core 2 and 3.3.2.11): an access token never binds a nonce or the
# hash of a code or of another token.
ID_TOKEN_CLAIMS = ("nonce", "at_hash", "c_hash", "s_hash")
MAX_TOKEN_LENGTH = 16_384


def check_algorithms(algorithms: Collection[str]) -> tuple[str, ...]:
    """`algorithms` when each may sign a token askback accepts; raises `ValueError` for `none` and HMAC ones."""
    if not algorithms:
        raise ValueError("name at least one signing algorithm (for example RS256)")
    for name in algorithms:
        if name.lower() == "none":
            raise ValueError("'none' is not a signing algorithm; a token must be signed")
        if name.upper().startswith("HS"):
            raise ValueError(
                f"{name} is an HMAC algorithm: a resource server holds no shared secret, and an HMAC check keyed "
                "with a public key can be forged by anyone"
            )
        if name not in JWSRegistry.algorithms:
            raise ValueError(f"{name} is not a JWS signing algorithm askback knows")
    return tuple(algorithms)


def looks_like_jwt(token: str) -> bool:
    """Whether `token` has the shape of a compact JWS (three dot-separated parts, the first two non-empty)."""
    parts = token.split(".")
    return len(parts) == 3 and bool(parts[0]) and bool(parts[1])


def _unverified(token: str) -> tuple[dict[str, Any], Any]:
    """The header and claims of `token` as it says, before anything is verified: only for refusals."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidTokenError("the token is too long")
    try:
        compact = extract_compact(token.encode("ascii"))
        header = dict(compact.headers())
        claims = json.loads(compact.payload)
    except (JoseError, ValueError, TypeError, UnicodeError):
        raise InvalidTokenError("the token is not a well-formed JWT") from None
    return header, claims


def precheck_jwt(token: str, *, issuer: str, algorithms: Collection[str]) -> dict[str, Any]:
    """The unverified header of `token` unless its algorithm is not on the allow-list or it names another issuer
    (`InvalidTokenError`): the refusals that need no key, and so no request to any issuer."""
    header, claims = _unverified(token)
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in algorithms or alg.lower() == "none" or alg.upper().startswith("HS"):
        raise InvalidTokenError("the token's signing algorithm is not accepted")
    if not isinstance(claims, dict) or claims.get("iss") != issuer:
        raise InvalidTokenError("the token was issued by another issuer")
    return header


async def _signed(
    token: str, *, keys: KeyCache, issuer: str, algorithms: Collection[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of `token` once its algorithm, issuer and signature are accepted."""
    header = precheck_jwt(token, issuer=issuer, algorithms=algorithms)
    alg = header["alg"]
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise InvalidTokenError("the token is not a well-formed JWT")
    key = await keys.key_for(kid)
    key_alg = key.get("alg")
    if key_alg is not None and key_alg != alg:
        raise InvalidTokenError("the token's signing algorithm does not match its key")
    try:
        verified = jwt.decode(token, key, algorithms=[alg], registry=JWSRegistry(strict_check_header=False))
    except BadSignatureError:
        raise InvalidTokenError("the token's signature is not valid") from None
    except JoseError:
        raise InvalidTokenError("the token's signature could not be checked with the issuer's key") from None
    return dict(verified.header), dict(verified.claims)


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTokenError(f"the token's {name} is not a time")
    return float(value)


def _check_times(claims: Mapping[str, Any], *, now: float, leeway: float, iat_required: bool = False) -> None:
    exp = _number(claims, "exp")
    if exp is None:
        raise InvalidTokenError("the token has no expiry (exp)")
    if now > exp + leeway:
        raise InvalidTokenError("the token has expired")
    nbf = _number(claims, "nbf")
    if nbf is not None and nbf > now + leeway:
        raise InvalidTokenError("the token is not yet valid (nbf)")
    iat = _number(claims, "iat")
    if iat is None and iat_required:
        raise InvalidTokenError("the token has no issue time (iat)")
    if iat is not None and iat > now + leeway:
        raise InvalidTokenError("the token was issued in the future (iat)")


def _audiences(claims: Mapping[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        return list(aud)
    return []


def id_token_marks(claims: Mapping[str, Any]) -> str | None:
    """What says the claims are an ID token's, not an access token's (`None` when nothing does): a claim only ID
    tokens carry, a `typ` claim of `ID` (as Keycloak writes it), or an `auth_time` in a token whose audience is the
    party it was issued to (`azp`), which is the ID token's shape. Read whatever the header's `typ` says."""
    for name in ID_TOKEN_CLAIMS:
        if name in claims:
            return f"it carries {name}"
    typ = claims.get("typ")
    if isinstance(typ, str) and typ.lower() in ("id", "id_token"):
        return "its typ claim says ID"
    azp = claims.get("azp")
    if "auth_time" in claims and isinstance(azp, str) and azp in _audiences(claims):
        return "it carries auth_time and its audience is the party it was issued to (azp)"
    return None


def check_access_claims(
    header: Mapping[str, Any],
    claims: Mapping[str, Any],
    *,
    issuer: str,
    audience: str,
    principal_claim: str,
    now: float,
    leeway: float,
    accept_jwt_typ: bool = False,
) -> None:
    """Refuse (`InvalidTokenError`) the verified access token `header`/`claims` unless it is a token of `issuer`
    for `audience`, valid at `now` (give or take `leeway` seconds), naming a principal."""
    typ = header.get("typ")
    if typ is not None:
        accepted = ACCESS_TOKEN_TYPES | ({"jwt"} if accept_jwt_typ else set())
        if not isinstance(typ, str) or typ.lower() not in accepted:
            raise InvalidTokenError("the token is not an access token (typ)")
    # A signed ID token of the same issuer for a client id used as the audience would pass every check below.
    marks = id_token_marks(claims)
    typed = isinstance(typ, str) and typ.lower() in ACCESS_TOKEN_TYPES
    if marks is None and not typed and all(claims.get(name) in (None, "", []) for name in ACCESS_TOKEN_CLAIMS):
        marks = "it is not typed at+jwt and carries none of client_id, scope, scp or roles"
    if marks is not None:
        raise InvalidTokenError(f"the token looks like an ID token, not an access token: {marks}")
    if claims.get("iss") != issuer:
        raise InvalidTokenError("the token was issued by another issuer")
    if audience not in _audiences(claims):
        raise InvalidTokenError("the token was issued for another audience")
    _check_times(claims, now=now, leeway=leeway)
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal:
        raise InvalidTokenError(f"the token names no principal (claim {principal_claim})")
    checked_principal(principal)
    scopes_of(claims)


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes a token grants: `scope` (separated by the space character), else `scp` (a list, or
    space-separated). `InvalidTokenError` for more than `MAX_SCOPES` of them, or one that is longer than
    `MAX_SCOPE_LENGTH` or not a name people can be shown (`name_problem`): scopes are stored in the audit trail."""
    scopes: tuple[str, ...] = ()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            scopes = split_scopes(value)
            break
        if isinstance(value, list):
            scopes = tuple(s for s in value if isinstance(s, str) and s)
            break
    return frozenset(checked_scopes(scopes))


def caller_from_claims(claims: Mapping[str, Any], *, principal_claim: str, issuer: str | None) -> Caller:
    """The `Caller` accepted claims name: a token of the resource server's own issuer, its home one
    (`principal_of`), with the actors of its `act` chain (`actors_of`)."""
    client_id = claims.get("client_id", claims.get("azp"))
    exp = claims.get("exp")
    try:
        principal = principal_of(checked_principal(str(claims[principal_claim])), issuer, home=issuer)
    except ValueError as exc:
        raise InvalidTokenError(f"the token names no usable principal: {exc}") from None
    return Caller(
        principal=principal,
        scopes=scopes_of(claims),
        client_id=client_id if isinstance(client_id, str) else None,
        issuer=issuer,
        expires_at=int(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None,
        actors=actors_of(claims, issuer=issuer, home=issuer, principal_claim=principal_claim),
    )


async def verify_jwt(
    token: str,
    *,
    keys: KeyCache,
    issuer: str | None,
    audience: str | None,
    algorithms: Collection[str],
    principal_claim: str,
    leeway: float,
    accept_jwt_typ: bool,
    now: float,
) -> dict[str, Any]:
    """The claims of the JWT access token `token` once every check passes (the identity settings' `issuer`,
    `expected_audience`, `algorithms`, `principal_claim`, `leeway` and `accept_jwt_typ`); raises `InvalidTokenError`
    (or `IssuerUnavailableError` when the issuer's keys cannot be read)."""
    if issuer is None or audience is None:
        raise InvalidTokenError("no issuer and audience are configured to check the token against")
    header, claims = await _signed(token, keys=keys, issuer=issuer, algorithms=algorithms)
    check_access_claims(
        header,
        claims,
        issuer=issuer,
        audience=audience,
        principal_claim=principal_claim,
        now=now,
        leeway=leeway,
        accept_jwt_typ=accept_jwt_typ,
    )
    return claims


def check_id_token_claims(
    claims: Mapping[str, Any], *, issuer: str, client_id: str, nonce: str | None, now: float, leeway: float
) -> None:
    """Refuse (`InvalidTokenError`) verified ID token claims unless OpenID Connect Core 3.1.3.7 accepts them for
    `client_id` (and the `nonce` the sign-in sent, when it sent one)."""
    if claims.get("iss") != issuer:
        raise InvalidTokenError("the ID token was issued by another issuer")
    audiences = _audiences(claims)
    if client_id not in audiences:
        raise InvalidTokenError("the ID token was issued for another client")
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != client_id:
        raise InvalidTokenError("the ID token was issued to another party (azp)")
    _check_times(claims, now=now, leeway=leeway, iat_required=True)
    if nonce is not None:
        sent = claims.get("nonce")
        if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), nonce.encode()):
            raise InvalidTokenError("the ID token's nonce is not the one this sign-in sent")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise InvalidTokenError("the ID token names no subject (sub)")


async def verify_id_token(
    token: str,
    *,
    keys: KeyCache,
    issuer: str,
    client_id: str,
    nonce: str | None,
    now: float,
    leeway: float = 60.0,
    algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
) -> dict[str, Any]:
    """The claims of the ID token `token` once its signature and claims are accepted; raises `InvalidTokenError`
    (or `IssuerUnavailableError` when the issuer's keys cannot be read)."""
    _, claims = await _signed(token, keys=keys, issuer=issuer, algorithms=algorithms)
    check_id_token_claims(claims, issuer=issuer, client_id=client_id, nonce=nonce, now=now, leeway=leeway)
    return claims
