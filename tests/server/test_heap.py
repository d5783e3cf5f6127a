"""While the HTTP app runs, the objects built until it started are left out of Python's full garbage collections
(`ASKBACK_GC_FREEZE`, on by default): the first app of the process to start freezes them, another started meanwhile
freezes nothing more, and the last to stop hands them back to the collector, so that a process that goes on frees
them. Off, nothing is frozen.

Each case runs in a process of its own: freezing is the whole process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import gc, json, sys, weakref
import anyio
from askback import Askback, load_settings
from askback.server.http import build_app

def app():
    return build_app(Askback("heap", settings=load_settings(database_url=sys.argv[1], demo_auth=True)))

async def main():
    seen = {"before": gc.get_freeze_count()}
    first = app()
    gone = weakref.ref(first)
    async with first.router.lifespan_context(first):
        seen["started"] = gc.get_freeze_count()
        # A full collection now walks only what was made since the start: far fewer objects than the heap holds.
        seen["tracked"] = len(gc.get_objects())
        later = [{"n": [n]} for n in range(5000)]  # alive at the second start: frozen if it froze again
        second = app()
        async with second.router.lifespan_context(second):
            seen["second"] = gc.get_freeze_count()
        seen["second stopped"] = gc.get_freeze_count()
    seen["all stopped"] = gc.get_freeze_count()
    del first, second, later
    gc.collect()
    seen["first app freed"] = gone() is None
    print(json.dumps(seen))

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
    seen: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.http
def test_the_start_up_heap_is_frozen_while_the_app_runs_and_handed_back_when_it_stops(tmp_path: Path) -> None:
    seen = _run(tmp_path)
    assert seen["before"] == 0
    assert seen["started"] > 50_000  # the libraries and the app, left out of later collections
    assert seen["tracked"] < seen["started"] // 10
    # A second app started meanwhile freezes nothing more (5,000 objects made in between stay collectable), and its
    # stop leaves the first app's freeze as it was.
    assert seen["second"] - seen["started"] < 5_000
    assert seen["second stopped"] == seen["second"]
    # Once the last app stops, everything is the collector's again: the first app's objects are freed.
    assert seen["all stopped"] == 0
    assert seen["first app freed"] is True


@pytest.mark.http
def test_with_the_setting_off_nothing_is_frozen(tmp_path: Path) -> None:
    seen = _run(tmp_path, ASKBACK_GC_FREEZE="false")
    assert seen["started"] == seen["second"] == seen["all stopped"] == 0
    assert seen["tracked"] > 50_000
    assert seen["first app freed"] is True
