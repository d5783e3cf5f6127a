"""Real infrastructure for tests, on loopback: a PostgreSQL server, `askback serve` instances, nginx in front,
oidc-provider, Debian's Chromium, and a test's own small servers (a standard-library one on a thread, an ASGI app
under uvicorn).

Every piece runs from a temporary folder and is stopped at the end, also when a test fails. PostgreSQL and nginx
come from Debian's packages (`.ci/run` installs them when missing). No sleeps: waits poll a condition with a
deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import pytest

from askback.testing import free_port

if TYPE_CHECKING:
    from playwright.async_api import Browser as AsyncBrowser
    from playwright.async_api import BrowserContext as AsyncBrowserContext
    from playwright.sync_api import Browser as SyncBrowser
    from playwright.sync_api import BrowserContext as SyncBrowserContext

# The repository and the tests' fixture modules, for every test whatever folder it sits in: fixture servers are
# served as `tests.fixtures.x:server` with the repository as their working directory.
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

# Ports held for the life of the test process: see held_port.
_HELD: list[socket.socket] = []


def held_port() -> int:
    """A loopback port that stays this process's until it exits, for a port a module names before its server starts
    (a redirect URI registered at the provider, say). The port is bound, with SO_REUSEADDR, and never listened on: the
    kernel gives it to no other bind(0) and to no outgoing connection, so minutes later it is still free for the
    server (uvicorn, askback serve, nginx and asyncio all bind with SO_REUSEADDR), where `free_port`'s port may by
    then be another process's."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])


