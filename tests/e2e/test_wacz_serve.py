"""``gateway serve`` of a WACZ, configured as docs/wacz.md writes it, from a temporary directory.

The config is docs/wacz.md's first example as written: ``crawls/sample.wacz``
(a relative path to one file) and ``wacz+crawls/`` (a relative directory).
The WACZ is built by py-wacz from the sample's WARCs; the server is asked
what a user asks: index lines, a record, a WACZ copied in later, a damaged one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.e2e.support import gateway, get, serve, until
from tests.wacz_support import flip_byte

DOCS = Path(__file__).resolve().parents[2] / "docs" / "wacz.md"


def _docs_config() -> str:
    block = re.search(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert block is not None, "docs/wacz.md shows its config first"
    assert "crawls/sample.wacz" in block.group(1)
    return block.group(1)


def _index(port: int, coll: str, url: str, match: str = "domain") -> list[dict[str, str]]:
    status, _, body = get(port, f"/{coll}/index?url={quote(url)}&matchType={match}&output=json")
    assert status == 200, body[:500]
    return [json.loads(line) for line in body.decode().splitlines() if line]


def test_a_wacz_and_a_directory_of_them_serve_as_the_docs_say(
    tmp_path: Path, sample_wacz: Path, sample_dir: Path
) -> None:
    (tmp_path / "collections.yaml").write_text(_docs_config())
    (tmp_path / "crawls").mkdir()
    shutil.copyfile(sample_wacz, tmp_path / "crawls" / "sample.wacz")
    checked = gateway(["check-config", "collections.yaml"], tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "wacz" in checked.stdout
    server, port = serve(tmp_path)
    try:
        lines = [
            line
            for name in ("iana.cdxj", "example.cdxj")
            for line in (sample_dir / "cdxj" / name).read_text().splitlines()
            if line.startswith("org,iana)")
        ]
        rows = _index(port, "crawl", "iana.org")
        assert [(r["urlkey"], r["timestamp"]) for r in rows] == sorted(
            tuple(line.split(" ", 2)[:2]) for line in lines
        )
        assert {r["source"] for r in rows} == {"crawl:sample.wacz"}
        status, headers, body = get(port, "/crawl/resource?url=http://www.iana.org/")
        assert status == 200, body[:500]
        assert body.startswith(b"WARC/1.0\r\nWARC-Type: response\r\n")
        assert headers["memento-datetime"] == "Sun, 26 Jan 2014 20:06:24 GMT"

        # The collection's page lists the WACZ's pages/pages.jsonl, as ReplayWeb.page does.
        status, _, body = get(port, "/crawl/")
        assert status == 200
        page = body.decode()
        memento = "/crawl/20140126200624id_/http://www.iana.org/"
        assert '<table id="pages">' in page
        assert f'<a class="memento" href="{memento}">http://www.iana.org/</a>' in page
        assert "2014-01-26 20:06:24" in page
        assert "crawl:sample.wacz" in page
        status, _, body = get(port, memento)
        assert status == 200, body[:300]

        # The directory member: a WACZ copied in while serving is served by a later lookup.
        assert len(_index(port, "many", "iana.org")) == len(rows)
        shutil.copyfile(sample_wacz, tmp_path / "crawls" / ".partial")
        (tmp_path / "crawls" / ".partial").rename(tmp_path / "crawls" / "copy.wacz")
        until(
            "the new WACZ is served beside the first",
            lambda: len(_index(port, "many", "iana.org")) == 2 * len(rows),
        )
        sources = {r["source"] for r in _index(port, "many", "iana.org")}
        assert sources == {"many:sample.wacz", "many:copy.wacz"}

        # A damaged WACZ copied in is refused by name, and the member with it: not half-served.
        flip_byte(sample_wacz, "archive/example.warc.gz", tmp_path / "crawls" / ".partial")
        (tmp_path / "crawls" / ".partial").rename(tmp_path / "crawls" / "damaged.wacz")

        def refused() -> bool:
            status, _, body = get(port, "/many/index?url=iana.org&matchType=domain")
            return status == 503 and b"damaged.wacz: resource archive/example.warc.gz" in body

        until("the damaged WACZ is refused by name", refused)
    finally:
        server.stop()


def test_index_check_verifies_wacz_files_and_names_the_damaged_resource(
    tmp_path: Path, sample_wacz: Path
) -> None:
    shutil.copyfile(sample_wacz, tmp_path / "good.wacz")
    flip_byte(sample_wacz, "archive/iana.warc.gz", tmp_path / "bad.wacz")
    good = gateway(["index", "--check", "good.wacz"], tmp_path)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("good.wacz: ok, 5 resources verified and datapackage.json")
    both = gateway(["index", "--check", "good.wacz", "bad.wacz"], tmp_path)
    assert both.returncode == 1
    assert "good.wacz: ok" in both.stdout
    assert "WACZ bad.wacz: resource archive/iana.warc.gz: hash sha256:" in both.stderr


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def test_store_add_of_a_wacz_imports_its_warcs_and_keeps_its_pages(
    tmp_path: Path, sample_wacz: Path
) -> None:
    config = next(block for block in _blocks("yaml") if "$store" in block)
    command = next(block for block in _blocks("sh") if "store add" in block).strip()
    (tmp_path / "collections.yaml").write_text(config)
    (tmp_path / "crawls").mkdir()
    flip_byte(sample_wacz, "archive/iana.warc.gz", tmp_path / "crawls" / "sample.wacz")
    argv = shlex.split(command)[1:]
    refused = gateway(argv, tmp_path)
    assert refused.returncode == 1
    assert "WACZ sample.wacz: resource archive/iana.warc.gz: hash" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert not (tmp_path / "archive").exists()

    shutil.copyfile(sample_wacz, tmp_path / "crawls" / "sample.wacz")
    added = gateway(argv, tmp_path)
    assert added.returncode == 0, added.stderr
    assert "store add: 2 imported" in added.stdout
    assert (tmp_path / "archive" / "store" / "pages" / "sample.jsonl").is_file()
    server, port = serve(tmp_path)
    try:
        rows = _index(port, "stored", "example.com")
        assert [(r["timestamp"], r["status"]) for r in rows] == [
            ("20140103030321", "200"),
            ("20140103030341", "200"),
        ]
        status, _, body = get(port, "/stored/")
        assert status == 200
        memento = "/stored/20140126200624id_/http://www.iana.org/"
        assert f'<a class="memento" href="{memento}">http://www.iana.org/</a>' in body.decode()
        status, _, body = get(port, memento)
        assert status == 200, body[:300]
    finally:
        server.stop()


def test_the_docs_check_command_runs_as_written(tmp_path: Path, sample_wacz: Path) -> None:
    block = next(block for block in _blocks("sh") if "--check" in block)
    command, _, said = block.strip().partition("#")
    (tmp_path / "crawls").mkdir()
    shutil.copyfile(sample_wacz, tmp_path / "crawls" / "sample.wacz")
    argv = shlex.split(command)
    assert argv[0] == "gateway"
    done = gateway(argv[1:], tmp_path)
    assert done.returncode == 0, done.stderr
    assert said.strip().rstrip(".").strip() in done.stdout.replace("crawls/", "")


@contextlib.contextmanager
def _file_server(folder: Path) -> Iterator[int]:
    """An aiohttp static file server (it answers ``Range`` with 206) on 127.0.0.1, in a
    thread, standing in for a web server that holds WACZ files; yields its port."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        app = web.Application()
        app.router.add_static("/", folder)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        state.update(port=runner.addresses[0][1], loop=asyncio.get_running_loop())
        state["stop"] = asyncio.Event()
        ready.set()
        try:
            await state["stop"].wait()
        finally:
            await runner.cleanup()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    assert ready.wait(30), "the file server did not start"
    try:
        yield int(state["port"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)


def test_a_wacz_on_a_web_server_is_served_through_range_requests(
    tmp_path: Path, sample_wacz: Path
) -> None:
    with _file_server(sample_wacz.parent) as files:
        config = f"collections:\n  remote:\n    index: wacz+http://127.0.0.1:{files}/sample.wacz\n"
        (tmp_path / "collections.yaml").write_text(config)
        server, port = serve(tmp_path)
        try:
            rows = _index(port, "remote", "example.com")
            assert [r["timestamp"] for r in rows] == ["20140103030321", "20140103030341"]
            status, headers, body = get(port, "/remote/resource?url=http://www.iana.org/")
            assert status == 200, body[:300]
            assert headers["memento-datetime"] == "Sun, 26 Jan 2014 20:06:24 GMT"
        finally:
            server.stop()
