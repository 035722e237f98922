"""StoreSettings: the ``store:`` section of collections.yaml.

``config.py`` builds :class:`StoreSettings` from the YAML mapping by field name
(unknown keys are rejected there); every field has a plain type so that the
mapping converts one to one. :meth:`StoreSettings.__post_init__` raises
:class:`ValueError` naming the field and what was expected, which ``config.py``
turns into a :class:`~gateway.errors.ConfigError` carrying the YAML path.

Example::

    store:
      root: ./archive/store
      rollover_bytes: 1000000000
      rollover_s: 300
      dedup: revisit
      fsync: always
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, get_args

from gateway.paths import absolute_path
from gateway.storage.settings import RetentionPolicy, SettingError, StorageSpec, check_retention
from gateway.store.layout import DEFAULT_ROOT

__all__ = [
    "DEDUP_POLICIES",
    "FSYNC_POLICIES",
    "DedupPolicy",
    "FsyncPolicy",
    "PublishSettings",
    "StoreSettings",
    "check_publish",
]

#: ``keep``: every capture is written in full. ``revisit``: a capture whose
#: payload digest equals a stored full record's is written as a revisit record
#: (WARC 1.1 §6.7.2). ``skip``: a capture whose payload equals the latest
#: capture of the same URL is not written at all (otherwise as ``revisit``).
DedupPolicy = Literal["keep", "revisit", "skip"]

#: ``always``: every acknowledged capture has been fsynced (WARC file and
#: index), so it survives a power loss. ``close``: fsync only when a WARC file
#: is closed; an acknowledged capture survives a crash of the process (the
#: bytes are in the OS page cache) but not of the machine. ``never``: no
#: fsync at all (tests and benchmarks).
FsyncPolicy = Literal["always", "close", "never"]

DEDUP_POLICIES: Final[tuple[DedupPolicy, ...]] = get_args(DedupPolicy)
FSYNC_POLICIES: Final[tuple[FsyncPolicy, ...]] = get_args(FsyncPolicy)

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _split(url: str, *, form: str = "") -> tuple[str, str]:
    """``(server URL, key)`` of a sorted set's URL; :class:`ValueError` when it is not one.
    (:mod:`gateway.redis_keys` imports redis-py: only a config with ``publish`` pays.)"""
    from gateway.redis_keys import server_and_key

    return server_and_key(url, "", what="sorted-set", form=form)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishSettings:
    """``store.publish``: where a fleet of gateways finds the store's captures (issue 13 §5).

    - ``redis``: ``redis://[user:password@]host[:port]/db/key``, the sorted set
      that receives every capture's CDXJ line (pywb's Redis index format,
      score 0) once its WARC file is safe;
    - ``storage``: the ``store.storages`` entry the fleet reads the WARC
      files from (``resource:`` of its collections); a file is published once
      it is safe under the retention policy *and* present there. Default:
      the only ``s3`` storage.

    Raises :class:`SettingError` naming the field.
    """

    redis: str
    storage: str = ""

    def __post_init__(self) -> None:
        try:
            _split(self.redis, form="redis://host:port/db/key")
        except ValueError as exc:
            raise SettingError("redis", str(exc)) from exc

    @property
    def server_url(self) -> str:
        """``redis://host:port/db`` (what :meth:`SharedClients.redis` pools by)."""
        return _split(self.redis)[0]

    @property
    def key(self) -> str:
        """The sorted set's key."""
        return _split(self.redis)[1]

    @property
    def target(self) -> str:
        """The sorted set named for logs and the ``publications`` table, password masked."""
        from gateway.redis_keys import redact

        return f"{redact(self.server_url)}/{self.key}"


