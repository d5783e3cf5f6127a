"""The page kit (`askback.web.pages`): every page's templates autoescaped, the stylesheet allowed by its hash, the same
headers on every response (problem pages and a 500 included), the form token set once and checked, the template
files shipped with the package, and no product imported by the kit.

Each test builds its tiny app on a kit of its own (a folder of templates in `tmp_path`) and drives it in process.
"""

from __future__ import annotations

import ast
import base64
import fnmatch
import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import jinja2
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from askback.web.asgi import FormGuard
from askback.web.pages import PageKit
from infra import ROOT

pytestmark = pytest.mark.anyio

SRC = ROOT / "src" / "askback"
HOSTILE = "<script>alert(\"x\")</script> & 'quoted'"
STYLE = "body{margin:0}\nmain{max-width:30rem;\n  padding:0 1rem}\n"


def kit_in(folder: Path, **templates: str) -> PageKit:
    (folder / "style.css").write_text(STYLE)
    for name, text in templates.items():
        (folder / f"{name}.html").write_text(text)
    return PageKit(folder, title_suffix=" · test")


PAGE = """{% extends "kit/page.html" %}
{% import "kit/forms.html" as forms %}
{% block title %}{{ title }}{% endblock %}
{% block main %}
<h1 title="{{ title }}">{{ title }}</h1>
<form method="post" action="/form">
{{ forms.csrf(csrf) }}
</form>
{% endblock %}
"""
PROBLEM = """{% extends "kit/page.html" %}
{% block title %}Problem {{ status }}{% endblock %}
{% block main %}
<h1>Problem {{ status }}</h1>
{% endblock %}
"""


def client_of(kit: PageKit, guard: FormGuard, base_url: str = "http://site.test") -> httpx.AsyncClient:
    async def page(request: Request) -> Response:
        return kit.form_page(request, guard, "page.html", {"title": request.query_params.get("title", "")})

    async def form(request: Request) -> Response:
        refusal = guard.check(request, await request.form())
        return kit.redirect("/done") if refusal is None else Response(refusal, status_code=403)

    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug in a route")

    def problem(request: Request, status: int) -> Response:
        return kit.page(request, "problem.html", {"status": status}, status=status)

    routes = [Route("/", page), Route("/form", form, methods=["POST"]), Route("/broken", broken)]
    app = kit.app(routes, max_body=1024, problem=problem)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url=base_url)


def test_a_value_from_outside_is_escaped_in_text_and_in_attributes_as_html_escape_does(tmp_path: Path) -> None:
    kit = kit_in(tmp_path, page=PAGE)

    html = kit.render("page.html", title=HOSTILE, csrf='"><b>')

    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;quoted&#x27;"
    assert f'<h1 title="{escaped}">{escaped}</h1>' in html
    assert f"<title>{escaped} · test</title>" in html
    assert '<input type="hidden" name="csrf" value="&quot;&gt;&lt;b&gt;">' in html
    assert "<script>" not in html and "<b>" not in html


def test_a_name_a_template_does_not_get_is_an_error_not_an_empty_string(tmp_path: Path) -> None:
    kit = kit_in(tmp_path, page=PAGE)

    with pytest.raises(jinja2.UndefinedError):
        kit.render("page.html", title="t")


def test_no_template_of_askback_turns_escaping_off() -> None:
    templates = sorted(SRC.rglob("templates/*.html"))
    assert {p.parent.parent.name for p in templates} >= {"pages", "accounts", "inbox"}
    for path in templates:
        text = path.read_text()
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|\bMarkup\b", text), path


