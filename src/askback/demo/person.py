"""The scripted person of `askback demo` connecting an account: what they would do in a browser, done with plain HTTP
(httpx, with a cookie jar and no redirects followed, so that each step can be told).

They open the link from their assistant, are asked to sign in first (the demo server's development sign-in), sign
in and are sent back to the link, which sends them to the provider, sign in there and allow access, and are sent back to the demo
server's callback, which says whether the account is connected. `--interactive` leaves all this to the person's own
browser instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape
from urllib.parse import urljoin, urlsplit

import httpx

__all__ = ["connect_account"]

_TIMEOUT = 10.0


def _first(pattern: str, html: str) -> str | None:
    found = re.search(pattern, html, re.DOTALL)
    return None if found is None else unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


def _said(response: httpx.Response) -> str:
    """What a page says: its heading and first paragraph."""
    heading = _first(r"<h1>(.*?)</h1>", response.text) or ""
    paragraph = _first(r"<p>(.*?)</p>", response.text) or ""
    return (
        f"{heading}: {paragraph}" if heading and paragraph else heading or paragraph or f"HTTP {response.status_code}"
    )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def connect_account(link: str, *, user: str, say: Callable[[str], None]) -> bool:
    """Follow `link` as `user` through both sign-ins and the consent page, telling each step to `say`; true when the
    demo server's callback says the account is connected."""
    try:
        with httpx.Client(follow_redirects=False, timeout=_TIMEOUT) as browser:
            return _walk(browser, link, user, say)
    except httpx.HTTPError as exc:
        say(f"a page could not be loaded ({type(exc).__name__}: {exc})")
        return False


def _walk(browser: httpx.Client, link: str, user: str, say: Callable[[str], None]) -> bool:
    first = browser.get(link)
    sign_in = _first(r'<a href="([^"]*/dev/sign-in[^"]*)"', first.text)
    if first.status_code != 400 or sign_in is None:
        say(f"expected to be asked to sign in first, but the page says {_said(first)}")
        return False
    sign_in_url = urljoin(link, sign_in)
    form = browser.get(sign_in_url)
    # The sign-in form carries this browser's form token, which its post must send back.
    csrf = _first(r'name="csrf" value="([^"]*)"', form.text)
    if form.status_code != 200 or csrf is None:
        say(f"expected the development sign-in page, but it says {_said(form)}")
        return False
    signed_in = browser.post(sign_in_url, data={"user": user, "csrf": csrf})
    # The page takes a browser back to the link by itself; its link says where.
    way_back = _first(r'<a href="([^"]*/dev/sign-in/back)"', signed_in.text)
    if signed_in.status_code != 200 or way_back is None:
        say(f"the development sign-in did not send {user} back to the link: {_said(signed_in)}")
        return False
    back = browser.get(urljoin(sign_in_url, way_back)).headers.get("location", "")
    say(f"{user} opens it; the demo server asks who they are, they sign in as {user} and are sent back to the link")

    to_provider = browser.get(urljoin(link, back))
    consent_url = to_provider.headers.get("location", "")
    if to_provider.status_code != 303 or not consent_url:
        say(f"expected to be sent to the provider, but the page says {_said(to_provider)}")
        return False
    consent = browser.get(consent_url)
    action = _first(r'<form method="post" action="([^"]*)"', consent.text)
    ticket = _first(r'name="ticket" value="([^"]*)"', consent.text)
    if consent.status_code != 200 or action is None or ticket is None:
        say(f"expected the provider's sign-in page, but it says {_said(consent)}")
        return False
    title = _first(r"<h1>(.*?)</h1>", consent.text)
    say(f"{title} at {_origin(consent_url)}: {user} signs in as {user} and allows reading their mail")

    allowed = browser.post(urljoin(consent_url, action), data={"ticket": ticket, "user": user, "decision": "allow"})
    callback = allowed.headers.get("location", "")
    if allowed.status_code != 302 or not callback:
        say(f"expected to be sent back with a code, but the provider says {_said(allowed)}")
        return False
    back = browser.get(callback)
    say(f"back at {urlsplit(callback).path} of the demo server: {_said(back)}")
    return back.status_code == 200 and (_first(r"<h1>(.*?)</h1>", back.text) or "") == "Connected"
