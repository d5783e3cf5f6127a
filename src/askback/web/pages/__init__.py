"""The page kit: what every HTML page askback hosts is built with (the hosted account pages, the runtime's web inbox,
and the pages to come).

A product makes one `PageKit` over its folder of templates and its stylesheet (`style.css`). The kit gives:

- Jinja2 templates with autoescaping on for every one of them (each value escaped as `html.escape` does), which
  extend the kit's own document, `kit/page.html` (`<html lang="en">`, a title, the one inline style, a `<main>`),
  and may import its form parts, `kit/forms.html`;
- the security headers of every response, redirects and problem pages included: a Content-Security-Policy that
  allows no script, nothing from elsewhere and exactly the one stylesheet (by its hash), `no-store`, `no-referrer`,
  frame denial and `nosniff`;
- pages holding a form, rendered with this browser's form token (`askback.web.asgi.FormGuard`, the double-submit
  pattern, with the `Origin` and `Sec-Fetch-Site` checks), and 303 redirects;
- the app itself: the product's routes behind the headers and a body cap, every error (404, 405, 413, 500) answered
  with the product's own problem page;
- `SignIn`, who the person in the browser is and where they sign in (`PersonSignIn`: with their groups, as a
  `SignedInPerson`), and `safe_next_path`, the one check of where a person may be sent back to.

The kit imports no product: every product may import it.
"""

from askback.web.pages._kit import PageKit, security_headers
from askback.web.pages._signin import PersonSignIn, SignedInPerson, SignIn, safe_next_path

__all__ = ["PageKit", "PersonSignIn", "SignIn", "SignedInPerson", "safe_next_path", "security_headers"]
