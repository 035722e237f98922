"""``gateway store add x.wacz``: a WACZ's WARCs into the snapshot store, its pages kept.

A WACZ handed to ``store add`` is first verified as ``gateway serve`` verifies
one (:meth:`~gateway.loaders.wacz_archive.WaczArchive.verify`: ZIP,
datapackage digest, every resource's size and hash); a WACZ that fails is
refused whole, nothing changed. Each ``archive/*`` WARC entry is then written
to a staging directory of this command, its SHA-256 computed again while it
is written and compared with the one ``datapackage.json`` lists, and handed to
the store's import as any WARC file is (warcio verification, deduplication,
indexing). The staging directory is removed when the command ends.

The WACZ's ``pages/pages.jsonl`` is kept as a list of pages of the store,
``<store root>/pages/<WACZ name>.jsonl`` (written to a temporary name, fsynced,
renamed), once the WARCs are imported; the ``$store`` source lists it
(:meth:`~gateway.sources.store.StoreSource.pages`) on the collection page.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.errors import ArchiveRefused, LoadError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["StagedWacz", "add_with_waczs", "keep_pages", "stage_wacz"]

#: Where a store keeps the page lists of the WACZ files added to it.
PAGES_DIR = "pages"


@dataclass(slots=True)
class StagedWacz:
    """A verified WACZ: its WARCs written under ``folder``, its page list."""

    source: Path
    warcs: list[Path] = field(default_factory=list)
    pages: bytes | None = None


def add_with_waczs(
    names: Sequence[str], root: Path, *, no_wait: bool, add: Callable[[list[Path]], int]
) -> int:
    """``store add NAMES``: stage each ``.wacz`` of ``names``, ``add`` the WARC files
    and the staged ones (the store's import; returns its exit status), then keep
    each WACZ's pages under ``root``. A WACZ that fails its checks is refused
    (exit 1) before anything is added; ``--no-wait`` cannot take one (exit 2).
    The staging directory (in the system's temporary directory) is removed at the end.
    """
    waczs = [Path(name) for name in names if name.endswith(".wacz")]
    sources = [Path(name).absolute() for name in names if not name.endswith(".wacz")]
    if waczs and no_wait:
        print(
            "gateway store add: --no-wait cannot take a WACZ: its WARCs are staged for "
            "this command only; add it without --no-wait",
            file=sys.stderr,
        )
        return 2
    staging = Path(tempfile.mkdtemp(prefix="gateway-store-add-")) if waczs else None
    try:
        staged = []
        for wacz in waczs:
            try:
                staged.append(stage_wacz(wacz, staging or Path()))
            except LoadError as exc:
                print(f"gateway store add: {exc.message}; nothing was changed", file=sys.stderr)
                return 1
        status = add(sources + [warc for one in staged for warc in one.warcs])
        if status == 0:
            for one in staged:
                kept = keep_pages(root.absolute(), one)
                if kept is not None:
                    print(f"store add: {one.source.name}: its pages kept as {kept}")
        return status
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def stage_wacz(source: Path, staging: Path) -> StagedWacz:
    """Verify ``source`` and write its WARC entries under ``staging`` (made here).

    Raises :class:`~gateway.errors.LoadError` (an
    :class:`~gateway.errors.ArchiveRefused` naming the resource) when the WACZ
    fails its checks or cannot be read.
    """
    return asyncio.run(_stage(source.absolute(), staging))


async def _stage(source: Path, staging: Path) -> StagedWacz:
    from gateway.loaders.wacz_archive import open_wacz
    from gateway.sources.wacz_index import PAGES_ENTRY

    def no_session() -> aiohttp.ClientSession:
        raise RuntimeError("a local WACZ needs no HTTP session")

    archive = await open_wacz(str(source), label=source.name, session=no_session)
    await archive.verify()
    listed = {
        str(r.get("path")): str(r.get("hash", ""))
        for r in archive.datapackage.get("resources") or []
        if isinstance(r, dict)
    }
    staged = StagedWacz(source)
    folder = staging / source.stem
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    for name, entry in sorted(archive.entries.items()):
        if not name.startswith("archive/") or name.endswith("/"):
            continue
        expected = listed.get(name)
        if expected is None or not expected.startswith("sha256:"):
            raise ArchiveRefused(
                f"WACZ {source.name}: {name} has no sha256 in datapackage.json; "
                "the store imports only WARCs whose digest the package states",
                {source.name: f"{name}: no sha256"},
            )
        target = folder / os.path.basename(name)
        digest = hashlib.sha256()
        with target.open("wb") as out:
            async for chunk in archive.iter_entry(entry):
                await asyncio.to_thread(digest.update, chunk)
                await asyncio.to_thread(out.write, chunk)
        if f"sha256:{digest.hexdigest()}" != expected:
            raise ArchiveRefused(
                f"WACZ {source.name}: {name} changed while it was read (sha256 "
                f"{digest.hexdigest()}, datapackage.json says {expected})",
                {source.name: f"{name}: changed"},
            )
        staged.warcs.append(target)
    if not staged.warcs:
        raise ArchiveRefused(
            f"WACZ {source.name}: no WARC under archive/", {source.name: "no archive/"}
        )
    if PAGES_ENTRY in archive.entries:
        staged.pages = await archive.read_entry(PAGES_ENTRY)
    return staged


def keep_pages(root: Path, staged: StagedWacz) -> Path | None:
    """Write ``staged``'s page list to ``root/pages/<name>.jsonl`` (tmp, fsync, rename,
    fsync the directory); None when it has none. Raises OSError."""
    if staged.pages is None:
        return None
    folder = root / PAGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{staged.source.stem}.jsonl"
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with tmp.open("wb") as out:
            out.write(staged.pages)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return target
