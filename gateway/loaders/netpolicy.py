"""Where the live web may connect: the gateway's SSRF protection.

A live fetch takes its URL from a client request, so without a policy any
client could make the gateway connect to ``http://127.0.0.1:6379/``, to a
service on the private network, or to the cloud metadata endpoint
(``http://169.254.169.254/``). :func:`refusal_reason` names the address
ranges that are refused unless a source sets ``allow_private_networks``:

==========================  =============================================
range                       why
==========================  =============================================
``0.0.0.0/8``, ``::``       unspecified ("this host")
``127.0.0.0/8``, ``::1``    loopback
``10/8``, ``172.16/12``,    private (RFC 1918), unique local (RFC 4193)
``192.168/16``, ``fc00::/7``
``169.254.169.254``,        cloud metadata endpoints (checked before
``fd00:ec2::254``           link-local and unique local, for the message)
``169.254/16``,             link-local
``fe80::/10``
``100.64/10``               carrier-grade NAT (RFC 6598)
``224/4``, ``ff00::/8``     multicast
``192.0.0/24``,             IETF protocol assignments, benchmarking,
``198.18/15``, ``240/4``,   reserved and broadcast, deprecated site-local,
``fec0::/10``,              IPv6 discard-only
``100::/64``
==========================  =============================================

IPv6 addresses that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``,
6to4 ``2002::/16``) are judged by the IPv4 address they carry.

The policy is enforced where the connection is made, after DNS resolution,
so a name that resolves to a refused address (``localhost``, or DNS
rebinding between a check and the connect) cannot get through:

- :class:`GuardedResolver` wraps aiohttp's resolver and drops refused
  addresses from every answer; a name with only refused addresses fails with
  :class:`DestinationRefused`;
- :func:`guarded_socket_factory` checks the exact address of every socket
  the connector opens (IP literals never reach a resolver in aiohttp), before
  the socket exists, so no packet goes to a refused address.

:func:`guarded_connector` builds an ``aiohttp.TCPConnector`` with both.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Final

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

__all__ = [
    "ALLOWED_SCHEMES",
    "DestinationRefused",
    "GuardedResolver",
    "check_ip_literal",
    "guarded_connector",
    "guarded_socket_factory",
    "refusal_reason",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: A ``getaddrinfo`` tuple: ``(family, type, proto, canonname, sockaddr)``.
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]

#: URL schemes the live web is fetched with.
ALLOWED_SCHEMES: Final = frozenset({"http", "https"})

#: Refused ranges in checking order (the first match names the reason).
_REFUSED: Final[tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]] = tuple(
    (ipaddress.ip_network(network), reason)
    for network, reason in (
        ("169.254.169.254/32", "cloud metadata endpoint"),
        ("fd00:ec2::254/128", "cloud metadata endpoint"),
        ("0.0.0.0/8", "unspecified"),
        ("::/128", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("::1/128", "loopback"),
        ("10.0.0.0/8", "private network"),
        ("172.16.0.0/12", "private network"),
        ("192.168.0.0/16", "private network"),
        ("fc00::/7", "private network (unique local)"),
        ("169.254.0.0/16", "link-local"),
        ("fe80::/10", "link-local"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("224.0.0.0/4", "multicast"),
        ("ff00::/8", "multicast"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("198.18.0.0/15", "benchmarking network"),
        ("240.0.0.0/4", "reserved (or broadcast)"),
        ("fec0::/10", "site-local (deprecated)"),
        ("100::/64", "discard-only"),
    )
)
_NAT64: Final = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE: Final = ipaddress.ip_network("::/96")


class DestinationRefused(OSError):
    """A connection to a refused address was not made (see the module docstring).

    An :class:`OSError` so that aiohttp's connector reports it as a
    connection error (``ClientConnectorError.os_error``) instead of a bug.
    """


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, if it carries one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal_reason(address: str | IPAddress) -> str | None:
    """Why a connection to ``address`` is refused, or None when it is allowed.

    ``address`` is an IP address (an IPv6 zone ``%eth0`` is ignored); anything
    that is not an IP address is refused as such.

    >>> refusal_reason("127.0.0.1")
    'loopback'
    >>> refusal_reason("169.254.169.254")
    'cloud metadata endpoint'
    >>> refusal_reason("::ffff:10.1.2.3")
    'private network'
    >>> refusal_reason("93.184.215.14") is None
    True
    """
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address.partition("%")[0])
        except ValueError:
            return "not an IP address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return refusal_reason(embedded)
    for network, reason in _REFUSED:
        if address.version == network.version and address in network:
            return reason
    return None


def _refusal(host: str, address: str, reason: str) -> DestinationRefused:
    return DestinationRefused(
        f"refused to connect to {host} ({address}: {reason}); live fetches of private, "
        "loopback, link-local and metadata addresses need allow_private_networks: true "
        "on the source"
    )


def check_ip_literal(host: str) -> None:
    """Raise :class:`DestinationRefused` when ``host`` is a refused IP address.

    Host names are not resolved here (the connector's :class:`GuardedResolver`
    judges their addresses); a name passes this check. IPv6 literals may be
    given with or without brackets.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(bare.partition("%")[0])
    except ValueError:
        return
    reason = refusal_reason(address)
    if reason is not None:
        raise _refusal(host, str(address), reason)


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that drops refused addresses from every answer.

    ``inner`` does the resolution (aiohttp's ``DefaultResolver`` when None).
    :meth:`resolve` returns the allowed addresses in ``inner``'s order and
    raises :class:`DestinationRefused` when none is left, naming each refused
    address and why. Errors of ``inner`` (no such name) pass through.
    """

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self.inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self.inner.resolve(host, port, family)
        allowed = []
        refused = []
        for answer in answers:
            reason = refusal_reason(answer["host"])
            if reason is None:
                allowed.append(answer)
            else:
                refused.append(f"{answer['host']}: {reason}")
        if not allowed and refused:
            raise DestinationRefused(
                f"refused to connect to {host}: it resolves only to refused addresses "
                f"({', '.join(refused)}); live fetches of private, loopback, link-local and "
                "metadata addresses need allow_private_networks: true on the source"
            )
        return allowed

    async def close(self) -> None:
        await self.inner.close()


def guarded_socket_factory(addr_info: AddrInfo) -> socket.socket:
    """Create the socket for one connection attempt, refusing refused addresses.

    ``addr_info`` is a ``getaddrinfo`` tuple ``(family, type, proto,
    canonname, sockaddr)``; the check runs before the socket is created, so
    nothing is sent to a refused address. Raises :class:`DestinationRefused`.
    """
    family, type_, proto, _, sockaddr = addr_info
    address = str(sockaddr[0])
    reason = refusal_reason(address)
    if reason is not None:
        raise _refusal(address, address, reason)
    return socket.socket(family=family, type=type_, proto=proto)


def guarded_connector(
    *,
    allow_private_networks: bool,
    limit: int = 100,
    limit_per_host: int = 0,
    resolver: AbstractResolver | None = None,
) -> aiohttp.TCPConnector:
    """A TCPConnector enforcing the policy (or not, with ``allow_private_networks``).

    ``resolver`` is the name resolution to use (aiohttp's default when None);
    when the policy applies it is wrapped in a :class:`GuardedResolver` and
    every socket goes through :func:`guarded_socket_factory`. Call from a
    running event loop.
    """
    if allow_private_networks:
        return aiohttp.TCPConnector(
            limit=limit, limit_per_host=limit_per_host, resolver=resolver or DefaultResolver()
        )
    return aiohttp.TCPConnector(
        limit=limit,
        limit_per_host=limit_per_host,
        resolver=GuardedResolver(resolver),
        socket_factory=guarded_socket_factory,
    )
