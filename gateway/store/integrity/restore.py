"""Restore before repair: a damaged or lost primary comes back from a verified copy first.

``gateway store repair`` (:mod:`gateway.store.integrity.repair`) used to
salvage a damaged file, dropping what no longer passed, and to record the
new SHA-256 of a file whose bytes changed, while replicas still held the
file's bytes. Now every file the check finds damaged, changed or missing is
first offered to a :class:`Restorer`: each storage holding a ``present``
copy of the file's recorded SHA-256 is tried in the policy's order through
:func:`gateway.store.replication.primary.restore_primary`, which writes the
replica's bytes beside the file, checks their SHA-256, keeps the damaged
file in ``invalid/`` and only then gives the restored bytes the file's name.
Only what no copy restores is salvaged, and what salvage drops is listed and
kept in ``invalid/`` too (the Software Heritage archiver's rule: a copy is
restored from a copy that verifies, never rebuilt by guessing).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from types import TracebackType

from gateway.storage.errors import StorageError
from gateway.storage.settings import PRIMARY
from gateway.store.layout import Layout
from gateway.store.object_types import write_scrub_recheck
from gateway.store.replication.copy_status import read_file_copies, write_copy_present
from gateway.store.replication.primary import restore_primary
from gateway.store.replication.replicas import Replicas
from gateway.store.rows import FileRow
from gateway.store.settings import StoreSettings

__all__ = ["Restorer"]


class Restorer:
    """Restores primaries from their replicas for a blocking caller (``store repair``).

    A context manager: it runs its own event loop (:class:`asyncio.Runner`)
    and the store's :class:`Replicas` (storages opened on first use) until
    it exits. :meth:`restore` never raises for a storage or disk failure: it
    says why no copy could be restored.
    """

    def __init__(self, settings: StoreSettings, layout: Layout) -> None:
        self.settings = settings
        self.layout = layout
        self._runner = asyncio.Runner()
        self._replicas: Replicas | None = None

    def __enter__(self) -> Restorer:
        self._runner.__enter__()
        self._replicas = Replicas(self.settings, self.layout)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._replicas is not None:
                self._runner.run(self._replicas.close())
        finally:
            self._replicas = None
            self._runner.__exit__(kind, exc, traceback)

    def restore(self, file: FileRow) -> tuple[bool, str]:
        """Restore ``file``'s primary from the first storage whose verified copy
        restores; returns ``(restored, what happened in words)``."""
        return self._runner.run(self._restore(file))

    async def _restore(self, file: FileRow) -> tuple[bool, str]:
        replicas = self._replicas
        assert replicas is not None, "use the Restorer as a context manager"
        if file.sha256 is None:
            return False, "its SHA-256 was never recorded: no copy can be verified against it"
        if not file.owned:
            return False, f"the store did not write it (origin {file.origin}): not restored"
        found = await replicas.index.call(read_file_copies, replicas.places, names=[file.name])
        copies = found[0].copies if found else {}
        holders = [
            place
            for place in replicas.places
            if place != PRIMARY
            and (row := copies.get(place)) is not None
            and row.status == "present"
            and row.sha256 == file.sha256
        ]
        if not holders:
            return False, "no storage holds a verified copy of its bytes"
        replicas.rows[file.name] = file
        reasons: list[str] = []
        for place in holders:
            try:
                source = await replicas.storage(place)
            except StorageError as exc:
                reasons.append(f"{place}: cannot be opened: {exc}")
                continue
            result = await restore_primary(self.layout, file, sha256=file.sha256, source=source)
            if result.outcome in ("copied", "already_present"):
                now = time.time()
                await replicas.index.call(
                    write_copy_present,
                    file.name,
                    PRIMARY,
                    file.sha256,
                    mtime=now,
                    verified_at=now,
                    detail=f"restored from {place} by store repair (SHA-256 verified)",
                )
                await replicas.index.call(write_scrub_recheck, file.name, datetime.now(UTC))
                if result.outcome == "already_present":
                    return True, f"{file.name}: its bytes at its place are whole (SHA-256 verified)"
                return True, (
                    f"restored {file.name} from {place}: {result.size} bytes whose SHA-256 "
                    "matches the file's, put in place after the check; the damaged copy "
                    "is kept in invalid/"
                )
            reasons.append(f"{place}: {result.outcome}: {result.detail}")
        return False, "; ".join(reasons)
