"""``$live``: the live web as an index source (pywb warcserver ``LiveIndexSource``).

Every exact lookup is answered with one capture "at the current time": the
live web always has the URL, now. Its :class:`~gateway.cdx.cdxj.CdxRecord` is::

    urlkey timestamp {"url": URL, "load_url": URL, "is_live": "true"}

with ``urlkey`` the query's key, ``timestamp`` the current UTC time (14
digits), ``url`` and ``load_url`` the query URL (``http://`` added when it has
no scheme). ``is_live`` is ``"true"`` as pywb writes it. The aggregator adds
``source`` and ``source-coll``; the source's :class:`~gateway.loaders.live.LiveLoader`
loads only such records of its own source, fetching the URL when the
Resource API asks for it (the Index API never touches the network).

Differences from pywb, on purpose:

- only ``matchType=exact`` is answered; prefix, host and domain lookups yield
  nothing, because the live web cannot list the URLs under a prefix and a
  single line for the prefix itself would pretend to be that listing (pywb
  answers any lookup with the query URL);
- URLs that are not ``http://`` or ``https://`` (after adding ``http://`` to
  a schemeless URL) yield nothing: the live web is only fetched over HTTP(S);
- no ``HEAD`` request fills ``status``/``mime`` when the query has filters
  (pywb does): an index lookup never causes live traffic, so filters on those
  fields do not match live records.

Config: ``$live`` or ``{type: live, allow_private_networks: false,
max_record_bytes: 104857600}`` (see :class:`LiveSourceConfig`). Sources take
no timeout: the step's ``timeout`` bounds lookups.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery, now_timestamp
from gateway.clients import SharedClients
from gateway.loaders.base import ResourceLoader
from gateway.loaders.live import DEFAULT_MAX_RECORD_BYTES, LiveLoader, with_scheme
from gateway.loaders.netpolicy import ALLOWED_SCHEMES
from gateway.sources.base import SourceConfig

__all__ = ["SHORTHAND", "LiveSource", "LiveSourceConfig"]

SHORTHAND: Final = "$live"


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveSourceConfig:
    """The live web: ``$live`` or ``{type: live, ...}``.

    ``allow_private_networks``: also fetch loopback, private, link-local and
    metadata addresses (off by default: see :mod:`gateway.loaders.netpolicy`).
    ``max_record_bytes``: the largest payload fetched into one record, in
    bytes (default 100 MiB); a larger response is a load error.
    """

    allow_private_networks: bool = False
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        if self.max_record_bytes <= 0:
            raise ValueError(
                f"max_record_bytes must be a positive number of bytes, got {self.max_record_bytes}"
            )

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Accept exactly ``$live`` (the defaults); raises ValueError otherwise.

        >>> LiveSourceConfig.from_shorthand("$live")
        LiveSourceConfig(allow_private_networks=False, max_record_bytes=104857600)
        """
        if text != SHORTHAND:
            raise ValueError(
                f"{text!r} is not the live web; expected {SHORTHAND!r} or "
                "{type: live, allow_private_networks: ..., max_record_bytes: ...}"
            )
        return cls()


class LiveSource:
    """The live web as an index (see the module docstring).

    ``resolver`` replaces aiohttp's DNS resolution for the fetches (tests,
    embedding); the network policy applies to its answers all the same.
    """

    config_type: ClassVar[type[SourceConfig]] = LiveSourceConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (SHORTHAND,)

    def __init__(
        self,
        config: LiveSourceConfig,
        *,
        name: str,
        clients: SharedClients,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.loader = LiveLoader(
            name,
            clients=clients,
            allow_private_networks=config.allow_private_networks,
            max_record_bytes=config.max_record_bytes,
            resolver=resolver,
        )

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> LiveSource:
        """Build the source; nothing connects before the first fetch."""
        if not isinstance(config, LiveSourceConfig):
            raise TypeError(f"expected LiveSourceConfig, got {type(config).__name__}")
        return cls(config, name=name, clients=clients)

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield one capture of ``query.url`` now for an exact lookup, else nothing.

        A widened (fuzzy) lookup gets nothing, as from pywb's ``LiveIndexSource``.
        Never fails and never touches the network.
        """
        if query.match_type != "exact" or query.fuzzy or not query.key < query.end_key:
            return
        url = with_scheme(query.url)
        if urlsplit(url).scheme.lower() not in ALLOWED_SCHEMES:
            return
        fields = {"url": url, "load_url": url, "is_live": "true"}
        yield CdxRecord(query.key, now_timestamp(), fields)

    def describe(self) -> str:
        policy = "private networks allowed" if self.config.allow_private_networks else "public only"
        return f"live web ({policy}, max_record_bytes={self.config.max_record_bytes})"

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """``[LiveLoader]`` bound to this source's name."""
        return (self.loader,)

    async def aclose(self) -> None:
        """Close the loader's HTTP session."""
        await self.loader.aclose()