async def test_the_page_carries_its_stylesheet_on_one_line_and_the_csp_allows_exactly_it(tmp_path: Path) -> None:
    kit = kit_in(tmp_path, page=PAGE, problem=PROBLEM)
    async with client_of(kit, FormGuard("kit_csrf")) as http:
        page = await http.get("/", params={"title": "Hello"})

    style = re.search(r"<style>(.*?)</style>", page.text, re.DOTALL)
    assert style is not None
    assert style.group(1) == "body{margin:0}main{max-width:30rem;padding:0 1rem}"
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    assert page.headers["content-security-policy"] == (
        f"default-src 'none'; style-src 'sha256-{digest}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


async def test_every_response_carries_the_headers_problem_pages_redirects_and_a_500_included(tmp_path: Path) -> None:
    kit = kit_in(tmp_path, page=PAGE, problem=PROBLEM)
    async with client_of(kit, FormGuard("kit_csrf")) as http:
        page = await http.get("/")
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        responses = {
            200: page,
            303: await http.post("/form", data={"csrf": token.group(1)}),
            404: await http.get("/nowhere"),
            405: await http.put("/"),
            413: await http.post(
                "/form", content=b"x" * 2048, headers={"Content-Type": "application/x-www-form-urlencoded"}
            ),
            500: await http.get("/broken"),
        }

    for status, response in responses.items():
        assert response.status_code == status, response.text
        for name, value in kit.headers.items():
            assert response.headers[name] == value, (status, name)
        if status >= 400:
            assert f"<h1>Problem {status}</h1>" in response.text
    assert set(kit.headers) == {
        "Cache-Control",
        "Referrer-Policy",
        "Content-Security-Policy",
        "X-Frame-Options",
        "X-Content-Type-Options",
    }
    assert (kit.headers["Cache-Control"], kit.headers["Referrer-Policy"]) == ("no-store", "no-referrer")
    assert set(responses[405].headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


async def test_a_form_page_sets_the_token_cookie_once_and_the_guard_takes_its_form_only_from_this_site(
    tmp_path: Path,
) -> None:
    kit = kit_in(tmp_path, page=PAGE, problem=PROBLEM)
    async with client_of(kit, FormGuard("kit_csrf", path="/", origins=["http://site.test"])) as http:
        first = await http.get("/")
        second = await http.get("/")
        token = re.search(r'name="csrf" value="([^"]+)"', first.text)
        assert token is not None
        from_here = await http.post("/form", data={"csrf": token.group(1)}, headers={"Origin": "http://site.test"})
        from_elsewhere = await http.post(
            "/form", data={"csrf": token.group(1)}, headers={"Origin": "https://evil.test"}
        )
        forged = await http.post("/form", data={"csrf": "x" * 43})

    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"kit_csrf={token.group(1)};")
    assert {"httponly", "samesite=strict", "path=/"} <= {p.strip().lower() for p in cookie.split(";")}
    assert "secure" not in cookie.lower()
    assert "set-cookie" not in second.headers and token.group(1) in second.text
    assert from_here.status_code == 303
    assert (from_elsewhere.status_code, from_elsewhere.text) == (403, "cross_site")
    assert (forged.status_code, forged.text) == (403, "no_token")


async def test_a_guard_for_a_site_behind_https_sets_a_secure_cookie_even_over_plain_http(tmp_path: Path) -> None:
    kit = kit_in(tmp_path, page=PAGE, problem=PROBLEM)
    async with client_of(kit, FormGuard("kit_csrf", secure=True)) as http:
        page = await http.get("/")

    assert "secure" in {p.strip().lower() for p in page.headers["set-cookie"].split(";")}


def test_every_template_file_is_shipped_with_the_package() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["askback"]
    files = [p for p in SRC.rglob("templates/*") if p.is_file()]
    assert {p.suffix for p in files} >= {".html", ".css"}
    for path in files:
        relative = path.relative_to(SRC).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), f"{relative} is not package data"


PRODUCTS = ("askback.server", "askback.accounts", "askback.runtime", "askback.cli", "askback.demo")


@pytest.mark.parametrize("path", [*sorted((SRC / "pages").glob("*.py")), SRC / "asgi.py"], ids=lambda p: p.name)
def test_the_page_kit_imports_no_product(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        for name in names:
            assert not name.startswith(PRODUCTS), f"{path.name} imports {name}"


@pytest.mark.http
def test_importing_the_page_kit_loads_no_product() -> None:
    code = "import sys, askback.web.pages; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not [m for m in loaded if m.startswith(PRODUCTS)]


PAGE_MODULES = [
    *sorted((SRC / "pages").glob("*.py")),
    *sorted((SRC / "runtime" / "inbox").glob("*.py")),
    SRC / "accounts" / "pages.py",
    SRC / "asgi.py",
]


@pytest.mark.parametrize("path", PAGE_MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_module_of_the_pages_is_at_most_500_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 500
