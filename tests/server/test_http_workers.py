"""The demo server over real HTTP with several worker processes: rounds of one flow land on different workers and
still complete, state keys rotate without losing flows in flight, bad states are refused and audited, and a
replayed final round does its work once.

One 3-worker server (state key ring `new,old`) serves the module; the key rotation test starts two more for the
phases before and after it, on the same database. Every round is a new connection with the official SDK client.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState
from mcp_types import CallToolResult, ElicitResult

from _http import RawReply, Served, Step, audit, flow_id, listing, post_call, request_number, run_flow, served
from askback.audit import AuditEvent
from askback.core.plan import Round
from askback.testing import accept, asked_keys, call_round, state_of, text

pytestmark = [pytest.mark.anyio, pytest.mark.http]

WORKERS = 3
# The phases before and after the rotation run one worker each: a key ring is per process, the phase during the
# rotation is the module's 3-worker server, and each 3-worker start costs several seconds on a small machine.
PHASE_WORKERS = 1
MISSING_CAPABILITY = -32021
INVALID_PARAMS = -32602

PRODUCTION = {"pick_env": accept(environment="production"), "confirm_prod": accept(confirm=True)}


@dataclass(frozen=True)
class Ring:
    new: str
    old: str


@pytest.fixture(scope="module")
def ring() -> Ring:
    return Ring(new=secrets.token_urlsafe(48), old=secrets.token_urlsafe(48))


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("http-workers") / "db.sqlite"
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def server(database_url: str, ring: Ring) -> Iterator[Served]:
    """The module's server: 3 workers, mid-rotation (seals with `new`, still opens `old`)."""
    with served(database_url, [ring.new, ring.old], workers=WORKERS) as s:
        yield s


def assert_refused(rnd: Round) -> None:
    """A JSON-RPC error -32602 with HTTP 400: no completion, no new question."""
    assert rnd.result is None, f"expected a refusal, got {rnd.result!r}"
    assert rnd.error is not None
    assert rnd.error.error.code == INVALID_PARAMS, rnd.error
    assert rnd.http_status == 400


async def assert_one_invalid_state_rejection(server: Served, since: float, rnd: Round, principal: str) -> None:
    rejected = await audit(server.database_url, event="rejected", tool="deploy", since=since)
    assert [(e.outcome, e.principal, e.instance) for e in rejected] == [("invalid_state", principal, rnd.instance)]


# -- 2. key rotation (first in the file: it starts the module server between its own phases) --


async def test_a_flow_sealed_under_the_old_key_completes_after_rotation_and_is_refused_once_the_key_is_retired(
    request: pytest.FixtureRequest, database_url: str, ring: Ring
) -> None:
    args_done, args_retired = {"service": "rotated-before"}, {"service": "rotated-retired"}
    with served(database_url, [ring.old], workers=PHASE_WORKERS) as before:
        first = await call_round(before.url, "deploy", args_done, token="demo-frank")
        other = await call_round(before.url, "deploy", args_retired, token="demo-frank")
    sealed_old, sealed_old_too = state_of(first), state_of(other)
    # Sealed under the old key, which the new one cannot open: the rest of the test is about the ring.
    with pytest.raises(InvalidRequestState):
        AESGCMRequestStateCodec([ring.new]).unseal(sealed_old)

    # The old server is gone; the rotated one (ring `new,old`) takes round two on the same database.
    rotated: Served = request.getfixturevalue("server")
    steps = await run_flow(
        rotated.url,
        "deploy",
        args_done,
        {"pick_env": accept(environment="staging")},
        token="demo-frank",
        request_state=sealed_old,
        responses={"pick_env": accept(environment="staging")},
    )
    assert text(steps[-1].round.result) == "Deployed rotated-before to staging."
    fresh = await call_round(rotated.url, "deploy", {"service": "rotated-after"}, token="demo-frank")
    sealed_new = state_of(fresh)

    with served(database_url, [ring.new], workers=PHASE_WORKERS) as after:
        since = time.time()
        refused = await call_round(
            after.url,
            "deploy",
            args_retired,
            token="demo-frank",
            responses={"pick_env": accept(environment="dev")},
            request_state=sealed_old_too,
        )
        assert_refused(refused)
        await assert_one_invalid_state_rejection(after, since, refused, "frank")
        # Only the retired key is refused: a state sealed with the new key still completes here.
        done = await call_round(
            after.url,
            "deploy",
            {"service": "rotated-after"},
            token="demo-frank",
            responses={"pick_env": accept(environment="dev")},
            request_state=sealed_new,
        )
        assert text(done.result) == "Deployed rotated-after to dev."
        recorded = await listing(after.url)
    services = [d["service"] for d in recorded["deployments"] if d["service"].startswith("rotated-")]
    assert sorted(services) == ["rotated-after", "rotated-before"]


