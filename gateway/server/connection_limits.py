"""``gateway serve``'s client connection limits: options, file descriptors, the cap.

:class:`ConnectionLimits` holds ``gateway serve``'s options (per process):

- *keep-alive* (``keepalive_timeout_s``, 15 s): a connection on which no
  byte of a request arrives for that long after it was accepted, or after
  its last answer, is closed (aiohttp's ``keepalive_timeout``, whose own
  default is an hour);
- *head* (``head_timeout_s``, 10 s): a request head (request line and
  headers) must be whole within that time of its first byte, else the
  client gets a ``408`` (JSON, ``Connection: close``) and the connection
  is closed. Until the first byte the keep-alive timeout applies, from it
  this one;
- *body* (``body_timeout_s``, 30 s): while a request body arrives, at most
  that long between two of its reads (time the gateway holds the client
  back, its buffer full while the app has not read it, does not count);
  else a ``408`` when no byte of an answer was sent yet, and the
  connection is closed either way (the handler still waiting for the body
  is cancelled: a client that left, logged at DEBUG);
- *connections* (``max_connections``, 1024, lowered to fit under the
  file-descriptor limit: :func:`fit_to_open_files`, after
  :func:`raise_open_files_limit`). :class:`ConnectionSlots` counts them: a
  connection accepted at the cap closes the connection that has waited
  longest for a request (idle, or in the middle of its head); when every
  connection is busy with a request, the new one serves probes only
  (``GET /_health`` and ``/_ready`` answer, any other request is a ``503``
  with ``Retry-After: 1``), up to :data:`PROBE_CONNECTIONS` of them, with
  timeouts of at most :data:`PROBE_TIMEOUT_S`, the longest waiting of them
  closed to make room; past those, ``503`` at accept and closed. So
  ``/_health`` answers through a flood of connections of any kind.

The timers themselves are the connections' (:mod:`gateway.server.http_server`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Final, Protocol, TypeVar

from aiohttp import web

__all__ = [
    "DEFAULT_LIMITS",
    "OPEN_FILES_RESERVE",
    "PROBE_CONNECTIONS",
    "PROBE_PATHS",
    "PROBE_TIMEOUT_S",
    "Connection",
    "ConnectionLimits",
    "ConnectionSlots",
    "busy_answer",
    "fit_to_open_files",
    "open_files_limit",
    "probes_only_handler",
    "raise_open_files_limit",
    "raw_answer",
]

logger = logging.getLogger(__name__)

#: Paths a connection past the cap may still ask (``GET`` or ``HEAD``): the probes.
PROBE_PATHS: Final = frozenset({"/_health", "/_ready"})
#: Connections past the cap that serve probes only (per process).
PROBE_CONNECTIONS: Final = 16
#: The longest keep-alive, head and body timeouts of a probes-only connection.
PROBE_TIMEOUT_S: Final = 2.0
#: File descriptors kept for everything but client connections (upstream
#: connections, WARC and index files, Redis, the store, logs), at most a
#: quarter of the limit: the cap is lowered below ``limit - reserve``.
OPEN_FILES_RESERVE: Final = 256
#: How often, at most, reaching the cap is logged at WARNING (with counts).
CAP_REPORT_INTERVAL_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a client may take, and how many connections a process holds.

    ``keepalive_timeout_s``: an idle connection (no byte of a request since
    it was accepted or since its last answer) is closed after it;
    ``head_timeout_s``: a request head must be whole that long after its
    first byte (else 408 and closed); ``body_timeout_s``: the longest wait
    between two reads of a request body (else 408 when no answer started,
    and closed); ``min_body_rate_bps``: after ``body_timeout_s`` of a body, it
    must have come at this many bytes per second on average (mod_reqtimeout's
    ``MinRate``: a body that trickles a byte at a time is cut off too; 0: no
    rate); ``max_connections``: open client connections of the process (the
    module's docstring says what happens past it).
    """

    keepalive_timeout_s: float = 15.0
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    min_body_rate_bps: float = 500.0
    max_connections: int = 1024

    def __post_init__(self) -> None:
        for name in ("keepalive_timeout_s", "head_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0, not {getattr(self, name)!r}")
        if not self.min_body_rate_bps >= 0:
            raise ValueError(f"min_body_rate_bps must be 0 or more, not {self.min_body_rate_bps!r}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")

    def for_probes(self) -> ConnectionLimits:
        """These limits with each timeout at most :data:`PROBE_TIMEOUT_S`."""
        return replace(
            self,
            keepalive_timeout_s=min(self.keepalive_timeout_s, PROBE_TIMEOUT_S),
            head_timeout_s=min(self.head_timeout_s, PROBE_TIMEOUT_S),
            body_timeout_s=min(self.body_timeout_s, PROBE_TIMEOUT_S),
        )


DEFAULT_LIMITS: Final = ConnectionLimits()


