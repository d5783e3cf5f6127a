"""What scale-out costs: askback on one instance or three behind nginx, on SQLite or PostgreSQL, against the bare SDK.

One flow is the demo's `deploy {service}` without an environment: round one asks `pick_env`, round two answers
"staging" and the tool records the deployment once and completes. The bare baseline runs bench_flow.py's hand-written
two-round tool (`bench_flow.py --serve bare`, the same process bench_flow.py starts). Three groups of three processes
(askback on one SQLite file, askback on one PostgreSQL database, bare) are up together on this machine, each process
one uvicorn worker, and six configurations reach them; a direct one talks to the first process of its group:

    (a) askback x1 direct, SQLite file        (e) bare SDK x1 direct             (baseline for a and b)
    (b) askback x1 direct, PostgreSQL         (f) bare SDK x3 behind nginx       (baseline for c and d)
    (c) askback x3 behind nginx, PostgreSQL
    (d) askback x3 behind nginx, one SQLite file shared by the three

The client is this process: a fixed number of worker tasks (8 by default), each with its own kept-alive HTTP
connection per configuration and a new SDK client per flow, driving the rounds by hand (`allow_input_required=True`).
Configurations take turns in batches (the order rotates every turn) so that the machine's noise lands on all of
them; flows/s is the flows of a configuration over the wall time of its batches. While a batch runs, the CPU time of
every process involved is read from /proc, to show where the time goes. Figures are printed, never asserted: see
benchmarks/README.md.

    python benchmarks/bench_scaleout.py            # under two minutes on 2 quiet cores
    python benchmarks/bench_scaleout.py --quick    # under half a minute, rough figures
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, InputResponses

from askback.store import Store
from askback.testing import answered_by_hand, free_port, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the test suite's infrastructure: PostgreSQL, `askback serve`, nginx

import bench_flow  # noqa: E402 - next to this file

from infra import Instance, Nginx, Postgres, _pg_bin, postgres, wait_until  # noqa: E402

DEMO = "askback.demo:server"
TOKEN = "demo-bench"  # demo authentication: user "bench"
STAGING: InputResponses = {"pick_env": ElicitResult(action="accept", content={"environment": "staging"})}
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Group:
    """Three server processes of one kind, sharing one database (askback) or nothing (bare)."""

    name: str
    side: str  # "askback" or "bare"
    database: str  # "sqlite", "postgresql" or "" (bare)


SQLITE = Group("askback-sqlite", "askback", "sqlite")
PG = Group("askback-pg", "askback", "postgresql")
BARE = Group("bare", "bare", "")
INSTANCES = 3


@dataclass(frozen=True)
class Config:
    """A way to reach a group: its first instance directly, or all three behind nginx."""

    letter: str
    label: str
    group: Group
    nginx: bool
    baseline: str | None  # the letter of the bare configuration it is compared with

    @property
    def name(self) -> str:
        return f"({self.letter}) {self.label}"


CONFIGS = (
    Config("a", "askback-sqlite-1", SQLITE, False, "e"),
    Config("b", "askback-pg-1", PG, False, "e"),
    Config("c", "askback-pg-3-nginx", PG, True, "f"),
    Config("d", "askback-sqlite-3-nginx", SQLITE, True, "f"),
    Config("e", "bare-1", BARE, False, None),
    Config("f", "bare-3-nginx", BARE, True, None),
)


class BenchError(RuntimeError):
    """Something did not start, or a flow did not go as a two-round flow must: the figures would be meaningless."""


# --- the processes --------------------------------------------------------------------------------------------


class BareServer:
    """bench_flow.py's bare-SDK server in its own process (`bench_flow.py --serve bare`), one uvicorn worker."""

    def __init__(self, key: str, log: Path) -> None:
        self.key = key
        self.port = free_port()
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, bench_flow.__file__, "--serve", "bare", "--port", str(self.port)],
                env={**os.environ, bench_flow.KEY_ENV: key},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the benchmark only; it stops this process itself
            )

    def listening(self) -> bool:
        if self.proc.poll() is not None:
            raise BenchError(f"the bare server stopped while starting:\n{self.log.read_text(errors='replace')[-4000:]}")
        # uvicorn listens only once the app's start-up is done. The bare app has no /healthz.
        return bench_flow._listening(self.port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@dataclass
class BenchNginx(Nginx):
    """tests/infra.py's nginx with this benchmark's upstream keep-alive and, in front of servers without one, /healthz.

    Without `keepalive` in the upstream block nginx opens a new connection to an instance for every request, whatever
    `proxy_http_version` says. uvicorn closes a connection idle for 5 s, so nginx lets its idle ones go after 4 s
    rather than risk sending a request on a connection just being closed (a POST is not retried: a 502).
    """

    keepalive: int = 16
    local_healthz: bool = False

    def config(self) -> str:
        conf = super().config()
        start = conf.index("upstream askback {")
        end = conf.index("\n    }", start)
        # Whatever tests/infra.py keeps alive, this benchmark says how many, and for how long.
        block = re.sub(r"\n\s*keepalive(_timeout)?\s[^;]*;", "", conf[start:end])
        if self.keepalive:
            block += f"\n        keepalive {self.keepalive};\n        keepalive_timeout 4s;"
        conf = conf[:start] + block + conf[end:]
        if self.local_healthz:
            location = "\n        location / {"
            if conf.count(location) != 1:
                raise BenchError(f"tests/infra.py's nginx configuration changed: {location!r} is not there once")
            conf = conf.replace(location, '\n        location = /healthz { return 200 "ok\\n"; }' + location)
        return conf


@dataclass
class Target:
    """One configuration, up: where to send flows and which processes to read the CPU time of."""

    config: Config
    url: str
    server_pids: list[int]
    nginx_pid: int | None


@dataclass
class Cluster:
    targets: list[Target]
    postgres_pid: int
    versions: str
    startup_seconds: float


def _upgrade(url: str) -> None:
    # What `askback db upgrade --database URL` runs, here in this process: it has askback imported already, and a
    # process per database would only add its start-up to the benchmark's.
    async def upgrade() -> None:
        store = await Store.open(url, migrate=False, check=False)
        try:
            await store.database.upgrade()
        finally:
            await store.close()

    anyio.run(upgrade)


def _start_instances(stack: contextlib.ExitStack, url: str, keys: str) -> list[Instance]:
    """Migrate first, as in production; then start the group's instances together, without waiting for them."""
    _upgrade(url)
    instances = []
    for _ in range(INSTANCES):
        instance = Instance(DEMO, {"ASKBACK_DATABASE_URL": url, "ASKBACK_STATE_KEYS": keys})
        stack.callback(_stop_instance, instance)
        instance.start(wait=False)
        instances.append(instance)
    return instances


def _stop_instance(instance: Instance) -> None:
    instance.stop()
    if instance.log != Path("/dev/null"):  # Instance.start logs to a folder of its own in /tmp
        with contextlib.suppress(OSError):
            instance.log.unlink()
            instance.log.parent.rmdir()


def _version(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0]


def start_cluster(stack: contextlib.ExitStack, workdir: Path, upstream_keepalive: int) -> Cluster:
    """Start everything, registering each process's stop with `stack` before waiting for it to come up.

    Three processes per group; a direct configuration talks to the group's first instance, so that (a) and (d), or
    (b) and (c), measure the same processes and the same database, one way or the other. What does not depend on
    PostgreSQL starts first and comes up while the cluster is made.
    """
    started = time.monotonic()
    keys = secrets.token_urlsafe(48)
    bare: list[BareServer] = []
    for i in range(INSTANCES):
        server = BareServer(secrets.token_urlsafe(36) if i == 0 else bare[0].key, workdir / f"bare-{i}.log")
        stack.callback(server.stop)
        bare.append(server)
    processes: dict[Group, list[Instance]] = {}
    processes[SQLITE] = _start_instances(stack, f"sqlite:///{workdir / 'askback.db'}", keys)
    pg: Postgres = stack.enter_context(postgres())
    pg.create_database("askback")
    processes[PG] = _start_instances(stack, pg.url("askback"), keys)
    for members in processes.values():
        for instance in members:
            wait_until(instance.healthy, timeout=90, what=f"askback on port {instance.port}")
    for server in bare:
        wait_until(server.listening, timeout=90, what=f"the bare server on port {server.port}")

    ports = {
        SQLITE: [i.port for i in processes[SQLITE]],
        PG: [i.port for i in processes[PG]],
        BARE: [s.port for s in bare],
    }
    pids = {
        SQLITE: [i.proc.pid for i in processes[SQLITE] if i.proc is not None],
        PG: [i.proc.pid for i in processes[PG] if i.proc is not None],
        BARE: [s.proc.pid for s in bare],
    }
    targets: list[Target] = []
    for config in CONFIGS:
        group = config.group
        if not config.nginx:
            targets.append(Target(config, f"http://127.0.0.1:{ports[group][0]}/mcp", pids[group][:1], None))
            continue
        nginx = BenchNginx(
            workdir / f"nginx-{config.letter}",
            ports[group],
            keepalive=upstream_keepalive,
            local_healthz=group.side == "bare",
        )
        stack.callback(nginx.stop)
        nginx.start()
        assert nginx.proc is not None
        targets.append(Target(config, nginx.url, pids[group], nginx.proc.pid))

    postgres_pid = int((pg.data / "postmaster.pid").read_text().split()[0])
    versions = f"{_version([_pg_bin('postgres'), '--version'])}, {_version([shutil.which('nginx') or '/usr/sbin/nginx', '-v'])}"
    return Cluster(targets, postgres_pid, versions, time.monotonic() - started)


# --- CPU time from /proc ------------------------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks so far) for every process that can be read.

    The ticks are the process's own (user + system) and those of its children that ended and were waited for: a
    PostgreSQL backend that exits during a batch (a connection closed) moves its time to the postmaster, rather than
    take it out of the sum.
    """
    found: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on, after "pid (command) "
        found[int(entry.name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))  # utime stime cutime cstime
    return found


def _tree_ticks(processes: dict[int, tuple[int, int]], roots: Sequence[int]) -> int:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    total = 0
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in processes:
            total += processes[pid][1]
            todo.extend(children.get(pid, []))
    return total


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat."""
    # user nice system idle iowait irq softirq steal; guest time is already in user and nice.
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def machine_busy(seconds: float) -> float:
    """How busy the machine is over the next `seconds`, in percent of all its CPUs."""
    busy, total = _machine_ticks()
    time.sleep(seconds)
    busy_after, total_after = _machine_ticks()
    return 100 * (busy_after - busy) / max(total_after - total, 1)


@dataclass
class CpuSnapshot:
    servers: int
    nginx: int
    postgres: int
    machine: tuple[int, int]


def cpu_snapshot(target: Target, postgres_pid: int) -> CpuSnapshot:
    processes = _processes()
    return CpuSnapshot(
        servers=_tree_ticks(processes, target.server_pids),
        nginx=_tree_ticks(processes, [target.nginx_pid] if target.nginx_pid else []),
        postgres=_tree_ticks(processes, [postgres_pid]),
        machine=_machine_ticks(),
    )


# --- driving flows -------------------------------------------------------------------------------------------------


@dataclass
class Samples:
    """What a configuration's measured batches gave: per-round times in ns, wall and CPU seconds."""

    flows: int = 0
    wall: float = 0.0
    rounds: list[int] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    second: list[int] = field(default_factory=list)
    listing: list[int] = field(default_factory=list)
    cpu_client: float = 0.0
    cpu_servers: float = 0.0
    cpu_nginx: float = 0.0
    cpu_postgres: float = 0.0
    machine_busy: int = 0
    machine_total: int = 0

    def add_cpu(self, before: CpuSnapshot, after: CpuSnapshot, uses_postgres: bool) -> None:
        self.cpu_servers += (after.servers - before.servers) / CLK_TCK
        self.cpu_nginx += (after.nginx - before.nginx) / CLK_TCK
        if uses_postgres:
            self.cpu_postgres += (after.postgres - before.postgres) / CLK_TCK
        self.machine_busy += after.machine[0] - before.machine[0]
        self.machine_total += after.machine[1] - before.machine[1]


async def one_flow(target: Target, http: httpx2.AsyncClient, n: int, samples: Samples | None) -> None:
    """One two-round flow with a new SDK client over the worker's kept-alive connection."""
    askback = target.config.group.side == "askback"
    tool, arguments = ("deploy", {"service": f"svc-{n}"}) if askback else (bench_flow.TOOL, {"item": f"item-{n}"})
    answers, expected = (STAGING, f"Deployed svc-{n} to staging.") if askback else (bench_flow.YES, f"Wrote item-{n}.")
    transport = streamable_http_client(target.url, http_client=http)
    async with Client(transport, mode=bench_flow.MODE, elicitation_callback=answered_by_hand) as client:
        t0 = time.perf_counter_ns()
        # Listed before the rounds: the client checks a result against the tool's output schema and lists the tools
        # first if it has not. Timed apart; it is inside the flows/s wall time, as it is for a real client.
        await client.list_tools()
        t1 = time.perf_counter_ns()
        first = await client.session.call_tool(tool, arguments, allow_input_required=True)
        t2 = time.perf_counter_ns()
        if not isinstance(first, InputRequiredResult) or first.request_state is None:
            raise BenchError(f"{target.config.name}: round one should ask, got {first!r}")
        second = await client.session.call_tool(
            tool, arguments, input_responses=answers, request_state=first.request_state, allow_input_required=True
        )
        t3 = time.perf_counter_ns()
    if not isinstance(second, CallToolResult) or second.is_error:
        raise BenchError(f"{target.config.name}: round two should complete, got {second!r}")
    said = text(second)
    if said != expected:
        raise BenchError(f"{target.config.name}: round two completed with {said!r}, expected {expected!r}")
    if samples is not None:
        samples.listing.append(t1 - t0)
        samples.first.append(t2 - t1)
        samples.second.append(t3 - t2)
        samples.rounds += [t2 - t1, t3 - t2]


async def _touch(http: httpx2.AsyncClient, url: str) -> None:
    # Opens (or reopens) the worker's connection outside the timed batch: uvicorn closes a connection idle for 5 s,
    # which a turn of the other configurations can exceed. Any answer will do.
    health = url.removesuffix("/mcp") + "/healthz"
    try:
        await http.get(health)
    except httpx2.TransportError:  # closed by the server just as it was reused: once more, on a new connection
        await http.get(health)


async def batch(
    target: Target, pool: list[httpx2.AsyncClient], flows: int, first: int, samples: Samples | None, postgres_pid: int
) -> None:
    """`flows` flows, `len(pool)` at a time; with `samples`, timed and accounted."""
    async with anyio.create_task_group() as tg:
        for http in pool:
            tg.start_soon(_touch, http, target.url)
    numbers = iter(range(first, first + flows))

    async def worker(http: httpx2.AsyncClient) -> None:
        for n in numbers:
            await one_flow(target, http, n, samples)

    before = cpu_snapshot(target, postgres_pid) if samples is not None else None
    start, client_start = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for http in pool:
            tg.start_soon(worker, http)
    wall, client_cpu = time.perf_counter() - start, time.process_time() - client_start
    if samples is not None and before is not None:
        samples.add_cpu(before, cpu_snapshot(target, postgres_pid), target.config.group.database == "postgresql")
        samples.cpu_client += client_cpu
        samples.wall += wall
        samples.flows += flows


@dataclass(frozen=True)
class Plan:
    concurrency: int
    cycles: int
    batch: int
    warmup: int
    upstream_keepalive: int


async def measure(cluster: Cluster, plan: Plan) -> dict[str, Samples]:
    samples = {t.config.letter: Samples() for t in cluster.targets}
    next_flow = {t.config.letter: 0 for t in cluster.targets}
    async with contextlib.AsyncExitStack() as stack:
        pools: dict[str, list[httpx2.AsyncClient]] = {}
        for target in cluster.targets:
            pools[target.config.letter] = [
                await stack.enter_async_context(
                    httpx2.AsyncClient(timeout=httpx2.Timeout(60.0), headers={"Authorization": f"Bearer {TOKEN}"})
                )
                for _ in range(plan.concurrency)
            ]

        async def run(target: Target, flows: int, record: bool) -> None:
            letter = target.config.letter
            await batch(
                target,
                pools[letter],
                flows,
                next_flow[letter],
                samples[letter] if record else None,
                cluster.postgres_pid,
            )
            next_flow[letter] += flows

        for target in cluster.targets:
            await run(target, plan.warmup, False)
        for cycle in range(plan.cycles):
            shift = cycle % len(cluster.targets)
            for target in cluster.targets[shift:] + cluster.targets[:shift]:
                await run(target, plan.batch, True)
            print(f"  turn {cycle + 1}/{plan.cycles} done", file=sys.stderr, flush=True)
    return samples


# --- the report -----------------------------------------------------------------------------------------------------


def _ms(ns: float) -> float:
    return ns / 1e6


def _p99(values: Sequence[int]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def report(cluster: Cluster, plan: Plan, samples: dict[str, Samples]) -> None:
    by_letter = {t.config.letter: t.config for t in cluster.targets}
    width = max(len(c.name) for c in by_letter.values())

    def rate(letter: str) -> float:
        return samples[letter].flows / samples[letter].wall

    def p50(letter: str) -> float:
        return statistics.median(samples[letter].rounds)

    print(f"\nthroughput and latency per round ({plan.concurrency} flows at a time; a flow is 2 rounds)")
    for letter, config in by_letter.items():
        s = samples[letter]
        line = (
            f"{config.name:<{width}}  {s.flows:>5} flows {rate(letter):>7.1f} flows/s   round p50 {_ms(p50(letter)):6.1f} ms"
            f"  p99 {_ms(_p99(s.rounds)):6.1f} ms"
        )
        if config.baseline is not None:
            base = config.baseline
            line += f"   vs ({base}): flows/s {rate(letter) / rate(base):.2f}x, p50 {p50(letter) / p50(base):.2f}x"
        else:
            line += "   (baseline)"
        print(line)
    print(
        "scale-out on this machine, three behind nginx against one direct: "
        f"askback PostgreSQL (c)/(b) flows/s {rate('c') / rate('b'):.2f}x, "
        f"askback SQLite (d)/(a) {rate('d') / rate('a'):.2f}x, bare (f)/(e) {rate('f') / rate('e'):.2f}x"
    )

    print(
        "\nwhere the time goes, in ms: p50 of each request; CPU time per flow of the client (this process), the"
        " servers, nginx, PostgreSQL and every other process on the machine; the client's share of one core and how"
        " busy the machine was (of all its CPUs)"
    )
    print(
        f"{'':<{width}}  {'list':>5} {'round1':>6} {'round2':>6} | {'client':>6} {'servers':>7} {'nginx':>5}"
        f" {'postgres':>8} {'others':>6} | {'client core':>11} {'machine':>7}"
    )
    for letter, config in by_letter.items():
        s = samples[letter]
        per_flow = 1000 / s.flows
        ours = s.cpu_client + s.cpu_servers + s.cpu_nginx + s.cpu_postgres
        others = max(s.machine_busy / CLK_TCK - ours, 0.0)
        busy = 100 * s.machine_busy / s.machine_total if s.machine_total else 0.0
        print(
            f"{config.name:<{width}}  {_ms(statistics.median(s.listing)):5.1f} {_ms(statistics.median(s.first)):6.1f}"
            f" {_ms(statistics.median(s.second)):6.1f} | {s.cpu_client * per_flow:6.2f} {s.cpu_servers * per_flow:7.2f}"
            f" {s.cpu_nginx * per_flow:5.2f} {s.cpu_postgres * per_flow:8.2f} {others * per_flow:6.2f} |"
            f" {100 * s.cpu_client / s.wall:10.0f}% {busy:6.0f}%"
        )


def parse(argv: Sequence[str] | None) -> Plan:
    parser = argparse.ArgumentParser(
        description="Time two-round MRTR flows on askback (1 or 3 instances, SQLite or PostgreSQL) against the bare SDK."
    )
    parser.add_argument("--quick", action="store_true", help="few flows, under half a minute: rough figures")
    parser.add_argument("--concurrency", type=int, default=8, help="flows at a time, per configuration (default 8)")
    parser.add_argument("--cycles", type=int, default=None, help="turns of all configurations (default 12, quick 2)")
    parser.add_argument(
        "--batch", type=int, default=None, help="measured flows per configuration per turn (default 64, quick 16)"
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="unmeasured flows per configuration first (default 32, quick 8)"
    )
    parser.add_argument(
        "--upstream-keepalive",
        type=int,
        default=16,
        help="idle upstream connections nginx keeps (default 16; 0 = a new connection per request, as tests/infra.py)",
    )
    args = parser.parse_args(argv)

    def pick(value: int | None, default: int, quick: int, name: str, minimum: int) -> int:
        chosen = value if value is not None else (quick if args.quick else default)
        if chosen < minimum:
            parser.error(f"--{name} must be at least {minimum}")
        return chosen

    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.upstream_keepalive < 0:
        parser.error("--upstream-keepalive must be 0 or more")
    return Plan(
        concurrency=args.concurrency,
        cycles=pick(args.cycles, 12, 2, "cycles", 1),
        batch=pick(args.batch, 64, 16, "batch", 1),
        warmup=pick(args.warmup, 32, 8, "warmup", 0),
        upstream_keepalive=args.upstream_keepalive,
    )


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    # SIGTERM (a test runner's timeout, a CI cancel) unwinds like Ctrl-C, so that every process started is stopped.
    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(plan: Plan) -> None:
    started = time.monotonic()
    print(
        f"askback scale-out bench: two-round flows, {plan.concurrency} at a time, against the bare SDK; "
        f"python {platform.python_version()}, mcp {version('mcp')}, askback {version('askback')}, "
        f"{os.cpu_count()} CPU(s)"
    )
    idle_busy = machine_busy(1.0)
    if idle_busy > 20:
        print(f"warning: the machine was {idle_busy:.0f}% busy before the benchmark started; the figures will be noisy")
    with _sigterm_unwinds(), contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="askback-scaleout-")))
        cluster = start_cluster(stack, workdir, plan.upstream_keepalive)
        keepalive = f"keepalive {plan.upstream_keepalive}" if plan.upstream_keepalive else "no upstream keep-alive"
        print(
            f"{cluster.versions}; {INSTANCES} askback instances on SQLite, {INSTANCES} on PostgreSQL, "
            f"{INSTANCES} bare servers, {sum(c.nginx for c in CONFIGS)} nginx ({keepalive}) and PostgreSQL "
            f"started in {cluster.startup_seconds:.1f} s"
        )
        print(
            f"{len(CONFIGS)} configurations x {plan.cycles} turns x {plan.batch} flows, interleaved (the order rotates "
            f"every turn), after {plan.warmup} warm-up flows each"
            + ("; --quick: rough figures only" if plan.cycles < 4 else "")
        )
        measuring = time.monotonic()
        samples = anyio.run(measure, cluster, plan)
        measured = time.monotonic() - measuring
        report(cluster, plan, samples)
        stopping = time.monotonic()
    print(
        f"\ndone in {time.monotonic() - started:.1f} s (start-up {cluster.startup_seconds:.1f} s, measuring "
        f"{measured:.1f} s, stopping {time.monotonic() - stopping:.1f} s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse(argv)
    bench_flow._quiet_logging()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # in order with the progress on stderr
    try:
        run(plan)
    except KeyboardInterrupt:
        print("\ninterrupted; everything the benchmark started has been stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
