"""Every package's public face: exactly the names meant, each resolvable, and cheap to import.

A face is the `__init__` of a package (or the one module) whose `__all__` users import from; what is not in it is
private and may change. Each row says what the face exports and which heavy libraries importing it may load.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

HEAVY = frozenset(
    {
        "alembic",
        "anyio",
        "authlib",
        "cryptography",
        "httpx",
        "jinja2",
        "mcp",
        "opentelemetry",
        "sqlalchemy",
        "starlette",
        "typer",
        "uvicorn",
    }
)

FACES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "askback": (
        frozenset(
            {
                "Accepted",
                "Approval",
                "ApprovalGate",
                "Argument",
                "ArgumentRequiredError",
                "Askback",
                "AskbackError",
                "Cancelled",
                "Choice",
                "ConfigurationError",
                "Confirm",
                "Declined",
                "Default",
                "DefinitionError",
                "EffectInProgressError",
                "Flow",
                "Form",
                "InvalidParamsError",
                "Link",
                "MissingCapabilityError",
                "Outcome",
                "ProbeError",
                "Question",
                "RoundInProgressError",
                "Settings",
                "StoreUnavailableError",
                "ToolError",
                "current_principal",
                "load_settings",
            }
        ),
        frozenset(),
    ),
    "askback.server": (
        frozenset(
            {
                "Askback",
                "Bearer",
                "DemoTokenVerifier",
                "Extension",
                "ExtensionContext",
                "Mounted",
                "Open",
                "Ports",
                "Signed",
                "build_app",
                "current_principal",
            }
        ),
        frozenset(),
    ),
    "askback.runtime": (
        frozenset(
            {
                "AccountActive",
                "ApprovalDecided",
                "Answer",
                "Callback",
                "Claimed",
                "Completed",
                "Interactive",
                "Parked",
                "Pending",
                "ParkedQuestion",
                "Renderer",
                "Runtime",
                "WebInbox",
                "declared_modes",
                "resume_on_account_events",
                "safe_link",
                "webhook_receiver",
            }
        ),
        frozenset(),
    ),
    "askback.server.tasks": (
        frozenset(
            {"TASKS_EXTENSION", "TERMINAL", "TaskStatus", "TaskSupport", "TasksExtension", "iso_time", "task_view"}
        ),
        HEAVY - {"authlib", "jinja2", "typer"},  # part of the server kit, which an app imports whole
    ),
    "askback.webhooks": (
        frozenset(
            {
                "Attempt",
                "Delivery",
                "Dispatcher",
                "Endpoint",
                "Outbox",
                "RetrySchedule",
                "SentTest",
                "Webhooks",
                "load_endpoints",
                "send_test",
            }
        ),
        frozenset({"sqlalchemy", "httpx"}),
    ),
    "askback.identity": (
        frozenset({"IdentitySettings", "PeopleSignIn", "ResourceServer", "SignInSettings", "load_identity_settings"}),
        frozenset(),
    ),
    "askback.accounts": (
        frozenset(
            {
                "PRESETS",
                "Account",
                "AccountEvent",
                "AccountEvents",
                "AccountService",
                "Accounts",
                "AccountsSetup",
                "ApiKeyConnection",
                "Backoff",
                "ConnectedAccount",
                "Connection",
                "Connections",
                "CredentialUnreadable",
                "DevelopmentSignIn",
                "KeyCheck",
                "OAuthConnection",
                "SignInVerifier",
                "Status",
                "TokenKeeper",
                "TokenSet",
                "Vault",
                "discover",
                "discover_all",
                "enable_accounts",
                "github",
                "google",
                "load_connections",
                "microsoft",
                "new_key",
                "origin",
                "pages_app",
                "preset",
                "secret_from_env",
                "slack",
            }
        ),
        frozenset(),
    ),
    "askback.accounts.connections": (
        frozenset(
            {
                "PRESETS",
                "ApiKeyConnection",
                "Connection",
                "Connections",
                "FormRequest",
                "KeyCheck",
                "KeyCheckRequest",
                "OAuthConnection",
                "ProviderMetadata",
                "TokenAuthMethod",
                "TokenTypeHint",
                "api_key_headers",
                "authorization_request",
                "discover",
                "discover_all",
                "fetch_metadata",
                "github",
                "google",
                "key_check_request",
                "load_connections",
                "metadata_urls",
                "microsoft",
                "new_code_verifier",
                "new_state",
                "origin",
                "parse_metadata",
                "preset",
                "refresh_request",
                "revocation_request",
                "secret_from_env",
                "slack",
                "token_request",
            }
        ),
        # Authlib's pure helpers build the requests; discovery loads httpx only when it runs.
        frozenset({"authlib"}),
    ),
    "askback.accounts.tokens": (
        frozenset(
            {
                "PROVIDER_TIMEOUT",
                "Backoff",
                "ConnectedAccount",
                "Held",
                "Lapse",
                "Refresh",
                "RefuseToken",
                "TokenKeeper",
                "TokenSet",
                "Use",
                "decide",
                "judge_token_response",
            }
        ),
        # The keeper's database, vault and HTTP client; never the server kit or the pages.
        frozenset({"alembic", "anyio", "authlib", "cryptography", "httpx", "opentelemetry", "sqlalchemy"}),
    ),
    "askback.tools.check": (
        frozenset(
            {
                "CHECKS",
                "Branch",
                "Check",
                "Evidence",
                "Exchange",
                "Recorded",
                "Report",
                "Request",
                "Response",
                "describe",
                "evaluate",
                "invalid_content",
                "probe",
                "run_check",
                "tamper",
            }
        ),
        # httpx and the SDK's wire helpers (which bring parts of the SDK's stack); never a database.
        frozenset({"anyio", "cryptography", "httpx", "mcp", "opentelemetry", "starlette", "uvicorn"}),
    ),
    "askback.tools.lint": (
        frozenset(
            {"RULES", "Finding", "Rule", "lint_paths", "lint_source", "parse_codes", "render_json", "render_text"}
        ),
        frozenset(),
    ),
    "askback.errors": (
        frozenset(
            {
                "AccountStateError",
                "ArgumentRequiredError",
                "AskbackError",
                "CallError",
                "CallStateError",
                "ConfigurationError",
                "CredentialOriginError",
                "DefinitionError",
                "EffectInProgressError",
                "HeaderMismatchError",
                "InsufficientScopeError",
                "InvalidAnswerError",
                "InvalidParamsError",
                "InvalidStateError",
                "InvalidTokenError",
                "IssuerUnavailableError",
                "LimitReachedError",
                "ListenError",
                "MissingCapabilityError",
                "ProbeError",
                "ProtocolVersionMissingError",
                "ProviderError",
                "ResumeDueError",
                "RoundInProgressError",
                "ServerHTTPError",
                "ServerProtocolError",
                "ServerRefusedError",
                "ServerTimeoutError",
                "StoreUnavailableError",
                "ToolError",
                "UnansweredError",
                "UnknownCallError",
                "UnsafeLinkError",
                "VaultError",
            }
        ),
        frozenset(),
    ),
    "askback.audit": (frozenset({"AuditEvent", "AuditFilter"}), frozenset()),
    "askback.cli": (frozenset({"app", "main"}), frozenset({"typer"})),
    "askback.store": (
        frozenset(
            {
                "MIGRATIONS",
                "AuditLog",
                "Completion",
                "Database",
                "EffectClaim",
                "EventLog",
                "Flows",
                "HeldAnswers",
                "RoundClaim",
                "RoundRecord",
                "Store",
                "StoredEvent",
                "append_event",
                "chosen_types",
                "hold_lock",
            }
        ),
        frozenset({"alembic", "anyio", "opentelemetry", "sqlalchemy"}),
    ),
    "askback.web.pages": (
        frozenset({"PageKit", "PersonSignIn", "SignIn", "SignedInPerson", "safe_next_path", "security_headers"}),
        frozenset({"anyio", "jinja2", "starlette"}),
    ),
}

LAZY = ("askback", "askback.server", "askback.runtime", "askback.accounts", "askback.identity", "askback.webhooks")


def loaded_after(statement: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after `statement`."""
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in out.split()}


