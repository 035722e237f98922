"""``gateway export`` and ``GET /{coll}/export.wacz`` as docs/wacz-export.md runs them.

From a fresh working directory: the default ``collections.yaml`` (relative
paths), the sample archive indexed with ``gateway index`` as the README
does, then the command and the server side by side. Both exports must pass
py-wacz's ``wacz validate`` and hold the same records and index, byte for
byte. An export served back as a collection of its own answers as the
collection it came from.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Final
from urllib.parse import quote

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.conftest import REPO_ROOT
from tests.e2e.support import gateway, get, index_rows, serve

WACZ: Final = str(Path(sys.executable).with_name("wacz"))
WARCIO: Final = str(Path(sys.executable).with_name("warcio"))
#: Index API fields that say where a record lies and which source answered.
_PLACE_AND_SOURCE: Final = ("offset", "length", "filename", "source", "source-coll")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Path:
    """A working directory set up as the README's set-up step leaves it."""
    cwd = tmp_path_factory.mktemp("export")
    shutil.copy(REPO_ROOT / "collections.yaml", cwd / "collections.yaml")
    warcs = cwd / "archive" / "warcs"
    warcs.mkdir(parents=True)
    for warc in (sample_dir / "warcs").iterdir():
        if warc.name not in ("example-extra.warc", "bad.arc"):
            shutil.copy(warc, warcs / warc.name)
    result = gateway(["index", "archive/warcs/", "-o", "archive/indexes/pywb-sample.cdxj"], cwd)
    assert result.returncode == 0, result.stderr
    return cwd


