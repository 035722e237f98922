"""Instructions per call of each piece of the one-URL index lookup, under callgrind.

    python -m bench.bench_pieces [--calls 1000] [--only PIECE...]

``bench_instructions.py`` counts whole requests; this splits the gateway's
share of one (``/iana/index?url=http://www.iana.org/`` over the sample's
``iana.cdxj``) into the pieces it is made of, each called ``--calls``
times in a loop after 200 warm-up calls, in one process running under
``valgrind --tool=callgrind --zero-before=builtin_oct
--dump-before=builtin_bin``: ``oct(0)`` before a piece's loop zeroes the
counters and ``bin(0)`` after it writes them out (two builtins nothing
on these paths calls), so each dump counts exactly one loop. The heap is
frozen first (``gc.freeze``, as ``gateway serve`` does). Printed: thousands
of instructions per call, the loop's own cost (an empty body) subtracted.

Pieces (each includes the ones above it that it calls):

- ``stat``: ``IndexFile.acquire`` + ``release`` (the check that the file
  did not change);
- ``parse``: ``CdxRecord.parse`` of the answer's line;
- ``scan``: the member's scan, all in (``CdxjFileSource.lookup`` drained);
- ``lookup``: ``Collection.lookup`` and ``Lookup.in_memory`` (group,
  breaker, the query's processing, the scan);
- ``render``: the answer's body from its records (``line_renderer``, join,
  encode);
- ``query``: ``capture_query`` of a request already seen (the memo);
- ``handler``: ``index_handler`` on a request made by aiohttp's test
  utilities, route wrapper and CORS headers included (everything but
  aiohttp's reading of the request and its writing of the response, which
  the floor has too).

Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import gc
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from bench.workloads import IANA_CDXJ

_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)
_WARMUP_CALLS: Final = 200
PIECES: Final = ("empty", "stat", "parse", "scan", "lookup", "render", "query", "handler")
_URL: Final = "http://www.iana.org/"


def _pieces() -> dict[str, Callable[[], object]]:
    """One callable per piece; each runs one call of the piece (see the module docstring)."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from gateway.api.common import capture_query
    from gateway.api.index import index_handler, line_renderer
    from gateway.api.keys import COLLECTIONS
    from gateway.api.metrics import RouteStats
    from gateway.cdx.cdxj import CdxRecord
    from gateway.cdx.query import parse_query
    from gateway.clients import SharedClients
    from gateway.index.collection import Collection, Step
    from gateway.index.group import IndexGroup
    from gateway.server.app import api_route
    from gateway.sources.cdxj_file import CdxjFileSource, FileSourceConfig

    source = CdxjFileSource.from_config(
        FileSourceConfig(path=str(IANA_CDXJ)), name="iana", clients=SharedClients()
    )
    assert isinstance(source, CdxjFileSource)
    collection = Collection("iana", [Step("iana", IndexGroup([source]), [])])
    query = parse_query({"url": [_URL]})
    line = next(
        raw
        for raw in IANA_CDXJ.read_bytes().splitlines()
        if raw.startswith(b"org,iana)/ ") and b'"http://www.iana.org/"' in raw
    )
    app = web.Application()
    app[COLLECTIONS] = {"iana": collection}
    route = api_route(index_handler, RouteStats("GET", "/{coll}/index"))
    request = make_mocked_request(
        "GET", f"/iana/index?url={_URL}", match_info={"coll": "iana"}, app=app
    )
    render, separator, terminator = line_renderer(query)

    def stat() -> None:
        source._file.acquire().release()

    def scan() -> None:
        records = source.lookup(query)
        for _ in records.scan:  # type: ignore[attr-defined]
            pass

    async def lookup_once() -> list[CdxRecord] | None:
        _step, answer = await collection.lookup(query)
        return answer.in_memory()

    def run(coro: object) -> None:
        run_once(coro)

    records = run_once(lookup_once()) or []

    def render_body() -> bytes:
        return (separator.join(map(render, records)) + terminator).encode("utf-8")

    return {
        "empty": lambda: None,
        "stat": stat,
        "parse": lambda: CdxRecord.parse(line),
        "scan": scan,
        "lookup": lambda: run(lookup_once()),
        "render": render_body,
        "query": lambda: capture_query(request),
        "handler": lambda: run(route(request)),
    }


def run_once(coro: object) -> Any:
    """Run a coroutine that finishes without waiting; its result."""
    try:
        coro.send(None)  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value
    raise RuntimeError("the piece waited on the event loop")


async def _child(names: Sequence[str], calls: int) -> None:
    """Run each piece's loop between the markers callgrind zeroes and dumps at,
    on a running loop (``gateway serve``'s: uvloop when installed)."""
    pieces = _pieces()
    for name in names:
        piece = pieces[name]
        for _ in range(_WARMUP_CALLS):
            piece()
    gc.collect()
    gc.freeze()
    for name in names:
        piece = pieces[name]
        oct(0)  # callgrind: zero the counters
        for _ in range(calls):
            piece()
        bin(0)  # callgrind: dump them


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000, help="measured calls per piece")
    parser.add_argument("--only", nargs="*", choices=PIECES[1:], help="measure only these")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        from gateway.cli import _new_loop

        loop = _new_loop()
        loop.run_until_complete(_child(args.child, args.calls))
        loop.close()
        return 0
    names = ["empty", *(args.only or PIECES[1:])]
    with tempfile.TemporaryDirectory(prefix="bench-pieces-") as tmp:
        out = Path(tmp) / "pieces.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--zero-before=builtin_oct",
            "--dump-before=builtin_bin",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "bench.bench_pieces",
            "--calls",
            str(args.calls),
            "--child",
            *names,
        ]
        subprocess.run(command, check=True, capture_output=True)
        dumps = sorted(Path(tmp).glob("pieces.out.*"), key=lambda p: int(p.suffix[1:]))
        totals = []
        for dump in dumps[-len(names) :]:
            found = _TOTALS.search(dump.read_bytes())
            totals.append(int(found.group(1)) if found else 0)
    if len(dumps) < len(names):
        print(f"expected {len(names)} dumps, got {len(dumps)}", file=sys.stderr)
        return 1
    empty = totals[0] / args.calls
    print(f"# {args.calls} calls per piece; loop cost {empty / 1000:.2f}k per call, subtracted")
    for name, total in zip(names[1:], totals[1:], strict=True):
        print(f"{name:10} {(total / args.calls - empty) / 1000:8.1f}k instructions per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
