"""Benchmark: CPU instructions per request, the gateway vs pywb 2.10, under callgrind.

    python -m bench.bench_instructions [--requests 1000] [--connections 16] [--only ROW...]
                                       [--gateway-only] [--access-log]

The wall-clock benchmarks (``bench_gateway.py``) vary by 20-35% from run to
run on a shared VM. This one counts what does not vary: each server runs
under ``valgrind --tool=callgrind`` (one process each, as in
``bench_gateway.py``: the gateway as ``python -m gateway.cli serve``, pywb's
``WarcServer`` under gevent with TCP_NODELAY), the same rows are sent to
both (``bench_gateway.rows()``, paths taken in turn), and for each row the
counters are zeroed after a warm-up (``callgrind_control -z``) and dumped
after ``--requests`` requests over ``--connections`` keep-alive connections
(``callgrind_control -d``). Printed: thousands of instructions per request
for each server and the ratio pywb / gateway.

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

from bench.bench_gateway import gateway_yaml, pywb_config, rows
from bench.harness import HOST, Server, markdown_table, start_gateway, start_pywb
from bench.workloads import Row, check_answers

#: Starting Python and importing everything under callgrind takes a while.
_STARTUP_TIMEOUT_S = 300.0
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
    server: Server, row: Row, out_dir: Path, requests: int, connections: int
) -> float:
    """Thousands of instructions ``server`` executes per request of ``row``."""
    pid = str(server.proc.pid)
    asyncio.run(_load(server.port, row.paths, _WARMUP_REQUESTS, connections))
    subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
    asyncio.run(_load(server.port, row.paths, requests, connections))
    before = set(out_dir.glob(f"{server.name}.{pid}.out.*"))
    subprocess.run(["callgrind_control", "-d", row.name, pid], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = set(out_dir.glob(f"{server.name}.{pid}.out.*")) - before
        totals = [_TOTALS.search(path.read_bytes()) for path in new]
        if totals and all(totals):
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
) -> dict[str, float]:
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/{name}.%p.out"]
    server = start(prefix)
    try:
        found = {}
        for row in workload:
            check_answers([server], row)
            found[row.name] = _instructions_per_request(server, row, out_dir, requests, connections)
            print(f"# {name}: {row.name}: {found[row.name]:,.1f}k instructions/request", flush=True)
        return found
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per row")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--only", nargs="*", help="run only rows whose name starts with these")
    parser.add_argument(
        "--gateway-only", action="store_true", help="measure the gateway alone (no pywb)"
    )
    parser.add_argument(
        "--access-log", action="store_true", help="the gateway with its access log on"
    )
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed: apt-get install valgrind", file=sys.stderr)
            return 2
    workload = [r for r in rows() if not args.only or r.name.startswith(tuple(args.only))]
    print(f"# callgrind, {args.requests} requests per row over {args.connections} connections")
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        out_dir = Path(tmp)

        def gateway(prefix: Sequence[str]) -> Server:
            return start_gateway(
                gateway_yaml(),
                out_dir,
                prefix=prefix,
                startup_timeout_s=_STARTUP_TIMEOUT_S,
                access_log=args.access_log,
            )

        def pywb(prefix: Sequence[str]) -> Server:
            return start_pywb(
                pywb_config(), out_dir, prefix=prefix, startup_timeout_s=_STARTUP_TIMEOUT_S
            )

        ours = _measure(gateway, "gateway", workload, out_dir, args.requests, args.connections)
        if args.gateway_only:
            return 0
        theirs = _measure(pywb, "pywb", workload, out_dir, args.requests, args.connections)
    table = [
        [
            row.name,
            f"{ours[row.name]:,.1f}",
            f"{theirs[row.name]:,.1f}",
            f"**{theirs[row.name] / ours[row.name]:.2f}x**",
        ]
        for row in workload
    ]
    header = ["workload", "gateway k instr/req", "pywb k instr/req", "pywb / gateway"]
    print()
    print(markdown_table(header, table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
