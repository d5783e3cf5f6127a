"""Where a webhook may go: the decision on one address, the refusals when an endpoint is made, and the check at
connect time against the address a name resolves to then (DNS rebinding), with a real TLS receiver on loopback that
the refused dispatcher never reaches."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _hooks import account_data, add_event, new_secret
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from standardwebhooks.webhooks import Webhook

from askback.clock import FrozenClock
from askback.errors import ConfigurationError
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox, RetrySchedule, load_endpoints, send_test
from askback.webhooks._destinations import destination_problem
from askback.webhooks.dispatcher import _http_client
from infra import QuietHandler, run_askback

pytestmark = pytest.mark.anyio

NAME = "hooks.rebind.test"  # resolves to a public address at start-up, to 127.0.0.1 at send time


@pytest.mark.parametrize(
    ("address", "refused", "with_allow_private"),
    [
        ("8.8.8.8", None, None),
        ("2606:4700::1111", None, None),
        ("::ffff:8.8.8.8", None, None),
        ("127.0.0.1", "loopback", None),
        ("::1", "loopback", None),
        ("10.0.0.5", "private", None),
        ("172.16.0.1", "private", None),
        ("192.168.1.1", "private", None),
        ("fd00::1", "private", None),
        ("169.254.1.1", "link-local", None),
        ("fe80::1", "link-local", None),
        ("fe80::1%eth0", "link-local", None),
        ("0.0.0.0", "unspecified", None),
        ("::", "unspecified", None),
        ("224.0.0.1", "multicast", None),
        ("ff02::1", "multicast", None),
        ("100.64.0.1", "shared (CGNAT)", None),
        ("::ffff:10.0.0.5", "10.0.0.5 is a private", None),
        ("::ffff:127.0.0.1", "127.0.0.1 is a loopback", None),
        ("64:ff9b::a00:5", "10.0.0.5 is a private", None),
        ("2002:a00:5::1", "10.0.0.5 is a private", None),
        ("240.0.0.1", "address", None),
        ("169.254.169.254", "cloud metadata", "cloud metadata"),
        ("::ffff:169.254.169.254", "cloud metadata", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata", "cloud metadata"),
        ("100.100.100.200", "cloud metadata", "cloud metadata"),
        ("168.63.129.16", "cloud metadata", "cloud metadata"),
    ],
)
def test_the_destination_decision_refuses_non_public_addresses_and_always_the_metadata_services(
    address: str, refused: str | None, with_allow_private: str | None
) -> None:
    for allow_private, expected in ((False, refused), (True, with_allow_private)):
        problem = destination_problem(address, allow_private=allow_private)
        if expected is None:
            assert problem is None, (address, allow_private)
        else:
            assert problem is not None and expected in problem, (address, allow_private, problem)


def endpoint_file(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "webhooks.toml"
    path.write_text(f'[[endpoint]]\nurl = "{url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\n{extra}')
    return path


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("https://169.254.169.254/latest/meta-data", "169.254.169.254 is a cloud metadata address"),
        ("https://10.0.0.5/hooks", "10.0.0.5 is a private address"),
        ("https://[fe80::1]/hooks", "fe80::1 is a link-local address"),
        ("https://[fd00::1]/hooks", "fd00::1 is a private address"),
        ("https://[::ffff:10.0.0.5]/hooks", "10.0.0.5 is a private address"),
        ("https://100.64.0.7/hooks", "shared (CGNAT)"),
        ("https://0x7f000001/hooks", "127.0.0.1 is a loopback address"),
        ("https://127.1:8443/hooks", "127.0.0.1 is a loopback address"),
        ("https://localhost/hooks", "names this machine"),
        ("http://127.0.0.1:8080/hooks", "127.0.0.1 is a loopback address"),
        ("https://metadata.google.internal/computeMetadata/v1", "metadata.google.internal is a cloud metadata name"),
    ],
)
def test_an_endpoint_pointing_at_a_private_or_metadata_destination_is_refused_at_load_naming_it(
    tmp_path: Path, url: str, named: str
) -> None:
    environ = {"HOOK_SECRET": new_secret()}
    with pytest.raises(ConfigurationError) as refused:
        load_endpoints(endpoint_file(tmp_path, url), environ=environ)
    message = str(refused.value)
    assert named in message and "endpoint" in message and url.split("/")[2] in message
    metadata = "metadata" in named
    assert ("allow_private = true" in message) is not metadata
    if metadata:
        with pytest.raises(ConfigurationError, match="never goes to a cloud metadata service"):
            load_endpoints(endpoint_file(tmp_path, url, "allow_private = true\n"), environ=environ)
    else:
        [endpoint] = load_endpoints(endpoint_file(tmp_path, url, "allow_private = true\n"), environ=environ)
        assert endpoint.allow_private


def test_allow_private_is_a_boolean_and_a_public_name_needs_nothing(tmp_path: Path) -> None:
    environ = {"HOOK_SECRET": new_secret()}
    with pytest.raises(ConfigurationError, match="`allow_private` is true or false"):
        load_endpoints(endpoint_file(tmp_path, "https://10.0.0.5/in", 'allow_private = "yes"\n'), environ=environ)
    [endpoint] = load_endpoints(endpoint_file(tmp_path, "https://hooks.example.com/in"), environ=environ)
    assert not endpoint.allow_private


@pytest.mark.http
def test_the_cli_refuses_a_file_with_a_metadata_endpoint_naming_it(tmp_path: Path) -> None:
    config = endpoint_file(tmp_path, "https://169.254.169.254/latest")
    listed = run_askback("webhooks", "list", env={"ASKBACK_WEBHOOKS": str(config), "HOOK_SECRET": new_secret()})
    assert listed.returncode == 2 and "169.254.169.254 is a cloud metadata address" in listed.stderr
    assert "Traceback" not in listed.stderr


@dataclass
class TlsReceiver:
    """A receiver on 127.0.0.1 that speaks TLS with a certificate for `NAME`: every TCP connection it accepts is
    counted, every POST recorded."""

    port: int = 0
    ca_file: Path = Path()
    connections: int = 0
    posts: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@contextlib.contextmanager
def tls_receiving(folder: Path) -> Iterator[TlsReceiver]:
    state = TlsReceiver()
    cert_file, key_file = self_signed(folder)
    state.ca_file = cert_file
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with state.lock:
                state.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.answer(200, b"{}")

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            sock, address = self.socket.accept()
            with state.lock:
                state.connections += 1
            return context.wrap_socket(sock, server_side=True), address

    server = Server(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def tls_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsReceiver]:
    with tls_receiving(tmp_path) as state:
        monkeypatch.setenv("SSL_CERT_FILE", str(state.ca_file))  # the dispatcher trusts the receiver's certificate
        yield state


def rebinding(answers: Sequence[str]) -> Any:
    """A hosts-style resolver: `NAME` resolves to `answers`, any other name to nothing."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if host != NAME:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(answers)

    return resolve


