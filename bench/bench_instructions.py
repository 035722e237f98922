"""Benchmark: CPU instructions per request, the gateway vs pywb 2.10, under callgrind.

    python -m bench.bench_instructions [--requests 1000] [--connections 16] [--only ROW...]
                                       [--servers gateway pywb floor] [--access-log]
                                       [--keep DIR]

The wall-clock benchmarks (``bench_gateway.py``) vary by 20-35% from run to
run on a shared VM. This one counts what does not vary: each server runs
under ``valgrind --tool=callgrind`` (one process each, as in
``bench_gateway.py``: the gateway as ``python -m gateway.cli serve``, pywb's
``WarcServer`` under gevent with TCP_NODELAY), the same rows are sent to
both (``bench_gateway.rows()``, paths taken in turn), and for each row the
counters are zeroed after a warm-up (``callgrind_control -z``) and dumped
after ``--requests`` requests over ``--connections`` keep-alive connections
(``callgrind_control -d``). The third server is the floor
(:mod:`bench.floor`: a bare aiohttp handler on the gateway's interpreter and
loop replaying the gateway's answers). Rows: ``bench_gateway``'s, plus the
50-lookup mix against a group of three local files and against a group of
a local file and a remote CDX server (``bench_groups``). Printed: thousands
of instructions per request for each server, pywb / gateway and gateway /
floor. ``--keep DIR`` copies each row's callgrind dump to
``DIR/{server}.{row}.out`` for ``callgrind_annotate`` (its C functions:
the interpreter, aiohttp's and multidict's extensions, uvloop, ISA-L).

What the counts leave out: time in the kernel (socket reads and writes,
``pread``), cache misses and SIMD width (one AVX instruction of ISA-L's
inflate counts as one), so the ratio is a floor of neither server's speed;
it is the measure to compare two versions of the code with. A run takes
about 2 minutes per row and server. Needs valgrind (``apt-get install
valgrind``) and the pywb peer (``bash scripts/install-peers``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from bench.bench_gateway import gateway_yaml, pywb_config, rows
from bench.bench_groups import collections as group_collections
from bench.bench_groups import gateway_yaml as group_yaml
from bench.bench_groups import start_remote
from bench.harness import (
    HOST,
    Server,
    machine,
    markdown_table,
    print_machine,
    start_floor,
    start_gateway,
    start_pywb,
)
from bench.workloads import IANA_CDXJ, Row, check_answers, floor_answers, mix_paths

#: Starting Python and importing everything under callgrind takes a while.
_STARTUP_S = 300.0
#: The servers measured, in order: the gateway, pywb 2.10, the bare aiohttp floor.
SERVERS: Final = ("gateway", "pywb", "floor")
_REMOTE_DELAY_MS: Final = 5.0
_WARMUP_REQUESTS = 200
_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d+)")
_CHUNKED = re.compile(rb"(?im)^transfer-encoding:[ \t]*chunked")


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 response (Content-Length or chunked body); return its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = _CONTENT_LENGTH.search(head)
    if length is not None:
        await reader.readexactly(int(length.group(1)))
    elif _CHUNKED.search(head):
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _load(port: int, paths: Sequence[str], requests: int, connections: int) -> None:
    """Send ``requests`` GETs over ``connections`` keep-alive connections, paths in turn.

    Raises RuntimeError when an answer is not 200.
    """
    sent = 0

    async def connection() -> None:
        nonlocal sent
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while sent < requests:
                path = paths[sent % len(paths)]
                sent += 1
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
                status = await _read_response(reader)
                if status != 200:
                    raise RuntimeError(f"GET {path}: status {status}")
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))


def _instructions_per_request(
    server: Server,
    row: Row,
    out_dir: Path,
    requests: int,
    connections: int,
    keep: Path | None = None,
    warmup: Sequence[str] | None = None,
) -> float:
    """Thousands of instructions ``server`` executes per request of ``row``.

    With ``keep``, the row's dump is copied there as ``{server}.{row}.out``.
    The warm-up asks ``warmup`` when given (other paths than the row's, so
    that every measured request is a first one), else the row's paths.
    """
    pid = str(server.proc.pid)
    asyncio.run(_load(server.port, warmup or row.paths, _WARMUP_REQUESTS, connections))
    subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
    asyncio.run(_load(server.port, row.paths, requests, connections))
    before = set(out_dir.glob(f"{server.name}.{pid}.out.*"))
    subprocess.run(["callgrind_control", "-d", row.name, pid], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = set(out_dir.glob(f"{server.name}.{pid}.out.*")) - before
        totals = [_TOTALS.search(path.read_bytes()) for path in new]
        if totals and all(totals):
            if keep is not None:
                for index, path in enumerate(sorted(new)):
                    suffix = f".{index}" if index else ""
                    slug = re.sub(r"[^A-Za-z0-9]+", "-", row.name).strip("-")
                    shutil.copyfile(path, keep / f"{server.name}.{slug}.out{suffix}")
            return sum(int(m.group(1)) for m in totals if m) / requests / 1000
        time.sleep(0.2)
    raise RuntimeError(f"callgrind wrote no dump for {server.name} {row.name}")


def _measure(
    start: Callable[[Sequence[str]], Server],
    name: str,
    workload: Sequence[Row],
    out_dir: Path,
    requests: int,
    connections: int,
    keep: Path | None,
) -> dict[str, float]:
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/{name}.%p.out"]
    server = start(prefix)
    try:
        found = {}
        for row in workload:
            check_answers([server], row)
            found[row.name] = _instructions_per_request(
                server, row, out_dir, requests, connections, keep
            )
            print(f"# {name}: {row.name}: {found[row.name]:,.1f}k instructions/request", flush=True)
        return found
    finally:
        server.stop()


def _rows_and_configs(work: Path) -> tuple[list[Row], str, dict[str, object], Server]:
    """Every row, the gateway's YAML and pywb's config for them, and the remote stand-in.

    Adds to ``bench_gateway``'s collection the groups of ``bench_groups``:
    ``group3`` (three local copies of ``iana.cdxj``) and ``mixed`` (one of
    them and the remote CDX stand-in, which answers after ``_REMOTE_DELAY_MS``:
    waiting costs no instructions).
    """
    files = []
    for name in ("a", "b", "c"):
        (work / name).mkdir()
        files.append(work / name / "iana.cdxj")
        shutil.copyfile(IANA_CDXJ, files[-1])
    remote = start_remote(work, _REMOTE_DELAY_MS)
    groups = {
        name: spec
        for name, spec in group_collections(files, f"cdx+{remote.base}/cdx").items()
        if name in ("group3", "mixed")
    }
    workload = [
        *rows(),
        Row("group of 3 local, mix 50", mix_paths("group3")),
        Row("local + remote group, mix 50", mix_paths("mixed")),
    ]
    yaml = gateway_yaml() + group_yaml(groups).removeprefix("collections:\n")
    pywb = pywb_config()
    pywb_colls = pywb["collections"]
    assert isinstance(pywb_colls, dict)
    pywb = {"collections": {**pywb_colls, **groups}}
    return workload, yaml, pywb, remote


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per row")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--only", nargs="*", help="run only rows whose name starts with these")
    parser.add_argument(
        "--access-log", action="store_true", help="the gateway with its access log on"
    )
    parser.add_argument(
        "--servers",
        nargs="+",
        choices=SERVERS,
        default=list(SERVERS),
        help="measure only these servers (the others' columns print '-')",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="copy each row's callgrind dump to DIR (for callgrind_annotate)",
    )
    args = parser.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed: apt-get install valgrind", file=sys.stderr)
            return 2
    print_machine(machine())
    print(f"# callgrind, {args.requests} requests per row over {args.connections} connections")
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        out_dir = Path(tmp)
        every, yaml, pywb_conf, remote = _rows_and_configs(out_dir)
        try:
            workload = [r for r in every if not args.only or r.name.startswith(tuple(args.only))]
            # The floor replays the gateway's answers: fetch them from a gateway
            # running without callgrind.
            plain = start_gateway(yaml, out_dir, name="gateway-answers")
            try:
                answers = floor_answers(plain, workload)
            finally:
                plain.stop()

            def gateway(prefix: Sequence[str]) -> Server:
                return start_gateway(
                    yaml,
                    out_dir,
                    prefix=prefix,
                    startup_timeout_s=_STARTUP_S,
                    access_log=args.access_log,
                )

            def pywb(prefix: Sequence[str]) -> Server:
                return start_pywb(pywb_conf, out_dir, prefix=prefix, startup_timeout_s=_STARTUP_S)

            def floor(prefix: Sequence[str]) -> Server:
                return start_floor(answers, out_dir, prefix=prefix, startup_timeout_s=_STARTUP_S)

            starters = {"gateway": gateway, "pywb": pywb, "floor": floor}
            found = {
                name: _measure(
                    starters[name],
                    name,
                    workload,
                    out_dir,
                    args.requests,
                    args.connections,
                    args.keep,
                )
                for name in SERVERS
                if name in args.servers
            }
        finally:
            remote.stop()

    def count(server: str, row: Row) -> str:
        value = found.get(server, {}).get(row.name)
        return "-" if value is None else f"{value:,.1f}"

    def ratio(top: str, bottom: str, row: Row, bold: bool) -> str:
        a, b = found.get(top, {}).get(row.name), found.get(bottom, {}).get(row.name)
        if a is None or b is None:
            return "-"
        return f"**{a / b:.2f}x**" if bold else f"{a / b:.2f}x"

    table = [
        [
            row.name,
            count("gateway", row),
            count("pywb", row),
            count("floor", row),
            ratio("pywb", "gateway", row, True),
            ratio("gateway", "floor", row, False),
        ]
        for row in workload
    ]
    header = [
        "workload",
        "gateway k instr/req",
        "pywb k instr/req",
        "floor k instr/req",
        "pywb / gateway",
        "gateway / floor",
    ]
    print()
    print(markdown_table(header, table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
