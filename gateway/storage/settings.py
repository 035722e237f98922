"""The ``store.storages`` and ``store.retention`` sections (issue 13 §1).

::

    store:
      storages:                      # named destinations; the primary is the store's own warcs/
        backup: {type: local, path: /mnt/backup/warcs}
        s3: {type: s3, endpoint: "http://127.0.0.1:8333", bucket: warcs,
             prefix: "gateway/", region: us-east-1}
      retention:
        copies: 2                    # copies that make a file safe, the primary included
        archival_max_age_s: 3600     # an `ongoing` copy older than this counts as missing
        batch_size: 100
        parallel_copies: 4

``config.py`` reads the YAML and builds these (each storage's own config
dataclass comes from :data:`gateway.storage.STORAGE_TYPES`);
:class:`~gateway.store.settings.StoreSettings` holds them as ``storages``
and ``retention``. Validation errors are :class:`SettingError`, which carry
the field they are about so that the config error names its YAML path
(``store.storages.s3.bucket: ...``). S3 credentials never appear here: they
come from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` or
``AWS_PROFILE``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["PRIMARY", "RetentionPolicy", "SettingError", "StorageSpec", "check_retention"]

#: The name the store's own ``warcs/`` goes by in copy status rows; no storage may take it.
PRIMARY: Final = "primary"
STORAGE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


class SettingError(ValueError):
    """A setting is invalid; ``field`` names it (config.py appends it to the YAML path)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageSpec:
    """One ``store.storages`` entry: its registry ``type`` and typed ``config``.

    ``path`` is its YAML path (``store.storages.s3``), for messages.
    """

    type: str
    config: Any
    path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """How many copies make a file safe, and how the archiver works towards them.

    - ``copies``: copies that make a closed WARC file safe, the primary
      (the store's own ``warcs/``) included; 1 means no replication.
    - ``archival_max_age_s``: an ``ongoing`` copy older than this many
      seconds counts as missing (its copier died).
    - ``batch_size``: files per worker batch.
    - ``parallel_copies``: copies running at once.

    These are the Software Heritage archiver's ``retention_policy``,
    ``archival_max_age``, ``batch_max_size`` and ``max_queue_length``.
    """

    copies: int = 1
    archival_max_age_s: float = 3600.0
    batch_size: int = 100
    parallel_copies: int = 4

    def __post_init__(self) -> None:
        if self.copies < 1:
            raise SettingError("copies", f"{self.copies}: expected 1 or more (1 is the primary)")
        if not self.archival_max_age_s > 0:
            raise SettingError(
                "archival_max_age_s", f"{self.archival_max_age_s}: expected a positive duration"
            )
        if self.batch_size < 1:
            raise SettingError("batch_size", f"{self.batch_size}: expected 1 or more")
        if self.parallel_copies < 1:
            raise SettingError("parallel_copies", f"{self.parallel_copies}: expected 1 or more")


def check_retention(retention: RetentionPolicy, storages: Mapping[str, StorageSpec]) -> None:
    """Raise :class:`SettingError` (field ``copies``) when the policy asks for more
    copies than the primary and the storages can hold, or a storage is named
    :data:`PRIMARY` or not a plain name.

    >>> check_retention(RetentionPolicy(copies=2), {})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gateway.storage.settings.SettingError: copies: 2 copies asked for, but there is only ...
    """
    for name in storages:
        if name == PRIMARY or not STORAGE_NAME.fullmatch(name):
            raise SettingError(
                "storages",
                f"{name!r} cannot name a storage; expected 1-64 letters, digits, '_', '.', '-' "
                f"(not {PRIMARY!r}, the store's own copy)",
            )
    available = 1 + len(storages)
    if retention.copies > available:
        where = (
            "there is only the primary"
            if not storages
            else f"there are only {available} places (the primary and {', '.join(storages)})"
        )
        raise SettingError(
            "copies",
            f"{retention.copies} copies asked for, but {where}; "
            "add a storage under store.storages or lower copies",
        )