def run_askback(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run the `askback` command as a user would, without this process's ASKBACK_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    return subprocess.run(
        [sys.executable, "-m", "askback", *args],
        cwd=cwd,
        env={**clean, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_until(check: Callable[[], bool], *, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        time.sleep(0.05)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found[-1]


def _as_postgres(args: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; tests run as root in CI.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@dataclass
class Postgres:
    """A throwaway PostgreSQL cluster listening on 127.0.0.1 only."""

    root: Path
    port: int = field(default_factory=free_port)
    password: str = "askback-test-pw"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "askback") -> str:
        return f"postgresql://askback:{self.password}@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        subprocess.run(
            _as_postgres(
                [_pg_bin("initdb"), "-D", str(self.data), "-U", "askback", f"--pwfile={pwfile}", "-A", "scram-sha-256"]
            ),
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        subprocess.run(
            _as_postgres(
                [
                    _pg_bin("pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.root / "log"),
                    "-w",
                    "-o",
                    f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{self.root}' "
                    "-c fsync=off -c max_connections=200",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(
            _as_postgres([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
            capture_output=True,
        )

    def create_database(self, name: str) -> None:
        subprocess.run(
            _as_postgres([_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "askback", name]),
            check=True,
            capture_output=True,
            env={**os.environ, "PGPASSWORD": self.password},
        )


@contextlib.contextmanager
def postgres() -> Iterator[Postgres]:
    # Not under pytest's tmp_path: the postgres user must be able to reach its folder, and tmp_path is root-only.
    root = Path(tempfile.mkdtemp(prefix="askback-pg-"))
    root.chmod(0o755)
    pg = Postgres(root / "cluster")
    try:
        pg.init()
        pg.start()
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Instance:
    """One `askback serve` process."""

    target: str
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    workers: int = 1
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=lambda: Path("/dev/null"))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    def start(self, *, wait: bool = True) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
        self.log = Path(tempfile.mkdtemp(prefix="askback-instance-")) / "serve.log"
        with self.log.open("w") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "askback",
                    "serve",
                    self.target,
                    "--port",
                    str(self.port),
                    "--workers",
                    str(self.workers),
                ],
                env={**clean, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            wait_until(self.healthy, timeout=60, what=f"askback on port {self.port}")

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            out = self.log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"askback on port {self.port} exited with {self.proc.returncode}:\n{out}")
        try:
            return httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL the whole process group: no clean shutdown, like a machine dying."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.log.name == "serve.log" and not os.environ.get("ASKBACK_KEEP_LOGS"):
            shutil.rmtree(self.log.parent, ignore_errors=True)


NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
{user}
events {{ worker_connections 1024; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;

    upstream askback {{
{servers}
        keepalive 32;
        # Below uvicorn's 5 s idle timeout, so nginx never reuses a connection the instance is closing.
        keepalive_timeout 4s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://askback;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host:$server_port;
            proxy_buffering off;
            proxy_read_timeout 60s;
            # An instance that is down (connection refused) is skipped for the next one.
            proxy_next_upstream error timeout;
            proxy_connect_timeout 2s;
        }}
    }}
}}
"""


@dataclass
class Nginx:
    root: Path
    upstreams: list[int]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def config(self) -> str:
        servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;" for p in self.upstreams)
        user = "user root;" if os.geteuid() == 0 else ""
        return NGINX_CONF.format(root=self.root, servers=servers, port=self.port, user=user)

    def start(self) -> None:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "nginx.conf"
        conf.write_text(self.config())
        self.proc = subprocess.Popen(
            [nginx, "-p", str(self.root), "-c", str(conf)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=30, what="nginx")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


@contextlib.contextmanager
def running_process(
    argv: list[str],
    *,
    ready: Callable[[], bool],
    what: str,
    log: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    own_settings: bool = False,
) -> Iterator[None]:
    """Run `argv` in a process group of its own until the block ends, once `ready()` holds (within 60 s). Its output
    goes to `log`, shown when it fails to start or when the block raises; the group is stopped (SIGTERM, then
    SIGKILL) at the end. With `own_settings`, it does not inherit this process's ASKBACK_* settings (only `env`'s)."""
    inherited = {k: v for k, v in os.environ.items() if not (own_settings and k.startswith("ASKBACK_"))}
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**inherited, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def started() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        return ready()

    try:
        try:
            wait_until(started, timeout=60, what=what)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; its log:\n{log.read_text(errors='replace')}") from None
        try:
            yield
        except BaseException:
            print(f"--- {what} log ---\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
            raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextlib.contextmanager
def inbox_serving(
    database: str, *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[str]:
    """`askback inbox serve --database DATABASE ARGS...` on a free loopback port, in its own process and with no
    ASKBACK_* settings but `env`'s, until the block ends; yields its base URL once its first page answers. Its
    output goes to `log` (a file of its own when not given)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{base}/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    argv = [sys.executable, "-m", "askback", "inbox", "serve", "--database", database, "--port", str(port), *args]
    log = log or Path(tempfile.mkdtemp(prefix="askback-inbox-")) / "inbox.log"
    with running_process(argv, ready=ready, what="askback inbox serve", log=log, env=env, own_settings=True):
        yield base


@contextlib.contextmanager
def behind_nginx(
    target: str, env: dict[str, str], root: Path, *, count: int = 3, port: int | None = None
) -> Iterator[tuple[list[Instance], Nginx]]:
    """`count` `askback serve TARGET` instances with `env`, and nginx's round-robin in front of them (its files under
    `root`, listening on `port` or a free one); all stopped when the block ends."""
    instances = [Instance(target, env) for _ in range(count)]
    ports = [i.port for i in instances]
    nginx = Nginx(root, ports) if port is None else Nginx(root, ports, port=port)
    try:
        for instance in instances:
            instance.start()
        nginx.start()
        yield instances, nginx
    finally:
        nginx.stop()
        for instance in instances:
            instance.stop()


# An OAuth 2.0 / OpenID Connect authorization server (oidc-provider, run by interop/oidc/provider.mjs under Node 22),
# and a headless Chromium to click through its pages. Their behaviour, login and consent pages are described at the
# top of interop/oidc/provider.mjs.

INTEROP = ROOT / "interop"
OIDC_PROVIDER_SCRIPT = INTEROP / "oidc" / "provider.mjs"


def _installed_interop_version(package: str) -> tuple[str | None, str]:
    lock = json.loads((INTEROP / "package-lock.json").read_text())
    wanted: str = lock["packages"][f"node_modules/{package}"]["version"]
    installed = INTEROP / "node_modules" / package / "package.json"
    have = json.loads(installed.read_text())["version"] if installed.exists() else None
    return have, wanted


@functools.cache
def interop_node() -> Path:
    """The Node >= 22 binary (from interop/node.sh), with interop/node_modules installed from the lockfile (again
    when any package interop/package.json names is missing or at another version).

    Like interop/conformance.sh: `npm ci` runs first, with the machine's Node, since it replaces interop/node_modules,
    where interop/node.sh may have installed Node 22."""
    # Test processes running side by side (pytest -n) install one at a time: `npm ci` replaces interop/node_modules.
    with open(INTEROP / ".install.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _installed_interop_node()


def _installed_interop_node() -> Path:
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
    env.setdefault("HOME", tempfile.mkdtemp(prefix="askback-npm-home-"))  # npm's cache goes under HOME
    package = json.loads((INTEROP / "package.json").read_text())
    missing = [name for name in package["dependencies"] if len(set(_installed_interop_version(name))) != 1]
    if missing:
        if shutil.which("npm") is None:
            raise RuntimeError("npm is needed to install interop/node_modules (apt-get install npm)")
        installed = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=INTEROP,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if installed.returncode != 0:
            raise RuntimeError(f"npm ci in interop/ failed:\n{installed.stderr[-4000:]}")
    found = subprocess.run(
        ["bash", str(INTEROP / "node.sh")], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if found.returncode != 0:
        raise RuntimeError(f"interop/node.sh could not provide Node 22:\n{found.stderr[-4000:]}")
    return Path(found.stdout.strip()) / "node"


@dataclass
class OidcProvider:
    """One oidc-provider process on 127.0.0.1 with one confidential client (`client_id`, `client_secret`): PKCE S256
    required, authorization_code and refresh_token grants, rotating refresh tokens with reuse detection, RFC 7009
    revocation. Refresh tokens come with scope `offline_access` asked for together with `prompt=consent`."""

    redirect_uris: list[str]
    access_token_ttl: int = 60
    refresh_token_ttl: int = 86400
    client_id: str = "askback-test"
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    token_endpoint_auth_method: str = "client_secret_basic"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=lambda: Path("/dev/null"))
    metadata: dict[str, Any] = field(default_factory=dict)
    """The discovery document, read once the provider answers."""
    resources: dict[str, dict[str, str]] | None = None
    """RFC 8707 resources by URL, each `{"scope": "a b", "audience"?: "..."}`: their tokens are RFC 9068 JWTs."""
    client_credentials: bool = False
    """The client_credentials grant enabled, and allowed to the client."""
    registration: bool = False
    """Open dynamic client registration (RFC 7591)."""
    jwks: dict[str, Any] | None = None
    """`{"keys": [private JWKs]}` to sign with; None: oidc-provider's development key."""
    scopes: list[str] | None = None
    """The provider's scopes; None: openid, offline_access, read, write."""
    extra_clients: list[dict[str, Any]] = field(default_factory=list)
    """More clients' metadata, after the one above."""
    accounts: dict[str, dict[str, Any]] | None = None
    """More claims of some accounts by login name (`{"erin": {"groups": ["sre"]}}`), in their ID tokens."""

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def authorization_endpoint(self) -> str:
        return str(self.metadata["authorization_endpoint"])

    @property
    def token_endpoint(self) -> str:
        return str(self.metadata["token_endpoint"])

    @property
    def revocation_endpoint(self) -> str:
        return str(self.metadata["revocation_endpoint"])

    @property
    def jwks_uri(self) -> str:
        return str(self.metadata["jwks_uri"])

    def config(self) -> dict[str, Any]:
        grant_types = ["authorization_code", "refresh_token"]
        if self.client_credentials:
            grant_types.append("client_credentials")
        client = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "redirect_uris": self.redirect_uris,
            "grant_types": grant_types,
            "response_types": ["code"],
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
        }
        config: dict[str, Any] = {
            "port": self.port,
            "accessTokenTtl": self.access_token_ttl,
            "refreshTokenTtl": self.refresh_token_ttl,
            "clients": [client, *self.extra_clients],
        }
        if self.resources is not None:
            config["resources"] = self.resources
        if self.client_credentials:
            config["clientCredentials"] = True
        if self.registration:
            config["registration"] = True
        if self.jwks is not None:
            config["jwks"] = self.jwks
        if self.scopes is not None:
            config["scopes"] = self.scopes
        if self.accounts is not None:
            config["accounts"] = self.accounts
        return config

    def client_credentials_token(self, resource: str, scope: str) -> str:
        """A fresh access token for `resource` with `scope`, from the client_credentials grant (basic auth)."""
        response = httpx.post(
            self.token_endpoint,
            data={"grant_type": "client_credentials", "resource": resource, "scope": scope},
            auth=(self.client_id, self.client_secret),
            timeout=10,
        )
        if response.status_code != 200:
            raise RuntimeError(f"client_credentials at {self.token_endpoint}: {response.status_code} {response.text}")
        token: str = response.json()["access_token"]
        return token

    def restart(self, *, jwks: dict[str, Any] | None = None) -> None:
        """Stop, then start again on the same port and issuer with `jwks` as the signing keys (its state, in memory,
        is gone: clients in the configuration stay, tokens and grants do not)."""
        self.stop()
        self.jwks = jwks
        self.start()

    def start(self) -> None:
        node = interop_node()
        self.log = Path(tempfile.mkdtemp(prefix="askback-oidc-")) / "provider.log"
        with self.log.open("w") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [str(node), str(OIDC_PROVIDER_SCRIPT), "--config", json.dumps(self.config())],
                cwd=INTEROP,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_until(self.ready, timeout=30, what=f"oidc-provider's discovery on port {self.port}")
        except TimeoutError as e:
            raise TimeoutError(f"{e}; its log ({self.log}):\n{self.log_tail()}") from None

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"oidc-provider on port {self.port} exited with {self.proc.returncode}:\n{self.log_tail()}"
            )
        try:
            response = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=1)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        self.metadata = response.json()
        return True

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def counters(self) -> dict[str, Any]:
        """Requests that reached the provider since it started or since `reset_counters()`:
        `{"token": {"authorization_code": n, "refresh_token": n, ...}, "revocation": n, "refresh_token_reuse": n}`,
        and `"jwks": n` (GET /jwks) when `resources` or `jwks` is set."""
        response = httpx.get(f"{self.issuer}/__counters", timeout=5)
        response.raise_for_status()
        counts: dict[str, Any] = response.json()
        return counts

    def reset_counters(self) -> None:
        httpx.post(f"{self.issuer}/__counters/reset", timeout=5).raise_for_status()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.log.name == "provider.log" and not os.environ.get("ASKBACK_KEEP_LOGS"):
            shutil.rmtree(self.log.parent, ignore_errors=True)


@contextlib.contextmanager
def oidc_provider(
    redirect_uris: list[str],
    *,
    access_token_ttl: int = 60,
    refresh_token_ttl: int = 86400,
    resources: dict[str, dict[str, str]] | None = None,
    client_credentials: bool = False,
    registration: bool = False,
    jwks: dict[str, Any] | None = None,
    scopes: list[str] | None = None,
    extra_clients: list[dict[str, Any]] | None = None,
    port: int | None = None,
    accounts: dict[str, dict[str, Any]] | None = None,
) -> Iterator[OidcProvider]:
    """A fresh authorization server (its state lives in memory) for the block; its log is printed to stderr when the
    block raises, so pytest shows it with the failure. The keyword arguments are `OidcProvider`'s fields."""
    provider = OidcProvider(
        redirect_uris=list(redirect_uris),
        access_token_ttl=access_token_ttl,
        refresh_token_ttl=refresh_token_ttl,
        resources=resources,
        client_credentials=client_credentials,
        registration=registration,
        jwks=jwks,
        scopes=scopes,
        extra_clients=list(extra_clients or []),
        port=free_port() if port is None else port,
        accounts=accounts,
    )
    try:
        provider.start()  # when the start fails, its error carries the log
        try:
            yield provider
        except BaseException:
            print(f"--- oidc-provider log ({provider.log}) ---\n{provider.log_tail()}", file=sys.stderr)
            raise
    finally:
        provider.stop()


# Debian's chromium (`.ci/run` installs it); never Playwright's downloaded browsers, which are unreachable here.
# Every host name but localhost fails to resolve, so a page never waits on the internet (oidc-provider's pages
# import a web font).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]


def _chromium_executable() -> str:
    executable = shutil.which("chromium")
    if executable is None:
        raise RuntimeError("Debian's chromium is not installed: apt-get install chromium (.ci/run does)")
    return executable


@contextlib.contextmanager
def chromium() -> Iterator[SyncBrowser]:
    """A headless Chromium driven by Playwright's sync API (not inside an event loop: use `async_chromium` there)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium_executable(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.asynccontextmanager
async def async_chromium() -> AsyncIterator[AsyncBrowser]:
    """A headless Chromium driven by Playwright's async API (asyncio)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=_chromium_executable(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


STEP_TIMEOUT_MS = 10_000
"""How long one browser step (a click, a navigation, a wait for an element) may take before the test fails."""


def browser_context(browser: SyncBrowser, *, timeout_ms: float = STEP_TIMEOUT_MS) -> SyncBrowserContext:
    """A fresh context of `browser` (a person's own browser, cookies of its own), each step bounded by `timeout_ms`;
    it is closed with the browser, or earlier by the test."""
    context = browser.new_context()
    context.set_default_timeout(timeout_ms)
    context.set_default_navigation_timeout(timeout_ms)
    return context


async def async_browser_context(browser: AsyncBrowser, *, timeout_ms: float = STEP_TIMEOUT_MS) -> AsyncBrowserContext:
    """`browser_context` with Playwright's async API."""
    context = await browser.new_context()
    context.set_default_timeout(timeout_ms)
    context.set_default_navigation_timeout(timeout_ms)
    return context


# A test's own servers on 127.0.0.1 (a provider's stand-in, a resource server, a redirect URI, another site), and
# an ASGI app under uvicorn on a listening socket: each answers until its block ends, also when the test fails.


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler of a test's own standard-library server: `answer` sends a whole response, and no request
    is logged (a test records what it needs itself)."""

    def answer(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving_http(server: HTTPServer) -> Iterator[str]:
    """`server` (bound on 127.0.0.1) answering on a thread of its own until the block ends; yields its base URL."""
    # shutdown() returns at the serving loop's next poll: a short interval keeps each test quick.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.asynccontextmanager
async def serving_asgi(
    app: Any,
    listener: socket.socket,
    *,
    lifespan: Literal["auto", "on", "off"] = "auto",
    log_level: str = "warning",
) -> AsyncIterator[str]:
    """The ASGI `app` under uvicorn on `listener` (a loopback socket already listening, as the `listener` fixture
    gives), on the running event loop until the block ends; yields its base URL once uvicorn has started."""
    import anyio
    import uvicorn

    ready = anyio.Event()

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                await super().startup(sockets)
            except SystemExit:
                # uvicorn exits the process when the app's startup fails; here the test fails instead, with its log.
                self.should_exit = True
            finally:
                ready.set()  # started, or gave up (the app's startup failed): `started` says which

    server = Server(uvicorn.Config(app, lifespan=lifespan, log_level=log_level, timeout_graceful_shutdown=5))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve, [listener])
        try:
            with anyio.fail_after(15):
                await ready.wait()
            if not server.started:
                raise RuntimeError("uvicorn did not start the app (its log above says why)")
            yield f"http://127.0.0.1:{listener.getsockname()[1]}"
        finally:
            server.should_exit = True


# Where a flow's answers wait between rounds matters to a few modules: those run each test in both places, the
# sealed state (the default) and the store (`ASKBACK_ANSWERS=server`); the others in the default only.
BOTH_ANSWER_MODES = pytest.mark.usefixtures("answers_mode")  # in process (`make_settings`, `demo`)
BOTH_ANSWER_MODES_OVER_HTTP = pytest.mark.parametrize("demo_server", ["state", "server"], indirect=True, scope="module")
