"""Benchmark: index_group aggregation, gateway vs pywb 2.10 (issue 3 §7).

    python -m bench.bench_groups [--duration 10] [--connections 16 64] [--repeat 3]
        [--latency-connections 1 16] [--only group3 local mixed remote]
        [--limit-per-host N] [--delay-ms 50] [--profile DIR]

Both servers (one process each, on 127.0.0.1; pywb with TCP_NODELAY, see
``bench/harness.py``) get the same collections:

- ``group3``: an ``index_group`` of three local CDXJ files (three copies of
  ``iana.cdxj``: every member answers every lookup, the merge triples),
  ``timeout: 5``;
- ``local``: one of those files alone;
- ``mixed``: an ``index_group`` of a local file and a remote CDX server,
  ``timeout: 5``;
- ``remote``: that remote CDX server alone, ``cdx+http://127.0.0.1:P/cdx``.

The remote CDX server is an aiohttp app in its own process on 127.0.0.1
(``--serve-remote-cdx``) that sleeps ``--delay-ms`` (50) and then answers the
CDXJ lines of ``iana.cdxj`` under the SURT of ``url``, closest first when
asked (``closest`` + ``sort=closest``), cut at ``limit``.

Every row is the 50-lookup mix of ``bench_gateway`` (``url=URL&closest=TS``)
against that collection; ``wrk -t2 -cN -dS --latency`` loads one server at a
time. Prints req/s, p50 and p99 side by side with the ratios, then each
group's **added latency** at p50: the group's p50 minus the p50 of its slowest
member served alone (``local`` for ``group3``, ``remote`` for ``mixed``).
Targets: at least 3x pywb's req/s; at most 5 ms added at p50. wrk, the
remote server and the server under load share the machine's cores. Speed is
measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import surt
from aiohttp import web

from bench.harness import (
    Server,
    WrkResult,
    free_port,
    http_get,
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
    Row,
    Runner,
    Runs,
    check_answers,
    emit,
    floor_answers,
    mix_paths,
    pair_row,
)

TIMEOUT_S = 5


# -- the remote CDX server --------------------------------------------------------


def _closest_distance(timestamp: str, closest: str) -> int:
    """|timestamp - closest| on 14-digit strings read as numbers (ordering only)."""
    return abs(int(timestamp.ljust(14, "0")[:14]) - int(closest.ljust(14, "0")[:14]))


def remote_cdx_app(index: Path, delay_s: float) -> web.Application:
    """``GET /cdx?url=...``: after ``delay_s``, the CDXJ lines of ``index`` for the SURT
    of ``url`` (exact match), ordered by distance to ``closest`` when ``sort=closest``,
    at most ``limit``; 200 with an empty body when there are none."""
    by_key: dict[str, list[str]] = {}
    for line in index.read_text("utf-8").splitlines():
        by_key.setdefault(line.split(" ", 1)[0], []).append(line)

    async def cdx(request: web.Request) -> web.Response:
        await asyncio.sleep(delay_s)
        url = request.query.get("url", "")
        lines = list(by_key.get(surt.surt(url), ()))
        closest = request.query.get("closest", "")
        if closest.isdigit() and request.query.get("sort") == "closest":
            lines.sort(key=lambda ln: _closest_distance(ln.split(" ", 2)[1], closest))
        limit = request.query.get("limit", "")
        if limit.isdigit():
            lines = lines[: int(limit)]
        body = "".join(ln + "\n" for ln in lines)
        return web.Response(text=body, content_type="text/x-cdxj")

    app = web.Application()
    app.router.add_get("/cdx", cdx)
    return app


def serve_remote_cdx(port: int, delay_ms: float) -> int:
    """Serve :func:`remote_cdx_app` over ``iana.cdxj`` on 127.0.0.1:port until killed."""
    try:
        import uvloop
    except ImportError:
        loop = asyncio.new_event_loop()
    else:
        loop = uvloop.new_event_loop()
    app = remote_cdx_app(IANA_CDXJ, delay_ms / 1000)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)
    return 0


def start_remote(workdir: Path, delay_ms: float) -> Server:
    """The remote CDX server in its own process; ready when it answers a lookup."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.bench_groups", "--serve-remote-cdx", str(port)]
    argv += ["--delay-ms", f"{delay_ms:g}"]
    server = Server("remote-cdx", argv, workdir, port)
    server.wait_ready(
        lambda p: (http_get(p, "/cdx?url=http://www.iana.org/") or (0, b""))[0] == 200
    )
    return server


