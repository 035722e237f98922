"""``GET /{coll}/export.wacz``: a WACZ of an Index API query, streamed, that py-wacz accepts.

The collection is the README's default one: the sample's WARCs less the two
broken on purpose, indexed by the gateway's own indexer. Every export is read
back with the standard library's zipfile and warcio, and checked with
``wacz validate`` (py-wacz, run as its command) and against the gateway's
own Index API and Resource API answers for the same query.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.index.export import WaczExport, parse_export_query
from gateway.index.indexer import archive_files, write_cdxj_index
from gateway.server.collection_builder import build_collections
from tests.conftest import leave_mid_answer, serving

WACZ: Final = str(Path(sys.executable).with_name("wacz"))
#: The README's set-up leaves these out of the default collection (broken on purpose).
BROKEN: Final = ("example-extra.warc", "bad.arc")
_PLACE: Final = ("offset", "length", "filename")


def default_collection(sample_dir: Path, root: Path) -> Path:
    """``root/archive/{warcs,indexes}`` as the README's set-up makes them; returns ``root``."""
    warcs = root / "archive" / "warcs"
    warcs.mkdir(parents=True)
    (root / "archive" / "indexes").mkdir()
    for warc in sorted((sample_dir / "warcs").iterdir()):
        if warc.name not in BROKEN:
            shutil.copy(warc, warcs / warc.name)
    with (root / "archive" / "indexes" / "pywb-sample.cdxj").open("w") as out:
        write_cdxj_index(archive_files([warcs]), out)
    return root


