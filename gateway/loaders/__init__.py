"""Resource loader types: LOADER_TYPES maps a loader type name to its class.

One module and one line here per type (as ``SOURCE_TYPES`` for index
sources). Every class implements the
:class:`~gateway.loaders.base.ResourceLoader` protocol; the shared contract
suite (``tests/loaders/test_contract.py``) runs over every one.

``warc``
    :class:`~gateway.loaders.warc.WarcLoader`: a capture's ``filename`` and
    ``offset`` read from a local directory, an HTTP range prefix, a path
    index or a Redis hash (:mod:`gateway.loaders.resolvers`).
``replay``
    :class:`~gateway.loaders.replay.ReplayLoader`: a remote source's capture
    fetched from its ``id_`` replay URL (``load_url``).
``live``
    :class:`~gateway.loaders.live.LiveLoader`: a ``$live`` capture fetched
    from the live web.

``store``
    :class:`~gateway.loaders.store.StoreRecordLoader`: a ``$store``
    capture read from the snapshot store's ``warcs/`` directory.
``wacz``
    :class:`~gateway.loaders.wacz.WaczLoader`: a WACZ source's capture
    range-read from the WACZ's ``archive/`` entry.
"""

from __future__ import annotations

from typing import Final

from gateway.loaders.base import ResourceLoader
from gateway.registry import LazyRegistry

__all__ = ["LOADER_TYPES", "ResourceLoader"]

# Each module is imported when its type is first looked up: building a
# collection of local files imports neither aiohttp nor redis-py.
LOADER_TYPES: Final = LazyRegistry[type[ResourceLoader]](
    {
        "warc": "gateway.loaders.warc:WarcLoader",
        "replay": "gateway.loaders.replay:ReplayLoader",
        "live": "gateway.loaders.live:LiveLoader",
        "store": "gateway.loaders.store:StoreRecordLoader",
        "wacz": "gateway.loaders.wacz:WaczLoader",
    }
)
