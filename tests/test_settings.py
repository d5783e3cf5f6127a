"""Configuration is validated at start-up, with messages that say what to set."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from askback import Askback, ConfigurationError, load_settings


def test_one_worker_without_keys_works_and_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = Askback("t", settings=load_settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", state_keys=None))
    with caplog.at_level(logging.WARNING, logger="askback"):
        app.check_workers(1)
    assert "ASKBACK_STATE_KEYS" in caplog.text and "askback keys new" in caplog.text


def test_several_workers_without_keys_are_refused(tmp_path: Path) -> None:
    app = Askback("t", settings=load_settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", state_keys=None))
    with pytest.raises(ConfigurationError, match="askback keys new"):
        app.check_workers(2)


def test_several_workers_with_keys_are_fine(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = Askback("t", settings=load_settings(state_keys="k" * 40 + "," + "o" * 40))
    with caplog.at_level(logging.WARNING, logger="askback"):
        app.check_workers(3)
    assert caplog.text == ""
    assert app.settings.key_ring() == ["k" * 40, "o" * 40]


@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("state_keys", "short-secret-value", "ASKBACK_STATE_KEYS"),
        ("state_keys", "k" * 40 + "," + "k" * 40, "twice"),
        ("max_rounds", 0, "ASKBACK_MAX_ROUNDS"),
        ("flow_deadline", -1, "ASKBACK_FLOW_DEADLINE"),
    ],
)
def test_bad_settings_are_refused_naming_what_to_fix(field: str, value: object, hint: str) -> None:
    with pytest.raises(ConfigurationError, match=hint) as err:
        load_settings(**{field: value})
    assert str(value) not in str(err.value)  # a key is never echoed


@pytest.mark.parametrize("value", ["inf", "Infinity", "-inf", "nan", "1e400"])
@pytest.mark.parametrize("name", ["ASKBACK_EFFECT_WAIT", "ASKBACK_FLOW_DEADLINE", "ASKBACK_TASK_LEASE"])
def test_a_duration_without_end_is_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    # A wait of `inf` would let a round's end wait for ever on a database that never answers.
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=f"{name}: Input should be a finite number"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "most"),
    [
        ("ASKBACK_FLOW_DEADLINE", "2592000"),
        ("ASKBACK_EFFECT_LEASE", "2592000"),
        ("ASKBACK_EFFECT_WAIT", "3600"),
        ("ASKBACK_ANSWER_WAIT", "2592000"),
        ("ASKBACK_TASK_TTL", "2147483"),
        ("ASKBACK_TASK_POLL_INTERVAL", "3600000"),
    ],
)
def test_a_duration_is_taken_up_to_its_limit_and_refused_past_it(
    monkeypatch: pytest.MonkeyPatch, name: str, most: str
) -> None:
    monkeypatch.setenv(name, most)
    assert float(getattr(load_settings(), name.removeprefix("ASKBACK_").lower())) == float(most)
    monkeypatch.setenv(name, str(int(most) + 1))
    with pytest.raises(ConfigurationError, match=f"{name}: Input should be less than or equal to"):
        load_settings()


def test_the_longest_task_ttl_fits_the_32_bit_column_of_its_milliseconds() -> None:
    from askback.store.models import TaskRow

    most = load_settings(task_ttl=2147483).task_ttl
    assert TaskRow.__table__.c.ttl_ms.type.python_type is int
    assert int(most * 1000) <= 2**31 - 1  # PostgreSQL's `integer`, as the column is created


def test_settings_come_from_askback_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASKBACK_MAX_ROUNDS", "3")
    monkeypatch.setenv("ASKBACK_FLOW_DEADLINE", "60")
    settings = load_settings()
    assert settings.max_rounds == 3 and settings.flow_deadline == 60


def test_a_bad_database_url_is_refused_without_echoing_the_password() -> None:
    from askback.db.urls import normalize_database_url

    with pytest.raises(ConfigurationError) as err:
        normalize_database_url("mysql://u:hunter2@db/x")
    assert "hunter2" not in str(err.value)
