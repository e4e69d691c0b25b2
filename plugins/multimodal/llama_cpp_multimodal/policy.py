"""What a media reference may point at: the switches that make untrusted input safe to load."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Callable, Sequence, Union

import attrs

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

#: The schemes the fetcher speaks; ``MediaPolicy.schemes`` may narrow them, not widen them.
REMOTE_SCHEMES = frozenset({"http", "https"})

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address stands for (mapped ``::ffff:a.b.c.d``, 6to4, NAT64), else ``ip``.

    Python 3.11's ``is_loopback`` & co. look at the IPv6 address only, so ``::ffff:127.0.0.1`` would pass
    as public; unwrapping first closes that door.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def refused_address_reason(ip: IPAddress) -> str | None:
    """Why a remote fetch must not connect to ``ip`` (``"loopback"``, ``"private"``...), or None if it may.

    The default ``MediaPolicy.address_check``. Anything that is not a global unicast address is refused:
    reaching the host's own services or the local network through a URL in a prompt is server-side
    request forgery.
    """
    ip = embedded_ipv4(ip)
    for reason, flag in (("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback),
                         ("link-local", ip.is_link_local), ("multicast", ip.is_multicast),
                         ("reserved", ip.is_reserved), ("private", ip.is_private)):
        if flag:
            return reason
    return None if ip.is_global else "not globally routable"


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the default ``MediaPolicy.resolver``)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # a switch that guards a door: "false" read from a config file must not open it
    if not isinstance(value, bool):
        raise ValueError(f"MediaPolicy.{attribute.name} must be True or False, not {value!r}")


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"MediaPolicy.{attribute.name} must be a positive number, not {value!r}")


def _not_negative(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"MediaPolicy.{attribute.name} must be a whole number, 0 or more, not {value!r}")


def _lower_set(value: Sequence[str]) -> frozenset[str]:
    if isinstance(value, str):
        value = (value,)
    return frozenset(s.lower() for s in value)


def _remote_schemes(instance: object, attribute: attrs.Attribute[Any], value: frozenset[str]) -> None:
    if not value <= REMOTE_SCHEMES:
        raise ValueError(f"MediaPolicy.schemes: {sorted(value - REMOTE_SCHEMES)} not supported; "
                         f"allowed: {sorted(REMOTE_SCHEMES)}")


@attrs.frozen(kw_only=True)
class MediaPolicy:
    """Where media may come from and how much of it.

    The library's default trusts its caller (remote URLs on, local files off, private networks off); a
    server facing untrusted users keeps local files and private addresses off and may turn remote
    fetching off too. ``data:`` URIs and raw bytes are always accepted (they are already in the request).

    ``address_check`` and ``resolver`` are seams: a deployment can allow one internal host, and tests can
    treat a loopback server as public, without turning the whole check off.
    """

    allow_remote: bool = attrs.field(default=True, validator=_flag)
    allow_private_addresses: bool = attrs.field(default=False, validator=_flag)
    allow_local_files: bool = attrs.field(default=False, validator=_flag)
    max_bytes: int = attrs.field(default=20 * 1024 * 1024, validator=_positive)
    max_pixels: int = attrs.field(default=1 << 26, validator=_positive)
    timeout: float = attrs.field(default=10.0, validator=_positive)
    max_redirects: int = attrs.field(default=5, validator=_not_negative)
    schemes: frozenset[str] = attrs.field(default=REMOTE_SCHEMES, converter=_lower_set, validator=_remote_schemes)
    address_check: Callable[[IPAddress], str | None] = refused_address_reason
    resolver: Callable[[str, int], Sequence[str]] = resolve_host
