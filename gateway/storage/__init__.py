"""Storage backends: STORAGE_TYPES maps a ``store.storages`` ``type`` to its class.

One module and one line here per type; each class carries its config
dataclass (``config_type``) and an async ``open(name, config)``. The S3
backend imports its client library only when a storage is opened, and
each backend's module is imported when its type is first looked up
(:class:`~gateway.registry.LazyRegistry`), so reading a config stays cheap.
"""

from __future__ import annotations

from typing import Final

from gateway.registry import LazyRegistry
from gateway.storage.base import ObjectInfo, PutResult, Storage, StorageFactory

__all__ = ["STORAGE_TYPES", "ObjectInfo", "PutResult", "Storage", "StorageFactory"]

# Each backend's module is imported when a config names its type.
STORAGE_TYPES: Final = LazyRegistry[type[StorageFactory]](
    {
        "local": "gateway.storage.local:LocalStorage",
        "s3": "gateway.storage.s3:S3Storage",
    }
)
