"""The web inbox: where a person answers the questions their agent's parked calls wait on (`askback inbox serve`).

`inbox_app(runtime, principal=...)` is a small Starlette app over a `Runtime`'s store. `principal(request)` says who
opens a page (the one name of `--user`, or a header set by a signing-in proxy); a person sees and answers only the
questions of their own calls, and another person's question is answered 404, as if it did not exist.

- `GET /`: the person's pending questions (message, mode, the deadline, and who asks: the server's host and the
  name it gives itself, the tool and its arguments);
- `GET /q/{call_id}/{round}/{key}`: one question, with who asks: a form built from its schema (`forms.fields`), or a
  URL question's link shown with the host a browser reaches (`questions.checked_link`) for the person to open
  themselves, the "Open" link being the address that was checked (the runtime never fetches it), with "Decline"
  and "Cancel" beside the answer;
- `POST /q/{call_id}/{round}/{key}`: the answer, checked against the form (400, the form again with the errors and
  what was typed) and recorded with `Runtime.answer`; with `resume=True`, the last answer of a round sends the round
  back to its server (`Runtime.resume`), and the call's page shows what came of it;
- `GET /calls/{call_id}`: a call's outcome: its result, the server's next questions, or why it failed.

The pages are the page kit's (`askback.web.pages`), from the templates in `templates/`: plain server-rendered HTML, no
JavaScript, no external resource, every value escaped by the template. Every POST carries a per-browser token (a
random value in an HttpOnly, SameSite=Strict cookie, repeated in a hidden field: `askback.web.asgi.FormGuard`), and one
sent from another origin is refused (403). Every response carries a strict Content-Security-Policy, `no-store`,
`no-referrer` and `nosniff`. Only the configured hosts are answered (`askback.web.asgi.HostGuard`: the loopback names, the
public URL's host, `ASKBACK_ALLOWED_HOSTS`), 421 otherwise: a page on a name pointed at 127.0.0.1 reaches nothing.

Its parts: `_view` (what each page shows, as plain values), `_forms` (what a form sent: the answer, or why it is
refused), `_app` (the routes) and the templates.
"""

from askback.runtime.inbox._app import inbox_app

__all__ = ["inbox_app"]
