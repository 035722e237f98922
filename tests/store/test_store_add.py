"""``gateway store add`` (issue 11 §6): what the gateway serves is stored as given; not the rest.

Every real file in ``../shared/data`` is offered to ``store add``: ARC and
WARC/1.0, gzipped or not, are stored byte for byte, indexed as cdxj-indexer
indexes them, and served back through ``/resource``; WARC/0.17 (made here
from a WARC/1.0 file by changing each record's version line, which no digest
covers); broken files are refused with the reason, before the store changes
at all. Then the user story of the issue, followed as a test: the README's
defaults, a user's own WARCs in ``archive/warcs/`` (two of them WARC/0.17),
``gateway store add``, and the ``web`` collection still answering.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import shutil
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.cli import main as gateway_cli
from gateway.commands.store import main as store_cli
from gateway.config import load_config, parse_config
from gateway.index.indexer import write_cdxj_index
from gateway.server.app import create_app
from gateway.store.integrity.check import check_store
from gateway.store.layout import DEFAULT_ROOT, Layout
from tests.store.store_support import store_path, tree_snapshot, warc_files

Client = TestClient[web.Request, web.Application]
REPO: Final = Path(__file__).resolve().parents[2]
DATA: Final = REPO.parent / "shared" / "data"

#: Files the store accepts: every one ``warcio check`` passes, less the three
#: below whose framing is broken.
ACCEPTED: Final = (
    "warcio-test/example-iana.org-chunked.warc",
    "warcio-test/example-resource.warc.gz",
    "warcio-test/example-space-in-target-uri.warc.gz",
    "warcio-test/example-space-in-url.arc",
    "warcio-test/example-wget-bad-target-uri.warc.gz",
    "warcio-test/example.arc",
    "warcio-test/example.arc.gz",
    "warcio-test/example.warc",
    "warcio-test/example.warc.gz",
    "warcio-test/post-test.warc.gz",
    "pywb-sample/warcs/dupes.warc.gz",
    "pywb-sample/warcs/example-url-agnostic-orig.warc.gz",
    "pywb-sample/warcs/example-url-agnostic-revisit.warc.gz",
    "pywb-sample/warcs/example-wget-1-14.warc.gz",
    "pywb-sample/warcs/example-wpull.warc.gz",
    "pywb-sample/warcs/example2.warc.gz",
    "pywb-sample/warcs/httpbin-resource.warc.gz",
)

#: File -> what the refusal says (the first problem).
REFUSED: Final = {
    "warcio-test/bad.arc": "not an ARC record header",
    "warcio-test/example-bad-non-chunked.warc.gz": "use warcio recompress",
    "warcio-test/example-digest.warc": "payload digest failed",
    "warcio-test/example-trunc.warc": "not followed by CRLF or LF (wrong Content-Length?)",
    "warcio-test/example-wrong-chunks.warc.gz": "gzip member ends inside the record",
    "pywb-sample/warcs/example-extra.warc": "payload digest failed",
    # warcio check only warns: a request record's Content-Length is one byte short
    "pywb-sample/warcs/example.warc": "offset 4061: record block not followed by CRLF or LF",
    # lines end in CR CR LF
    "pywb-sample/warcs/missing-status-text.warc": "no CRLF CRLF before the end",
    "warcio-test/example-bad.warc.gz.bad": "expected a .warc, .warc.gz, .arc or .arc.gz",
}


def _cdxj(path: Path) -> set[tuple[str, str, str, str]]:
    """(urlkey, timestamp, offset, length) of every line ``gateway index`` writes (cdxj-indexer)."""
    text = io.StringIO()
    write_cdxj_index([path], text)
    out = set()
    for line in text.getvalue().splitlines():
        urlkey, timestamp, block = line.split(" ", 2)
        fields = json.loads(block)
        out.add((urlkey, timestamp, fields["offset"], fields["length"]))
    return out


def _stored_rows(root: Path, name: str) -> set[tuple[str, str, str, str]]:
    import sqlite3

    db = sqlite3.connect(Layout(root).db_path)
    try:
        rows = db.execute(
            "SELECT urlkey, timestamp, offset, length FROM captures c JOIN files f"
            " ON f.id = c.file_id WHERE f.name = ?",
            (name,),
        ).fetchall()
    finally:
        db.close()
    return {(u, t, str(o), str(n)) for u, t, o, n in rows}


def _warc_0_17(source: Path, target: Path) -> None:
    """A WARC/0.17 file: ``source`` (gzipped WARC/1.0) with each record's version line changed."""
    data = source.read_bytes()
    members = []
    while data:
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        record = inflater.decompress(data)
        data = inflater.unused_data
        assert record.startswith(b"WARC/1.0\r\n")
        members.append(gzip.compress(b"WARC/0.17\r\n" + record[len(b"WARC/1.0\r\n") :]))
    target.write_bytes(b"".join(members))


