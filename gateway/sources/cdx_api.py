"""A remote CDX server as an index source (pywb warcserver ``RemoteIndexSource``).

Configured as ``cdx+URL`` (``cdxj+URL`` too), optionally followed by a space
or ``;`` and where its mementos are replayed, or as a mapping
``{type: cdx, api_url: ..., replay_url: ...}``. The replay URL is a template
with ``{url}`` and ``{timestamp}`` (``{url}`` is percent-encoded when it
stands in the query string, as pywb's ``res_template`` does); by default
``<prefix>{timestamp}id_/{url}``, the prefix derived from the API URL as pywb's
``RemoteIndexSource.init_from_string`` derives it:

- ``cdx+http://host/pywb/cdx``: the API's parent, ``http://host/pywb/``;
- ``cdx+http://host/pywb-cdx``: drop ``-cdx``, ``http://host/pywb/``;
- ``cdx+http://host/cdx /web`` (pywb: a collection path after a space, or
  after ``;`` here): the API's parent plus that path, ``http://host/web/``;
- ``cdx+https://web.archive.org/cdx/search/cdx https://web.archive.org/web/``:
  an absolute replay prefix; a template with ``{url}`` is taken as it is.

A lookup is one ``GET`` of the API URL (its own query parameters kept) with
``url``, ``matchType``, ``from`` and ``to`` (14 digits, padded), and, when the
query has no filters (they are applied here, after the answer, so a limit
upstream would cut before them): ``limit``; for ``sort=closest`` also
``closest`` and ``sort=closest`` with ``limit`` capped at ``closest_limit``
(pywb asks for 100 closest); for ``sort=reverse`` ``sort=reverse``. No
``output`` is asked for: every answer format is read (CDXJ, NDJSON, IA JSON,
11-, 9- and 7-field text; :mod:`gateway.sources.cdx_stream`), line by line or
row by row as it streams in; ``Accept-Encoding: gzip, deflate`` is sent and a
compressed answer is decoded in bounded steps (the shared session does not
decompress).

Records are yielded sorted by (urlkey, timestamp): ascending answers stream
through (at most one line and one network chunk in memory); closest and
reverse answers are read up to the ``limit`` asked for, then sorted (memory
bounded by that limit). Records outside ``[query.key, query.end_key)`` (a
server canonicalizing URLs differently) are dropped with one WARNING per
lookup. Each record gets ``load_url``, the replay template filled with its
``url`` and ``timestamp``; the records load through this source's
:class:`~gateway.loaders.replay.ReplayLoader` (:meth:`resource_loaders`).

Errors: a connection failure or an HTTP error status raises
:class:`SourceUnavailable` (``"HTTP 502 from <api>"``; ``retry_after_s`` from
``Retry-After`` on 429 and 503); an answer that does not parse raises
:class:`SourceBadAnswer` naming the line. A 4xx about the query (a ``400`` for
``url=javascript:alert(1)``; any 4xx but 404, 401, 407, 408 and 429) is the
client's error, not the server's: it raises
:class:`~gateway.errors.SourceRefused` naming the status and what the answer's
text said (:mod:`gateway.sources.upstream`), which never opens the circuit
breaker. A **404 is "no captures"**: pywb's
CDX server and OpenWayback answer an empty lookup with 404 (pywb's
``RemoteIndexSource`` treats it so); a misconfigured API URL therefore looks
empty, which ``gateway check-config`` cannot detect.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.memento import retry_after_seconds
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceBadAnswer, SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.loaders.replay import DEFAULT_MAX_RECORD_BYTES, ReplayLoader, requote_url
from gateway.loaders.warc_build import CHUNK_BYTES, DEFAULT_SPOOL_MEMORY_BYTES
from gateway.sources.base import IndexSource, SourceConfig
from gateway.sources.cdx_stream import BodyDecoder, CdxAnswerError, CdxAnswerParser
from gateway.sources.upstream import body_excerpt, is_refusal, refusal

__all__ = ["DEFAULT_CLOSEST_LIMIT", "CdxApiConfig", "CdxApiSource", "fill_replay_template"]

logger = logging.getLogger(__name__)

#: Captures asked for by a closest-sorted lookup at most (pywb ``closest_limit``).
DEFAULT_CLOSEST_LIMIT: Final = 100
_ID_SUFFIX: Final = "{timestamp}id_/{url}"
_PLACEHOLDERS: Final = ("{url}", "{timestamp}")


def _check_http_url(what: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{what} {url!r} is not an http(s) URL; expected e.g. cdx+https://host/cdx"
        )


def _derived_replay(api_url: str, coll: str = "") -> str:
    """The replay template pywb derives from a CDX API URL (see module docstring)."""
    base = api_url.split("?", 1)[0]
    if not coll and base.endswith("-cdx"):
        return base[:-4] + "/" + _ID_SUFFIX
    parent = base.rsplit("/", 1)[0]
    if coll:
        coll = "/" + coll.strip("/")
    return parent + coll + "/" + _ID_SUFFIX


def _replay_template(value: str, api_url: str) -> str:
    """A replay setting (template, absolute prefix or pywb collection path) as a template."""
    if "{url}" in value:
        return value
    if "://" in value:
        return value.rstrip("/") + "/" + _ID_SUFFIX
    return _derived_replay(api_url, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class CdxApiConfig:
    """A remote CDX server (IA CDX server API, pywb ``/cdx``, OpenWayback).

    ``api_url``: the CDX API endpoint (http or https, query parameters kept).
    ``replay_url``: a template with ``{url}`` (and usually ``{timestamp}``),
    an absolute prefix (``{timestamp}id_/{url}`` appended) or a pywb
    collection path; empty: derived from ``api_url`` (module docstring).
    ``closest_limit``: most captures asked for by a closest-sorted lookup.
    ``max_record_bytes`` / ``spool_memory_bytes``: the replay loader's bound
    on one payload and on the part of it held in memory (bytes).
    """

    api_url: str
    replay_url: str = ""
    closest_limit: int = DEFAULT_CLOSEST_LIMIT
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    spool_memory_bytes: int = DEFAULT_SPOOL_MEMORY_BYTES

    def __post_init__(self) -> None:
        _check_http_url("CDX API URL", self.api_url)
        template = self.replay_template
        _check_http_url("replay URL", template.replace("{timestamp}", "").replace("{url}", ""))
        leftover = template
        for placeholder in _PLACEHOLDERS:
            leftover = leftover.replace(placeholder, "")
        if "{" in leftover or "}" in leftover:
            raise ValueError(
                f"replay URL template {template!r} may only use {{url}} and {{timestamp}}"
            )
        for name in ("closest_limit", "max_record_bytes", "spool_memory_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer")

    @property
    def replay_template(self) -> str:
        """The replay URL template, with ``{url}`` and ``{timestamp}``."""
        return _replay_template(self.replay_url, self.api_url)

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse ``cdx+URL``, ``cdxj+URL``, optionally ``<space or ;>REPLAY``.

        >>> CdxApiConfig.from_shorthand("cdx+http://h/pywb/cdx").replay_template
        'http://h/pywb/{timestamp}id_/{url}'
        >>> CdxApiConfig.from_shorthand("cdx+http://h/pywb-cdx").replay_template
        'http://h/pywb/{timestamp}id_/{url}'
        >>> CdxApiConfig.from_shorthand("cdx+http://h/cdx /web").replay_template
        'http://h/web/{timestamp}id_/{url}'
        >>> CdxApiConfig.from_shorthand(
        ...     "cdx+https://web.archive.org/cdx/search/cdx;https://web.archive.org/web/"
        ... ).replay_template
        'https://web.archive.org/web/{timestamp}id_/{url}'

        Raises :class:`ValueError` naming what was expected.
        """
        for prefix in CdxApiSource.shorthand_prefixes:
            if text.startswith(prefix):
                rest = text[len(prefix) :].strip()
                break
        else:
            raise ValueError(f"{text!r} is not a CDX server; expected cdx+http(s)://host/path")
        cut = min((i for i in (rest.find(" "), rest.find(";")) if i >= 0), default=-1)
        api, replay = (rest, "") if cut < 0 else (rest[:cut], rest[cut + 1 :].strip())
        _check_http_url("CDX API URL", api)
        return cls(api_url=api, replay_url=_replay_template(replay, api))


