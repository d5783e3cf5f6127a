"""Reading an OAuth authorization server's metadata: the fetch every product shares, the judgement each its own.

An issuer publishes its metadata at OpenID Connect Discovery's `{issuer}/.well-known/openid-configuration`, or at
RFC 8414's `/.well-known/oauth-authorization-server` inserted before the issuer's path (RFC 8414 §3.1); those are
`metadata_urls(issuer)`, in the order they are tried. `fetch_metadata` GETs them in turn and returns the first JSON
document answered with 200 in at most `MAX_METADATA_BYTES` (`Found`), or what each URL gave instead (`NotFound`,
one `Problem` per URL tried). It raises nothing: the product turns a `NotFound` into its own error, in its own words.

What the document must hold is the product's to judge, with one rule they all keep (`names_issuer`): its `issuer`
is identical to the one configured (RFC 8414 §3.3), so a server answering for another issuer is not the one
trusted. A document that answers but is wrong is refused by the product, not skipped in favour of the next URL.
httpx is imported only when a fetch runs.

Every JSON answer askback reads from an authorization server (this metadata, a JWKS, an introspection or token
endpoint's answer) is read through `read_json`, which streams the body and stops once its decoded bytes pass the
cap: a server answering an endless or hugely compressed body costs askback at most that much.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import httpx

__all__ = [
    "MAX_METADATA_BYTES",
    "Found",
    "JsonBody",
    "NotFound",
    "Problem",
    "ProblemKind",
    "fetch_metadata",
    "metadata_urls",
    "names_issuer",
    "read_json",
]

# A metadata document is a few kilobytes; a body past this is not read further.
MAX_METADATA_BYTES = 1 << 20

ProblemKind = Literal["unreachable", "status", "too_big", "not_json"]


@dataclass(frozen=True)
class Problem:
    """Why `url` gave no metadata. `unreachable`: the GET failed (`error` is the httpx exception's class name,
    `detail` its message); `status`: it answered `status`, not 200; `too_big`: a body over `MAX_METADATA_BYTES`;
    `not_json`: a 200 whose body is not JSON."""

    url: str
    kind: ProblemKind
    status: int | None = None
    error: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Found:
    """The JSON `document` (any JSON value: whether it is an object is the caller's to judge) answered at `url`."""

    url: str
    document: object
    outcome: Literal["found"] = "found"


@dataclass(frozen=True)
class NotFound:
    """No URL answered a document: `problems` says what each one tried gave, in order."""

    problems: tuple[Problem, ...]
    outcome: Literal["not_found"] = "not_found"


@dataclass(frozen=True)
class JsonBody:
    """What `read_json` read: the response's `status` and its body, `json` (the `document`, any JSON value),
    `not_json`, or `too_big` (read no further than the cap)."""

    status: int
    kind: Literal["json", "not_json", "too_big"]
    document: object = None


async def read_json(http: httpx.AsyncClient, method: str, url: str, *, limit: int, **request: Any) -> JsonBody:
    """The JSON body of `method url` (`request`: httpx's `headers`, `data`, `auth`...), read until its decoded
    bytes pass `limit`, whatever the status. Raises `httpx.HTTPError` when the request fails."""
    body = bytearray()
    async with http.stream(method, url, **request) as response:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                return JsonBody(response.status_code, "too_big")
        status = response.status_code
    try:
        document: object = json.loads(body)
    except ValueError:
        return JsonBody(status, "not_json")
    return JsonBody(status, "json", document)


def metadata_urls(issuer: str) -> tuple[str, str]:
    """Where the metadata of `issuer` (an absolute URL with no query or fragment) is looked for, in order."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return (
        urlunsplit((parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", "")),
        urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")),
    )


def names_issuer(document: Mapping[str, object], issuer: str) -> bool:
    """Whether `document`'s `issuer` is exactly `issuer`: compared as it is, so a trailing '/', a host's case or
    another port is another issuer."""
    return document.get("issuer") == issuer


async def fetch_metadata(
    http: httpx.AsyncClient, issuer: str, *, stop_when_unreachable: bool = False
) -> Found | NotFound:
    """The first of `metadata_urls(issuer)` to answer a JSON document, else what each gave. With
    `stop_when_unreachable`, a URL that cannot be reached ends the search there: the next is on the same server."""
    problems: list[Problem] = []
    for url in metadata_urls(issuer):
        answer = await _get(http, url)
        if isinstance(answer, Found):
            return answer
        problems.append(answer)
        if stop_when_unreachable and answer.kind == "unreachable":
            break
    return NotFound(tuple(problems))


async def _get(http: httpx.AsyncClient, url: str) -> Found | Problem:
    import httpx

    try:
        answer = await read_json(http, "GET", url, limit=MAX_METADATA_BYTES, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        return Problem(url, "unreachable", error=type(exc).__name__, detail=str(exc))
    if answer.status != 200:
        return Problem(url, "status", status=answer.status)
    if answer.kind != "json":
        return Problem(url, answer.kind, status=200)
    return Found(url, answer.document)