@pytest.mark.parametrize("relative", ACCEPTED)
def test_files_the_gateway_serves_are_stored_as_given_and_indexed(
    relative: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = DATA / relative
    root = tmp_path / "store"
    assert store_cli(["add", "--root", str(root), str(source)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"added as warcs/{source.name}" in out
    stored = store_path(root / "warcs", source.name)
    assert stored.read_bytes() == source.read_bytes()
    assert _stored_rows(root, source.name) == _cdxj(source)
    if relative.endswith("example-space-in-url.arc"):
        assert "note: offset 151: the last ARC record has 12 bytes fewer" in out
    assert check_store(Layout(root), progress=False).ok


@pytest.mark.parametrize(("relative", "reason"), sorted(REFUSED.items()))
def test_broken_files_are_refused_before_anything_changes(
    relative: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    assert store_cli(["add", "--root", str(root), str(DATA / relative)]) == 1
    err = capsys.readouterr().err
    assert "refused, nothing was changed" in err
    assert reason in err
    assert not root.exists()
    # A store that exists is left exactly as it was, too.
    assert store_cli(["add", "--root", str(root), str(DATA / ACCEPTED[0])]) == 0
    before = tree_snapshot(root)
    assert store_cli(["add", "--root", str(root), str(DATA / relative)]) == 1
    assert tree_snapshot(root) == before


async def test_warc_0_17_and_arc_files_are_served_from_the_store(
    tmp_path: Path, make_client: Callable[[str], Awaitable[Client]]
) -> None:
    old = tmp_path / "heritrix-0.17.warc.gz"
    _warc_0_17(DATA / "warcio-test" / "example.warc.gz", old)
    root = tmp_path / "store"
    files = [old, DATA / "warcio-test" / "example.arc.gz", DATA / "warcio-test" / "example.arc"]
    for path in files:
        assert await asyncio.to_thread(store_cli, ["add", "--root", str(root), str(path)]) == 0
    client = await make_client(f"store: {{root: {root}}}\ncollections:\n  stored: $store\n")
    found = await client.get(
        "/stored/index", params={"url": "http://example.com/", "output": "json"}
    )
    lines = [json.loads(line) for line in (await found.text()).splitlines()]
    by_file = {line["filename"] for line in lines}
    assert by_file == {old.name, "example.arc.gz", "example.arc"}
    for name in by_file:
        resp = await client.get(
            "/stored/resource", params={"url": "http://example.com/", "filter": f"filename:{name}"}
        )
        assert resp.status == 200
        body = await resp.read()
        if name == old.name:  # served as stored: the record keeps its version line
            assert body.startswith(b"WARC/0.17\r\n")
            assert b"Content-Encoding: gzip" in body  # and its payload, still gzipped
        else:  # ARC records are served as WARC/1.0 response records
            assert body.startswith(b"WARC/1.0\r\n")
            assert b"<title>Example Domain</title>" in body


def test_the_same_bytes_are_not_imported_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    source = DATA / "warcio-test" / "example.warc.gz"
    renamed = tmp_path / "renamed.warc.gz"
    shutil.copy(source, renamed)
    assert store_cli(["add", "--root", str(root), str(source), str(renamed)]) == 0
    out = capsys.readouterr().out
    assert "renamed.warc.gz: already in the store as warcs/example.warc.gz" in out
    assert sorted(p.name for p in warc_files(root / "warcs")) == ["example.warc.gz"]


def test_a_different_file_of_the_same_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    other = tmp_path / "other" / "example.warc.gz"
    other.parent.mkdir()
    shutil.copy(DATA / "pywb-sample" / "warcs" / "example.warc.gz", other)
    assert store_cli(["add", "--root", str(root), str(DATA / "warcio-test/example.warc.gz")]) == 0
    before = tree_snapshot(root)
    assert store_cli(["add", "--root", str(root), str(other)]) == 1
    assert "a different file named example.warc.gz is already in the store" in (
        capsys.readouterr().err
    )
    assert tree_snapshot(root) == before


def test_a_foreign_file_in_warcs_is_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    assert store_cli(["add", "--root", str(root), str(DATA / "warcio-test/example.arc")]) == 0
    squatter = root / "warcs" / "example.warc.gz"
    squatter.write_bytes(b"a file the store did not write")
    assert store_cli(["add", "--root", str(root), str(DATA / "warcio-test/example.warc.gz")]) == 1
    assert "exists but is not in the store's index" in capsys.readouterr().err
    assert squatter.read_bytes() == b"a file the store did not write"
    assert not list((root / "incoming").iterdir())


# --------------------------------------------------------------- user story
def _user_warcs(sample: Path, warcs: Path) -> None:
    """A user's own files, as the tester of issue 11 had them: two are WARC/0.17."""
    warcs.mkdir(parents=True)
    shutil.copy(sample / "warcs" / "iana.warc.gz", warcs)
    shutil.copy(sample / "warcs" / "example.warc.gz", warcs)
    _warc_0_17(sample / "warcs" / "example-wget-1-14.warc.gz", warcs / "crawl-2009.warc.gz")
    _warc_0_17(sample / "warcs" / "example2.warc.gz", warcs / "crawl-2010.warc.gz")


async def test_store_add_with_the_defaults_leaves_the_users_collection_alone(
    sample_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    aiohttp_client: Callable[..., Awaitable[Client]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 11 §6: ``store add`` with the defaults moved four of a user's files away."""
    shutil.copy(REPO / "collections.yaml", tmp_path / "collections.yaml")
    monkeypatch.chdir(tmp_path)
    user = tmp_path / "archive" / "warcs"
    _user_warcs(sample_dir, user)
    (tmp_path / "archive" / "indexes").mkdir()
    for warc in sorted(user.iterdir()):
        index = ["index", str(warc), "-o", f"archive/indexes/{warc.name}.cdxj"]
        assert await asyncio.to_thread(gateway_cli, index) == 0
    before = tree_snapshot(tmp_path / "archive")

    # The README's step: import a file into the store, with every default.
    added = tmp_path / "new-crawl.warc.gz"
    shutil.copy(sample_dir / "warcs" / "post-test.warc.gz", added)
    assert await asyncio.to_thread(gateway_cli, ["store", "add", str(added)]) == 0
    assert "added as warcs/new-crawl.warc.gz" in capsys.readouterr().out
    assert store_path(tmp_path / DEFAULT_ROOT / "warcs", "new-crawl.warc.gz").is_file()

    # Serving: the default collection and a recording store over the same ./archive.
    config = load_config("collections.yaml")
    assert config.store.root == str(tmp_path / "archive" / "store")  # resolved at load
    recording = parse_config(
        (tmp_path / "collections.yaml").read_text()
        + "  stored: $store\n  rec:\n    index: {type: live}\n    record: true\n"
    )
    for conf in (config, recording):
        client = await aiohttp_client(create_app(conf))
        for url in ("http://www.iana.org/", "http://example.com/"):
            resp = await client.get("/web/resource", params={"url": url})
            assert resp.status == 200, (url, await resp.text())
        await client.close()
    # Nothing of the user's was moved, renamed, changed or added to.
    after = tree_snapshot(tmp_path / "archive")
    assert {k: v for k, v in after.items() if not k.startswith("store/")} == before
    assert not (tmp_path / "archive" / "invalid").exists()
    assert check_store(Layout(tmp_path / DEFAULT_ROOT), progress=False).ok


def test_the_default_store_never_shares_a_directory_with_the_default_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(REPO / "collections.yaml")
    store = Path(config.store.root).resolve()
    directories = []
    for collection in config.collections.values():
        for step in collection.steps:
            directories += [Path(spec.config.path).resolve() for _, spec in step.members]
            directories += [Path(r.config.prefix).resolve() for r in step.resolvers]
    assert len(directories) == 2  # ./archive/indexes/ and ./archive/warcs/
    for directory in directories:
        assert store != directory
        assert store not in directory.parents, directory  # nothing the collection reads
        assert directory not in store.parents, directory  # nothing the store writes


def test_a_record_without_a_warc_date_is_stored_but_not_indexed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """WARC 1.1 §5.4 makes WARC-Date mandatory; a record without one has no place in a CDX index."""
    source = tmp_path / "dateless.warc"
    shutil.copy(DATA / "warcio-test" / "example.warc", source)
    with source.open("ab") as fh:
        fh.write(b"WARC/1.0\r\nWARC-Type: metadata\r\nContent-Type: text/plain\r\n")
        fh.write(b"WARC-Target-URI: http://example.com/note\r\nContent-Length: 4\r\n")
        fh.write(b"\r\nnote\r\n\r\n")
    root = tmp_path / "store"
    assert store_cli(["add", "--root", str(root), str(source)]) == 0, capsys.readouterr().err
    assert _stored_rows(root, source.name) == _cdxj(DATA / "warcio-test" / "example.warc")
    assert check_store(Layout(root), progress=False).ok
