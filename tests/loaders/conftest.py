"""Fixtures and helpers for resource loader tests, over real WARC/ARC files.

``sample_index``
    every capture of the sample archive's indexes (``cdxj/*.cdxj`` and
    ``cdx/*.cdx*``), plus a CDXJ made by cdxj-indexer for the sample files no
    index covers (``example.warc``, wget, wpull), and the ARC captures under
    their real urlkey (session-scoped).
``crafted_dir``
    a folder holding ``crafted.warc.gz``, written with warcio, with the record
    kinds the sample lacks: a revisit with its own HTTP headers, a 3xx
    revisit, an empty-payload revisit, a revisit without HTTP headers, a
    wget-style revisit (``WARC-Refers-To`` only), a request and a resource
    record; ``crafted_index`` lists its captures (cdxj-indexer, all records).
``finder``
    a ``find_original`` over ``sample_index`` + ``crafted_index``: a linear
    scan for non-revisit captures of a URL with a digest, closest first (test
    scaffolding standing in for the collection's index lookup).
``clients``
    started :class:`SharedClients` (one aiohttp session), closed afterwards.
``loader_bucket``
    a bucket of the session's SeaweedFS for the S3 entries of the contract suite.

:func:`load_all` loads a capture and drains its body; :func:`capture` finds
one capture of the index by filename and offset.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.loaders.base import FindOriginal, LoadContext, LoadedRecord, ResourceLoader
from tests.storage.seaweedfs import SeaweedFS, run_in_thread

#: Sample files that no sample index covers, indexed by cdxj-indexer here.
UNINDEXED_SAMPLES = (
    "example.warc",
    "example-wget-1-14.warc.gz",
    "example-wpull.warc.gz",
)

#: ARC captures of ``cdx/example-arc-test.cdx`` (whose urlkeys are made up).
ARC_CAPTURES = (
    'com,example)/ 20140216050221 {"url": "http://example.com/", "mime": "text/html", '
    '"status": "200", "digest": "B2LTWWPUOYAH7UIPQ7ZUPQ4VMBSVC36A", "length": "1656", '
    '"offset": "151", "filename": "example.arc"}',
    'com,example)/ 20140216050221 {"url": "http://example.com/", "mime": "text/html", '
    '"status": "200", "digest": "B2LTWWPUOYAH7UIPQ7ZUPQ4VMBSVC36A", "length": "856", '
    '"offset": "171", "filename": "example.arc.gz"}',
)


def index_files(paths: list[Path]) -> list[CdxRecord]:
    """Every capture line of CDXJ / legacy CDX files (header and blank lines skipped)."""
    records = []
    for path in paths:
        for line in path.read_text("utf-8").splitlines():
            if line.strip() and not line.startswith((" CDX", "CDX ")):
                records.append(CdxRecord.parse(line))
    return records


def run_cdxj_indexer(inputs: list[Path], output: Path, *, all_records: bool = False) -> None:
    """Index WARC files with cdxj-indexer (file names without their folder).

    Run in a child process: cdxj-indexer prints warnings about the sample's odd
    records and leaves warcio's temporary digest buffers unclosed.
    """
    args = [str(path) for path in inputs] + ["-o", str(output)]
    if all_records:
        args += ["--records", "all"]
    code = "import sys; from cdxj_indexer.main import main; main(sys.argv[1:])"
    subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, timeout=120
    )


@pytest.fixture(scope="session")
def warcs_dir(sample_dir: Path) -> Path:
    return sample_dir / "warcs"


@pytest.fixture(scope="session")
def sample_index(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[CdxRecord]:
    extra = tmp_path_factory.mktemp("extra-index") / "extra.cdxj"
    run_cdxj_indexer([sample_dir / "warcs" / name for name in UNINDEXED_SAMPLES], extra)
    files = sorted((sample_dir / "cdxj").glob("*.cdxj")) + sorted(
        path for path in (sample_dir / "cdx").glob("*.cdx*") if "arc-test" not in path.name
    )
    records = index_files([*files, extra])
    records += [CdxRecord.parse(line) for line in ARC_CAPTURES]
    return records


def write_records(writer: WARCWriter, *records: Any) -> None:
    """Write warcio records and close the temporary buffers warcio leaves open."""
    for record in records:
        writer.write_record(record)
        record.raw_stream.close()
        original = getattr(record, "_orig_stream", None)
        if original is not None:
            original.close()


def _write_crafted(path: Path) -> None:
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)

        def http(status: str, headers: list[tuple[str, str]]) -> StatusAndHeaders:
            return StatusAndHeaders(status, headers, protocol="HTTP/1.1")

        original = writer.create_warc_record(
            "http://crafted.test/page",
            "response",
            payload=io.BytesIO(b"hello world"),
            http_headers=http("200 OK", [("Content-Type", "text/html"), ("Content-Length", "11")]),
            warc_headers_dict={"WARC-Date": "2020-01-01T00:00:00Z"},
        )
        write_records(writer, original)
        digest = original.rec_headers.get_header("WARC-Payload-Digest")
        record_id = original.rec_headers.get_header("WARC-Record-ID")
        # A revisit with its own (longer) HTTP headers: Content-Length is adjusted.
        write_records(
            writer,
            writer.create_revisit_record(
                "http://crafted.test/page",
                digest,
                "http://crafted.test/page",
                "2020-01-01T00:00:00Z",
                http_headers=http("200 OK", [("Content-Type", "text/html"), ("X-Long", "x" * 50)]),
                warc_headers_dict={"WARC-Date": "2020-02-01T00:00:00Z"},
            ),
        )
        # A 3xx revisit whose original exists nowhere: served as is, Content-Length: 0.
        write_records(
            writer,
            writer.create_revisit_record(
                "http://crafted.test/redir",
                "sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                "http://crafted.test/redir",
                "2019-01-01T00:00:00Z",
                http_headers=http(
                    "301 Moved",
                    [("Location", "http://crafted.test/other"), ("Content-Length", "5")],
                ),
                warc_headers_dict={"WARC-Date": "2020-03-01T00:00:00Z"},
            ),
        )
        # A revisit of the empty payload: nothing to look up.
        write_records(
            writer,
            writer.create_revisit_record(
                "http://crafted.test/empty",
                "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ",
                "http://crafted.test/empty",
                "2019-01-01T00:00:00Z",
                http_headers=http("200 OK", [("Content-Length", "0")]),
                warc_headers_dict={"WARC-Date": "2020-04-01T00:00:00Z"},
            ),
        )
        # A revisit without HTTP headers: the original's are served.
        write_records(
            writer,
            writer.create_revisit_record(
                "http://crafted.test/page",
                digest,
                "http://crafted.test/page",
                "2020-01-01T00:00:00Z",
                warc_headers_dict={"WARC-Date": "2020-05-01T00:00:00Z"},
            ),
        )
        # wget 1.14 style: WARC-Refers-To (a record id), no Refers-To-Target-URI/Date.
        write_records(
            writer,
            writer.create_warc_record(
                "http://crafted.test/page",
                "revisit",
                http_headers=http("200 OK", [("Content-Type", "text/html")]),
                warc_headers_dict={
                    "WARC-Date": "2020-06-01T00:00:00Z",
                    "WARC-Refers-To": record_id,
                    "WARC-Profile": "http://netpreserve.org/warc/1.0/revisit/"
                    "identical-payload-digest",
                    "WARC-Payload-Digest": digest,
                },
            ),
        )
        write_records(
            writer,
            writer.create_warc_record(
                "http://crafted.test/page",
                "request",
                http_headers=StatusAndHeaders(
                    "GET /page HTTP/1.1",
                    [("Host", "crafted.test"), ("User-Agent", "x")],
                    is_http_request=True,
                ),
                warc_headers_dict={"WARC-Date": "2020-01-01T00:00:00Z"},
            ),
        )
        write_records(
            writer,
            writer.create_warc_record(
                "http://crafted.test/res.txt",
                "resource",
                payload=io.BytesIO(b"resource body"),
                warc_headers_dict={
                    "WARC-Date": "2020-07-01T00:00:00Z",
                    "Content-Type": "text/plain",
                },
            ),
        )


@pytest.fixture(scope="session")
def crafted_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("crafted")
    _write_crafted(folder / "crafted.warc.gz")
    return folder


@pytest.fixture(scope="session")
def crafted_index(crafted_dir: Path) -> list[CdxRecord]:
    output = crafted_dir / "crafted.cdxj"
    run_cdxj_indexer([crafted_dir / "crafted.warc.gz"], output, all_records=True)
    return [record for record in index_files([output]) if record.urlkey != "-"]


def make_finder(index: list[CdxRecord]) -> FindOriginal:
    """``find_original`` by linear scan: same urlkey, not a revisit, same digest, closest first."""

    def find(url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
        bare = digest.rpartition(":")[2] if digest not in ("", "-") else ""
        key = canonical_urlkey(url)
        found = [
            record
            for record in index
            if record.urlkey == key
            and not record.is_revisit
            and (not bare or record.digest.rpartition(":")[2] == bare)
        ]
        found.sort(key=lambda record: abs(int(record.timestamp) - int(timestamp)))

        async def iterate() -> AsyncIterator[CdxRecord]:
            for record in found:
                yield record

        return iterate()

    return find


@pytest.fixture(scope="session")
def finder(sample_index: list[CdxRecord], crafted_index: list[CdxRecord]) -> FindOriginal:
    return make_finder(sample_index + crafted_index)


def capture(index: list[CdxRecord], filename: str, offset: int) -> CdxRecord:
    """The capture of ``index`` at ``filename``/``offset`` (a copy)."""
    for record in index:
        if record.filename == filename and record.offset == offset:
            return record.copy()
    raise LookupError(f"no capture of {filename} at {offset} in the test index")


def context(finder: FindOriginal, request_url: str) -> LoadContext:
    return LoadContext(request_url=request_url, find_original=finder)


async def load_all(
    loader: ResourceLoader,
    record: CdxRecord,
    finder: FindOriginal,
    request_url: str | None = None,
) -> tuple[LoadedRecord, bytes]:
    """Load ``record``, drain its body and close it; returns the record and all its bytes."""
    loaded = await loader.load(record, context(finder, request_url or record.url))
    try:
        body = b"".join([chunk async for chunk in loaded.body])
    finally:
        await loaded.aclose()
    return loaded, loaded.warc_headers + loaded.http_headers + body


def open_fds() -> int:
    """How many file descriptors this process holds (Linux ``/proc/self/fd``)."""
    return len(list(Path("/proc/self/fd").iterdir()))


@contextlib.contextmanager
def peak_rss_growth() -> Iterator[Callable[[], int]]:
    """Measure how far the peak resident set size rises above its current value.

    Resets the kernel's high-water mark (``/proc/self/clear_refs`` value 5,
    Linux >= 4.0) and reads ``VmHWM`` afterwards; the yielded function
    returns the growth in bytes.
    """
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS is measured through /proc (Linux only)")

    def status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise LookupError(field)

    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("cannot reset the peak RSS (/proc/self/clear_refs not writable)")
    start = status("VmRSS")
    yield lambda: status("VmHWM") - start


#: The SeaweedFS bucket the S3 entries of the loader contract suite read from.
LOADER_BUCKET = "contract-loaders"


@pytest.fixture(scope="session")
def loader_bucket(seaweedfs: SeaweedFS) -> str:
    """:data:`LOADER_BUCKET`, created once per session (each entry uses a prefix of its own)."""
    run_in_thread(seaweedfs.create_bucket(LOADER_BUCKET))
    return LOADER_BUCKET
