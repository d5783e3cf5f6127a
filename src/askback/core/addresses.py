"""Which hosts are this machine: the one test of "only this machine reaches it", for every place that allows plain
http for development (links, issuers, providers, webhooks, a site's base URL) or serves without sign-in only on
loopback (`askback serve`, `askback inbox serve`)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]

# RFC 6761 reserves `localhost`; `localhost.localdomain` is the other name systems give this machine. A name with its
# final dot (`localhost.`) is the same name. Other names under `.localhost` are not taken: the system's resolver
# decides where they go.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def is_loopback(host: str | None) -> bool:
    """Whether `host` is this machine: a loopback name (any case, with or without its final dot) or address (all of
    127.0.0.0/8 and ::1, an IPv6 one bare or in a URL's brackets, an IPv4 one mapped into IPv6 too). An unspecified
    address (0.0.0.0, ::) is not one, nor is a name that merely starts with a loopback address (127.0.0.1.nip.io)."""
    if not host:
        return False
    name = host.lower()
    if name.removesuffix(".") in LOOPBACK_NAMES:
        return True
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)
