"""The ``gateway`` command: serve | check-config | index | store | worker | jobs | token | export
| acl | zipnum.

Exit status: 0 success, 1 a command failed, 2 bad usage or a bad config
(reported before anything binds a port).

Only :mod:`argparse` is imported up front: each command imports what it
needs when it runs (aiohttp, the config reader and every source type take
most of a second to import), so ``gateway --help`` answers at once. A
module that adds commands registers its parsers without importing its
implementation (see :func:`gateway.commands.store.add_subcommands`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.commands.args import count_arg
from gateway.progress import add_progress_argument
from gateway.server.logs import add_logging_arguments

if TYPE_CHECKING:
    import asyncio
    import socket

    from gateway.clients import SharedClients
    from gateway.config import GatewayConfig
    from gateway.index.collection import Collection
    from gateway.server.connection_limits import ConnectionLimits
    from gateway.server.recorder_link import RecorderLink

__all__ = ["main"]

DEFAULT_CONFIG = "collections.yaml"


def _load(path: str) -> GatewayConfig:
    from gateway.config import load_config

    return load_config(path)


def _require_replay(config: GatewayConfig) -> None:
    """``client_side_replay: true`` without a wabac.js install: a
    :class:`~gateway.errors.ConfigError` naming ``replay`` (only the commands
    that serve pages ask)."""
    from gateway.errors import ConfigError

    try:
        config.replay.require_install()
    except ValueError as exc:
        raise ConfigError("replay", str(exc)) from None


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (``pip install '.[fast]'``), else the default loop."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def _serve(args: argparse.Namespace) -> int:
    import logging

    from gateway.clients import SharedClients
    from gateway.errors import ConfigError
    from gateway.server.collection_builder import build_collections
    from gateway.server.jobs_service import JobsService
    from gateway.server.logs import configure_logging
    from gateway.store.errors import StoreError

    try:
        config = _load(args.config)
        _require_replay(config)
        clients = SharedClients(config.client)
        collections = build_collections(config, clients)
        # The jobs' plugins resolve now, or the bad config stops start-up; each
        # serving process makes its own service (create_app), one of them runs it.
        JobsService.from_config(config, role="serve")
        if config.uses_store:
            from gateway.store.store import check_store

            check_store(config.store)
    except ConfigError as exc:
        print(f"gateway: bad config {args.config}: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # known before anything starts: said once, exit 2
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    try:
        sock = _listen(args.host, args.port)
    except OSError as exc:
        print(
            f"gateway: cannot listen on {args.host} port {args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    configure_logging(args.log_level, args.log_format)
    _warn_open_recording(config, args.host)
    limits = _connection_limits(args)
    names = ", ".join(collections) or "(no collections)"
    logging.getLogger("gateway.cli").info("replay in the browser: %s", config.replay.describe())
    if args.workers > 1:
        return _serve_workers(args, config, names, sock, limits)
    # A log record, so that with --log-format json every line of standard error is JSON.
    logging.getLogger("gateway.cli").info(
        "serving %s on http://%s:%d/ (open it in a browser, or ask /openapi.json)",
        names,
        args.host,
        args.port,
    )
    try:
        _run_app(config, collections, clients, args, sock=sock, limits=limits)
    except StoreError as exc:  # the store cannot be opened (in use, newer, unreadable)
        print(f"gateway: {exc}", file=sys.stderr)
        return 1
    return 0


def _warn_open_recording(config: GatewayConfig, host: str) -> None:
    """A WARNING when collections that record are open to whoever reaches a
    non-loopback address (no ``auth.require.record``, docs/access-tokens.md)."""
    import ipaddress
    import logging

    recording = [name for name, coll in config.collections.items() if coll.records]
    if not recording or config.auth.require_record or host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    logging.getLogger("gateway.cli").warning(
        "anyone who reaches %s can make the collection(s) %s fetch and record into the "
        "store: require a token with the scope 'record' (auth: section, docs/access-tokens.md)",
        host,
        ", ".join(recording),
    )


def _run_app(
    config: GatewayConfig,
    collections: dict[str, Collection],
    clients: SharedClients,
    args: argparse.Namespace,
    *,
    sock: socket.socket,
    limits: ConnectionLimits,
    parent: int | None = None,
    recorder: RecorderLink | None = None,
) -> None:
    """Serve ``config`` on ``sock`` in this process until SIGINT/SIGTERM.

    ``limits``: the client connections' timeouts and cap
    (:mod:`gateway.server.connection_limits`). ``parent``: the supervisor's pid
    when this process is one of ``--workers`` (the worker stops when it
    goes away); ``recorder``: its place when the config records
    (:mod:`gateway.server.recorder_link`).
    """
    from gateway.server.app import create_app
    from gateway.server.http_server import run_app
    from gateway.server.logs import access_logger

    app = create_app(config, collections=collections, clients=clients, recorder=recorder)
    app.on_startup.append(_freeze_heap)
    if parent is not None:
        from gateway.server.workers import watch_parent

        watch_parent(app, parent)
    run_app(  # aiohttp's run_app, raw UTF-8 request targets read percent-encoded
        app,
        sock=sock,
        loop=_new_loop(),
        handler_cancellation=True,
        access_log=access_logger(args.access_log),
        access_log_format=args.access_log or "",
        unix_path=recorder.socket_path if recorder is not None and recorder.records else None,
        limits=limits,
    )


def _connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    """The options' limits, the cap fitted under the open files limit (raised first).

    Done once, before ``--workers`` forks: the workers inherit the raised
    limit, and a lowered cap is said once.
    """
    from gateway.server.connection_limits import (
        ConnectionLimits,
        fit_to_open_files,
        raise_open_files_limit,
    )

    limits = ConnectionLimits(
        keepalive_timeout_s=args.keepalive_timeout_s,
        head_timeout_s=args.head_timeout_s,
        body_timeout_s=args.body_timeout_s,
        min_body_rate_bps=args.min_body_rate_bps,
        max_connections=args.max_connections,
    )
    return fit_to_open_files(limits, raise_open_files_limit())


def _serve_workers(
    args: argparse.Namespace,
    config: GatewayConfig,
    names: str,
    sock: socket.socket,
    limits: ConnectionLimits,
) -> int:
    """``--workers N``: ``sock`` is bound once, N processes serve it.

    See :mod:`gateway.server.workers`.

    A config that records gets a private directory for the recorder's
    socket (:mod:`gateway.server.recorder_link`), removed when the supervisor exits.
    """
    import logging
    import shutil
    import tempfile

    from gateway.clients import SharedClients
    from gateway.server.collection_builder import build_collections
    from gateway.server.recorder_link import RecorderLink
    from gateway.server.workers import Supervisor

    records = any(coll.records for coll in config.collections.values())
    runtime = tempfile.mkdtemp(prefix="gateway-") if records else None

    def serve(sock: socket.socket, index: int, parent: int) -> None:
        clients = SharedClients(config.client)
        collections = build_collections(config, clients)
        recorder = None if runtime is None else RecorderLink(f"{runtime}/recorder.sock", index)
        _run_app(
            config,
            collections,
            clients,
            args,
            sock=sock,
            limits=limits,
            parent=parent,
            recorder=recorder,
        )

    logging.getLogger("gateway.cli").info(
        "serving %s on http://%s:%d/ with %d worker processes",
        names,
        args.host,
        args.port,
        args.workers,
    )
    try:
        return Supervisor(sock, args.workers, serve).run()
    finally:
        sock.close()
        if runtime is not None:
            shutil.rmtree(runtime, ignore_errors=True)


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (the first address it resolves to).

    Bound before anything is printed or started, so a busy port is one line
    and exit status 2, never a traceback after "serving on". Raises
    :class:`OSError` (``socket.gaierror`` for a host that does not resolve).
    """
    import socket

    family, _type, _proto, _name, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address[:2], family=family, backlog=1024)