# -- 1. many flows across workers --


async def test_thirty_deploy_flows_complete_with_rounds_served_by_different_workers(server: Served) -> None:
    environments = ("dev", "staging", "production")
    flows: dict[str, list[Step]] = {}
    limiter = anyio.CapacityLimiter(6)

    async def one(i: int) -> None:
        service, env = f"fleet-{i:02d}", environments[i % 3]
        answers = {"pick_env": accept(environment=env), "confirm_prod": accept(confirm=True)}
        async with limiter:
            flows[service] = await run_flow(server.url, "deploy", {"service": service}, answers, token="demo-carol")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(one, i)

    for i in range(30):
        service, env = f"fleet-{i:02d}", environments[i % 3]
        steps = flows[service]
        assert text(steps[-1].round.result) == f"Deployed {service} to {env}."
        assert len(steps) == (3 if env == "production" else 2)
        assert all(s.round.http_status == 200 and s.round.instance for s in steps)
    deployed = [d for d in (await listing(server.url))["deployments"] if d["service"].startswith("fleet-")]
    assert sorted((d["service"], d["environment"], d["by"]) for d in deployed) == [
        (f"fleet-{i:02d}", environments[i % 3], "carol") for i in range(30)
    ]

    # Every round's audit events name the worker that the HTTP response said served that round.
    events = await audit(server.database_url, tool="deploy", principal="carol")
    by_flow: dict[str | None, list[AuditEvent]] = defaultdict(list)
    for ev in events:
        by_flow[ev.flow_id].append(ev)
    ids = {service: flow_id(server, state_of(steps[0].round)) for service, steps in flows.items()}
    for service, steps in flows.items():
        served_by: dict[int, set[str | None]] = defaultdict(set)
        for ev in by_flow[ids[service]]:
            served_by[request_number(ev)].add(ev.instance)
        assert served_by == {n: {s.round.instance} for n, s in enumerate(steps, start=1)}, service

    all_instances = {s.round.instance for steps in flows.values() for s in steps}
    assert len(all_instances) >= 2, f"every round of 30 flows was served by one worker: {all_instances}"
    spread = [service for service, steps in flows.items() if len({s.round.instance for s in steps}) > 1]
    assert spread, "no flow had rounds on two workers"
    for service in spread:
        trail = by_flow[ids[service]]
        asked = next(e for e in trail if e.event == "asked" and e.round == 1)
        later = {e.instance for e in trail if e.event in ("answered", "completed")}
        assert asked.instance == flows[service][0].round.instance
        assert later - {asked.instance}, f"{service}: the audit trail shows no round on another worker"


# -- 3. refused states --


