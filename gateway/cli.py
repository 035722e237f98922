"""The ``gateway`` command: serve | check-config | index | store.

Exit status: 0 success, 1 a command failed, 2 bad usage or a bad config
(reported before anything binds a port).

Only :mod:`argparse` is imported up front: each command imports what it
needs when it runs (aiohttp, the config reader and every source type take
most of a second to import), so ``gateway --help`` answers at once. A
module that adds commands registers its parsers without importing its
implementation (see :func:`gateway.store.cli.add_subcommands`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from gateway.aggregate import Collection
    from gateway.clients import SharedClients
    from gateway.config import GatewayConfig

__all__ = ["main"]

DEFAULT_CONFIG = "collections.yaml"


def _load(path: str) -> GatewayConfig:
    from gateway.config import load_config

    return load_config(path)


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

    from gateway.app import build_collections
    from gateway.clients import SharedClients
    from gateway.errors import ConfigError
    from gateway.workers import store_conflict

    try:
        config = _load(args.config)
        clients = SharedClients(config.client)
        collections = build_collections(config, clients)
    except ConfigError as exc:
        print(f"gateway: bad config {args.config}: {exc}", file=sys.stderr)
        return 2
    conflict = store_conflict(config, args.workers)
    if conflict is not None:
        print(f"gateway: {conflict}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    names = ", ".join(collections) or "(no collections)"
    if args.workers == 1:
        print(f"gateway: serving {names} on http://{args.host}:{args.port}/", file=sys.stderr)
        _run_app(config, collections, clients, host=args.host, port=args.port)
        return 0
    return _serve_workers(args, config, names)


def _run_app(
    config: GatewayConfig,
    collections: dict[str, Collection],
    clients: SharedClients,
    **where: Any,
) -> None:
    """Serve ``config`` in this process until SIGINT/SIGTERM; ``where``: host/port or sock."""
    from aiohttp import web

    from gateway.app import create_app

    app = create_app(config, collections=collections, clients=clients)
    app.on_startup.append(_freeze_heap)
    parent = where.pop("parent", None)
    if parent is not None:
        from gateway.workers import watch_parent

        watch_parent(app, parent)
    web.run_app(
        app,
        handler_cancellation=True,
        access_log=None,
        print=None,
        loop=_new_loop(),
        **where,
    )


def _serve_workers(args: argparse.Namespace, config: GatewayConfig, names: str) -> int:
    """``--workers N``: bind once, then N processes serve (see :mod:`gateway.workers`)."""
    import socket

    from gateway.app import build_collections
    from gateway.clients import SharedClients
    from gateway.workers import Supervisor

    try:
        family = socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((args.host, args.port), family=family, backlog=1024)
    except OSError as exc:
        print(
            f"gateway: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1

    def serve(sock: socket.socket, index: int, parent: int) -> None:
        clients = SharedClients(config.client)
        _run_app(config, build_collections(config, clients), clients, sock=sock, parent=parent)

    print(
        f"gateway: serving {names} on http://{args.host}:{args.port}/ "
        f"with {args.workers} worker processes",
        file=sys.stderr,
    )
    try:
        return Supervisor(sock, args.workers, serve).run()
    finally:
        sock.close()


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
    from gateway.app import build_collections
    from gateway.clients import SharedClients
    from gateway.errors import ConfigError

    try:
        config = _load(args.file)
        collections = build_collections(config, SharedClients(config.client))
    except ConfigError as exc:
        print(f"gateway: bad config {args.file}: {exc}", file=sys.stderr)
        return 2
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
    return 0


def _index(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.indexer import write_cdxj_index

    inputs = [Path(p) for p in args.warcs]
    try:
        if args.output and args.output != "-":
            out_path = Path(args.output)
            tmp = out_path.with_name(out_path.name + ".tmp")
            with tmp.open("w", encoding="utf-8") as out:
                count = write_cdxj_index(inputs, out)
            tmp.replace(out_path)
        else:
            count = write_cdxj_index(inputs, sys.stdout)
    except (ValueError, OSError) as exc:
        print(f"gateway index: {exc}", file=sys.stderr)
        return 1
    print(f"gateway index: {count} captures from {len(inputs)} file(s)", file=sys.stderr)
    return 0


def _workers_arg(text: str) -> int:
    from gateway.workers import parse_workers

    try:
        return parse_workers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description="Web-archive gateway: Index, Resource and Memento APIs."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the collections of a config file")
    serve.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml to serve")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    serve.add_argument(
        "--workers",
        type=_workers_arg,
        default=1,
        metavar="N",
        help="processes serving the port, each with its own event loop: a number, or "
        "'auto' for one per core (default 1; a config using the store needs 1)",
    )
    serve.set_defaults(run=_serve)

    check = sub.add_parser("check-config", help="validate a config and print its tree")
    check.add_argument("file", nargs="?", default=DEFAULT_CONFIG)
    check.set_defaults(run=_check_config)

    index = sub.add_parser("index", help="write a sorted CDXJ index of WARC/ARC files")
    index.add_argument("warcs", nargs="+", metavar="WARC", help="WARC or ARC files")
    index.add_argument("-o", "--output", help="output file (default: standard output)")
    index.set_defaults(run=_index)

    from gateway.store.cli import add_subcommands as add_store_subcommands

    add_store_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gateway`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    status: int = args.run(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
