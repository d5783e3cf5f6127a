"""Endpoints are checked when they are made, each refusal naming the field and never a secret; the signature is
Standard Webhooks' own; the retry schedule is bounded and its jitter stays within its bounds; the webhooks' tables
are exactly what their models describe."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
from pathlib import Path
from typing import Any

import pytest
from _hooks import new_secret
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from askback.errors import ConfigurationError
from askback.store import Store
from askback.webhooks import Endpoint, RetrySchedule, load_endpoints
from askback.webhooks._models import Base
from askback.webhooks.schedule import GiveUp, RetryAt
from askback.webhooks.signing import message_body, signed_headers

pytestmark = pytest.mark.anyio

SECRET = new_secret()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"url": "http://hooks.example.com/in"}, "`url`"),
        ({"url": "ftp://127.0.0.1/in"}, "`url`"),
        ({"events": []}, "`events`"),
        ({"events": ["account.connectd"]}, "account.connectd"),
        ({"events": ["approval.approved"]}, "approval.approved"),
        ({"events": ["billing.*"]}, "billing.*"),
        ({"events": ["*"]}, "'*'"),
        ({"secrets": []}, "holds no secret"),
        ({"secrets": ["c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"]}, "whsec_"),
        ({"secrets": ["whsec_c2hvcnQ="]}, "bytes long"),
        ({"secrets": [SECRET, "whsec_!!!"]}, "secret 2"),
    ],
)
def test_a_wrong_endpoint_is_refused_naming_the_field(fields: dict[str, Any], named: str) -> None:
    values: dict[str, Any] = {"url": "https://hooks.example.com/in", "events": ["account.*"], "secrets": [SECRET]}
    with pytest.raises(ConfigurationError, match=named.replace("*", r"\*")) as refused:
        Endpoint(**(values | fields))
    assert SECRET not in str(refused.value) and SECRET not in repr(Endpoint(**values))


def test_approval_events_are_named_one_by_one_or_as_a_family_and_read_from_the_event_log() -> None:
    values: dict[str, Any] = {"url": "https://hooks.example.com/in", "secrets": [SECRET]}
    family = Endpoint(**values, events=["approval.*"])
    one = Endpoint(**values, events=["approval.decided"])
    accounts = Endpoint(**values, events=["account.connected"])
    audit = Endpoint(**values, events=["audit.*"])
    assert family.wants("approval.expired") and not family.wants("account.connected")
    assert one.wants("approval.decided") and not one.wants("approval.requested")
    assert [e.wants_logged_events for e in (family, one, accounts, audit)] == [True, True, True, False]


def test_loopback_http_is_allowed_for_development_on_an_endpoint_that_allows_private_destinations() -> None:
    for url in ("http://127.0.0.1:8080/in", "http://localhost/in", "http://[::1]/in"):
        assert Endpoint(url=url, events=["audit.*"], secrets=[SECRET], allow_private=True).wants("audit.asked")
        with pytest.raises(ConfigurationError, match="allow_private"):
            Endpoint(url=url, events=["audit.*"], secrets=[SECRET])


def test_the_file_reads_secrets_from_the_variable_it_names_comma_separated(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.toml"
    path.write_text(
        '[[endpoint]]\nurl = "https://a.example/in"\nevents = ["account.connected", "audit.*"]\nsecret_env = "A"\n'
        '[[endpoint]]\nurl = "https://b.example/in"\nevents = ["account.*"]\nsecret_env = "B"\n'
    )
    other = new_secret()
    a, b = load_endpoints(path, environ={"A": f"{SECRET}, {other}", "B": other})
    assert a.secrets == (SECRET, other) and a.wants("audit.rejected") and not a.wants("account.revoked")
    assert b.wants("account.revoked") and not b.wants("audit.asked") and not b.wants_audit_events
    path.write_text(path.read_text().replace("https://b.example/in", "https://a.example/in"))
    with pytest.raises(ConfigurationError, match="two endpoints"):
        load_endpoints(path, environ={"A": SECRET, "B": other})
    path.write_text('[[endpoint]]\nurl = "https://a.example/in"\nevents = ["account.*"]\nsecrets = "x"\n')
    with pytest.raises(ConfigurationError, match="unknown field"):
        load_endpoints(path, environ={})
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_endpoints(tmp_path / "missing.toml", environ={})


def test_the_signature_is_hmac_sha256_over_id_timestamp_and_body_with_the_secrets_bytes() -> None:
    body = message_body("account.connected", 1_800_000_000.5, {"principal": "alice"})
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    headers = signed_headers([key], "msg_1_abc", 1_800_000_000, body)
    expected = base64.b64encode(hmac.new(key, f"msg_1_abc.1800000000.{body}".encode(), hashlib.sha256).digest())
    assert headers["webhook-signature"] == "v1," + expected.decode()
    assert json.loads(body) == {
        "type": "account.connected",
        "timestamp": "2027-01-15T08:00:00.500000Z",
        "data": {"principal": "alice"},
    }
    # Standard Webhooks refuses a timestamp 5 minutes away: this one, from 2027, is refused today.
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body, headers)


def test_the_schedule_is_bounded_and_its_jitter_stays_within_its_bounds() -> None:
    schedule = RetrySchedule(delays=(5.0, 30.0, 120.0), jitter=0.2)
    rng = random.Random(3)
    for attempt, delay in enumerate(schedule.delays, 1):
        for _ in range(50):
            decision = schedule.after_failure(attempt, 100.0, rng)
            assert isinstance(decision, RetryAt) and 100 + delay * 0.8 <= decision.at <= 100 + delay * 1.2
    assert schedule.after_failure(4, 100.0, rng) == GiveUp()
    with pytest.raises(ConfigurationError):
        RetrySchedule(delays=())
    with pytest.raises(ConfigurationError):
        RetrySchedule(jitter=1.0)


async def test_the_webhooks_migration_creates_exactly_the_tables_its_models_describe(store: Store) -> None:
    def differences(connection: Connection) -> list[Any]:
        return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))

    async with store.database.engine.connect() as conn:
        found = await conn.run_sync(differences)
    ours = set(Base.metadata.tables)
    assert [d for d in found if d[0] != "remove_table" and d[0] != "remove_index"] == []
    assert ours == {"askback_webhook_cursors", "askback_webhook_deliveries", "askback_webhook_attempts"}
    assert (await store.database.revisions())["webhooks"] == "w001"
