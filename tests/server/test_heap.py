"""Once the HTTP app has started, the objects built until then are left out of Python's full garbage collections
(`ASKBACK_GC_FREEZE`, on by default), once per process; off, nothing is frozen.

Each case runs in a process of its own: freezing is the whole process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import gc, json, sys
import anyio
from askback import Askback, load_settings
from askback.server.http import build_app

def app():
    return build_app(Askback("heap", settings=load_settings(database_url=sys.argv[1], demo_auth=True)))

async def main():
    seen = {"before": gc.get_freeze_count()}
    first = app()
    async with first.router.lifespan_context(first):
        seen["started"] = gc.get_freeze_count()
        # A full collection now walks only what was made since the start: far fewer objects than the heap holds.
        seen["tracked"] = len(gc.get_objects())
    later = [{"n": [n]} for n in range(5000)]  # alive at the second start: frozen if it froze again
    second = app()
    async with second.router.lifespan_context(second):
        seen["second"] = gc.get_freeze_count()
    print(json.dumps(seen), len(later))

anyio.run(main)
"""


def _run(tmp_path: Path, **env: str) -> dict[str, int]:
    environment = {k: v for k, v in os.environ.items() if k != "ASKBACK_GC_FREEZE"} | env
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path / 'heap.db'}"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, int] = json.loads(done.stdout.split("\n")[0].rsplit(" ", 1)[0])
    return seen


@pytest.mark.http
def test_the_start_up_heap_is_frozen_once_per_process_by_default(tmp_path: Path) -> None:
    seen = _run(tmp_path)
    assert seen["before"] == 0
    assert seen["started"] > 50_000  # the libraries and the app, left out of later collections
    assert seen["tracked"] < seen["started"] // 10
    # A second app in the same process freezes nothing more (5,000 objects made in between stay out of it).
    assert seen["second"] - seen["started"] < 5_000


@pytest.mark.http
def test_with_the_setting_off_nothing_is_frozen(tmp_path: Path) -> None:
    seen = _run(tmp_path, ASKBACK_GC_FREEZE="false")
    assert seen == {"before": 0, "started": 0, "tracked": seen["tracked"], "second": 0}
    assert seen["tracked"] > 50_000
