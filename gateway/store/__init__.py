"""The snapshot store: versioned, deduplicated WARC/1.1 captures with a crash-safe index.

Modules, one concept each:

- :mod:`~gateway.store.settings`  ``StoreSettings`` (the ``store:`` section)
- :mod:`~gateway.store.store`     ``Store``: open/recover, record, look up, import, close
- :mod:`~gateway.store.capture`   ``CaptureInput`` in, ``CaptureAck`` out
- :mod:`~gateway.store.writer`    the writer task (batches, dedup, durability)
- :mod:`~gateway.store.warcfile`  the open WARC file (append, truncate back, close)
- :mod:`~gateway.store.db`        ``IndexDB``: the SQLite index (captures, files, dedup)
- :mod:`~gateway.store.rows`      the index's columns and row types (``FileRow``, ``StoredRow``)
- :mod:`~gateway.store.connection`  opening the index: write, read-only, immutable
- :mod:`~gateway.store.reader_pool`  ``ReaderPool``: read-only connections for lookups
- :mod:`~gateway.store.schema`  the index's schema versions
- :mod:`~gateway.store.reader`    lookups: versions, latest, nearest, ranges
- :mod:`~gateway.store.indexing`  index rows from WARC bytes (warcio)
- :mod:`~gateway.store.framing`   strict "is this record whole?" scanner
- :mod:`~gateway.store.verify`    framing + warcio digests of one file
- :mod:`~gateway.store.recovery`  recovery at open: unfinished files and imports only
- :mod:`~gateway.store.importer`  ``store add``: verify, stage, publish
- :mod:`~gateway.store.online_import`  the ``import`` actor type: files handed to a live store
- :mod:`~gateway.store.integrity.scrub`     the ``scrub`` actor type: closed files verified again
- :mod:`~gateway.store.store_actor`  the base of the store's actor types (:mod:`gateway.jobs`)
- :mod:`~gateway.store.integrity.check`     ``store check``
- :mod:`~gateway.store.integrity.repair`    ``store repair``
- :mod:`~gateway.store.layout`    directory layouts (a file's place from its row), file
  names, the locks of several processes
- :mod:`~gateway.store.migration.layout_steps`  the chain of layout steps and the move
  (copy, verify, commit, remove); on write
- :mod:`~gateway.store.migration.reconcile`  one file on disk against the index: import, quarantine,
  merge, finish a killed move
- :mod:`~gateway.store.migration.migrator`  a run of ``store migrate``: the index pass and the
  reconcile pass, the counts
- :mod:`~gateway.store.migration.actor`  the ``migrate`` actor type: the index pass in the
  background, a batch per tick
- :mod:`~gateway.commands.store`       ``gateway store add|history|check|repair|migrate``

The on-disk layout, what the store may touch and the lock model are
described in :mod:`gateway.store.layout`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from gateway.store.capture import CaptureAck, CaptureInput, HttpRequest, HttpResponse
    from gateway.store.errors import StoreError, StoreWriteError
    from gateway.store.settings import StoreSettings
    from gateway.store.store import Store

#: Where each public name lives; imported on first use (PEP 562), so that
#: ``import gateway.store.settings`` (the config reader, the CLI) does not
#: import warcio and the whole store.
_EXPORTS: Final = {
    "CaptureAck": "gateway.store.capture",
    "CaptureInput": "gateway.store.capture",
    "HttpRequest": "gateway.store.capture",
    "HttpResponse": "gateway.store.capture",
    "Store": "gateway.store.store",
    "StoreError": "gateway.store.errors",
    "StoreSettings": "gateway.store.settings",
    "StoreWriteError": "gateway.store.errors",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gateway.store' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "CaptureAck",
    "CaptureInput",
    "HttpRequest",
    "HttpResponse",
    "Store",
    "StoreError",
    "StoreSettings",
    "StoreWriteError",
]