# -- collections ------------------------------------------------------------------


def collections(files: Sequence[Path], remote: str) -> dict[str, dict[str, object]]:
    """The shared collections as plain data (both configs are written from it)."""
    a, b, c = (str(f) for f in files)
    return {
        "group3": {"index_group": {"a": a, "b": b, "c": c}, "timeout": TIMEOUT_S},
        "local": {"index": a},
        "mixed": {"index_group": {"local": a, "remote": remote}, "timeout": TIMEOUT_S},
        "remote": {"index": remote},
    }


def gateway_yaml(colls: dict[str, dict[str, object]], limit_per_host: int | None = None) -> str:
    """The gateway's YAML for ``colls`` (values quoted as JSON strings, which YAML reads),
    with ``client.limit_per_host`` when given (else the gateway's default)."""
    out = [] if limit_per_host is None else ["client:", f"  limit_per_host: {limit_per_host}"]
    out.append("collections:")
    for name, spec in colls.items():
        out.append(f"  {name}:")
        for key, value in spec.items():
            if isinstance(value, dict):
                out.append(f"    {key}:")
                out += [f"      {k}: {json.dumps(v)}" for k, v in value.items()]
            else:
                out.append(f"    {key}: {json.dumps(value)}")
    return "\n".join(out) + "\n"


# -- measuring --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Added:
    """A group's p50 and its slowest member's p50 alone, at one connection count (ms)."""

    group: str
    member: str
    conns: int
    gw_member: Runs
    gw_group: Runs
    pw_member: Runs
    pw_group: Runs


def added_rows(added: Sequence[Added], target_ms: float) -> list[list[str]]:
    rows = []
    for a in added:
        gw = a.gw_group.p50_ms - a.gw_member.p50_ms
        pw = a.pw_group.p50_ms - a.pw_member.p50_ms
        verdict = "met" if gw <= target_ms else f"**missed by {gw - target_ms:.2f} ms**"
        rows.append(
            [
                f"{a.group} over {a.member}",
                str(a.conns),
                f"{a.gw_member.p50_ms:.2f}",
                f"{a.gw_group.p50_ms:.2f}",
                f"**{gw:+.2f}**",
                f"{a.pw_member.p50_ms:.2f}",
                f"{a.pw_group.p50_ms:.2f}",
                f"{pw:+.2f}",
                verdict,
            ]
        )
    return rows


ADDED_HEADER = (
    "group over slowest member",
    "conns",
    "gw member p50 ms",
    "gw group p50 ms",
    "gw added ms",
    "pywb member p50 ms",
    "pywb group p50 ms",
    "pywb added ms",
    "target <= 5 ms (gw)",
)


