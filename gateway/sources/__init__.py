"""Index source types: SOURCE_TYPES maps a config ``type`` to its class.

One module and one line here per type; the class carries its config dataclass
(``config_type``) and the shorthand prefixes that select it.
"""

from __future__ import annotations

from typing import Final

from gateway.sources.base import IndexSource, SourceFactory
from gateway.sources.cdx_api import CdxApiSource
from gateway.sources.cdxj_file import CdxjFileSource
from gateway.sources.live import LiveSource
from gateway.sources.memento_api import MementoSource
from gateway.sources.redis_zset import RedisIndexSource
from gateway.sources.store import StoreSource
from gateway.sources.zipnum import ZipNumSource

__all__ = ["SOURCE_TYPES", "IndexSource", "SourceFactory"]

SOURCE_TYPES: Final[dict[str, type[SourceFactory]]] = {
    "cdx": CdxApiSource,
    "file": CdxjFileSource,
    "live": LiveSource,
    "memento": MementoSource,
    "redis": RedisIndexSource,
    "store": StoreSource,
    "zipnum": ZipNumSource,
}
