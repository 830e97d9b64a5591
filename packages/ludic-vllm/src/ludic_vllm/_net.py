"""Which caller addresses count as the local host (shared by the routes and the server launcher)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str | None) -> bool:
    """``127.0.0.0/8``, ``::1`` and IPv4-mapped loopback (``::ffff:127.0.0.1``, what a dual-stack
    socket reports for an IPv4 loopback caller)."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))