async def _freeze_heap(app: object) -> None:
    """Move everything alive after start-up out of the garbage collector's sight.

    Modules, config and pools live as long as the process (about 75,000
    objects); frozen, they are no longer walked by every full collection
    that request garbage triggers (``gc.freeze``, Python 3.7+).
    """
    import gc

    gc.collect()
    gc.freeze()


def _check_config(args: argparse.Namespace) -> int:
    from gateway.clients import SharedClients
    from gateway.errors import ConfigError
    from gateway.missing_dirs import report_only
    from gateway.server.collection_builder import build_collections

    try:
        config = _load(args.file)
        _require_replay(config)
        with report_only() as missing:  # check-config changes nothing on disk
            collections = build_collections(config, SharedClients(config.client))
    except ConfigError as exc:
        print(f"gateway: bad config {args.file}: {exc}", file=sys.stderr)
        return 2
    for line in missing:
        print(f"gateway: warning: {line}", file=sys.stderr)
    print(f"{args.file}: OK, {len(collections)} collection(s)")
    for name, collection in collections.items():
        kind = "sequence" if collection.is_sequence else "collection"
        print(f"{name} ({kind})")
        fuzzy = collection.fuzzy.describe() if collection.fuzzy is not None else "off"
        print(f"  fuzzy matching: {fuzzy}")
        for step in collection.steps:
            print(f"  step {step.name} (timeout {step.index.timeout_s:g} s)")
            for member, description in step.index.describe_members():
                print(f"    index {member}: {description}")
            if not step.loaders:
                print("    resource: (none: captures load only through their own source)")
            for loader in step.loaders:
                print(f"    resource: {loader.describe()}")
    _print_storages(config)
    if config.auth.enabled:
        from gateway.access.tokens import describe

        print(f"tokens: {len(config.auth.tokens)}, required by")
        for routes, scope in describe(config.auth).items():
            print(f"  {routes}: scope {scope}")
    print(f"replay in the browser: {config.replay.describe()}")
    return 0


