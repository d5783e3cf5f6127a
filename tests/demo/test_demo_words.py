"""What `askback demo` says about its workers: what the names of the processes are, and why its rounds may land on
fewer workers than it started."""

from __future__ import annotations

from askback.demo.rounds import served_by, serving_workers


def test_the_start_says_workers_share_one_port_and_are_named_host_pid() -> None:
    said = serving_workers(3, "127.0.0.1:8000")
    assert said.startswith("3 worker processes sharing 127.0.0.1:8000.")
    assert "a load balancer may send each round to any instance" in said and "HOST:PID" in said


def test_fewer_workers_than_started_are_explained() -> None:
    said = served_by({"vm:21117", "vm:21118"}, 3)
    assert said.startswith("Rounds were served by 2 of the 3 worker processes (HOST:PID): vm:21117, vm:21118.")
    assert "so not every worker need serve one" in said


def test_every_worker_serving_is_all_of_them() -> None:
    assert served_by({"a:1", "a:2", "a:3"}, 3).startswith("Rounds were served by all 3 worker processes")


def test_one_worker_is_the_one_worker() -> None:
    assert served_by({"a:1"}, 1) == "Every round was served by the one worker process (a:1, as HOST:PID)."
    assert serving_workers(1, "127.0.0.1:9").startswith("1 worker process on 127.0.0.1:9;")
