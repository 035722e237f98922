"""Benchmark: what access control costs, with 100,000 rules against none (callgrind).

    python -m bench.bench_access [--requests 300] [--rules 100000] [--only ROW...]

Two gateways serve the same collection (``bench_gateway``'s: the sample's
``iana.cdxj`` and WARCs) under ``valgrind --tool=callgrind``, one without
access control, one with ``acl_paths`` naming a file of ``--rules`` rules
(prefix and exact rules over many hosts, and some under ``org,iana)/`` that
match none of the captures asked for, so every lookup searches them and the
answers stay ``allow``). Each row of ``bench_gateway.rows()`` is measured on
both as ``bench_instructions`` measures it (warm-up, zero, N requests, dump;
instrumentation is off until the server answers)
and printed as thousands of instructions per request, and the ratio; the
target of issue 22 is at most 1.05 on the index and resource rows.

Then the time to read and sort the rules (``read_rule_files``) for 10,000 to
``--rules`` rules, in seconds and microseconds per rule: loading is
O(n log n) once, at start-up and on a change (in a thread).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.bench_gateway import gateway_yaml, rows
from bench.bench_instructions import _instructions_per_request
from bench.harness import (
    Server,
    http_get,
    machine,
    markdown_table,
    print_machine,
    start_gateway,
)
from bench.workloads import Row, check_answers
from gateway.access.rules import read_rule_files


def write_rules(path: Path, count: int, seed: int = 22) -> Path:
    """``count`` rules that decide nothing the rows ask for, sorted in reverse."""
    chooser = random.Random(seed)
    accesses = ("allow", "block", "exclude")
    lines: set[str] = set()
    while len(lines) < count:
        i = chooser.randrange(10**9)
        kind = chooser.randrange(10)
        if kind == 0:  # under the sample's host: searched, never matching
            key = f"org,iana)/zz{i}"
        elif kind < 4:
            key = f"com,example{i % 50000})/path/{i}###"
        else:
            key = f"{('com', 'org', 'net', 'uk,co')[i % 4]},site{i})/"
        lines.add(f'{key} - {{"access": "{chooser.choice(accesses)}"}}')
    path.write_text("".join(line + "\n" for line in sorted(lines, reverse=True)))
    return path


def load_times(work: Path, largest: int) -> list[list[str]]:
    """Seconds to read and sort ``n`` rules, for n from 10,000 to ``largest``."""
    table = []
    sizes = sorted({n for n in (10_000, 100_000, 1_000_000) if n < largest} | {largest})
    for n in sizes:
        path = write_rules(work / f"load-{n}.aclj", n)
        start = time.perf_counter()
        rules = read_rule_files([str(path)])
        seconds = time.perf_counter() - start
        assert len(rules) == n
        table.append([f"{n:,}", f"{seconds:.2f}", f"{seconds / n * 1e6:.1f}"])
    return table


def measure(
    yaml: str, name: str, workload: Sequence[Row], work: Path, requests: int, connections: int
) -> dict[str, float]:
    """k instructions per request of each row, for a gateway serving ``yaml``.

    Started with instrumentation off (``--instr-atstart=no``: reading 100,000
    rules under callgrind takes minutes otherwise), turned on once it
    answers; each row is then warmed up, zeroed and counted as
    ``bench_instructions`` does."""
    prefix = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={work}/{name}.%p.out",
    ]
    server = start_gateway(yaml, work, name, prefix=prefix, startup_timeout_s=900.0)
    try:
        subprocess.run(
            ["callgrind_control", "-i", "on", str(server.proc.pid)], check=True, capture_output=True
        )
        found = {}
        for row in workload:
            check_answers([server], row)
            check_gated(server, row, gated=name == "acl")
            found[row.name] = _instructions_per_request(server, row, work, requests, connections)
            print(f"# {name}: {row.name}: {found[row.name]:,.1f}k instructions/request", flush=True)
        return found
    finally:
        server.stop()


def check_gated(server: Server, row: Row, *, gated: bool) -> None:
    """Raise RuntimeError unless the index lines of ``row`` carry ``access`` exactly
    when the gateway has rules: a config that puts ``acl_paths`` under another
    collection than the one asked would measure nothing."""
    for path in row.paths:
        if "/index?" not in path:
            continue
        answer = http_get(server.port, path)
        assert answer is not None  # check_answers saw it answer
        if (b'"access": ' in answer[1]) != gated:
            raise RuntimeError(f"{server.name} {path}: access field expected {gated}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=300, help="measured requests per row")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rules", type=int, default=100_000)
    parser.add_argument("--only", nargs="*", help="run only rows whose name starts with these")
    args = parser.parse_args(argv)
    print_machine(machine())
    workload = [r for r in rows() if not args.only or r.name.startswith(tuple(args.only))]
    with tempfile.TemporaryDirectory(prefix="bench-access-") as tmp:
        work = Path(tmp)
        acl = write_rules(work / "rules.aclj", args.rules)
        configs = {
            "none": gateway_yaml(),
            f"{args.rules:,} rules": gateway_yaml(f"    acl_paths: {acl}\n"),
        }
        found: dict[str, dict[str, float]] = {}
        for label, yaml in configs.items():
            name = "plain" if label == "none" else "acl"
            found[label] = measure(yaml, name, workload, work, args.requests, args.connections)
        none, ruled = list(configs)
        table = [
            [
                row.name,
                f"{found[none][row.name]:,.1f}",
                f"{found[ruled][row.name]:,.1f}",
                f"{found[ruled][row.name] / found[none][row.name]:.3f}",
            ]
            for row in workload
        ]
        print("\nk instructions per request (callgrind)\n")
        print(markdown_table(["row", "no rules", ruled, "ratio"], table))
        print("\nloading rules (read, parse, sort)\n")
        print(markdown_table(["rules", "seconds", "µs per rule"], load_times(work, args.rules)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
