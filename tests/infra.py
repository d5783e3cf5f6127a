"""Real infrastructure for tests, on loopback: a PostgreSQL server, `askback serve` instances, and nginx in front.

Every piece runs from a temporary folder and is stopped at the end, also when a test fails. PostgreSQL and nginx
come from Debian's packages (`.ci/run` installs them when missing). No sleeps: waits poll a condition with a
deadline.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from askback.testing import free_port


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
