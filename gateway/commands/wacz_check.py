"""``gateway index --check FILE.wacz...``: verify WACZ files on demand.

The same check ``gateway serve`` runs when it first opens a WACZ
(:meth:`~gateway.loaders.wacz_archive.WaczArchive.verify`): the ZIP
directory, ``datapackage.json`` against ``datapackage-digest.json``, every
listed resource's presence, size and hash, then its indexes loaded as the
source loads them. One line per file on standard output (``ok`` with what was
verified, and what was not: a signature), a refusal on standard error naming
the file and the resource. Exit status 0 when every file verified, else 1.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.errors import LoadError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["check_wacz_files"]


def check_wacz_files(paths: Sequence[str]) -> int:
    """Verify each local WACZ of ``paths``; print a line per file; 0 when all verified."""
    return asyncio.run(_check_all([(os.path.abspath(path), path) for path in paths]))


async def _check_all(paths: Sequence[tuple[str, str]]) -> int:
    failed = 0
    for location, path in paths:
        try:
            line = await _check_one(location, path)
        except LoadError as exc:
            failed += 1
            print(f"gateway index --check: {exc.message}", file=sys.stderr)
        else:
            print(line)
    return 1 if failed else 0


async def _check_one(location: str, shown: str) -> str:
    from gateway.loaders.wacz_archive import open_wacz
    from gateway.sources.wacz_index import load_index

    def no_session() -> aiohttp.ClientSession:
        raise RuntimeError("a local WACZ needs no HTTP session")

    archive = await open_wacz(location, label=shown, session=no_session)
    notes = await archive.verify()
    index = await load_index(archive, source="check")
    index.close()
    resources = archive.datapackage.get("resources") or []
    said = f"{shown}: ok, {len(resources)} resources verified"
    if archive.digest is not None:
        said += " and datapackage.json against datapackage-digest.json"
    return said + "".join(f"; {note}" for note in notes)
