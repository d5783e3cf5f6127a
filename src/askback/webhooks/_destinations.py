"""Where a webhook may go, decided twice: when an endpoint is made (its URL's literal address or well-known name,
`host_problem`) and when the dispatcher connects (every address the name resolves to then, `webhooks._guard`), so
that a name that resolved to a public address at start-up and resolves to 127.0.0.1 at send time (DNS rebinding)
is refused all the same. The decision itself, `destination_problem`, is a pure function of one address; this module
does no I/O.

Refused unless the endpoint says `allow_private`: loopback, private, link-local, unspecified, multicast, shared
(CGNAT, 100.64.0.0/10), reserved and other non-global addresses, and an IPv4 address inside IPv6 (mapped, NAT64,
6to4) that is one of those. Always refused, even with `allow_private`: the cloud metadata services, which answer
credentials to whoever reaches them and are never a webhook receiver.
"""

from __future__ import annotations

import ipaddress
import re
import socket

from askback.core.addresses import is_loopback

__all__ = ["Address", "destination_problem", "host_problem"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud instance metadata services (AWS, ECS, GCP, Azure, Alibaba, Oracle): they hand out credentials.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.169.123",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
    )
)
_METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The shorthand IPv4 spellings the C resolver accepts (`127.1`, `0x7f000001`, `017700000001`).
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def destination_problem(address: Address | str, *, allow_private: bool = False) -> str | None:
    """Why a webhook may not go to `address` (e.g. "10.0.0.5 is a private address"), or `None` when it may.
    `allow_private` lets through everything but the cloud metadata services."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        ip = ipaddress.IPv6Address(int(ip))  # without its zone (`%eth0`)
        inner = _embedded_ipv4(ip)
        if inner is not None:
            problem = destination_problem(inner, allow_private=allow_private)
            return None if problem is None else f"{ip} carries the IPv4 address {inner}, and {problem}"
    if ip in _METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if allow_private:
        return None
    kinds = (
        (ip.is_unspecified, "an unspecified"),
        (ip.is_loopback, "a loopback"),
        (ip.is_link_local, "a link-local"),
        (ip.is_multicast, "a multicast"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED, "a shared (CGNAT)"),
        (ip.is_private, "a private"),
        (ip.is_reserved, "a reserved"),
        (not ip.is_global, "a non-public"),
    )
    return next((f"{ip} is {kind} address" for found, kind in kinds if found), None)


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _LEGACY_IPV4.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def host_problem(host: str, *, allow_private: bool = False) -> str | None:
    """What is wrong with a webhook URL's host before any lookup: a literal address `destination_problem` refuses,
    a cloud metadata name, or (unless `allow_private`) a name of this machine. Other names are judged when the
    dispatcher connects."""
    name = host.strip("[]").lower().rstrip(".")
    if name in _METADATA_NAMES:
        return f"{name} is a cloud metadata name"
    literal = _literal(name)
    if literal is not None:
        return destination_problem(literal, allow_private=allow_private)
    if not allow_private and (is_loopback(name) or name.endswith(".localhost")):
        return f"{name} names this machine (loopback)"
    return None
