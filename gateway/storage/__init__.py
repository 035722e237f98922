"""Storage backends: STORAGE_TYPES maps a ``store.storages`` ``type`` to its class.

One module and one line here per type; each class carries its config
dataclass (``config_type``) and an async ``open(name, config)``. The S3
backend imports its client library only when a storage is opened, so
reading a config stays cheap.
"""

from __future__ import annotations

from typing import Final

from gateway.storage.base import ObjectInfo, PutResult, Storage, StorageFactory
from gateway.storage.local import LocalStorage
from gateway.storage.s3 import S3Storage

__all__ = ["STORAGE_TYPES", "ObjectInfo", "PutResult", "Storage", "StorageFactory"]

STORAGE_TYPES: Final[dict[str, type[StorageFactory]]] = {
    "local": LocalStorage,
    "s3": S3Storage,
}
