"""The IndexSource protocol every index source type implements.

A source answers one :class:`~gateway.cdx.query.CaptureQuery` with an async
iterator of :class:`~gateway.cdx.cdxj.CdxRecord` covering the urlkey range
``[query.key, query.end_key)``, **sorted by (urlkey, timestamp) ascending**.
Sources may use ``closest``, ``limit``, ``from_ts``/``to_ts`` as hints (a
remote server may apply them), but the aggregator applies every operation
again, so a source that ignores them is still correct.

Sources take no timeout: the aggregator owns deadlines (``asyncio.timeout``
inside a ``TaskGroup``). A source that cannot answer raises a
:class:`~gateway.errors.SourceError` subclass, translating foreign exceptions
at its boundary; it never returns an empty result for a failure.

A record may carry a ``source`` field naming a sub-part of the source (a
directory source sets the file name); the aggregator prefixes it with the
configured member name (``name:file``), as pywb does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self, runtime_checkable

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.loaders.base import ResourceLoader

__all__ = ["IndexSource", "Page", "PageList", "SourceConfig", "SourceFactory"]


class SourceConfig(Protocol):
    """A frozen, slotted, keyword-only dataclass holding one source's settings.

    ``from_shorthand`` parses the string form (``memento+URL``, a path, ...);
    it raises :class:`ValueError` with a message naming what was expected.
    """

    @classmethod
    def from_shorthand(cls, text: str) -> Self: ...


@runtime_checkable
class IndexSource(Protocol):
    """An index of captures (pywb warcserver ``IndexSource``)."""

    #: The configured name: group member, sequence step or collection.
    name: str

    def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield captures in ``[query.key, query.end_key)`` sorted by (urlkey, timestamp).

        Raises a :class:`~gateway.errors.SourceError` when the source fails.
        """
        ...

    def describe(self) -> str:
        """One line for ``gateway check-config`` (type and location)."""
        ...

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """Loaders for this source's own captures (remote replay, live fetch).

        Local index sources return ``()``: their captures name WARC files that
        the step's ``resource:`` loaders read. A remote source returns a loader
        whose ``accepts`` is true only for records it produced (``source-coll``
        equal to its ``name``), so each capture loads with its own policy.
        """
        ...

    async def aclose(self) -> None:
        """Release files, pools and connections held by the source."""
        ...


@dataclass(frozen=True, slots=True)
class Page:
    """One entry of a curated list of pages (WACZ ``pages/pages.jsonl``, WACZ 1.1.1
    §pages): the page's URL, its title (may be empty), the 14-digit timestamp of
    its capture, and the list it came from (the WACZ's file name)."""

    url: str
    title: str
    timestamp: str
    origin: str


@runtime_checkable
class PageList(Protocol):
    """A source that carries a list of pages besides its captures (a WACZ)."""

    async def pages(self, limit: int) -> tuple[list[Page], int]:
        """Up to ``limit`` pages in list order, and how many there are in all.

        Never raises for a list that cannot be read: it is left out (the
        source's lookups report the failure).
        """
        ...


class SourceFactory(Protocol):
    """What SOURCE_TYPES maps a type name to: a class built from its config."""

    config_type: ClassVar[type[SourceConfig]]
    #: Shorthand string prefixes that select this type (``("memento+",)``).
    shorthand_prefixes: ClassVar[tuple[str, ...]]

    @classmethod
    def from_config(
        cls, config: SourceConfig, *, name: str, clients: SharedClients
    ) -> IndexSource: ...
