"""Demo Mail's pages: the sign-in and consent page and the problem page, built with no I/O."""

from __future__ import annotations

from html import escape

from starlette.responses import HTMLResponse, Response

from askback.demo.provider._storage import NAME, SCOPE

__all__ = ["consent_page", "problem_page"]


def _page(title: str, body: str, *, form_to: str = "") -> HTMLResponse:
    # A form's redirect is checked against form-action too, so the consent page allows the client's origin as well.
    html = (
        f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
        f"</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )
    return HTMLResponse(
        html,
        headers={
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": (
                f"default-src 'none'; form-action 'self' {form_to}".rstrip()
                + "; frame-ancestors 'none'; base-uri 'none'"
            ),
            "X-Frame-Options": "DENY",
        },
    )


def consent_page(*, client_id: str, action: str, ticket: str, redirect_origin: str, problem: str = "") -> Response:
    alert = f'<p role="alert">{escape(problem)}</p>\n' if problem else ""
    response = _page(
        f"Sign in to {NAME}",
        f"<h1>Sign in to {escape(NAME)}</h1>\n"
        f"<p>{escape(client_id)} asks to read your mail ({escape(SCOPE)}). This is a development provider: it signs "
        "you in as whatever name you type.</p>\n"
        f"{alert}"
        f'<form method="post" action="{escape(action)}">\n'
        f'<input type="hidden" name="ticket" value="{escape(ticket)}">\n'
        '<label for="user">User name</label>\n'
        '<input type="text" id="user" name="user" autocomplete="username" required maxlength="64">\n'
        '<button type="submit" name="decision" value="allow">Allow</button>\n'
        '<button type="submit" name="decision" value="deny">Deny</button>\n'
        "</form>",
        form_to=redirect_origin,
    )
    if problem:
        response.status_code = 400
    return response


def problem_page(message: str, status: int = 400) -> Response:
    response = _page(f"{NAME}: not authorized", f"<h1>Not authorized</h1>\n<p>{escape(message)}</p>")
    response.status_code = status
    return response
