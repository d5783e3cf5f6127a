"""One typed settings object, read from `ASKBACK_*` environment variables and validated at start-up.

| variable | meaning | default |
| --- | --- | --- |
| `ASKBACK_STATE_KEYS` | comma-separated state keys (>= 32 chars each); the first seals, all unseal | none: one worker only, a key made at start-up |
| `ASKBACK_DATABASE_URL` | `sqlite:///PATH` or `postgresql://USER[:PASS]@HOST:PORT/DB` | `sqlite:///askback.db` |
| `ASKBACK_SERVER_NAME` | the audience sealed into every `requestState`; identical on every instance | the server's name |
| `ASKBACK_FLOW_DEADLINE` | seconds a flow may take from its first question to its last answer | `900` |
| `ASKBACK_STATE_GRACE` | seconds a sealed state stays readable after the flow deadline, to say "too late" politely | `300` |
| `ASKBACK_MAX_ROUNDS` | rounds of questions one call may take | `8` |
| `ASKBACK_EFFECT_WAIT` | seconds a replay waits for a concurrent first run of an effect to finish | `10` |
| `ASKBACK_EFFECT_LEASE` | seconds after which an effect claimed by a process that never finished it is taken over | `300` |
| `ASKBACK_MAX_PENDING_PUSHES` | 2025-11-25 questions pushed and waiting for an answer, in one process | `1000` |
| `ASKBACK_MAX_PENDING_PUSHES_PER_SESSION` | the same, in one 2025-11-25 session | `8` |
| `ASKBACK_ANSWERS` | where a flow's answers wait between rounds: `state` (inside the sealed `requestState`) or `server` (in the store, sealed with the state keys; the state carries only the flow's handle) | `state` |
| `ASKBACK_TASK_TTL` | seconds a task (`tool(task=...)`) and its result are kept after it is created | `3600` |
| `ASKBACK_TASK_POLL_INTERVAL` | milliseconds a client is told to wait between two `tasks/get` of a task | `1000` |
| `ASKBACK_TASK_LEASE` | seconds after which a running task whose instance stopped renewing its lease is taken over | `30` |
| `ASKBACK_TASKS_PER_PRINCIPAL` | tasks one principal may hold that have not ended (working, input_required); one more is refused | `100` |
| `ASKBACK_EXPOSE` | what `tools/list` shows: `direct` (each tool), `meta` (five meta-tools over the catalogue: docs/meta.md) or `both` | `direct` |
| `ASKBACK_DEMO_AUTH` | accept `demo-<name>` bearer tokens as user `<name>` | `false` |
| `ASKBACK_LINK_TTL` | connected accounts: seconds an authorization link stays usable until it is opened | `600` |
| `ASKBACK_PENDING_ACCOUNTS_PER_PRINCIPAL` | connected accounts: accounts one principal may hold whose link is issued but never connected (PENDING); a link for one more is refused | `20` |
| `ASKBACK_PENDING_APPROVALS_PER_PRINCIPAL` | approvals: approval requests one principal may hold that nobody has decided yet; a request for one more is refused | `20` |
| `ASKBACK_PROVIDER_VISIT_TTL` | connected accounts: seconds a person has, once the link is opened, to sign in at the provider and come back | `1800` |
| `ASKBACK_SESSION_TTL` | people's sign-in: seconds a session lasts from sign-in (60 to 2592000) | `28800` |
| `ASKBACK_SESSIONS_PER_PERSON` | people's sign-in: sessions one person may hold at once; signing in past it ends their oldest (1 to 1000) | `10` |
| `ASKBACK_LOG_FORMAT` | `askback serve`'s log lines: `auto` (text on a terminal, JSON otherwise), `json` or `text` | `auto` |
| `ASKBACK_ANSWER_WAIT` | agent runtime: seconds a parked round waits for its answers before each unanswered question is answered `cancel` | `86400` |
| `ASKBACK_CALL_MAX_ROUNDS` | agent runtime: rounds one call may take before the runtime gives up on it | `10` |
| `ASKBACK_RESUME_LEASE` | agent runtime: seconds a resume claimed by a process that never finished it stays its own | `120` |
| `ASKBACK_DEVELOPMENT` | agent runtime: show plain-http links on loopback (local servers under development) | `false` |
| `ASKBACK_DEBUG` | the command line: print a crash's traceback after its one-line error (as `askback --debug`) | `false` |
| `ASKBACK_PUBLIC_URL` | where people and clients reach the server (scheme, host, port): its host is answered, and it names `/mcp` in the resource metadata | none |
| `ASKBACK_ALLOWED_HOSTS` | comma-separated further hosts the HTTP surfaces answer (`name`, `10.0.0.5`, `[fd00::5]`, `*.example.com`), beside the loopback names and the public URLs' hosts | none |
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from askback.errors import ConfigurationError

__all__ = ["Settings", "load_settings"]

_MIN_KEY_LEN = 32
# The longest any wait, lease or lifetime may be: 30 days. A task's lifetime is kept in milliseconds in a 32-bit
# column, so its own limit is the most that fits (about 24.8 days).
_MAX_SECONDS = 30 * 86400.0
_MAX_TASK_TTL = (2**31 - 1) // 1000


class Settings(BaseSettings):
    # No setting is a duration or a count without end: `inf` and `nan` are refused wherever a number is read.
    model_config = SettingsConfigDict(env_prefix="ASKBACK_", extra="ignore", frozen=True, allow_inf_nan=False)

    state_keys: SecretStr | None = None
    database_url: str = "sqlite:///askback.db"
    server_name: str | None = None
    flow_deadline: float = Field(default=900.0, gt=0, le=_MAX_SECONDS)
    state_grace: float = Field(default=300.0, ge=0, le=_MAX_SECONDS)
    max_rounds: int = Field(default=8, ge=1, le=100)
    # A replay's wait, and the bound on writing a round's end: at most an hour.
    effect_wait: float = Field(default=10.0, gt=0, le=3600)
    effect_lease: float = Field(default=300.0, gt=0, le=_MAX_SECONDS)
    max_pending_pushes: int = Field(default=1000, ge=1)
    max_pending_pushes_per_session: int = Field(default=8, ge=1)
    answers: Literal["state", "server"] = "state"
    # How the tools are exposed: each one (`direct`), five meta-tools over the catalogue (`meta`), or both.
    expose: Literal["direct", "meta", "both"] = "direct"
    # Tasks (`tool(task=...)`): how long one is kept, how often a client should poll it, and how long the lease of
    # the instance running it lasts without renewal.
    task_ttl: float = Field(default=3600.0, gt=0, le=_MAX_TASK_TTL)
    task_poll_interval: int = Field(default=1000, ge=1, le=3_600_000)
    task_lease: float = Field(default=30.0, gt=0, le=_MAX_SECONDS)
    # How many tasks one principal may hold that have not ended: one more is refused (held for the TTL otherwise).
    tasks_per_principal: int = Field(default=100, ge=1)
    demo_auth: bool = False
    # `askback serve`'s log lines (its --log-format): read before the server is imported, from the environment.
    log_format: Literal["auto", "json", "text"] = "auto"
    # The audit trail's log lines (the database keeps every event whatever these say): one record per round, per
    # event, or none, and the level of those records. A setting of the process, applied by each `Askback(...)`.
    audit_log: Literal["round", "event", "off"] = "round"
    audit_log_level: Literal["debug", "info", "warning"] = "info"
    # While the HTTP app runs, the objects built until it started (its store open) are left out of Python's full
    # garbage collections (`gc.freeze`), which otherwise stop the event loop for tens of milliseconds each.
    gc_freeze: bool = True
    # Connected accounts: the vault's own key ring (`askback vault new-key`; never the state keys), the connections
    # file, how long an authorization link stays usable until it is opened, how long the person then has to sign in
    # at the provider and come back, and how early a token is refreshed before it expires.
    vault_keys: SecretStr | None = None
    connections_file: str | None = None
    link_ttl: float = Field(default=600.0, gt=0, le=_MAX_SECONDS)
    provider_visit_ttl: float = Field(default=1800.0, gt=0, le=_MAX_SECONDS)
    refresh_leeway: float = Field(default=60.0, ge=0, le=_MAX_SECONDS)
    # How many accounts one principal may hold whose link was issued and never connected (PENDING, any connection).
    pending_accounts_per_principal: int = Field(default=20, ge=1)
    # Approvals: how many requests one principal may hold that nobody has decided yet (pending, any tool).
    pending_approvals_per_principal: int = Field(default=20, ge=1)
    # People's sign-in on the hosted pages and the web inbox (`askback.identity.PeopleSignIn`): how long a session
    # lasts from sign-in, and how many one person may hold at once (signing in past it ends their oldest).
    session_ttl: float = Field(default=8 * 3600.0, ge=60, le=30 * 86400)
    sessions_per_person: int = Field(default=10, ge=1, le=1000)
    # The agent runtime: how long a parked round waits for people, how many rounds a call may take, whether its
    # calls declare the tasks extension (so a server may run one as a task), how long a call waits for a task it asked
    # to cancel to end, how long a resume stays claimed by a process that stopped half-way, and whether loopback http
    # links are shown.
    answer_wait: float = Field(default=86400.0, gt=0, le=_MAX_SECONDS)
    call_max_rounds: int = Field(default=10, ge=1, le=100)
    call_tasks: bool = True
    call_cancel_wait: float = Field(default=600.0, gt=0, le=_MAX_SECONDS)
    resume_lease: float = Field(default=120.0, gt=0, le=_MAX_SECONDS)
    development: bool = False
    # The command line: a crash's traceback is printed too (`askback --debug`).
    debug: bool = False
    # The hosts every HTTP surface answers (`askback.web.asgi.HostGuard`): the loopback names, the public URL's host and
    # these (DNS rebinding: a page on another name pointed at this address is refused).
    public_url: str | None = None
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        return value.strip().rstrip("/") or None if value is not None else None

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return tuple(_split(value)) if isinstance(value, str) else value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from askback.web.asgi import AllowedHosts  # the server stack, needed only where hosts are configured

        AllowedHosts.of(value)
        return value

    @field_validator("state_keys")
    @classmethod
    def _keys_are_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        keys = _split(value.get_secret_value())
        for i, key in enumerate(keys):
            if len(key) < _MIN_KEY_LEN:
                raise ValueError(
                    f"key {i} is {len(key)} characters; each state key needs at least {_MIN_KEY_LEN}. "
                    "Make one with `askback keys new`."
                )
        if len(set(keys)) != len(keys):
            raise ValueError("the same key appears twice in the ring; list each key once, the sealing key first")
        return value

    def key_ring(self) -> list[str]:
        """The state keys, sealing key first; empty when none are configured."""
        return _split(self.state_keys.get_secret_value()) if self.state_keys is not None else []


def _split(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def load_settings(**overrides: object) -> Settings:
    """Read and validate the settings; a bad value raises `ConfigurationError` naming the variable (never its
    value, which may be a key)."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_input=False, include_url=False):
            name = "ASKBACK_" + "_".join(str(part) for part in err["loc"]).upper()
            problems.append(f"{name}: {err['msg'].removeprefix('Value error, ')}")
        raise ConfigurationError("Invalid askback configuration. " + "; ".join(problems)) from None