@pytest.mark.parametrize("face", FACES)
def test_a_face_exports_exactly_the_names_meant_once_each(face: str) -> None:
    module = importlib.import_module(face)
    assert set(module.__all__) == FACES[face][0]
    assert len(module.__all__) == len(set(module.__all__))


@pytest.mark.parametrize("face", FACES)
def test_every_exported_name_resolves_and_is_listed(face: str) -> None:
    module = importlib.import_module(face)
    namespace: dict[str, object] = {}
    exec(f"from {face} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(module.__all__)
    assert all(namespace[name] is not None for name in module.__all__)
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("face", LAZY)
def test_a_lazy_face_hands_out_the_defining_modules_own_objects(face: str) -> None:
    module = importlib.import_module(face)
    where = module._WHERE
    assert set(where) == set(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is getattr(importlib.import_module(where[name]), name), name


@pytest.mark.parametrize("face", LAZY)
def test_an_unknown_name_on_a_lazy_face_is_an_attribute_error_naming_it(face: str) -> None:
    module = importlib.import_module(face)
    with pytest.raises(AttributeError, match=rf"module '{face}' has no attribute 'Nope'"):
        module.Nope  # noqa: B018


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("MIGRATIONS", "askback.runtime.parked_calls"),
        ("CallRecord", "askback.runtime.parked_calls"),
        ("Held", "askback.runtime.calls"),
    ],
)
def test_the_runtimes_internals_are_off_its_face_and_still_in_their_modules(name: str, home: str) -> None:
    with pytest.raises(ImportError):
        exec(f"from askback.runtime import {name}", {})
    assert getattr(importlib.import_module(home), name) is not None


@pytest.mark.parametrize("face", FACES)
@pytest.mark.http
def test_importing_a_face_loads_no_heavy_library_it_does_not_need(face: str) -> None:
    allowed = FACES[face][1]
    assert loaded_after(f"import {face}") & HEAVY <= allowed, face
