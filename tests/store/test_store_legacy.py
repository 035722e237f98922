"""A store written by the release at af8b42d opens, migrates and serves every capture unchanged.

``tests/data/legacy-store-af8b42d.tar.gz`` was made with that release's own
code (``tests/data/make_legacy_store.py`` says how): a store closed cleanly,
with recorded captures, an imported file and a file that release adopted
(origin ``found``), and a store whose writer died with its file ``.open``
and half a record after the last whole one. Its manifest lists every index
row that release wrote and the payload of every recorded capture.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import tarfile
from collections.abc import Awaitable, Callable
from io import BytesIO
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from warcio.archiveiterator import ArchiveIterator

from gateway.commands.store import main as store_cli
from gateway.store.errors import StoreError
from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from gateway.store.schema import SCHEMA_VERSION, schema_version
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import store_path, warc_files

Client = TestClient[web.Request, web.Application]
FIXTURE: Final = Path(__file__).resolve().parents[1] / "data" / "legacy-store-af8b42d.tar.gz"


def _extract(tmp_path: Path) -> dict[str, Any]:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    manifest: dict[str, Any] = json.loads((tmp_path / "manifest.json").read_text())
    return manifest


def _files(root: Path) -> list[tuple[str, str, str, int, str | None, int]]:
    db = sqlite3.connect(root / "index.sqlite3")
    try:
        assert schema_version(db) == SCHEMA_VERSION
        rows = db.execute(
            "SELECT name, state, origin, fs_version, date, open_link FROM files ORDER BY id"
        ).fetchall()
    finally:
        db.close()
    return [(str(a), str(b), str(c), int(d), e, int(f)) for a, b, c, d, e, f in rows]


def _payload_sha256(record_bytes: bytes) -> str:
    digests = [
        hashlib.sha256(record.content_stream().read()).hexdigest()
        for record in ArchiveIterator(BytesIO(record_bytes))
    ]
    assert len(digests) == 1
    return digests[0]


async def _serves_every_capture(client: Client, manifest: dict[str, Any]) -> None:
    """Every index row of the old release is listed, and every capture loads."""
    rows = manifest["index"]
    for url in sorted({row["url"] for row in rows}):
        params = {"url": url, "output": "json", "allowFuzzy": "0"}
        resp = await client.get("/stored/index", params=params)
        served = {
            (line["filename"], int(line["offset"]), int(line["length"]), line["timestamp"])
            for line in map(json.loads, (await resp.text()).splitlines())
        }
        expected = {
            (row["filename"].removesuffix(".open"), row["offset"], row["length"], row["timestamp"])
            for row in rows
            if row["url"] == url and "__wb_method=post" not in row["urlkey"]
        }
        assert served == expected, url
    for row in rows:
        if "__wb_method=post" in row["urlkey"]:
            continue
        resp = await client.get(
            "/stored/resource",
            params={
                "url": row["url"],
                "closest": row["timestamp"],
                "filter": f"filename:{row['filename'].removesuffix('.open')}",
            },
        )
        assert resp.status == 200, (row, await resp.text())
    for capture in manifest["captures"]:
        if capture["method"] == "POST":
            resp = await client.post(
                "/stored/resource",
                params={"url": capture["url"]},
                data=b"q=archive&n=5",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
        else:
            params = {"url": capture["url"], "closest": capture["timestamp"], "limit": "1"}
            resp = await client.get("/stored/resource", params=params)
        assert resp.status == 200, capture
        assert resp.headers["Memento-Datetime"]
        assert _payload_sha256(await resp.read()) == capture["payload_sha256"], capture


def _theirs(root: Path) -> dict[str, bytes]:
    """The files under ``warcs/`` by name, without the store's own temporary files
    (``.NAME.moving``: a background move of a file to the current layout, under way)."""
    return {
        p.name: p.read_bytes() for p in warc_files(root / "warcs") if not p.name.startswith(".")
    }


async def test_a_clean_store_of_the_previous_release_serves_unchanged(
    tmp_path: Path, make_client: Callable[[str], Awaitable[Client]]
) -> None:
    manifest = _extract(tmp_path)
    root = tmp_path / "clean"
    warcs_before = _theirs(root)
    client = await make_client(f"store: {{root: {root}}}\ncollections:\n  stored: $store\n")
    files = _files(root)
    assert {(name, state, origin) for name, state, origin, *_ in files} == {
        *((n, "closed", "written") for n in warcs_before if n.startswith("gateway-")),
        ("example.warc.gz", "closed", "imported"),
        ("example-wget-1-14.warc.gz", "closed", "found"),
    }
    for name, _state, origin, fs_version, date, _link in files:
        assert fs_version == 1
        assert date == (name.split("-")[1] if origin == "written" else None)
    await _serves_every_capture(client, manifest["clean"])
    # Nothing of theirs changed, and the migrated store checks clean.
    assert _theirs(root) == warcs_before
    await client.close()  # the store is closed: check reads it alone
    report = await asyncio.to_thread(check_store, Layout(root), progress=False)
    assert report.ok, report.problems


async def test_a_crashed_store_of_the_previous_release_is_recovered_and_serves(
    tmp_path: Path, make_client: Callable[[str], Awaitable[Client]]
) -> None:
    manifest = _extract(tmp_path)
    root = tmp_path / "crashed"
    [open_file] = list((root / "warcs").glob("*.open"))
    store = await Store.open(StoreSettings(root=str(root)))  # the writer closes what was left
    try:
        assert store.recovery.truncated == [open_file.name]
        assert store.recovery.closed == [open_file.name.removesuffix(".open")]
    finally:
        await store.close()
    [(name, state, origin, _v, date, link)] = _files(root)
    assert (name, state, origin, link) == (
        open_file.name.removesuffix(".open"),
        "closed",
        "written",
        0,
    )
    assert date == name.split("-")[1]
    client = await make_client(f"store: {{root: {root}}}\ncollections:\n  stored: $store\n")
    await _serves_every_capture(client, manifest["crashed"])
    report = await asyncio.to_thread(check_store, Layout(root), progress=False)
    assert report.ok, report.problems


def test_check_on_an_unmigrated_store_changes_nothing(tmp_path: Path) -> None:
    """``store check`` reads an index of the old schema through a migrated scratch copy."""
    _extract(tmp_path)
    root = tmp_path / "clean"
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    report = check_store(Layout(root), progress=False)
    assert report.ok, report.problems
    assert report.entries > 0
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before


def test_the_old_default_root_is_not_replaced_by_an_empty_store(
    tmp_path: Path,
    sample_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """That release's default root was ./archive: with store.root unset, say so, start nothing."""
    _extract(tmp_path)
    (tmp_path / "clean").rename(tmp_path / "archive")
    monkeypatch.chdir(tmp_path)
    assert store_cli(["history", "http://legacy.example.org/page1"]) == 2
    err = capsys.readouterr().err
    assert "./archive holds a store made by an earlier release" in err
    assert "set `store: {root: ./archive}`" in err
    assert not (tmp_path / "archive" / "store").exists()
    with pytest.raises(StoreError, match="earlier release"):
        asyncio.run(Store.open(StoreSettings()))
    # Kept where it is, it serves as before ...
    assert store_cli(["history", "--root", "./archive", "http://legacy.example.org/page1"]) == 0
    assert capsys.readouterr().out.count("legacy.example.org/page1") == 2
    # ... and a new store at the new default starts once its directory exists.
    (tmp_path / "archive" / "store").mkdir()
    assert store_cli(["add", str(sample_dir / "warcs" / "example.warc.gz")]) == 0
    assert store_path(tmp_path / "archive" / "store" / "warcs", "example.warc.gz").is_file()
    assert store_cli(["check"]) == 0