@pytest.mark.http
async def test_a_name_that_resolves_to_loopback_at_send_time_is_refused_and_the_receiver_is_never_reached(
    store: Store, tls_receiver: TlsReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    secret = new_secret()
    endpoint = Endpoint(url=f"https://{NAME}:{tls_receiver.port}/hooks", events=["account.*"], secrets=[secret])
    clock = FrozenClock(at=time.time())
    http = _http_client(5.0, [endpoint], resolve=rebinding(["127.0.0.1"]))
    hooks = Dispatcher(
        Outbox(store.database, store.events),
        [endpoint],
        clock=clock,
        rng=random.Random(1),
        schedule=RetrySchedule(delays=(5.0,)),
        http=http,
    )
    await hooks.prepare()
    await add_event(store, "account.connected", time.time(), **account_data())
    with caplog.at_level(logging.WARNING, logger="askback.webhooks"):
        await hooks.run_once()
        clock.advance(10)
        await hooks.run_once()
    await http.aclose()
    await hooks.aclose()

    assert tls_receiver.connections == 0 and tls_receiver.posts == []
    [delivery] = await Outbox(store.database, store.events).deliveries()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("failed", 2, "DestinationRefused")
    assert [a.error for a in await Outbox(store.database, store.events).attempts(delivery.id)] == [
        "DestinationRefused"
    ] * 2
    assert "127.0.0.1 is a loopback address" in caplog.text and "allow_private" in caplog.text


@pytest.mark.http
async def test_a_name_that_resolves_to_any_refused_address_is_refused_even_beside_a_public_one(
    tls_receiver: TlsReceiver,
) -> None:
    endpoint = Endpoint(url=f"https://{NAME}:{tls_receiver.port}/hooks", events=["account.*"], secrets=[new_secret()])
    for answers in (["93.184.216.34", "127.0.0.1"], ["::ffff:127.0.0.1"], ["169.254.169.254"]):
        http = _http_client(5.0, [endpoint], resolve=rebinding(answers))
        sent = await send_test(endpoint, http=http)
        await http.aclose()
        assert (sent.status, sent.error) == (None, "DestinationRefused"), answers
    assert tls_receiver.connections == 0


@pytest.mark.http
async def test_an_endpoint_that_allows_private_destinations_is_delivered_on_loopback_with_tls_checked_against_its_name(
    store: Store, tls_receiver: TlsReceiver
) -> None:
    secret = new_secret()
    url = f"https://{NAME}:{tls_receiver.port}/hooks"
    endpoint = Endpoint(url=url, events=["account.*"], secrets=[secret], allow_private=True)
    other = Endpoint(url=f"https://{NAME}:1/other", events=["account.*"], secrets=[secret])
    http = _http_client(5.0, [endpoint, other], resolve=rebinding(["127.0.0.1"]))
    hooks = Dispatcher(Outbox(store.database, store.events), [endpoint], clock=FrozenClock(at=time.time()), http=http)
    await hooks.prepare()
    await add_event(store, "account.connected", time.time(), **account_data())
    await hooks.run_once()
    [(headers, body)] = tls_receiver.posts
    assert Webhook(secret).verify(body, headers)["type"] == "account.connected"
    # The allowance is the endpoint's own: another port of the same name is still refused.
    assert (await send_test(other, http=http)).error == "DestinationRefused"
    await http.aclose()
    await hooks.aclose()
    # Metadata addresses stay refused, allowed or not.
    http = _http_client(5.0, [endpoint], resolve=rebinding(["169.254.169.254"]))
    assert (await send_test(endpoint, http=http)).error == "DestinationRefused"
    await http.aclose()
    assert tls_receiver.connections == 1
