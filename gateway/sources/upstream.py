"""Whose fault is a remote archive's error answer: the source's, or the client's?

A remote index source (``cdx+``, ``memento+``) asks another archive about the
URL a client sent. Only the faults of that archive may feed its circuit
breaker and readiness: a connection refused or reset, a timeout, a 5xx, an
answer that does not parse, and statuses that say the archive is in trouble
with the gateway itself (``429`` slow down, ``401``/``407`` the gateway's
credentials, ``408`` the archive's own timeout). Any other 4xx is about the
query, the client's input (``GET /coll/index?url=javascript:alert(1)`` answered
``400 Bad Request`` by the archive): :func:`refusal` turns it into a
:class:`~gateway.errors.SourceRefused`, which the group reports without
counting it against the source (:mod:`gateway.index.group`). A ``404`` (and a
Memento ``410``) is "no captures", decided by each source before.
"""

from __future__ import annotations

import http
from typing import Final

import aiohttp

from gateway.errors import SourceRefused

__all__ = ["SOURCE_FAULT_4XX", "body_excerpt", "is_refusal", "refusal"]

#: 4xx statuses that are the archive's (or the gateway's configuration's) trouble,
#: not the client's input: they count as failures of the source.
SOURCE_FAULT_4XX: Final = frozenset({401, 407, 408, 429})
#: Upstream statuses passed on to the client as they are; other refusals are a 400.
_PASSED_ON: Final = frozenset({400, 403, 414, 422, 451})
#: Most bytes of an error answer's body read, and characters of it quoted.
_EXCERPT_BYTES: Final = 2048
_EXCERPT_CHARS: Final = 200


def is_refusal(status: int) -> bool:
    """True for a 4xx that refuses the query (not 404, not :data:`SOURCE_FAULT_4XX`).

    >>> [s for s in (400, 403, 404, 408, 414, 429, 500) if is_refusal(s)]
    [400, 403, 414]
    """
    return 400 <= status < 500 and status != 404 and status not in SOURCE_FAULT_4XX


def refusal(source: str, status: int, what: str, detail: str = "") -> SourceRefused:
    """The :class:`SourceRefused` for ``what`` answered ``status`` (a 4xx refusal).

    The message names the upstream's status and reason phrase, and ``detail``
    (what its body said) when there is one; the client's answer is that status
    when it means the same from the gateway (400, 403, 414, 422, 451), else 400.

    >>> error = refusal("ia", 400, "TimeMap http://arc/timemap/link/javascript:alert(1)")
    >>> error.status, error.reason
    (400, 'the archive refused the query: TimeMap http://arc/timemap/link/javascript:alert(1) \
answered HTTP 400 Bad Request')
    """
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    reason = f"the archive refused the query: {what} answered HTTP {status}"
    if phrase:
        reason += f" {phrase}"
    if detail:
        reason += f" ({detail})"
    return SourceRefused(source, reason, status if status in _PASSED_ON else 400)


async def body_excerpt(response: aiohttp.ClientResponse) -> str:
    """The start of an error answer's body as one line of text, when it is text
    (``text/plain`` or JSON; an HTML error page says nothing a client can use);
    ``""`` otherwise or when it cannot be read."""
    kind = response.content_type
    if kind != "text/plain" and not kind.endswith("json"):
        return ""
    try:
        raw = await response.content.read(_EXCERPT_BYTES)
    except (aiohttp.ClientError, TimeoutError):  # an excerpt is a courtesy, not a second failure
        return ""
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "..."
