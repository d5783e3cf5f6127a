"""`askback demo --port P` places every port the demo opens: the demo server on P, Demo Mail on P + 1, the webhook
receiver on P + 2, and nothing else; a taken one is refused before anything starts. The ports are read from the
kernel's table of listening sockets (/proc/net/tcp) for the demo's process and every process under it."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from askback.testing import free_port
from infra import run_askback

pytestmark = [pytest.mark.http]


def processes_under(root: int) -> set[int]:
    """`root` and every process descended from it, as /proc shows them now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


def listening_ports(root: int) -> set[int]:
    """The TCP ports on which `root` or a process under it listens."""
    inodes: set[str] = set()
    for pid in processes_under(root):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


def three_free_ports() -> int:
    """A port P such that P, P + 1 and P + 2 are free on loopback right now."""
    for _ in range(50):
        base = free_port()
        if base + 2 > 65535:
            continue
        try:
            for port in (base + 1, base + 2):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no three free ports in a row")


def test_the_demo_listens_only_on_the_port_it_is_given_and_the_next_two(tmp_path: Path) -> None:
    port = three_free_ports()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "askback", "demo", "--port", str(port)],
        cwd=tmp_path,
        env={**clean, "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    seen: set[int] = set()
    all_up: set[int] = set()
    output = b""
    deadline = time.monotonic() + 240
    try:
        # Every time the demo prints, look at what it listens on; once it says its servers are up, all must be.
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            assert ready, f"the demo did not end within 240 s; it printed:\n{output.decode(errors='replace')}"
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
            now = listening_ports(proc.pid)
            seen |= now
            if b"sends account.connected to the demo's agent runtime" in output and not all_up:
                all_up = now
        assert proc.wait(timeout=60) == 0, output.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    text = output.decode(errors="replace")
    assert all_up == {port, port + 1, port + 2}, text
    assert seen == {port, port + 1, port + 2}, text
    assert f"127.0.0.1:{port + 1}" in text  # Demo Mail, where it says it starts
    assert f"http://127.0.0.1:{port + 2}/" in text  # the receiver


def test_a_taken_port_of_the_three_is_refused_before_anything_starts(tmp_path: Path) -> None:
    port = three_free_ports()
    with socket.create_server(("127.0.0.1", port + 1)):
        result = run_askback("demo", "--port", str(port), cwd=tmp_path, env={"COLUMNS": "80"}, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{port + 1} for Demo Mail (--port {port} puts")
    assert "pass another --port" in line
    assert "Starting" not in result.stdout and not (tmp_path / "askback-demo.db").exists()