def fill_replay_template(template: str, url: str, timestamp: str) -> str:
    """The replay URL of one capture (pywb ``res_template`` quoting rules).

    ``{url}`` is percent-encoded when it stands after a ``?``, else only
    characters a URL may not hold are encoded.

    >>> fill_replay_template("http://h/web/{timestamp}id_/{url}", "http://a.org/x y", "2014")
    'http://h/web/2014id_/http://a.org/x%20y'
    >>> fill_replay_template("http://h/get?ts={timestamp}&u={url}", "http://a.org/?q=1", "2014")
    'http://h/get?ts=2014&u=http%3A//a.org/%3Fq%3D1'
    """
    query_at = template.find("?")
    in_query = 0 <= query_at < template.find("{url}")
    filled_url = quote(url) if in_query else requote_url(url)
    return template.replace("{timestamp}", timestamp).replace("{url}", filled_url)


def _in_range(record: CdxRecord, query: CaptureQuery) -> bool:
    """``key <= "urlkey timestamp" < end_key``, as a sorted file's lines are compared."""
    return query.key <= f"{record.urlkey} {record.timestamp}" < query.end_key


class CdxApiSource:
    """Captures from a remote CDX server; see the module docstring for the protocol.

    :meth:`lookup` yields :class:`CdxRecord` sorted by (urlkey, timestamp)
    inside ``[query.key, query.end_key)``, each with ``load_url``; raises
    :class:`SourceUnavailable` or :class:`SourceBadAnswer`.
    """

    config_type: ClassVar[type[SourceConfig]] = CdxApiConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = ("cdx+", "cdxj+")

    def __init__(self, config: CdxApiConfig, *, name: str, clients: SharedClients) -> None:
        self.name = name
        self.config = config
        self.clients = clients
        self.replay_template = config.replay_template
        self._loader = ReplayLoader(
            name=name,
            clients=clients,
            max_record_bytes=config.max_record_bytes,
            spool_memory_bytes=config.spool_memory_bytes,
        )

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> IndexSource:
        if not isinstance(config, CdxApiConfig):
            raise TypeError(f"expected CdxApiConfig, got {type(config).__name__}")
        return cls(config, name=name, clients=clients)

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """``[ReplayLoader]`` for this source's captures (``source-coll`` == name)."""
        return [self._loader]

    def describe(self) -> str:
        return f"CDX server {self.config.api_url} (replay {self.replay_template})"

    async def aclose(self) -> None:
        """Nothing to release: connections belong to the shared session."""

    def __repr__(self) -> str:
        return f"CdxApiSource({self.name!r}, {self.config.api_url!r})"

    def query_params(self, query: CaptureQuery) -> list[tuple[str, str]]:
        """The parameters sent upstream for ``query`` (module docstring), in order.

        A lookup under a request's method key (a POST looked up through the
        post-request API; ``query.extra["alt_url"]``, pywb's ``alt_url``) sends
        that URL, whose urlkey is the method key the archive's index holds
        (cdxj-indexer's ``__wb_method=post&...``), so the server looks up the
        same key as a local index would.

        >>> source = CdxApiSource(CdxApiConfig(api_url="http://h/cdx"), name="x",
        ...                       clients=SharedClients())
        >>> source.query_params(CaptureQuery.for_url("http://a.org/", closest="20140101000000"))
        [('url', 'http://a.org/'), ('matchType', 'exact'), ('closest', '20140101000000'), \
('sort', 'closest'), ('limit', '100')]
        >>> post = CaptureQuery.for_url("http://a.org/").evolve(
        ...     extra={"alt_url": "http://a.org/?__wb_method=post&a=1"})
        >>> source.query_params(post)[0]
        ('url', 'http://a.org/?__wb_method=post&a=1')
        """
        params = [("url", query.extra.get("alt_url", query.url)), ("matchType", query.match_type)]
        if query.from_ts:
            params.append(("from", query.from_ts))
        if query.to_ts:
            params.append(("to", query.to_ts))
        if query.filters:
            return params
        if query.sort == "closest" and query.closest:
            limit = min(query.limit, self.config.closest_limit)
            params += [("closest", query.closest), ("sort", "closest")]
        elif query.sort == "reverse":
            limit = query.limit
            params.append(("sort", "reverse"))
        else:
            limit = query.limit
        params.append(("limit", str(limit)))
        return params

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield the server's captures for ``query`` (see the class docstring)."""
        if query.key >= query.end_key:
            return
        records = self._fetch(query)
        try:
            if query.filters or query.sort == "ascending":
                async for record in records:
                    yield record
                return
            limit = query.limit
            if query.sort == "closest":
                limit = min(limit, self.config.closest_limit)
            held: list[CdxRecord] = []
            async for record in records:
                held.append(record)
                if len(held) >= limit:
                    break
        finally:
            await records.aclose()
        held.sort(key=CdxRecord.sort_key)
        for record in held:
            yield record

    # ------------------------------------------------------------------ internals
    def _url(self, query: CaptureQuery) -> URL:
        base = URL(requote_url(self.config.api_url), encoded=True)
        return base.update_query(self.query_params(query))

    async def _fetch(self, query: CaptureQuery) -> AsyncGenerator[CdxRecord, None]:
        """The answer's records in answer order, in range, with ``load_url``."""
        api = self.config.api_url
        dropped = [0]

        def keep(records: list[CdxRecord]) -> list[CdxRecord]:
            inside = [r for r in records if _in_range(r, query)]
            dropped[0] += len(records) - len(inside)
            for record in inside:
                record.fields["load_url"] = fill_replay_template(
                    self.replay_template, record.url, record.timestamp
                )
            return inside

        try:
            async with self.clients.session.get(
                self._url(query), headers={"Accept-Encoding": "gzip, deflate"}
            ) as resp:
                if resp.status == 404:
                    return
                if is_refusal(resp.status):
                    detail = await body_excerpt(resp)
                    raise refusal(self.name, resp.status, f"CDX server {api}", detail)
                if resp.status >= 300:
                    retry = None
                    if resp.status in (429, 503):
                        retry = retry_after_seconds(resp.headers.get("Retry-After"))
                    raise SourceUnavailable(
                        self.name, f"HTTP {resp.status} from {api}", retry_after_s=retry
                    )
                decoder = BodyDecoder(resp.headers.get("Content-Encoding", ""))
                parser = CdxAnswerParser()
                async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                    for piece in decoder.decode(chunk):
                        for record in keep(parser.feed(piece)):
                            yield record
                for piece in decoder.flush():
                    for record in keep(parser.feed(piece)):
                        yield record
                for record in keep(parser.finish()):
                    yield record
        except CdxAnswerError as exc:
            raise SourceBadAnswer(self.name, f"unparseable answer from {api}: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise SourceUnavailable(self.name, f"cannot read {api}: {exc}") from exc
        finally:
            if dropped[0]:
                logger.warning(
                    "%s: %d captures from %s were outside the urlkey range [%s, %s) of %s "
                    "and were dropped (the server canonicalizes URLs differently)",
                    self.name,
                    dropped[0],
                    api,
                    query.key,
                    query.end_key,
                    query.url,
                )