def _validate(path: Path) -> None:
    result = subprocess.run(
        [WACZ, "validate", "-f", str(path)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation succeeded" in result.stdout


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in ("archive/data.warc.gz", "indexes/index.cdx")}


def test_the_command_and_the_route_export_the_same_valid_wacz(workdir: Path) -> None:
    result = gateway(
        ["export", "iana.org", "--match-type", "prefix", "-o", "exports/iana.wacz"], workdir
    )
    assert result.returncode == 0, result.stderr
    assert "exports/iana.wacz: 184 captures" in result.stderr
    exported = workdir / "exports" / "iana.wacz"
    _validate(exported)
    assert not (workdir / "exports" / "iana.wacz.tmp").exists()
    server, port = serve(workdir)
    try:
        status, headers, body = get(port, "/web/export.wacz?url=iana.org&matchType=prefix")
        assert status == 200
        assert headers["transfer-encoding"] == "chunked"
        served = workdir / "served.wacz"
        served.write_bytes(body)
        status, _, bad = get(port, "/web/export.wacz?url=iana.org&matchType=nope")
        assert status == 400
        assert b'"param": "matchType"' in bad
    finally:
        server.stop()
    _validate(served)
    entries = _entries(exported)
    assert _entries(served) == entries
    # The records as stored: every digest they carry still holds (warcio check).
    warc = workdir / "data.warc.gz"
    warc.write_bytes(entries["archive/data.warc.gz"])
    check = subprocess.run(
        [WARCIO, "check", "-v", str(warc)], capture_output=True, text=True, timeout=300
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("digest pass") >= 50  # the iana responses' (revisits have none)
    assert "fail" not in check.stdout


def test_bad_query_and_missing_collection_are_bad_usage(workdir: Path) -> None:
    result = gateway(["export", "iana.org", "--match-type", "nope", "-o", "bad.wacz"], workdir)
    assert result.returncode == 2
    assert "matchType: 'nope' is not one of" in result.stderr
    result = gateway(["export", "iana.org", "--collection", "none", "-o", "bad.wacz"], workdir)
    assert result.returncode == 2
    assert "--collection: no collection 'none'" in result.stderr
    (workdir / "missing.yaml").write_text("collections:\n  gone:\n    index: ./gone.cdxj\n")
    result = gateway(["export", "--config", "missing.yaml", "iana.org", "-o", "bad.wacz"], workdir)
    assert result.returncode == 2
    assert "bad config missing.yaml: collections.gone.index:" in result.stderr
    result = gateway(["export", "nothing.example.org", "-o", "bad.wacz"], workdir)
    assert result.returncode == 1
    assert "no captures of nothing.example.org" in result.stderr
    assert not list(workdir.glob("bad.wacz*"))


def test_skipped_captures_are_listed_and_exit_1(workdir: Path, sample_dir: Path) -> None:
    lines = (sample_dir / "cdxj" / "example.cdxj").read_text().splitlines(keepends=True)
    missing = (
        'com,example)/missing 20140101000000 {"url": "http://example.com/missing", '
        '"mime": "text/html", "status": "200", "digest": "X", "length": "100", '
        '"offset": "0", "filename": "missing.warc.gz"}\n'
    )
    (workdir / "broken.cdxj").write_text("".join(sorted([*lines, missing])))
    (workdir / "broken.yaml").write_text(
        "collections:\n  broken:\n    index: ./broken.cdxj\n    resource: ./archive/warcs/\n"
    )
    command = ["export", "--config", "broken.yaml", "example.com", "--match-type", "domain"]
    result = gateway([*command, "-o", "broken.wacz"], workdir)
    assert result.returncode == 1, result.stderr
    assert "http://example.com/missing skipped" in result.stderr
    assert "1 problem(s)" in result.stderr
    _validate(workdir / "broken.wacz")


def test_an_export_of_the_snapshot_store(workdir: Path) -> None:
    """``$store`` as docs/store.md writes it: the command opens the store beside
    nothing else, and the store's own loader gives the records as stored."""
    (workdir / "store.yaml").write_text(
        "store:\n  root: ./archive/store\ncollections:\n  stored: $store\n"
    )
    added = gateway(
        ["store", "add", "--config", "store.yaml", "archive/warcs/example.warc.gz"], workdir
    )
    assert added.returncode == 0, added.stderr
    command = ["export", "--config", "store.yaml", "example.com", "--match-type", "prefix"]
    result = gateway([*command, "-o", "stored.wacz"], workdir)
    assert result.returncode == 0, result.stderr
    _validate(workdir / "stored.wacz")
    with zipfile.ZipFile(workdir / "stored.wacz") as archive:
        lines = archive.read("indexes/index.cdx").decode().splitlines()
    assert len(lines) == 2  # the capture and its revisit
    assert all('"source-coll": "stored"' in line for line in lines)


def _place_free(row: dict[str, str]) -> dict[str, str]:
    """An Index API row less where its record lies and which source answered."""
    return {k: v for k, v in row.items() if k not in _PLACE_AND_SOURCE}


def _record(port: int, coll: str, row: dict[str, str]) -> tuple[str, str, str, bytes]:
    """(WARC-Type, WARC-Record-ID, WARC-Date, payload) of the Resource API's record
    for ``row``'s capture (a revisit comes resolved, as pywb serves it)."""
    target = f"/{coll}/resource?url={quote(row['url'], safe='')}&closest={row['timestamp']}"
    status, _, body = get(port, target)
    assert status == 200, (coll, row, body[:300])
    record = next(iter(ArchiveIterator(io.BytesIO(body))))
    headers = record.rec_headers
    return (
        headers.get_header("WARC-Type"),
        headers.get_header("WARC-Record-ID"),
        headers.get_header("WARC-Date"),
        record.content_stream().read(),
    )


def test_an_export_served_as_a_collection_answers_as_the_collection_it_came_from(
    workdir: Path,
) -> None:
    """``gateway export`` of the default collection, then ``gateway serve`` of a config
    that is the default one plus a collection whose index is the exported file
    (docs/wacz.md's form: a relative path ending ``.wacz``). The two collections
    list the same captures for the query, each line alike but for where its
    record lies, and the Resource API gives the same record (ID, date, payload)
    for each, revisits resolved through the export's own originals."""
    result = gateway(
        ["export", "iana.org", "--match-type", "domain", "-o", "exports/iana-domain.wacz"], workdir
    )
    assert result.returncode == 0, result.stderr
    default = (workdir / "collections.yaml").read_text()
    (workdir / "roundtrip.yaml").write_text(
        default + "  exported:\n    index: exports/iana-domain.wacz\n"
    )
    server, port = serve(workdir, "--config", "roundtrip.yaml")
    try:
        original = index_rows(port, "web", "iana.org", "domain")
        exported = index_rows(port, "exported", "iana.org", "domain")
        assert len(original) > 150
        assert [_place_free(row) for row in exported] == [_place_free(row) for row in original]
        assert {row["filename"] for row in exported} == {"data.warc.gz"}
        assert {row["source"] for row in exported} == {"exported:iana-domain.wacz"}
        revisits = 0
        for before, after in zip(original, exported, strict=True):
            want = _record(port, "web", before)
            assert _record(port, "exported", after) == want, before["url"]
            revisits += before.get("mime") == "warc/revisit"
        assert revisits > 10  # revisits were resolved through the export's originals
    finally:
        server.stop()
