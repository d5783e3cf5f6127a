"""`PageKit`: one product's templates, stylesheet and headers, and the responses and app built with them."""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute
from starlette.templating import Jinja2Templates

from askback.web.asgi import CappedBody, FormGuard, SecurityHeaders

_KIT_TEMPLATES = Path(__file__).parent / "templates"

ProblemPage = Callable[[Request, int], Response]
"""A product's page for an error status (404, 405, 413, 500, ...)."""


def security_headers(style: str) -> dict[str, str]:
    """The headers of every response of pages whose one inline stylesheet is `style`."""
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    return {
        "Cache-Control": "no-store",
        # A page's URL may carry a secret (an account link's token), which must not reach another site in a `Referer`.
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'sha256-{digest}'; form-action 'self'; frame-ancestors 'none'; "
            "base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
    }


def _stylesheet(path: Path) -> str:
    """The stylesheet as the one line a page carries: the file's lines stripped and joined, so that the file can be
    read a rule a line while the page (and the hash its CSP allows) holds it without a byte of white space."""
    return "".join(line.strip() for line in path.read_text(encoding="utf-8").splitlines())


def _escaped(value: object) -> object:
    # Every value is escaped as `html.escape` does (`&quot;`, `&#x27;`), not as markupsafe does (`&#34;`, `&#39;`),
    # so that what a page holds stays what it has always held. Markup (a macro's output) passes as it is.
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape(str(value)))


class PageKit:
    """The pages of one product: its templates in `templates` (with `style.css`, its stylesheet), beside the kit's
    own (`kit/page.html`, `kit/forms.html`); every title ends with `title_suffix`."""

    def __init__(self, templates: Path, *, title_suffix: str = "") -> None:
        self.style = _stylesheet(templates / "style.css")
        self.headers: Mapping[str, str] = MappingProxyType(security_headers(self.style))
        environment = jinja2.Environment(
            loader=jinja2.ChoiceLoader(
                [
                    jinja2.FileSystemLoader(templates),
                    jinja2.PrefixLoader({"kit": jinja2.FileSystemLoader(_KIT_TEMPLATES)}),
                ]
            ),
            autoescape=True,
            finalize=_escaped,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        # The stylesheet is the product's own file, never a value from outside: it goes in as it is.
        environment.globals.update(style=Markup(self.style), title_suffix=title_suffix, csrf_field=FormGuard.FIELD)
        self.templates = Jinja2Templates(env=environment)

    def render(self, name: str, /, **context: Any) -> str:
        """The template `name` rendered with `context`."""
        return self.templates.get_template(name).render(context)

    def page(
        self,
        request: Request,
        name: str,
        context: Mapping[str, Any] | None = None,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        """The template `name` as a response with the kit's headers (and `headers`)."""
        return self.templates.TemplateResponse(
            request, name, dict(context or {}), status_code=status, headers={**self.headers, **(headers or {})}
        )

    def form_page(
        self, request: Request, guard: FormGuard, name: str, context: Mapping[str, Any], *, status: int = 200
    ) -> HTMLResponse:
        """A page holding a form: rendered with this browser's form token as `csrf`, its cookie set when new."""
        token, new = guard.token(request)
        response = self.page(request, name, {**context, "csrf": token}, status=status)
        if new:
            guard.remember(response, request, token)
        return response

    def redirect(self, url: str) -> RedirectResponse:
        """A 303 to `url`, with the kit's headers."""
        return RedirectResponse(url, status_code=303, headers=dict(self.headers))

    def app(self, routes: Sequence[BaseRoute], *, max_body: int, problem: ProblemPage) -> Starlette:
        """The product's app: `routes` behind the kit's headers and a cap of `max_body` bytes on a request body, every
        error answered with `problem(request, status)` (an `Allow` header kept)."""

        async def on_error(request: Request, exc: Exception) -> Response:
            # A 500 is re-raised by Starlette once this page is sent, so the server logs it with its traceback.
            # Starlette answers it outside the middleware, so the page carries the headers itself.
            status = exc.status_code if isinstance(exc, HTTPException) else 500
            response = problem(request, status)
            allow = (exc.headers or {}).get("Allow") if isinstance(exc, HTTPException) else None
            if allow is not None:
                response.headers["Allow"] = allow
            return response

        return Starlette(
            routes=list(routes),
            middleware=[Middleware(SecurityHeaders, headers=self.headers), Middleware(CappedBody, limit=max_body)],
            exception_handlers={HTTPException: on_error, Exception: on_error},
        )