def open_files_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE``, ``None`` when unlimited or unknown."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Unix
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_files_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit where allowed; the soft limit after.

    An unlimited hard limit raises it to 2**20 (Linux's default
    ``nr_open``). A refusal (a platform's lower ceiling) keeps it as it was.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not Unix
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.debug("cannot raise the open files limit from %d to %d: %s", soft, target, exc)
    return open_files_limit()


def fit_to_open_files(limits: ConnectionLimits, open_files: int | None) -> ConnectionLimits:
    """``limits`` with ``max_connections`` lowered to fit under ``open_files`` descriptors.

    Kept free: :data:`OPEN_FILES_RESERVE` (at most a quarter of the limit)
    and the :data:`PROBE_CONNECTIONS`. A lowered cap is logged at WARNING.

    >>> fit_to_open_files(ConnectionLimits(max_connections=1024), 1024).max_connections
    752
    >>> fit_to_open_files(ConnectionLimits(max_connections=1024), 65536).max_connections
    1024
    """
    if open_files is None:
        return limits
    room = open_files - min(OPEN_FILES_RESERVE, open_files // 4) - PROBE_CONNECTIONS
    fitted = max(1, min(limits.max_connections, room))
    if fitted < limits.max_connections:
        logger.warning(
            "at most %d client connections per process, not %d: the process may open %d files "
            "(RLIMIT_NOFILE; raise its hard limit to allow more)",
            fitted,
            limits.max_connections,
            open_files,
        )
    return replace(limits, max_connections=fitted)


def raw_answer(status: int, reason: str, message: str, *headers: str) -> bytes:
    """A whole HTTP/1.1 answer with a JSON ``{"message": ...}`` body that closes the connection."""
    body = json.dumps({"message": message}).encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: application/json; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
        "Access-Control-Allow-Origin: *",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Connection(Protocol):
    """What :class:`ConnectionSlots` asks of a connection (``GatewayRequestHandler``)."""

    def waiting_since(self) -> float | None:
        """Loop time since which it waits for a request; ``None`` when busy with one."""

    def evict(self) -> None:
        """Close it to make room (it waits for a request)."""


_C = TypeVar("_C", bound=Connection)


def _busy_message(slots: ConnectionSlots | None) -> str:
    cap = "" if slots is None else f" of {slots.max_connections}"
    return f"the gateway is at its limit{cap} connections: retry in a second"


def busy_answer(slots: ConnectionSlots | None) -> bytes:
    """The 503 of a connection past the cap (``Retry-After: 1``, closing the connection)."""
    return raw_answer(503, "Service Unavailable", _busy_message(slots), "Retry-After: 1")


def probes_only_handler(
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
    slots: ConnectionSlots | None,
) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """``handler`` for :data:`PROBE_PATHS` only, a 503 otherwise; every answer closes."""

    async def probe(request: web.BaseRequest) -> web.StreamResponse:
        if request.method in ("GET", "HEAD") and request.path in PROBE_PATHS:
            response = await handler(request)
        else:
            response = web.json_response(
                {"message": _busy_message(slots)},
                status=503,
                headers={"Retry-After": "1", "Access-Control-Allow-Origin": "*"},
            )
        response.force_close()
        return response

    return probe


class Refusal(asyncio.Protocol):
    """A connection refused at accept: a 503, then closed."""

    __slots__ = ("_answer",)

    def __init__(self, answer: bytes) -> None:
        self._answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(self._answer)
        transport.close()


#: What happens to a connection accepted at the cap (counted, logged).
_CAP_EVENTS: Final = (
    "idle connections closed to make room",
    "new connections served probes only",
    "new connections refused (503)",
)


class ConnectionSlots:
    """The client connections of one listening socket: at most ``max_connections``.

    :meth:`protocol` makes each accepted connection's protocol: a
    ``GatewayRequestHandler`` while there is room (made, at the cap, by
    closing the connection that has waited longest for a request), else a
    probes-only one (up to :data:`PROBE_CONNECTIONS`, the same way), else a
    503 at accept. Reaching the cap is logged at WARNING at most every
    :data:`CAP_REPORT_INTERVAL_S`, with counts.
    """

    __slots__ = ("_counts", "_reported_at", "max_connections", "probes", "regular")

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self.regular: dict[Connection, None] = {}
        self.probes: dict[Connection, None] = {}
        self._counts = dict.fromkeys(_CAP_EVENTS, 0)
        self._reported_at: float | None = None

    def __len__(self) -> int:
        return len(self.regular) + len(self.probes)

    def protocol(self, make: Callable[[bool], _C]) -> _C | Refusal:
        """The protocol of a connection just accepted: ``make(probes_only)``, or a refusal."""
        regular = self.regular
        if len(regular) < self.max_connections or self._evict(regular):
            handler = make(False)
            regular[handler] = None
            return handler
        if len(self.probes) < PROBE_CONNECTIONS or self._evict(self.probes):
            self._note(_CAP_EVENTS[1])
            handler = make(True)
            self.probes[handler] = None
            return handler
        self._note(_CAP_EVENTS[2])
        return Refusal(busy_answer(self))

    def discard(self, handler: Connection) -> None:
        """Forget a connection that ended."""
        self.regular.pop(handler, None)
        self.probes.pop(handler, None)

    def _evict(self, group: dict[Connection, None]) -> bool:
        """Close the connection of ``group`` that has waited longest for a request, if any."""
        victim: Connection | None = None
        oldest = 0.0
        for handler in group:
            since = handler.waiting_since()
            if since is not None and (victim is None or since < oldest):
                victim, oldest = handler, since
        if victim is None:
            return False
        del group[victim]
        victim.evict()
        if group is self.regular:
            self._note(_CAP_EVENTS[0])
        return True

    def _note(self, what: str) -> None:
        self._counts[what] += 1
        now = time.monotonic()
        if self._reported_at is not None and now - self._reported_at < CAP_REPORT_INTERVAL_S:
            return
        since = "" if self._reported_at is None else f" (in {now - self._reported_at:.0f} s)"
        self._reported_at = now
        counts = ", ".join(f"{n} {w}" for w, n in self._counts.items() if n)
        logger.warning(
            "at the limit of %d client connections%s: %s",
            self.max_connections,
            since,
            counts,
        )
        self._counts = dict.fromkeys(self._counts, 0)