def tampered(server: Served, state: str, args: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    middle = len(state) // 2
    flipped = "A" if state[middle] != "A" else "B"
    return args, "demo-alice", state[:middle] + flipped + state[middle + 1 :]


def other_user(server: Served, state: str, args: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    return args, "demo-bob", state


def anonymous(server: Served, state: str, args: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    return args, None, state


def other_arguments(server: Served, state: str, args: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    return {**args, "service": args["service"] + "-other"}, "demo-alice", state


def expired(server: Served, state: str, args: dict[str, str]) -> tuple[dict[str, str], str | None, str]:
    codec = AESGCMRequestStateCodec([server.keys[0]])
    envelope = json.loads(codec.unseal(state))
    return args, "demo-alice", codec.seal(json.dumps({**envelope, "exp": time.time() - 60}).encode())


Spoil = Callable[[Served, str, dict[str, str]], tuple[dict[str, str], str | None, str]]


@pytest.mark.parametrize(
    ("spoil", "principal"),
    [
        pytest.param(tampered, "alice", id="tampered"),
        pytest.param(other_user, "bob", id="alice-state-replayed-by-bob"),
        pytest.param(anonymous, "anonymous", id="alice-state-replayed-anonymously"),
        pytest.param(other_arguments, "alice", id="other-arguments"),
        pytest.param(expired, "alice", id="expired-seal"),
    ],
)
async def test_a_spoiled_state_is_refused_with_32602_and_audited_and_the_real_one_still_completes(
    server: Served, spoil: Spoil, principal: str
) -> None:
    args = {"service": f"guarded-{spoil.__name__}"}
    first = await call_round(server.url, "deploy", args, token="demo-alice")
    state = state_of(first)
    fid = flow_id(server, state)
    answer = {"pick_env": accept(environment="dev")}

    bad_args, bad_token, bad_state = spoil(server, state, args)
    since = time.time()
    refused = await call_round(
        server.url, "deploy", bad_args, token=bad_token, responses=answer, request_state=bad_state
    )
    assert_refused(refused)
    await assert_one_invalid_state_rejection(server, since, refused, principal)
    assert await audit(server.database_url, flow_id=fid, since=since) == []

    # The refusal spent nothing: the untouched state, from alice, with the same arguments, completes.
    done = await call_round(server.url, "deploy", args, token="demo-alice", responses=answer, request_state=state)
    assert text(done.result) == f"Deployed {args['service']} to dev."


async def test_a_resealed_but_unchanged_state_is_accepted(server: Served) -> None:
    # The control for the expired-seal case: re-sealing with the server's key alone is not what gets refused.
    args = {"service": "resealed"}
    state = state_of(await call_round(server.url, "deploy", args, token="demo-alice"))
    codec = AESGCMRequestStateCodec([server.keys[0]])
    resealed = codec.seal(codec.unseal(state))
    assert resealed != state
    done = await call_round(
        server.url,
        "deploy",
        args,
        token="demo-alice",
        responses={"pick_env": accept(environment="staging")},
        request_state=resealed,
    )
    assert text(done.result) == "Deployed resealed to staging."


# -- 4. missing capabilities --


async def test_delete_without_elicitation_is_32021_naming_form_with_http_400(server: Served) -> None:
    rnd = await call_round(server.url, "delete_project", {"project_id": "prj_42"}, token="demo-gina", elicitation=False)
    assert rnd.result is None and rnd.error is not None
    assert rnd.error.error.code == MISSING_CAPABILITY
    assert rnd.error.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert rnd.http_status == 400
    assert "prj_42" in [p["id"] for p in (await listing(server.url))["projects"]]


async def test_deploy_without_elicitation_or_environment_is_a_tool_error_naming_the_argument(server: Served) -> None:
    rnd = await call_round(server.url, "deploy", {"service": "no-ask"}, token="demo-gina", elicitation=False)
    assert rnd.error is None and isinstance(rnd.result, CallToolResult)
    assert rnd.result.is_error
    message = text(rnd.result)
    assert "environment" in message and "dev, staging, production" in message
    assert "no-ask" not in [d["service"] for d in (await listing(server.url))["deployments"]]


# -- 5. replayed final rounds --

CONCURRENT = 5
EXTRA_BATCHES = 6


@pytest.mark.parametrize(
    ("tool", "args", "answers", "expected", "effect"),
    [
        pytest.param(
            "delete_project",
            {"project_id": "prj_99"},
            {"confirm_project": accept(project_name="billing-legacy")},
            "Deleted billing-legacy.",
            "deletions",
            id="delete",
        ),
        pytest.param(
            "deploy",
            {"service": "replayed"},
            PRODUCTION,
            "Deployed replayed to production.",
            "deployments",
            id="deploy",
        ),
    ],
)
async def test_a_final_round_replayed_ten_times_on_several_workers_does_its_work_once(
    server: Served, tool: str, args: dict[str, str], answers: dict[str, ElicitResult], expected: str, effect: str
) -> None:
    steps = await run_flow(server.url, tool, args, answers, token="demo-dave")
    final = steps[-1]
    first = final.round
    assert text(first.result) == expected
    fid = flow_id(server, state_of(steps[0].round))

    async def replay() -> Round:
        return await call_round(
            server.url, tool, args, token="demo-dave", responses=final.responses, request_state=final.request_state
        )

    replies: list[Round] = []

    async def concurrent_batch() -> None:
        async def send() -> None:
            replies.append(await replay())

        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENT):
                tg.start_soon(send)

    with anyio.fail_after(60):
        await concurrent_batch()
        for _ in range(10 - 1 - CONCURRENT):
            replies.append(await replay())
        # Which worker takes a connection is the kernel's choice; give it a bounded number of further chances.
        for _ in range(EXTRA_BATCHES):
            if {r.instance for r in replies} - {first.instance}:
                break
            await concurrent_batch()

    assert len(replies) >= 9
    assert [(r.error, r.http_status, text(r.result)) for r in replies] == [(None, 200, expected)] * len(replies)
    elsewhere = {r.instance for r in replies} - {first.instance}
    assert elsewhere, f"all {len(replies)} replays landed on the first run's worker {first.instance}"

    recorded = await listing(server.url)
    if effect == "deletions":
        assert [d for d in recorded["deletions"] if d["project_id"] == "prj_99"] == [
            {"project_id": "prj_99", "name": "billing-legacy", "by": "dave"}
        ]
        assert "prj_99" not in [p["id"] for p in recorded["projects"]]
    else:
        assert [d for d in recorded["deployments"] if d["service"] == "replayed"] == [
            {"service": "replayed", "environment": "production", "by": "dave"}
        ]

    # The trail says the same: one completion on the first run's worker, then one replay per reply.
    ends = [e for e in await audit(server.database_url, flow_id=fid) if e.event in ("completed", "replayed")]
    assert sorted((e.event, e.instance) for e in ends) == sorted(
        [("completed", first.instance)] + [("replayed", r.instance) for r in replies]
    )


RACED = 30


async def _to_final_round(
    server: Served, tool: str, args: dict[str, str], rounds: list[dict[str, ElicitResult]]
) -> str:
    """Drive a flow up to its final round without sending it: the state the final answers go with."""
    state = state_of(await call_round(server.url, tool, args, token="demo-dave"))
    for answers in rounds[:-1]:
        state = state_of(
            await call_round(server.url, tool, args, token="demo-dave", responses=answers, request_state=state)
        )
    return state


@pytest.mark.parametrize(
    ("tool", "args", "rounds", "expected"),
    [
        pytest.param(
            "delete_project",
            {"project_id": "prj_42"},
            [{"confirm_project": accept(project_name="web-frontend")}],
            "Deleted web-frontend.",
            id="delete",
        ),
        pytest.param(
            "deploy",
            {"service": "raced"},
            [{"pick_env": accept(environment="production")}, {"confirm_prod": accept(confirm=True)}],
            "Deployed raced to production.",
            id="deploy",
        ),
    ],
)
async def test_a_final_round_sent_thirty_times_at_once_answers_every_copy_alike_and_acts_once(
    server: Served, tool: str, args: dict[str, str], rounds: list[dict[str, ElicitResult]], expected: str
) -> None:
    # No first run alone: thirty copies of the final round race through three workers. The deletion's handler reads
    # the project before its question, so a copy that reran it after the deletion would not find the project.
    state = await _to_final_round(server, tool, args, rounds)
    replies: list[RawReply] = []
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as http:

        async def send() -> None:
            replies.append(
                await post_call(
                    http, server.url, tool, args, token="demo-dave", responses=rounds[-1], request_state=state
                )
            )

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(RACED):
                    tg.start_soon(send)

    assert len(replies) == RACED
    first = replies[0]
    assert first.status == 200 and text(CallToolResult.model_validate(first.message()["result"])) == expected
    # Byte for byte: every copy got exactly what the first one did, whichever worker served it.
    assert [(r.status, r.body) for r in replies] == [(first.status, first.body)] * RACED
    # Which worker accepts each connection is the kernel's choice; the scale-out suite sends copies to each
    # instance directly.

    recorded = await listing(server.url)
    if tool == "delete_project":
        assert [d for d in recorded["deletions"] if d["project_id"] == "prj_42"] == [
            {"project_id": "prj_42", "name": "web-frontend", "by": "dave"}
        ]
    else:
        assert [d for d in recorded["deployments"] if d["service"] == "raced"] == [
            {"service": "raced", "environment": "production", "by": "dave"}
        ]
    trail = await audit(server.database_url, flow_id=flow_id(server, state))
    ends = sorted(e.event for e in trail if e.event in ("completed", "replayed"))
    assert ends == ["completed"] + ["replayed"] * (RACED - 1)
    # Who answered what counts each answer once: one per question asked, however many copies of a round came.
    answered = [(e.round, e.keys) for e in trail if e.event == "answered"]
    assert sorted(answered) == sorted((n, (key,)) for n, answers in enumerate(rounds, 1) for key in answers)


# -- 6. principal binding, positive case --


async def test_a_flow_started_by_alice_completes_for_alice_and_is_audited_as_hers(server: Served) -> None:
    steps = await run_flow(server.url, "deploy", {"service": "alices"}, PRODUCTION, token="demo-alice")
    assert text(steps[-1].round.result) == "Deployed alices to production."
    assert [asked_keys(s.round) for s in steps[:-1]] == [{"pick_env"}, {"confirm_prod"}]
    trail = await audit(server.database_url, flow_id=flow_id(server, state_of(steps[0].round)))
    assert [(e.event, e.round) for e in trail] == [
        ("asked", 1),
        ("answered", 1),
        ("asked", 2),
        ("answered", 2),
        ("completed", 2),
    ]
    assert {e.principal for e in trail} == {"alice"}
    deployed = [d for d in (await listing(server.url))["deployments"] if d["service"] == "alices"]
    assert deployed == [{"service": "alices", "environment": "production", "by": "alice"}]
