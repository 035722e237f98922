"""gateway.loaders.netpolicy: which addresses are refused, and where the refusal is enforced.

Nothing here connects anywhere but 127.0.0.1 (the stand-in live web), and
:func:`no_connections_except_loopback` would block it if it tried.
"""

from __future__ import annotations

import socket

import aiohttp
import pytest

from gateway.loaders.netpolicy import (
    DestinationRefused,
    GuardedResolver,
    check_ip_literal,
    guarded_socket_factory,
    refusal_reason,
)
from tests.loaders.live_web import (
    LiveWeb,
    StaticResolver,
    live_web,
    no_connections_except_loopback,
)


async def test_socket_factory_refuses_at_connect_time() -> None:
    """Even when a resolver lets a refused address through, the socket is never made."""
    async with live_web() as web:
        await _connect_through_unguarded_resolver(web)


async def _connect_through_unguarded_resolver(web: LiveWeb) -> None:
    port = int(web.base.rsplit(":", 1)[1])
    unguarded_dns = StaticResolver({"sneaky.test": ["127.0.0.1"]})
    connector = aiohttp.TCPConnector(resolver=unguarded_dns, socket_factory=guarded_socket_factory)
    with no_connections_except_loopback() as attempts:
        async with aiohttp.ClientSession(connector=connector) as session:
            with pytest.raises(aiohttp.ClientConnectorError) as caught:
                await session.get(f"http://sneaky.test:{port}/page")
    assert isinstance(caught.value.os_error, DestinationRefused)
    assert attempts == []
    assert web.hits["/page"] == 0


async def test_guarded_resolver_keeps_public_addresses_only() -> None:
    dns = StaticResolver({"mixed.test": ["10.0.0.1", "93.184.215.14", "::1", "2606:4700::1"]})
    answers = await GuardedResolver(dns).resolve("mixed.test", 80)
    assert [answer["host"] for answer in answers] == ["93.184.215.14", "2606:4700::1"]
    with pytest.raises(OSError, match="no such name"):
        await GuardedResolver(dns).resolve("unknown.test", 80)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private network"),
        ("172.31.255.255", "private network"),
        ("192.168.0.1", "private network"),
        ("fc00::1", "private network (unique local)"),
        ("fdff::1", "private network (unique local)"),
        ("169.254.0.5", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("169.254.169.254", "cloud metadata endpoint"),
        ("fd00:ec2::254", "cloud metadata endpoint"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("255.255.255.255", "reserved (or broadcast)"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "cloud metadata endpoint"),
        ("64:ff9b::a00:1", "private network"),
        ("2002:7f00:1::", "loopback"),
        ("::7f00:1", "loopback"),
        ("localhost", "not an IP address"),
        ("93.184.215.14", None),
        ("8.8.8.8", None),
        ("100.128.0.1", None),
        ("172.32.0.1", None),
        ("2606:4700::1", None),
        ("::ffff:8.8.8.8", None),
    ],
)
def test_refusal_reason(address: str, reason: str | None) -> None:
    assert refusal_reason(address) == reason


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("10.0.0.1", True),
        ("[::1]", True),
        ("::1", True),
        ("[fe80::1%eth0]", True),
        ("example.com", False),
        ("localhost", False),  # a name: judged after resolution, not here
        ("93.184.215.14", False),
    ],
)
def test_check_ip_literal(host: str, refused: bool) -> None:
    if refused:
        with pytest.raises(DestinationRefused, match="allow_private_networks: true"):
            check_ip_literal(host)
    else:
        check_ip_literal(host)


def test_socket_factory_makes_sockets_for_allowed_addresses() -> None:
    sock = guarded_socket_factory(
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("93.184.215.14", 80))
    )
    try:
        assert sock.family == socket.AF_INET
        assert sock.type == socket.SOCK_STREAM
    finally:
        sock.close()
    with pytest.raises(DestinationRefused, match="cloud metadata endpoint"):
        guarded_socket_factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80)))