def _print_storages(config: GatewayConfig) -> None:
    """The store's replication destinations and policy (``store.storages``, ``retention``)."""
    from gateway.storage import STORAGE_TYPES

    store = config.store
    if not store.storages:
        return
    print(f"store storages (retention: {store.retention.copies} copies, the primary included)")
    for name, spec in store.storages.items():
        print(f"  {name}: {STORAGE_TYPES[spec.type].describe_config(spec.config)}")
    if store.publish is not None:
        print(
            f"store publish: safe files' captures to redis {store.publish.target}, "
            f"read from storage {store.publish.storage}"
        )


def _index(args: argparse.Namespace) -> int:
    """``gateway index``: see :func:`gateway.index.indexer.index_archives`.

    Each problem is one line on stderr; the exit status is 1 when there was
    any (``--strict``: at the first, with nothing written). ``-o FILE`` is
    written under ``FILE.tmp`` and renamed at the end (its directory made
    when missing, as ``gateway serve`` makes a missing index directory); the
    temporary file is removed on every failure.
    """
    from pathlib import Path

    if args.check:
        from gateway.commands.wacz_check import check_wacz_files

        return check_wacz_files(args.warcs)

    from gateway.index.indexer import IndexReport, archive_files, index_archives
    from gateway.progress import progress_bar

    inputs = [Path(p) for p in args.warcs]
    report: IndexReport | None = None
    tmp: Path | None = None
    try:
        total = sum(path.stat().st_size for path in archive_files(inputs))
        with progress_bar("gateway index", total, enabled=args.progress) as bar:

            def advance(read: int) -> None:  # each file is read twice: checked, then indexed
                bar.update(read / 2)

            if args.output and args.output != "-":
                out_path = Path(args.output)
                out_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = out_path.with_name(out_path.name + ".tmp")
                with tmp.open("w", encoding="utf-8") as out:
                    report = index_archives(inputs, out, strict=args.strict, progress=advance)
                tmp.replace(out_path)
                tmp = None
            else:
                report = index_archives(inputs, sys.stdout, strict=args.strict, progress=advance)
    except (ValueError, OSError) as exc:
        print(f"gateway index: {exc}", file=sys.stderr)
        return 1
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    for problem in report.problems:
        print(f"gateway index: {problem}", file=sys.stderr)
    indexed = len(archive_files(inputs)) - len(report.skipped)
    print(
        f"gateway index: {report.lines} captures from {indexed} file(s)"
        + (f"; {len(report.problems)} problem(s), see above" if report.problems else ""),
        file=sys.stderr,
    )
    return 1 if report.problems else 0


def _number_arg(text: str, unit: str, *, zero_allowed: bool) -> float:
    """A finite number of ``unit`` from an option's text, more than 0 (or 0 or more)."""
    try:
        number = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {unit}, e.g. 15 or 0.5") from None
    low_ok = number >= 0 if zero_allowed else number > 0
    if not (low_ok and number < float("inf")):
        least = "0 or more" if zero_allowed else "more than 0"
        raise argparse.ArgumentTypeError(f"{text!r}: expected {least} {unit}")
    return number


