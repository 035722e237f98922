"""Index source types: SOURCE_TYPES maps a config ``type`` to its class.

One module and one line here per type; the class carries its config dataclass
(``config_type``) and the shorthand prefixes that select it. Each module is
imported when its type is first looked up (:class:`~gateway.registry.LazyRegistry`),
so reading a config imports only the types it uses; :data:`SOURCE_SHORTHANDS`
repeats each class's ``shorthand_prefixes`` and ``shorthand_suffixes`` for
that (``tests/sources/test_contract.py`` checks they agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.registry import LazyRegistry
from gateway.sources.base import IndexSource, SourceFactory

__all__ = ["SOURCE_SHORTHANDS", "SOURCE_TYPES", "IndexSource", "Shorthand", "SourceFactory"]

SOURCE_TYPES: Final = LazyRegistry[type[SourceFactory]](
    {
        "cdx": "gateway.sources.cdx_api:CdxApiSource",
        "file": "gateway.sources.cdxj_file:CdxjFileSource",
        "live": "gateway.sources.live:LiveSource",
        "memento": "gateway.sources.memento_api:MementoSource",
        "redis": "gateway.sources.redis_zset:RedisIndexSource",
        "store": "gateway.sources.store:StoreSource",
        "wacz": "gateway.sources.wacz:WaczSource",
        "zipnum": "gateway.sources.zipnum:ZipNumSource",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Shorthand:
    """The strings that select a source type in a shorthand ``index:`` value."""

    prefixes: tuple[str, ...]
    suffixes: tuple[str, ...] = ()


SOURCE_SHORTHANDS: Final[dict[str, Shorthand]] = {
    "cdx": Shorthand(prefixes=("cdx+", "cdxj+")),
    "file": Shorthand(prefixes=("file://",)),
    "live": Shorthand(prefixes=("$live",)),
    "memento": Shorthand(prefixes=("memento+", "http://", "https://")),
    "redis": Shorthand(prefixes=("redis://", "rediss://")),
    "store": Shorthand(prefixes=("$store",)),
    "wacz": Shorthand(prefixes=("wacz+",), suffixes=(".wacz",)),
    "zipnum": Shorthand(prefixes=("zipnum+",), suffixes=(".idx", ".summary")),
}