@pytest.fixture(scope="module")
def web_yaml(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> str:
    root = default_collection(sample_dir, tmp_path_factory.mktemp("default"))
    return (
        f"collections:\n  web:\n    index: {root}/archive/indexes/\n"
        f"    resource: {root}/archive/warcs/\n"
    )


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """``wacz validate -f PATH`` (py-wacz's command)."""
    return subprocess.run(
        [WACZ, "validate", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def without_place(line: str) -> str:
    """A CDXJ line less where its record lies (``offset length filename``)."""
    urlkey, timestamp, block = line.split(" ", 2)
    fields = {k: v for k, v in json.loads(block).items() if k not in _PLACE}
    return f"{urlkey} {timestamp} {json.dumps(fields)}"


def records(wacz: Path) -> Iterator[tuple[dict[str, Any], Any, bytes]]:
    """Each line of the WACZ's index with its record (warcio) and raw payload, read
    from ``archive/`` at the line's offset and length."""
    with zipfile.ZipFile(wacz) as archive:
        lines = archive.read("indexes/index.cdx").decode("utf-8").splitlines()
        for line in lines:
            fields = json.loads(line.split(" ", 2)[2])
            with archive.open(f"archive/{fields['filename']}") as warc:
                warc.seek(int(fields["offset"]))
                member = warc.read(int(fields["length"]))
            record = next(iter(ArchiveIterator(io.BytesIO(member))))
            yield fields | {"line": line}, record, record.raw_stream.read()


async def _get(port: int, target: str, path: Path | None = None) -> tuple[int, Any, bytes]:
    """GET ``target``: status, headers, body (streamed into ``path`` when given)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{target}") as response,
    ):
        if path is None:
            return response.status, response.headers, await response.read()
        with path.open("wb") as out:
            async for chunk in response.content.iter_chunked(65536):
                out.write(chunk)
        return response.status, response.headers, b""


async def test_iana_prefix_export_is_valid_and_holds_the_index_api_answer(
    web_yaml: str, tmp_path: Path
) -> None:
    query = "url=iana.org&matchType=prefix"
    wacz = tmp_path / "iana.wacz"
    async with serving(web_yaml) as port:
        status, headers, _ = await _get(port, f"/web/export.wacz?{query}", wacz)
        assert status == 200
        assert headers["Content-Type"] == "application/zip"
        assert "Content-Length" not in headers  # streamed as it is written
        assert headers["Transfer-Encoding"] == "chunked"
        _, _, index = await _get(port, f"/web/index?{query}")
        exported = list(records(wacz))
        # Each record against the Resource API's for the same capture.
        compared = 0
        for fields, record, payload in exported:
            if record.rec_headers.get_header("WARC-Type") == "revisit":
                continue
            url, ts = fields["url"], fields["line"].split(" ")[1]
            target = f"/web/resource?url={url}&closest={ts}&matchType=exact"
            _, _, served = await _get(port, target)
            served_record = next(iter(ArchiveIterator(io.BytesIO(served))))
            if served_record.rec_headers.get_header("WARC-Record-ID") != (
                record.rec_headers.get_header("WARC-Record-ID")
            ):
                continue  # another capture of the same URL and second
            assert served_record.raw_stream.read() == payload, fields["line"]
            compared += 1
    assert compared >= 30
    result = validate(wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation succeeded" in result.stdout
    # The index holds the Index API's lines, sorted, each placed in archive/.
    lines = [fields["line"] for fields, _, _ in exported]
    assert lines == sorted(lines)
    api_lines = index.decode("utf-8").splitlines()
    assert len(api_lines) > 150
    assert sorted(map(without_place, lines)) == sorted(map(without_place, api_lines))
    with zipfile.ZipFile(wacz) as archive:
        names = [info.filename for info in archive.infolist()]
        assert names == [
            "archive/data.warc.gz",
            "indexes/index.cdx",
            "pages/pages.jsonl",
            "logs/export.log",
            "datapackage.json",
            "datapackage-digest.json",
        ]
        assert archive.getinfo("archive/data.warc.gz").compress_type == zipfile.ZIP_STORED
        package = json.loads(archive.read("datapackage.json"))
        pages = archive.read("pages/pages.jsonl").decode().splitlines()
        log = [json.loads(line) for line in archive.read("logs/export.log").splitlines()]
    assert package["wacz_version"] == "1.1.1"
    assert package["profile"] == "data-package"
    assert package["software"].startswith("archive-gateway")
    assert [r["path"] for r in package["resources"]] == names[:4]
    assert json.loads(pages[0])["format"] == "json-pages-1.0"
    assert {"url": "http://www.iana.org/", "ts": "2014-01-26T20:06:24Z"}.items() <= json.loads(
        pages[1]
    ).items()
    assert log[-1]["details"]["captures"] == len(api_lines)
    assert log[-1]["details"]["skipped"] == 0


async def test_revisits_come_with_their_originals(web_yaml: str, tmp_path: Path) -> None:
    """The original of a revisit outside the query is added, line and record; one
    under another URL (url-agnostic) too."""
    async with serving(web_yaml) as port:
        for query, original in [
            # the revisit of 2014-01-27 refers to the capture of 2014-01-26
            ("url=http://www.iana.org/&from=20140127", "org,iana)/ 20140126200624"),
            # wget's url-agnostic revisit refers to a capture of another URL
            ("url=example.com&from=2013&to=2013", "org,iana,example)/ 20130702195402"),
        ]:
            wacz = tmp_path / "revisit.wacz"
            assert (await _get(port, f"/web/export.wacz?{query}", wacz))[0] == 200
            _, _, index = await _get(port, f"/web/index?{query}")
            exported = {fields["line"].rsplit(" {", 1)[0]: (r, p) for fields, r, p in records(wacz)}
            asked = [line.rsplit(" {", 1)[0] for line in index.decode().splitlines()]
            assert set(exported) == {*asked, original}, query
            assert original not in asked
            assert exported[original][0].rec_headers.get_header("WARC-Type") == "response"
            revisits = [r for r, _ in exported.values() if r.rec_type == "revisit"]
            assert revisits, query
            for revisit in revisits:  # the payload the gateway serves for it is the original's
                ts = revisit.rec_headers.get_header("WARC-Date")
                target = revisit.rec_headers.get_header("WARC-Target-URI")
                _, _, served = await _get(
                    port, f"/web/resource?url={target}&closest={ts[:4]}{ts[5:7]}{ts[8:10]}"
                )
                served_record = next(iter(ArchiveIterator(io.BytesIO(served))))
                assert served_record.raw_stream.read() == exported[original][1]
            result = validate(wacz)
            assert result.returncode == 0, result.stdout + result.stderr


async def test_bad_queries_are_a_400_naming_the_parameter(web_yaml: str) -> None:
    async with serving(web_yaml) as port:
        for query, param in [
            ("url=iana.org&matchType=bad", "matchType"),
            ("url=iana.org&limit=abc", "limit"),
            ("url=iana.org&from=2014x", "from"),
            ("url=iana.org&output=json", "output"),
            ("url=iana.org&fl=url", "fl"),
            ("url=iana.org&resolveRevisits=true", "resolveRevisits"),
            ("matchType=prefix", "url"),
        ]:
            status, headers, body = await _get(port, f"/web/export.wacz?{query}")
            assert status == 400, query
            assert headers["Content-Type"].startswith("application/json")
            assert json.loads(body)["param"] == param, query
        status, _, body = await _get(port, "/nope/export.wacz?url=iana.org")
        assert status == 404
        assert "unknown collection" in json.loads(body)["message"]
        status, _, body = await _get(port, "/web/export.wacz?url=nothing.example.org")
        assert status == 404
        assert "no captures" in json.loads(body)["message"]


async def test_a_capture_that_cannot_be_loaded_is_skipped_and_said(
    sample_dir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "example.cdxj"
    missing = (
        'com,example)/missing 20140101000000 {"url": "http://example.com/missing", '
        '"mime": "text/html", "status": "200", "digest": "X", "length": "100", '
        '"offset": "0", "filename": "missing.warc.gz"}\n'
    )
    lines = (sample_dir / "cdxj" / "example.cdxj").read_text().splitlines(keepends=True)
    index.write_text("".join(sorted([*lines, missing])))
    yaml_text = f"collections:\n  ex:\n    index: {index}\n    resource: {sample_dir}/warcs/\n"
    wacz = tmp_path / "ex.wacz"
    async with serving(yaml_text) as port:
        query = "url=example.com&matchType=domain"
        assert (await _get(port, f"/ex/export.wacz?{query}", wacz))[0] == 200
    with zipfile.ZipFile(wacz) as archive:
        log = [json.loads(line) for line in archive.read("logs/export.log").splitlines()]
        index_lines = archive.read("indexes/index.cdx").decode().splitlines()
    skipped = [entry for entry in log if entry["message"].startswith("capture skipped")]
    assert [entry["details"]["url"] for entry in skipped] == ["http://example.com/missing"]
    assert "missing.warc.gz" in skipped[0]["details"]["reason"]
    assert log[-1]["details"]["skipped"] == 1
    assert len(index_lines) == 2
    assert validate(wacz).returncode == 0


async def test_a_client_that_leaves_stops_the_export(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Random bytes do not compress: the export outgrows the socket buffers."""
    warc = tmp_path / "random.warc.gz"
    with warc.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for number in range(4):
            http = StatusAndHeaders(
                "200 OK", [("Content-Type", "application/octet-stream")], protocol="HTTP/1.1"
            )
            payload = io.BytesIO(os.urandom(4 * 1024 * 1024))
            url = f"http://example.com/random/{number}"
            record = writer.create_warc_record(url, "response", payload=payload, http_headers=http)
            writer.write_record(record)
            record.raw_stream.close()  # warcio spooled the payload to a temporary file
    with (tmp_path / "random.cdxj").open("w") as index:
        write_cdxj_index([warc], index)
    await leave_mid_answer(
        f"collections:\n  big:\n    index: {tmp_path}/random.cdxj\n    resource: {tmp_path}/\n",
        "/big/export.wacz?url=example.com/random/&matchType=prefix",
        caplog,
        expect_log="client left during GET /big/export.wacz",
    )


async def test_an_original_met_again_later_counts_as_a_capture(
    web_yaml: str, tmp_path: Path
) -> None:
    """In reverse order the revisit comes first: its original is written once, as
    the revisit's, and counted as the query's capture (and page) when met."""
    query = "url=http://www.iana.org/&sort=reverse"
    wacz = tmp_path / "reverse.wacz"
    async with serving(web_yaml) as port:
        assert (await _get(port, f"/web/export.wacz?{query}", wacz))[0] == 200
        _, _, index = await _get(port, f"/web/index?{query}")
    api_lines = index.decode().splitlines()
    assert api_lines[0].startswith("org,iana)/ 20140127171238")  # the revisit first
    with zipfile.ZipFile(wacz) as archive:
        lines = archive.read("indexes/index.cdx").decode().splitlines()
        pages = archive.read("pages/pages.jsonl").decode().splitlines()[1:]
        summary = json.loads(archive.read("logs/export.log").splitlines()[-1])["details"]
    assert sorted(map(without_place, lines)) == sorted(map(without_place, api_lines))
    assert (summary["captures"], summary["originals"]) == (len(api_lines), 0)
    assert [json.loads(page)["ts"] for page in pages] == ["2014-01-26T20:06:24Z"]


async def test_admit_leaves_captures_out_and_counts_them(
    web_yaml: str, clients: SharedClients
) -> None:
    """The access-control hook: ``admit`` sees every capture and original."""
    collection = build_collections(parse_config(web_yaml), clients)["web"]
    query = parse_export_query({"url": ["iana.org"], "matchType": ["prefix"]})
    seen: list[str] = []

    def admit(capture: CdxRecord) -> bool:
        seen.append(capture.url)
        return "/about" not in capture.url

    export = await WaczExport.start(collection, query, admit=admit)
    out = io.BytesIO()

    async def send(data: bytes) -> None:
        out.write(data)

    report = await export.write(send)
    about = [url for url in seen if "/about" in url]
    assert about
    assert report.refused == len(about)
    assert report.captures == len(seen) - len(about)
    with zipfile.ZipFile(out) as archive:
        index_text = archive.read("indexes/index.cdx").decode()
    assert "/about" not in index_text
    assert len(index_text.splitlines()) == report.captures


async def test_head_answers_the_headers_only(web_yaml: str) -> None:
    async with (
        serving(web_yaml) as port,
        aiohttp.ClientSession() as session,
        session.head(f"http://127.0.0.1:{port}/web/export.wacz?url=iana.org") as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Disposition"] == 'attachment; filename="web-export.wacz"'
        assert await response.read() == b""


async def test_an_index_group_of_several_source_types_exports_its_merged_answer(
    sample_dir: Path, tmp_path: Path
) -> None:
    """A ZipNum cluster and a CDXJ file in one ``index_group``: the export holds
    the group's merged answer, each line tagged with its member as on the Index API."""
    yaml_text = (
        "collections:\n  many:\n    index_group:\n"
        f"      zip: {sample_dir}/zipcdx/zipnum-sample.idx\n"
        f"      ex: {sample_dir}/cdxj/example.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n"
    )
    query = "url=*.iana.org&from=2014"
    wacz = tmp_path / "many.wacz"
    async with serving(yaml_text) as port:
        assert (await _get(port, f"/many/export.wacz?{query}", wacz))[0] == 200
        _, _, index = await _get(port, f"/many/index?{query}")
    api_lines = index.decode().splitlines()
    sources = {json.loads(line.split(" ", 2)[2])["source-coll"] for line in api_lines}
    assert sources == {"zip", "ex"}
    with zipfile.ZipFile(wacz) as archive:
        lines = archive.read("indexes/index.cdx").decode().splitlines()
    assert sorted(map(without_place, lines)) == sorted(map(without_place, api_lines))
    result = validate(wacz)
    assert result.returncode == 0, result.stdout + result.stderr


async def test_a_remote_archive_exports_the_records_it_serves(
    web_yaml: str, tmp_path: Path
) -> None:
    """``memento+`` and ``cdx+`` members: each record is fetched from the remote
    archive (another gateway) as its Resource API does, and packaged."""
    async with serving(web_yaml) as upstream:
        remote = (
            f"collections:\n  memento: memento+http://127.0.0.1:{upstream}/web/\n"
            f"  cdx:\n    index: cdx+http://127.0.0.1:{upstream}/web/cdx\n"
        )
        async with serving(remote) as port:
            for coll in ("memento", "cdx"):
                query = "url=http://www.iana.org/_css/2013.1/screen.css"
                wacz = tmp_path / f"{coll}.wacz"
                assert (await _get(port, f"/{coll}/export.wacz?{query}", wacz))[0] == 200
                _, _, index = await _get(port, f"/{coll}/index?{query}")
                api_lines = index.decode().splitlines()
                exported = list(records(wacz))
                lines = [fields["line"] for fields, _, _ in exported]
                assert sorted(map(without_place, lines)) == sorted(map(without_place, api_lines))
                assert len(lines) >= 3, coll
                _, _, original = await _get(
                    upstream, f"/web/resource?url={exported[0][0]['url']}&closest=20140126200625"
                )
                served = next(iter(ArchiveIterator(io.BytesIO(original))))
                assert exported[0][2] == served.raw_stream.read()
                result = validate(wacz)
                assert result.returncode == 0, result.stdout + result.stderr