def _seconds_arg(text: str) -> float:
    """A timeout option's value: seconds, more than 0 (``2``, ``0.5``)."""
    return _number_arg(text, "seconds", zero_allowed=False)


def _rate_arg(text: str) -> float:
    """A rate option's value: bytes per second, 0 or more (``500``, ``0``)."""
    return _number_arg(text, "bytes per second", zero_allowed=True)


def _workers_arg(text: str) -> int:
    from gateway.server.workers import parse_workers

    try:
        return parse_workers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_connection_arguments(serve: argparse.ArgumentParser) -> None:
    """``gateway serve``'s client connection limits (defaults: ``ConnectionLimits``'s)."""
    group = serve.add_argument_group(
        "client connections (per process; see docs/operations.md, Hardening)"
    )
    group.add_argument(
        "--keepalive-timeout",
        dest="keepalive_timeout_s",
        type=_seconds_arg,
        default=15.0,
        metavar="SECONDS",
        help="close a connection with no request for this long (default 15)",
    )
    group.add_argument(
        "--head-timeout",
        dest="head_timeout_s",
        type=_seconds_arg,
        default=10.0,
        metavar="SECONDS",
        help="408 and close when a request head is not whole this long after its "
        "first byte (default 10)",
    )
    group.add_argument(
        "--body-timeout",
        dest="body_timeout_s",
        type=_seconds_arg,
        default=30.0,
        metavar="SECONDS",
        help="408 (or close) when a request body stops for this long (default 30)",
    )
    group.add_argument(
        "--min-body-rate",
        dest="min_body_rate_bps",
        type=_rate_arg,
        default=500.0,
        metavar="BYTES_PER_S",
        help="after --body-timeout, 408 (or close) when a request body has come slower than "
        "this on average; 0: no minimum (default 500)",
    )
    group.add_argument(
        "--max-connections",
        dest="max_connections",
        type=count_arg,
        default=1024,
        metavar="N",
        help="client connections open at once; at the cap the one idle longest is closed, "
        "or a 503 answered (default 1024, lowered to fit the open files limit)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description="Web-archive gateway: Index, Resource and Memento APIs."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the collections of a config file")
    serve.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml to serve")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    add_logging_arguments(serve)
    serve.add_argument(
        "--workers",
        type=_workers_arg,
        default=1,
        metavar="N",
        help="processes serving the port, each with its own event loop: a number, or "
        "'auto' for one per core (default 1; a config using the store needs 1)",
    )
    _add_connection_arguments(serve)
    serve.set_defaults(run=_serve)

    check = sub.add_parser("check-config", help="validate a config and print its tree")
    check.add_argument("file", nargs="?", default=DEFAULT_CONFIG)
    check.set_defaults(run=_check_config)

    index = sub.add_parser(
        "index", help="write a sorted CDXJ index of WARC/ARC files; --check: verify WACZ files"
    )
    index.add_argument(
        "warcs", nargs="+", metavar="WARC", help="WARC or ARC files (WACZ files with --check)"
    )
    index.add_argument(
        "--check",
        action="store_true",
        help="verify WACZ files (ZIP, datapackage digests, indexes) instead; nothing written",
    )
    index.add_argument("-o", "--output", help="output file (default: standard output)")
    add_progress_argument(index)
    index.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first unreadable file or record, writing nothing",
    )
    index.set_defaults(run=_index)

    from gateway.commands.store import add_subcommands as add_store_subcommands

    add_store_subcommands(sub)

    from gateway.commands.jobs import add_subcommands as add_jobs_subcommands

    add_jobs_subcommands(sub)

    from gateway.commands.token import add_subcommands as add_token_subcommands

    add_token_subcommands(sub)
    from gateway.commands.export import add_subcommands as add_export_subcommands

    add_export_subcommands(sub)
    from gateway.commands.acl import add_subcommands as add_acl_subcommands

    add_acl_subcommands(sub)
    from gateway.commands.zipnum import add_subcommands as add_zipnum_subcommands

    add_zipnum_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gateway`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    status: int = args.run(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
