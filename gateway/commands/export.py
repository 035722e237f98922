"""``gateway export``: an Index API query's captures, with their records, as a WACZ file.

::

    gateway export [--config FILE] [--collection NAME] -o OUT.wacz
                   [--match-type exact|prefix|host|domain] [--from TS] [--to TS]
                   [--filter F]... [--limit N] [--progress | --no-progress] URL

The query is the Index API's (``url``, ``matchType``, ``from``, ``to``,
``filter``, ``limit``), checked by the same code as ``GET
/{coll}/export.wacz``; the collection comes from ``--config`` (default
``collections.yaml``; ``--collection`` is needed only when it has more
than one). What the file holds: :mod:`gateway.index.export`. The file is
written as ``OUT.wacz.tmp`` and renamed when whole (removed on failure).

Exit status: 0 every capture exported; 1 the export was written but some
captures were skipped or some revisits lack their original (each said on
standard error, and in the file's ``logs/export.log``), or it failed (no
captures, every source failed, a record broke off); 2 bad usage, a bad
query (the parameter named) or a bad config. A progress bar (captures
done) is drawn on standard error when it is a terminal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.progress import add_progress_argument

if TYPE_CHECKING:
    from gateway.cdx.query import CaptureQuery
    from gateway.clients import SharedClients
    from gateway.config import GatewayConfig
    from gateway.index.collection import Collection
    from gateway.index.export import ExportReport

__all__ = ["add_subcommands"]

DEFAULT_CONFIG = "collections.yaml"


def _err(message: object) -> None:
    print(f"gateway export: {message}", file=sys.stderr)


def _params(args: argparse.Namespace) -> dict[str, list[str]]:
    """The options as Index API parameters (``{name: [values]}``)."""
    params: dict[str, list[str]] = {"url": [args.url]}
    for name, value in (
        ("matchType", args.match_type),
        ("from", args.from_ts),
        ("to", args.to_ts),
        ("limit", args.limit),
    ):
        if value is not None:
            params[name] = [value]
    if args.filter:
        params["filter"] = list(args.filter)
    return params


def _collection_name(args: argparse.Namespace, config: GatewayConfig) -> str | None:
    names = list(config.collections)
    if args.collection is not None:
        if args.collection in names:
            return str(args.collection)
        _err(
            f"--collection: no collection {args.collection!r} in {args.config}; "
            f"it has {', '.join(names) or 'none'}"
        )
        return None
    if len(names) == 1:
        return names[0]
    _err(
        f"--collection: {args.config} has {len(names)} collections "
        f"({', '.join(names) or 'none'}); name one"
    )
    return None


def _export(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from gateway.clients import SharedClients
    from gateway.config import load_config
    from gateway.errors import BadRequest, ConfigError, GatewayError
    from gateway.index.export import parse_export_query
    from gateway.server.collection_builder import build_collection
    from gateway.store.errors import StoreError

    logging.basicConfig(level=logging.WARNING, format="gateway export: %(message)s")
    try:
        query = parse_export_query(_params(args))
        config = load_config(args.config)
        name = _collection_name(args, config)
        if name is None:
            return 2
        clients = SharedClients(config.client)
        collection = build_collection(config.collections[name], clients)
    except BadRequest as exc:
        _err(exc)
        return 2
    except ConfigError as exc:
        _err(f"bad config {args.config}: {exc}")
        return 2
    out = Path(args.output)
    tmp = out.with_name(out.name + ".tmp")
    try:
        report = asyncio.run(_run(config, collection, clients, query, tmp, args.progress))
        tmp.replace(out)
    except (GatewayError, StoreError, OSError) as exc:
        _err(exc)
        return 1
    finally:
        tmp.unlink(missing_ok=True)
    problems = len(report.skipped) + len(report.unresolved)
    _err(
        f"{out}: {report.captures} captures and {report.originals} originals of revisits, "
        f"{report.bytes} bytes"
        + (f"; {report.refused} blocked capture(s) left out" if report.refused else "")
        + (f"; {problems} problem(s), see above and logs/export.log" if problems else "")
    )
    return 1 if problems else 0


async def _run(
    config: GatewayConfig,
    collection: Collection,
    clients: SharedClients,
    query: CaptureQuery,
    path: Path,
    progress: bool | None,
) -> ExportReport:
    """Start the collection's clients (and open the store, shared, when the config
    uses one, as ``gateway serve`` does), export into ``path``, close them."""
    from gateway.access.policy import loadable
    from gateway.index.export import WaczExport
    from gateway.progress import progress_bar

    await clients.start()
    try:
        if config.uses_store:
            from gateway.store import Store

            clients.store = await Store.open(config.store, mode="shared")
        export = await WaczExport.start(collection, query, admit=loadable)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with (
                path.open("wb") as out,
                progress_bar("gateway export", unit="capture", enabled=progress) as bar,
            ):

                async def send(data: bytes) -> None:
                    out.write(data)

                return await export.write(send, bar.update)
        finally:
            await export.aclose()
    finally:
        await collection.aclose()
        if clients.store is not None:
            await clients.store.close()
            clients.store = None
        await clients.close()


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``gateway export`` (its implementation is imported when it runs)."""
    export = sub.add_parser(
        "export", help="write an Index API query's captures and their records as a WACZ file"
    )
    export.add_argument("url", metavar="URL", help="the URL looked up (the Index API's url=)")
    export.add_argument("-o", "--output", required=True, help="the WACZ file to write")
    export.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml to read")
    export.add_argument(
        "--collection", help="the collection to export from (needed when there are several)"
    )
    export.add_argument(
        "--match-type", metavar="TYPE", help="exact (default), prefix, host or domain"
    )
    export.add_argument("--from", dest="from_ts", metavar="TS", help="1 to 14 digits, padded down")
    export.add_argument("--to", dest="to_ts", metavar="TS", help="1 to 14 digits, padded up")
    export.add_argument(
        "--filter",
        action="append",
        metavar="F",
        help="repeatable, ANDed: [!][=|~]field:value (the Index API's filter=)",
    )
    export.add_argument("--limit", metavar="N", help="at most N captures (default 100000)")
    add_progress_argument(export)
    export.set_defaults(run=_export)