def profile_groups(
    gateway: Server,
    rows: dict[str, Row],
    plan: Sequence[tuple[str, str, list[int]]],
    out_dir: Path,
    conns: int,
    work: Path,
    duration_s: float = 10.0,
) -> list[tuple[str, WrkResult, Profile]]:
    """py-spy the gateway under each measured group's load (raw stacks to ``out_dir``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    found = []
    for coll in [c for c in ("group3", "mixed") if any(p[0] == c for p in plan)]:
        raw = out_dir / f"{coll}.txt"
        result, profile = profile_under_load(
            gateway, rows[coll].paths, raw, connections=conns, duration_s=duration_s, workdir=work
        )
        found.append((f"gateway, {coll}, {conns} connections", result, profile))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    parser.add_argument(
        "--latency-connections",
        type=int,
        nargs="+",
        default=[1, 16],
        help="connection counts at which added latency is measured",
    )
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per row and server (interleaved); medians"
    )
    parser.add_argument("--delay-ms", type=float, default=50.0, help="remote CDX server delay")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per server")
    parser.add_argument("--quiet-wait", type=float, default=60.0)
    parser.add_argument(
        "--limit-per-host",
        type=int,
        help="the gateway's client.limit_per_host (default: the gateway's own, 64)",
    )
    parser.add_argument(
        "--only",
        nargs="*",
        choices=("group3", "local", "mixed", "remote"),
        help="measure only these collections",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after measuring, profile the gateway with py-spy on both groups (raw stacks to DIR)",
    )
    parser.add_argument("--serve-remote-cdx", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_remote_cdx:
        return serve_remote_cdx(args.serve_remote_cdx, args.delay_ms)

    print_machine(machine())
    print("# pywb: WarcServer under gevent.pywsgi.WSGIServer WITH TCP_NODELAY on accepted sockets")
    print(
        f"# wrk -t{args.threads} -cN -d{args.duration:g}s --latency, one server loaded at a time;"
    )
    print(f"# remote CDX server answers after {args.delay_ms:g} ms; wrk, it and the server share")
    print("# the machine's cores")
    lph = args.limit_per_host
    print(f"# gateway client.limit_per_host: {'64 (default)' if lph is None else lph}")
    tp_conns = sorted(set(args.connections))
    lat_conns = sorted(set(args.latency_connections))
    table: list[list[str]] = []
    added: list[Added] = []
    profiles: list[tuple[str, WrkResult, Profile]] = []
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        work = Path(tmp)
        runner = Runner(args.duration, args.threads, args.quiet_wait, work, args.repeat)
        files = []
        for name in ("a", "b", "c"):
            (work / name).mkdir()
            files.append(work / name / "iana.cdxj")
            shutil.copyfile(IANA_CDXJ, files[-1])
        remote = start_remote(work, args.delay_ms)
        colls = collections(files, f"cdx+{remote.base}/cdx")
        servers: list[Server] = [remote]
        try:
            gateway = start_gateway(gateway_yaml(colls, args.limit_per_host), work)
            servers.append(gateway)
            pywb = start_pywb({"collections": colls}, work)
            servers.append(pywb)
            rows = {name: Row(name, mix_paths(name)) for name in colls}
            floor = start_floor(floor_answers(gateway, list(rows.values())), work)
            servers.append(floor)
            for row in rows.values():
                check_answers((gateway, pywb, floor), row)
            for server in (gateway, pywb, floor):
                run_wrk(
                    server,
                    rows["group3"].paths,
                    connections=16,
                    duration_s=args.warmup,
                    workdir=work,
                )
            remote_label = f"remote ({args.delay_ms:g} ms)"
            plan = [
                ("group3", "group of 3 local", sorted(set(tp_conns + lat_conns))),
                ("local", "1 local alone", lat_conns),
                ("mixed", f"local + {remote_label} group", sorted(set(tp_conns + lat_conns))),
                ("remote", f"{remote_label} alone", lat_conns),
            ]
            plan = [p for p in plan if not args.only or p[0] in args.only]
            results: dict[tuple[str, int], tuple[Runs, Runs]] = {}
            for coll, label, conns_list in plan:
                for conns in conns_list:
                    gw, pw, fl = runner.runs((gateway, pywb, floor), rows[coll], conns)
                    results[coll, conns] = (gw, pw)
                    emit(table, pair_row(f"{label}, mix 50", conns, gw, pw, fl))
            for group, member in (("group3", "local"), ("mixed", "remote")):
                for conns in lat_conns:
                    if (group, conns) not in results or (member, conns) not in results:
                        continue
                    (gwg, pwg), (gwm, pwm) = results[group, conns], results[member, conns]
                    added.append(Added(group, member, conns, gwm, gwg, pwm, pwg))
            if args.profile:
                try:
                    profiles = profile_groups(
                        gateway, rows, plan, args.profile, tp_conns[0], work, args.duration
                    )
                except RuntimeError as exc:  # py-spy missing or failing: keep the numbers
                    print(f"# profiling failed: {exc}")
        finally:
            for server in reversed(servers):
                server.stop()
    print()
    print(markdown_table(HEADER, table))
    print()
    print(markdown_table(ADDED_HEADER, added_rows(added, 5.0)))
    for title, result, profile in profiles:
        print_profile(title, result, profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
