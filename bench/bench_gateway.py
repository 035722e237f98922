"""Benchmark: the gateway vs pywb 2.10's warcserver, side by side (issue 2 §7).

    python -m bench.bench_gateway [--duration 10] [--connections 16 64] [--repeat 3]
                                  [--only ROW...] [--no-extra] [--profile DIR]

Both servers serve the same data (``../shared/data/pywb-sample``: index
``cdxj/iana.cdxj``, WARCs in ``warcs/``) on 127.0.0.1, one process each: the
gateway as ``python -m gateway.cli serve`` (uvloop when installed), pywb's
``WarcServer`` under gevent's ``WSGIServer`` **with TCP_NODELAY set on each
accepted socket** (stock pywb stalls ~44 ms per keep-alive response; see
``bench/harness.py``). ``wrk -t2 -cN -dS --latency`` loads one server at a time,
gateway then pywb for each row, at each connection count:

- ``index 1 URL``: ``/iana/index?url=http://www.iana.org/`` (one CDXJ line),
- ``ZipNum 1 URL``: the same lookup in collection ``zipnum``, the same lines as a
  ZipNum cluster of 3,000-line blocks (:func:`bench.workloads.iana_cluster`),
- ``index mix 50``: 50 captures spread evenly over ``iana.cdxj`` (31 distinct
  URLs), each as ``/iana/index?url=URL&closest=TIMESTAMP`` (1 to 16 lines,
  closest first), taken in turn,
- ``resource 6 KB``: ``http://www.iana.org/`` at 20140126200624 (2,258-byte
  gzip member, 5,988-byte HTTP response block, ~6.4 KB served),
- ``resource 225 KB``: ``OpenSans-Bold.ttf`` at 20140126200625 (117,166-byte
  member, 224,888-byte HTTP response block),
- ``resource 225 KB, compress=gzip``: the same with pywb's ``compress=gzip``
  (the gateway sends the stored member; pywb inflates and deflates),

and, unless ``--no-extra``: ``index 1 URL`` with ``Connection: close`` at the
first connection count, and stock pywb (no TCP_NODELAY) on ``index 1 URL``.

A third server, the **floor** (:mod:`bench.floor`: a bare aiohttp handler
on the gateway's interpreter and loop replaying the gateway's own answers,
fetched before the runs), is loaded the same way. ``--workers N`` runs the
gateway with ``gateway serve --workers N``.

Prints the machine, then per row req/s, p50 and p99 (ms) of each server, the
ratios gateway/pywb and gateway/floor req/s and pywb/gateway p99, and each
server's CPU use (1.0 = one core). wrk shares the machine's cores with the server under load.
Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness import (
    Server,
    WrkResult,
    machine,
    markdown_table,
    print_machine,
    run_wrk,
    start_floor,
    start_gateway,
    start_pywb,
)
from bench.profiling import Profile, print_profile, profile_under_load
from bench.workloads import (
    HEADER,
    IANA_CDXJ,
    WARCS,
    Row,
    Runner,
    check_answers,
    emit,
    floor_answers,
    iana_cluster,
    mix_paths,
    pair_row,
    quote,
)

COLL = "iana"
#: The same captures served from a ZipNum cluster (:func:`~bench.workloads.iana_cluster`).
ZIPNUM_COLL = "zipnum"
BOLD_TTF = "http://www.iana.org/_css/2013.1/fonts/OpenSans-Bold.ttf"


def rows() -> list[Row]:
    """The workloads, in the order they are measured."""
    return [
        Row("index 1 URL", (f"/{COLL}/index?url=http://www.iana.org/",)),
        Row("ZipNum 1 URL", (f"/{ZIPNUM_COLL}/index?url=http://www.iana.org/",)),
        Row("index mix 50", mix_paths(COLL)),
        Row(
            "resource 6 KB", (f"/{COLL}/resource?url=http://www.iana.org/&closest=20140126200624",)
        ),
        Row("resource 225 KB", (f"/{COLL}/resource?url={quote(BOLD_TTF)}&closest=20140126200625",)),
        Row(
            "resource 225 KB, compress=gzip",
            (f"/{COLL}/resource?url={quote(BOLD_TTF)}&closest=20140126200625&compress=gzip",),
        ),
    ]


def gateway_yaml(settings: str = "") -> str:
    """The gateway's config: ``COLL`` and ``ZIPNUM_COLL``, each with ``settings``
    (lines of collection settings indented by four spaces, such as ``acl_paths``)."""
    return (
        f"collections:\n  {COLL}:\n    index: {IANA_CDXJ}\n    resource: {WARCS}/\n{settings}"
        f"  {ZIPNUM_COLL}:\n    index: {iana_cluster()}\n    resource: {WARCS}/\n{settings}"
    )


def pywb_config() -> dict[str, object]:
    return {
        "collections": {
            COLL: {"index": str(IANA_CDXJ), "archive_paths": f"{WARCS}/"},
            ZIPNUM_COLL: {"index": str(iana_cluster()), "archive_paths": f"{WARCS}/"},
        }
    }


def profile_rows(
    gateway: Server, workload: Sequence[Row], out_dir: Path, conns: int, runner: Runner
) -> list[tuple[str, WrkResult, Profile]]:
    """py-spy the gateway under each row's load; raw stacks go to ``out_dir/<row>.txt``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    found = []
    for row in workload:
        raw = out_dir / (row.name.replace(" ", "-") + ".txt")
        result, profile = profile_under_load(
            gateway,
            row.paths,
            raw,
            connections=conns,
            duration_s=runner.duration_s,
            workdir=runner.workdir,
        )
        found.append((f"gateway, {row.name}, {conns} connections", result, profile))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per row and server (interleaved); medians"
    )
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per server")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=60.0,
        help="before each run, wait up to this many seconds for other load to stop",
    )
    parser.add_argument(
        "--no-extra", action="store_true", help="skip the Connection: close and stock pywb rows"
    )
    parser.add_argument("--only", nargs="*", help="run only rows whose name starts with these")
    parser.add_argument("--workers", type=int, default=1, help="gateway serve --workers N")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after measuring, profile the gateway with py-spy on each row (raw stacks to DIR)",
    )
    args = parser.parse_args(argv)

    print_machine(machine())
    print("# pywb: WarcServer under gevent.pywsgi.WSGIServer WITH TCP_NODELAY on accepted sockets")
    print(
        f"# wrk -t{args.threads} -cN -d{args.duration:g}s --latency, one server loaded at a time;"
    )
    print("# wrk and the server under load share the machine's cores")
    workload = [r for r in rows() if not args.only or r.name.startswith(tuple(args.only))]
    first, conns0 = rows()[0], args.connections[0]
    table: list[list[str]] = []
    profiles: list[tuple[str, WrkResult, Profile]] = []
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        runner = Runner(args.duration, args.threads, args.quiet_wait, Path(tmp), args.repeat)
        gateway = start_gateway(gateway_yaml(), runner.workdir, workers=args.workers)
        pywb = start_pywb(pywb_config(), runner.workdir)
        floor = start_floor(floor_answers(gateway, rows()), runner.workdir)
        try:
            for row in workload:
                check_answers((gateway, pywb, floor), row)
            for server in (gateway, pywb, floor):
                run_wrk(
                    server,
                    first.paths,
                    connections=16,
                    duration_s=args.warmup,
                    workdir=runner.workdir,
                )
            for row in workload:
                for conns in args.connections:
                    gw, pw, fl = runner.runs((gateway, pywb, floor), row, conns)
                    emit(table, pair_row(row.name, conns, gw, pw, fl))
            if not args.no_extra:
                closed = Row(first.name + ", Connection: close", first.paths, close=True)
                gw, pw, fl = runner.runs((gateway, pywb, floor), closed, conns0)
                emit(table, pair_row(closed.name, conns0, gw, pw, fl))
            if args.profile:
                try:
                    profiles = profile_rows(gateway, workload, args.profile, conns0, runner)
                except RuntimeError as exc:  # py-spy missing or failing: keep the numbers
                    print(f"# profiling failed: {exc}")
        finally:
            gateway.stop()
            pywb.stop()
            floor.stop()
        if not args.no_extra:
            stock = start_pywb(pywb_config(), runner.workdir, nodelay=False, name="pywb-stock")
            try:
                (pw,) = runner.runs((stock,), first, conns0)
            finally:
                stock.stop()
            emit(table, pair_row(first.name + ", stock pywb (no TCP_NODELAY)", conns0, None, pw))
    print()
    print(markdown_table(HEADER, table))
    for title, result, profile in profiles:
        print_profile(title, result, profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
