"""Workloads and result tables shared by the side-by-side benchmarks.

A :class:`Row` is a named list of request paths wrk rotates over; a
:class:`Runner` measures one row on one server with the command-line
settings (after waiting for other load on the machine to stop);
:func:`pair_row` formats a gateway, a pywb and a floor result side by side
with their ratios (gateway/pywb and gateway/floor req/s, pywb/gateway p99);
the floor is a bare aiohttp server replaying the gateway's answers
(:mod:`bench.floor`, :func:`floor_answers`).
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import tempfile
import urllib.parse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.harness import (
    SAMPLE_DIR,
    Server,
    WrkResult,
    fetch_answer,
    http_get,
    run_wrk,
    wait_quiet,
)

IANA_CDXJ: Final = SAMPLE_DIR / "cdxj" / "iana.cdxj"
WARCS: Final = SAMPLE_DIR / "warcs"
#: Lines per gzip block of the benchmark's ZipNum cluster (pywb's and the IA's default).
ZIPNUM_BLOCK_LINES: Final = 3000


def iana_cluster(lines_per_block: int = ZIPNUM_BLOCK_LINES) -> Path:
    """``iana.cdxj`` as a ZipNum cluster in pywb's layout; returns its summary's path.

    The cluster (``iana.idx``, ``iana.loc``, shard ``iana-01.cdx.gz``) is
    written once under the system's temporary directory and rewritten when
    missing: one gzip member per ``lines_per_block`` CDXJ lines, summary
    lines ``urlkey timestamp<TAB>part<TAB>offset<TAB>length<TAB>lineno``
    (pywb ``zipnum.py``, the IA's cluster format), a location file naming
    the shard relative to it. With the default 3,000 lines per block the
    sample's 171 lines are one block: a lookup reads and inflates 43 KB.
    """
    folder = Path(tempfile.gettempdir()) / f"bench-zipnum-iana-{lines_per_block}"
    summary = folder / "iana.idx"
    if summary.exists():
        return summary
    building = Path(tempfile.mkdtemp(prefix="bench-zipnum-", dir=tempfile.gettempdir()))
    lines = IANA_CDXJ.read_bytes().splitlines(keepends=True)
    index, offset = [], 0
    with (building / "iana-01.cdx.gz").open("wb") as shard:
        for number, first in enumerate(range(0, len(lines), lines_per_block), start=1):
            block = lines[first : first + lines_per_block]
            member = gzip.compress(b"".join(block), compresslevel=6, mtime=0)
            shard.write(member)
            key = b" ".join(block[0].split(b" ", 2)[:2]).decode("utf-8")
            index.append(f"{key}\tiana-01\t{offset}\t{len(member)}\t{number}\n")
            offset += len(member)
    (building / "iana.idx").write_text("".join(index), "utf-8")
    (building / "iana.loc").write_text("iana-01\tiana-01.cdx.gz\n", "utf-8")
    try:
        os.rename(building, folder)
    except OSError:  # built by another run meanwhile
        for path in building.iterdir():
            path.unlink()
        building.rmdir()
    return summary


@dataclass(frozen=True, slots=True)
class Row:
    """One measured workload: a name, the paths wrk rotates over, and options."""

    name: str
    paths: tuple[str, ...]
    #: Send ``Connection: close`` with every request (one TCP connection each).
    close: bool = False


def quote(value: str) -> str:
    """Percent-encode a URL for a query string value, keeping ``:`` and ``/``."""
    return urllib.parse.quote(value, safe=":/")


def mix_paths(coll: str, index: Path = IANA_CDXJ, size: int = 50) -> tuple[str, ...]:
    """``size`` lookups ``/{coll}/index?url=URL&closest=TIMESTAMP`` of captures spread
    evenly over ``index`` (every len/size-th line, in file order)."""
    lines = index.read_text("utf-8").splitlines()
    paths = []
    for i in range(size):
        _urlkey, timestamp, fields = lines[i * len(lines) // size].split(" ", 2)
        url = json.loads(fields)["url"]
        paths.append(f"/{coll}/index?url={quote(url)}&closest={timestamp}")
    return tuple(paths)


def check_answers(servers: Sequence[Server], row: Row) -> None:
    """Every path of ``row`` answers 200 with a non-empty body on every server.

    Raises RuntimeError naming the server and path otherwise; prints a note
    when the servers' bodies for a path differ in line count (information).
    """
    for path in row.paths:
        counts = []
        for server in servers:
            answer = http_get(server.port, path)
            if answer is None or answer[0] != 200 or not answer[1]:
                got = "nothing" if answer is None else f"{answer[0]} {answer[1][:300]!r}"
                raise RuntimeError(f"{server.name} {path}: expected 200 with a body, got {got}")
            counts.append(answer[1].count(b"\n"))
        if len(set(counts)) > 1 and "/index?" in path:
            names = ", ".join(f"{s.name} {n}" for s, n in zip(servers, counts, strict=True))
            print(f"# note: {path}: line counts differ: {names}")


@dataclass(frozen=True, slots=True)
class Runs:
    """Repeated wrk runs of one row on one server; each figure is the median over runs."""

    runs: tuple[WrkResult, ...]

    @property
    def requests_per_s(self) -> float:
        return statistics.median(r.requests_per_s for r in self.runs)

    @property
    def p50_ms(self) -> float:
        return statistics.median(r.p50_ms for r in self.runs)

    @property
    def p99_ms(self) -> float:
        return statistics.median(r.p99_ms for r in self.runs)

    @property
    def server_cpu(self) -> float:
        return statistics.median(r.server_cpu for r in self.runs)

    @property
    def other_cpu(self) -> float:
        return statistics.median(r.other_cpu for r in self.runs)

    def rps_cell(self) -> str:
        """``median`` req/s, `` (min-max)`` when repeated, then any errors (summed)."""
        cell = f"{self.requests_per_s:,.0f}"
        if len(self.runs) > 1:
            rates = [r.requests_per_s for r in self.runs]
            cell += f" ({min(rates):,.0f}-{max(rates):,.0f})"
        errors: Counter[str] = Counter()
        for r in self.runs:
            errors.update(r.errors)
        if errors:
            cell += " (" + ", ".join(f"{n} {kind} errors" for kind, n in errors.items()) + ")"
        return cell


@dataclass(frozen=True, slots=True)
class Runner:
    """Runs wrk with the command-line settings, after waiting for a quiet machine."""

    duration_s: float
    threads: int
    quiet_wait_s: float
    workdir: Path
    repeat: int = 1

    def run(self, server: Server, row: Row, conns: int) -> WrkResult:
        """One wrk run of ``row`` on ``server`` with ``conns`` connections."""
        wait_quiet(self.quiet_wait_s)
        return run_wrk(
            server,
            row.paths,
            connections=conns,
            duration_s=self.duration_s,
            workdir=self.workdir,
            threads=min(self.threads, conns),
            close=row.close,
        )

    def runs(self, servers: Sequence[Server], row: Row, conns: int) -> list[Runs]:
        """``repeat`` runs on each of ``servers``, interleaved (a, b, a, b, ...)."""
        found: list[list[WrkResult]] = [[] for _ in servers]
        for _ in range(self.repeat):
            for i, server in enumerate(servers):
                found[i].append(self.run(server, row, conns))
        return [Runs(tuple(results)) for results in found]


HEADER: Final = (
    "workload",
    "conns",
    "gateway req/s",
    "pywb req/s",
    "floor req/s",
    "req/s gw/pywb",
    "req/s gw/floor",
    "gw p50 ms",
    "pywb p50 ms",
    "floor p50 ms",
    "gw p99 ms",
    "pywb p99 ms",
    "floor p99 ms",
    "p99 pywb/gw",
    "server CPU gw / pywb / floor",
    "other load gw / pywb / floor",
)


def pair_row(
    label: str, conns: int, gw: Runs | None, pw: Runs, floor: Runs | None = None
) -> list[str]:
    """Cells of one :data:`HEADER` row (medians over runs); ``gw`` None for a pywb-only
    row, ``floor`` None when the bare aiohttp floor (:mod:`bench.floor`) was not run.

    CPU columns are CPU seconds per wall second (1.0 = one core): the server
    under load, and every process other than that server and wrk.
    """

    def cell(runs: Runs | None, text: str) -> str:
        return "-" if runs is None else text

    def ms(runs: Runs | None, value: str) -> str:
        return "-" if runs is None else f"{getattr(runs, value):.2f}"

    def cpu(field: str) -> str:
        return " / ".join(
            "-" if runs is None else f"{getattr(runs, field):.2f}" for runs in (gw, pw, floor)
        )

    return [
        label,
        str(conns),
        cell(gw, gw.rps_cell() if gw else ""),
        pw.rps_cell(),
        cell(floor, floor.rps_cell() if floor else ""),
        cell(gw, f"**{gw.requests_per_s / pw.requests_per_s:.2f}x**" if gw else ""),
        "-" if gw is None or floor is None else f"{gw.requests_per_s / floor.requests_per_s:.2f}x",
        ms(gw, "p50_ms"),
        ms(pw, "p50_ms"),
        ms(floor, "p50_ms"),
        ms(gw, "p99_ms"),
        ms(pw, "p99_ms"),
        ms(floor, "p99_ms"),
        cell(gw, f"**{pw.p99_ms / gw.p99_ms:.2f}x**" if gw else ""),
        cpu("server_cpu"),
        cpu("other_cpu"),
    ]


def floor_answers(server: Server, rows: Sequence[Row]) -> dict[str, dict[str, object]]:
    """What ``server`` (the gateway) answers for every path of ``rows``, for :mod:`bench.floor`."""
    return {path: fetch_answer(server.port, path) for row in rows for path in row.paths}


def emit(table: list[list[str]], cells: list[str]) -> None:
    """Append a row to ``table`` and print it at once (progress while running)."""
    table.append(cells)
    print(" | ".join(cells), flush=True)
