"""One exception tree for the gateway; every class knows its HTTP status.

::

    GatewayError                      500  base class; never raised itself
    ├── BadRequest                    400  a client parameter is malformed
    ├── ConfigError                    -   collections.yaml is wrong (start-up only)
    ├── NotFound                      404  nothing matched; carries per-source errors
    ├── AccessBlocked                 451  the capture is blocked by an access rule (pywb)
    ├── SourceError                   503  one index source failed a lookup
    │   ├── SourceTimeout                  ... did not answer within its deadline
    │   ├── SourceUnavailable              ... refused, reset, HTTP error status
    │   ├── SourceBadAnswer                ... answered something unparseable
    │   ├── SourceSkipped                  ... skipped by its circuit breaker
    │   └── SourceRefused             4xx  ... refused the query: the client's input, not
    │                                          a fault of the source (an upstream 400)
    ├── AllSourcesFailed              503  every source of a lookup failed
    ├── CapturesUnavailable           503  captures found, none loaded: their places unreachable
    ├── JobsUnavailable               503  the jobs database cannot be read (/_jobs)
    └── LoadError                     404  one capture could not be loaded
        ├── ArchiveFileNotFound            ... no configured prefix holds the file
        ├── ArchiveRefused                 ... a package failed its checks (a WACZ whose
        │                                      digests differ, no datapackage): not served
        ├── ArchiveUnavailable             ... I/O failed: HTTP 5xx, refused, read error
        │   ├── PlaceUnreachable           ... the storage, replica, path index or HTTP
        │   │                                  prefix was not reached (refused, reset,
        │   │                                  timed out, 5xx): it is down, not the record
        │   └── UpstreamLoadError          ... a remote archive could not serve a capture
        │       ├── UpstreamStatusError        ... it answered an error page (not a memento)
        │       ├── UpstreamUnreachable        ... refused, reset, broke off mid-answer
        │       └── TooManyArchiveRedirects    ... redirect chain past the limit
        ├── RecordTooLarge                 ... payload past the loader's max_record_bytes
        ├── LiveFetchRefused               ... live URL refused (scheme, network policy)
        ├── UnsafeFilename                 ... CDX filename escapes its prefixes
        ├── RecordFormatError              ... bytes at offset are not a WARC/ARC record
        │   └── RecordFramingError    502  ... its length cannot be read (-1, abc)
        ├── RevisitUnresolved              ... a revisit's original was not found
        └── SelfRedirect                   ... a 3xx capture redirects to itself

The snapshot store's own branch (``StoreError``) lives in
:mod:`gateway.store.errors`, the storage backends' (``StorageError``) in
:mod:`gateway.storage.errors`.

The route wrapper every handler is registered through
(:func:`gateway.server.app.api_route`) renders any of them as
``{"message": ..., "errors": {source: reason}}`` with :attr:`GatewayError.status`
(and ``Retry-After`` from :attr:`GatewayError.retry_after_s` when it is set).
Foreign exceptions are translated at the boundary where they occur
(``raise SourceUnavailable(name, str(exc)) from exc``).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AccessBlocked",
    "AllSourcesFailed",
    "ArchiveFileNotFound",
    "ArchiveRefused",
    "ArchiveUnavailable",
    "BadRequest",
    "CapturesUnavailable",
    "ConfigError",
    "GatewayError",
    "JobsUnavailable",
    "LiveFetchRefused",
    "LoadError",
    "NotFound",
    "PlaceUnreachable",
    "RecordFormatError",
    "RecordFramingError",
    "RecordTooLarge",
    "RevisitUnresolved",
    "SelfRedirect",
    "SourceBadAnswer",
    "SourceError",
    "SourceRefused",
    "SourceSkipped",
    "SourceTimeout",
    "SourceUnavailable",
    "TooManyArchiveRedirects",
    "UnsafeFilename",
    "UpstreamLoadError",
    "UpstreamStatusError",
    "UpstreamUnreachable",
]


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose.

    ``status`` is the HTTP status the API answers with; ``errors`` maps a
    source (or capture) name to the reason it failed, for the JSON body.
    """

    status: int = 500
    #: Seconds a client should wait before asking again (``Retry-After``,
    #: RFC 9110 §10.2.3), for answers that say "not now" rather than "no".
    retry_after_s: float | None = None

    def __init__(self, message: str, errors: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors: dict[str, str] = dict(errors or {})

    def to_json(self) -> dict[str, object]:
        """The response body: ``{"message": str, "errors": {name: reason}}``."""
        body: dict[str, object] = {"message": self.message}
        if self.errors:
            body["errors"] = self.errors
        return body


class BadRequest(GatewayError):
    """A request parameter is missing or malformed (HTTP 400).

    ``param`` names the offending parameter so clients can fix the request.
    """

    status = 400

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"{param}: {problem}")
        self.param = param
        self.problem = problem

    def to_json(self) -> dict[str, object]:
        return {"message": self.message, "param": self.param}


class ConfigError(GatewayError):
    """collections.yaml is invalid; ``path`` is the YAML path of the problem.

    Raised only at start-up (``gateway serve`` exits with status 2).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class AccessBlocked(GatewayError):
    """The capture to load is listed with ``access: block`` (HTTP 451, RFC 7725;
    pywb ``AccessException``). ``message`` is the rule's public message, or a
    generic one; the body also says ``"access": "block"``."""

    status = 451

    def to_json(self) -> dict[str, object]:
        return {"message": self.message, "access": "block"}


class JobsUnavailable(GatewayError):
    """The background jobs' database cannot be read (``GET /_jobs``, HTTP 503)."""

    status = 503
    retry_after_s = 5


