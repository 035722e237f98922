"""The request's host, validated once: where the URIs the gateway writes start.

:func:`public_base` is the one place the ``Host`` header is read. Its value
is validated and normalised as a URL's authority is
(:func:`gateway.cdx.hosts.normalize_authority`: a host name mapped with
UTS #46 and written in IDNA ASCII, ``évil.com`` -> ``xn--vil-9la.com``; an
IPv6 literal compressed; the port ASCII digits up to 65535). A ``Host`` that
does not validate (bytes that are not UTF-8, ``a..b``, a port past 65535,
two ``Host`` headers) is a 400 naming ``Host``: RFC 9112 §3.2 asks a server
to refuse such a request, and the header is never written back raw.

The base is the configured ``memento.public_url`` when one is set (behind a
proxy, the address clients use), else the request's scheme and its
normalised host. ``Location``, ``Link`` and the TimeMaps
(:mod:`gateway.api.memento`) start with it; nothing else the gateway
writes repeats the ``Host``.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from gateway.api.keys import CONFIG
from gateway.cdx.hosts import HostError, normalize_authority
from gateway.errors import BadRequest

__all__ = ["public_base", "request_host"]


def request_host(request: web.Request) -> str:
    """The request's ``Host`` (``host[:port]``) normalised; :class:`BadRequest`
    naming ``Host`` when it does not validate.

    Without a ``Host`` header (HTTP/1.0) the address the request arrived on
    stands for it, as aiohttp's ``request.host`` has it.
    """
    values = request.headers.getall(hdrs.HOST, ())
    if len(values) > 1:
        raise BadRequest("Host", f"given {len(values)} times; expected one Host header")
    try:
        return normalize_authority(values[0] if values else request.host)
    except HostError as exc:
        raise BadRequest("Host", f"{exc}; expected host[:port], e.g. archive.example.org") from None


def public_base(request: web.Request) -> str:
    """``scheme://host[:port]`` (or the configured ``memento.public_url``,
    which may hold a path), without a final ``/``: the start of every URI
    the gateway writes for ``request``.

    The ``Host`` is validated even when ``public_url`` is set (a request with
    an invalid one is malformed whatever the links start with): :class:`BadRequest`.
    """
    host = request_host(request)
    config = request.app.get(CONFIG)
    configured = config.memento.public_url if config is not None else None
    return configured or f"{request.scheme}://{host}"