def check_publish(
    publish: PublishSettings | None, storages: Mapping[str, StorageSpec]
) -> PublishSettings | None:
    """``publish`` with its ``storage`` resolved; :class:`SettingError` when it names
    no configured storage or none can be chosen."""
    if publish is None:
        return None
    if publish.storage:
        if publish.storage not in storages:
            raise SettingError(
                "storage",
                f"{publish.storage!r} is not one of store.storages "
                f"({', '.join(storages) or 'none configured'})",
            )
        return publish
    s3 = [name for name, spec in storages.items() if spec.type == "s3"]
    if len(s3) != 1:
        raise SettingError(
            "storage",
            "missing: name the storage the other gateways read the WARC files from "
            f"({len(s3)} s3 storages are configured: {', '.join(s3) or 'none'})",
        )
    return PublishSettings(redis=publish.redis, storage=s3[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSettings:
    """Where and how the snapshot store writes.

    - ``root``: the store directory (``warcs/``, ``index.sqlite3``,
      ``incoming/``, ``invalid/`` and the lock files live under it; see
      :mod:`gateway.store.layout`); a relative path is made absolute when
      the config is loaded (:mod:`gateway.paths`). The default,
      ``./archive/store``, is a directory of its own: the default config's
      collection reads ``./archive/indexes/`` and
      ``./archive/warcs/``, which the store never writes.
    - ``rollover_bytes``: a WARC file is closed and a new one started once it
      reaches this size (a capture is never split, so a file can exceed it by
      one capture).
    - ``rollover_s``: ... and once it has been open this many seconds, when
      captures come and when none do (the writer wakes for it): a capture
      waits at most this long, plus the copy time, to be replicated
      (:mod:`gateway.store.integrity.safety`). Default 300; up to 86400.
    - ``durable_ack``: when true, a recorded answer's last bytes wait until its
      capture is durable in the store (written, fsynced under ``fsync:
      always``, indexed), and the answer is cut short when it is not stored:
      a client that received a complete answer knows it is stored. When
      false (the default), the answer ends as soon as it is sent and the
      capture is written after it; a recording host killed right then loses
      the captures it answered and had not yet written.
    - ``dedup``: the default :data:`DedupPolicy`; a recording step may pass
      its collection's own policy with each capture.
    - ``fsync``: the :data:`FsyncPolicy`.
    - ``warc_prefix``: WARC file names are
      ``{warc_prefix}-{YYYYMMDDhhmmss}-{serial:05d}.warc.gz``.
    - ``dedup_min_payload_bytes``: payloads shorter than this are always
      written in full (a revisit of an empty body saves nothing).
    - ``max_queued_captures``: captures waiting for the writer before
      :meth:`Store.record <gateway.store.store.Store.record>` waits for room.
    - ``max_batch_captures``: captures written between two fsyncs at most
      (group commit).
    - ``storages``: named replication destinations (``store.storages``,
      :class:`~gateway.storage.settings.StorageSpec` by name, config order).
    - ``retention``: how many copies make a file safe (``store.retention``,
      :class:`~gateway.storage.settings.RetentionPolicy`); it may not ask
      for more copies than the primary and ``storages`` hold.
    - ``publish``: the Redis index a fleet of gateways serves the store's
      captures from (``store.publish``, :class:`PublishSettings`), or None.
    """

    root: str = DEFAULT_ROOT
    rollover_bytes: int = 1_000_000_000
    rollover_s: float = 300.0
    durable_ack: bool = False
    dedup: DedupPolicy = "revisit"
    fsync: FsyncPolicy = "always"
    warc_prefix: str = "gateway"
    dedup_min_payload_bytes: int = 1
    max_queued_captures: int = 256
    max_batch_captures: int = 64
    storages: Mapping[str, StorageSpec] = field(default_factory=dict)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    publish: PublishSettings | None = None

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError(f"root: empty; expected a directory path such as {DEFAULT_ROOT}")
        object.__setattr__(self, "root", absolute_path(self.root))
        if self.rollover_bytes < 1:
            raise ValueError(f"rollover_bytes: {self.rollover_bytes} is not a positive size")
        if not 0 < self.rollover_s <= 86_400:
            raise ValueError(
                f"rollover_s: {self.rollover_s} is not a duration from 0 to 86400 seconds"
            )
        if self.dedup not in DEDUP_POLICIES:
            raise ValueError(f"dedup: {self.dedup!r} is not one of {', '.join(DEDUP_POLICIES)}")
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync: {self.fsync!r} is not one of {', '.join(FSYNC_POLICIES)}")
        if not _PREFIX.fullmatch(self.warc_prefix):
            raise ValueError(
                f"warc_prefix: {self.warc_prefix!r} is not a file-name prefix; expected "
                "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if self.dedup_min_payload_bytes < 0:
            raise ValueError(f"dedup_min_payload_bytes: {self.dedup_min_payload_bytes} is negative")
        if self.max_queued_captures < 1:
            raise ValueError(f"max_queued_captures: {self.max_queued_captures} is below 1")
        if self.max_batch_captures < 1:
            raise ValueError(f"max_batch_captures: {self.max_batch_captures} is below 1")
        check_retention(self.retention, self.storages)
        if self.publish is not None and not self.publish.storage:
            raise ValueError("publish: its storage must be resolved first (check_publish)")

    @property
    def root_path(self) -> Path:
        """``root`` as a :class:`~pathlib.Path`."""
        return Path(self.root)