class NotFound(GatewayError):
    """No capture matched, or none of the matching captures loaded (HTTP 404)."""

    status = 404


class SourceError(GatewayError):
    """One index source failed; ``source`` is its configured name (HTTP 503)."""

    status = 503

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}", {source: reason})
        self.source = source
        self.reason = reason


class SourceTimeout(SourceError):
    """The source did not answer within its deadline (the aggregator's ``timeout``)."""


class SourceUnavailable(SourceError):
    """The source could not be reached or answered with an error status.

    ``retry_after_s`` carries an upstream ``Retry-After`` when there was one.
    """

    def __init__(self, source: str, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(source, reason)
        self.retry_after_s = retry_after_s


class SourceBadAnswer(SourceError):
    """The source answered, but not in a format the gateway can parse."""


class SourceSkipped(SourceError):
    """The source was skipped by its circuit breaker after repeated failures."""


class SourceRefused(SourceError):
    """The source refused the query because of the client's input, not because it
    is in trouble: a remote archive answered a 4xx about the URL asked for (an
    upstream ``400 Bad Request``), or the URL cannot be asked of it at all.

    ``status`` is the answer's (a 4xx: 400 unless the upstream's says more,
    :func:`gateway.sources.upstream.refusal`). A refusal never feeds a circuit
    breaker or readiness (:mod:`gateway.index.group`); when every source of a
    lookup refused it, the client gets this 4xx, else it is listed in
    ``errors`` beside the other sources' answers.
    """

    def __init__(self, source: str, reason: str, status: int = 400) -> None:
        super().__init__(source, reason)
        self.status = status


class AllSourcesFailed(GatewayError):
    """Every source of a lookup failed, so "no captures" cannot be claimed (HTTP 503)."""

    status = 503
    retry_after_s = 10


class CapturesUnavailable(GatewayError):
    """Captures were found but none loaded, because the places that hold them
    could not be reached or read now: a storage, a replica or an HTTP prefix
    down, a WARC file missing or unreadable (HTTP 503 with ``Retry-After``).

    Clients and caches read a 404 as "not archived"; this is not that. The
    JSON ``errors`` name each capture and what failed. A capture whose bytes
    are damaged everywhere is a :class:`NotFound` naming the damage instead.
    """

    status = 503
    retry_after_s = 10


class LoadError(GatewayError):
    """A capture was found in an index but its record could not be loaded.

    The Resource API skips to the next capture; when none loads the request is
    a 404 listing every LoadError.
    """

    status = 404


class ArchiveFileNotFound(LoadError):
    """No configured resource prefix or path index holds the CDX ``filename``."""


class ArchiveRefused(LoadError):
    """A package holding records failed its own checks (a WACZ whose ZIP, datapackage
    or resource digests are wrong, WACZ 1.1.1): none of it is served."""


class ArchiveUnavailable(LoadError):
    """The archive holding the record could not be read (HTTP 5xx, connection
    refused, read or permission error); another capture may still load."""


class PlaceUnreachable(ArchiveUnavailable):
    """The place that holds the record (a storage, a replica, a path index, an HTTP
    prefix) could not be reached: refused, reset, timed out, or a 5xx. It is down,
    which says nothing of the record; these failures, and only they, feed a
    loader's circuit breaker (:mod:`gateway.index.collection`)."""


class UpstreamLoadError(ArchiveUnavailable):
    """The archive holding a remote capture could not serve it."""


class UpstreamStatusError(UpstreamLoadError):
    """The archive answered an error status (400 or more) that is not a memento.

    ``status_code`` is the HTTP status code.
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status_code = status


class UpstreamUnreachable(UpstreamLoadError):
    """The archive could not be reached, or the connection broke mid-answer."""


class TooManyArchiveRedirects(UpstreamLoadError):
    """The archive redirected more times than allowed for one capture."""


class RecordTooLarge(LoadError):
    """The payload fetched upstream is larger than the loader's ``max_record_bytes``."""


class LiveFetchRefused(LoadError):
    """The live fetch was refused before anything was sent (scheme or network policy)."""


class UnsafeFilename(LoadError):
    """A CDX ``filename`` would leave its configured prefix (``../``, absolute, scheme)."""


class RecordFormatError(LoadError):
    """The bytes at the CDX offset are not a WARC or ARC record."""


class RecordFramingError(RecordFormatError):
    """The record's length cannot be read (``Content-Length: -1``, an ARC length
    ``abc``): where it ends is unknown, so it is never served as a record.

    The lookup moves on to the next capture; when every capture failed with
    this, the answer is a 502 naming the file and offset
    (:func:`gateway.index.collection.find_record`): the archive file holds a
    broken record, which is neither "not archived" (404) nor "down" (503).
    """

    status = 502


class RevisitUnresolved(LoadError):
    """A revisit record's original could not be found or loaded (WARC 1.1 §6.7)."""


class SelfRedirect(LoadError):
    """A 3xx capture redirects to its own URL; pywb skips these to avoid loops."""
