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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

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

    from aiohttp import web

    from gateway.app import build_collections, create_app
    from gateway.clients import SharedClients
    from gateway.errors import ConfigError

    try:
        config = _load(args.config)
        clients = SharedClients(config.client)
        collections = build_collections(config, clients)
    except ConfigError as exc:
        print(f"gateway: bad config {args.config}: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app = create_app(config, collections=collections, clients=clients)
    app.on_startup.append(_freeze_heap)
    print(
        f"gateway: serving {', '.join(collections) or '(no collections)'} "
        f"on http://{args.host}:{args.port}/",
        file=sys.stderr,
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        handler_cancellation=True,
        access_log=None,
        print=None,
        loop=_new_loop(),
    )
    return 0


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
    _print_storages(config)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description="Web-archive gateway: Index, Resource and Memento APIs."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the collections of a config file")
    serve.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml to serve")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
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
