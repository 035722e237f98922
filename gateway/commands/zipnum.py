"""``gateway zipnum build | compact``: ZipNum clusters from CDXJ files.

::

    gateway zipnum build INPUT... -o DIR [--name NAME] [--lines-per-block N]
                         [--shard-size SIZE] [--memory SIZE]
                         [--s3 LOCATION | --storage NAME [--config FILE]]
                         [--no-fsync] [--progress | --no-progress]
    gateway zipnum compact TAIL... -o DIR [the same options]

``build`` writes a new generation of the cluster ``DIR/NAME.idx`` +
``DIR/NAME.loc`` from CDXJ or CDX files (or directories of them), sorted or
not; ``compact`` merges CDXJ files into the cluster already in ``DIR``.
Both switch the new generation in atomically
(:mod:`gateway.index.zipnum_publish`). ``--s3 s3://BUCKET/PREFIX/`` (or
``s3+http://HOST:PORT/BUCKET/PREFIX/``) uploads the shards there instead of
keeping them in ``DIR``; the location file then names them by that URL.
``--storage NAME`` uploads them to the ``s3`` storage ``NAME`` of the
store's ``storages:`` in ``--config`` (default ``collections.yaml``), under
its prefix + ``zipnum/NAME-OF-CLUSTER/``, at its endpoint and region.
Sizes take a ``K``, ``M`` or ``G`` suffix (powers of 1024).

Exit status: 0 written and switched in, 1 an input or the output failed
(nothing switched in), 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Final

from gateway.commands.args import count_arg
from gateway.progress import add_progress_argument

if TYPE_CHECKING:
    from gateway.index.zipnum_publish import S3Target

__all__ = ["add_subcommands"]

_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size_arg(text: str) -> int:
    """Bytes from ``512M``, ``1G`` or a number.

    >>> _size_arg("64M")
    67108864
    """
    number, unit = text.rstrip("KMGkmg"), text[len(text.rstrip("KMGkmg")) :].upper()
    try:
        value = int(number) * _UNITS[unit.rstrip("B")]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; expected a number of bytes, optionally with K, M or G"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size of at least 1 byte")
    return value


def _s3_target(text: str) -> S3Target:
    from gateway.index.zipnum_publish import S3Target
    from gateway.loaders.s3_resolver import S3ResolverConfig

    config = S3ResolverConfig.from_shorthand(text)
    endpoint = config.endpoint
    if endpoint is None:  # as the reader does: the standard variables, else AWS
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    base = text if text.endswith("/") else text + "/"
    return S3Target(config.bucket, config.prefix, endpoint or None, base)


def _storage_target(storage: str, config_path: str, cluster: str) -> S3Target:
    """The ``s3`` storage ``storage`` of the store in ``config_path``, as a target.

    Raises :class:`ValueError` naming what is wrong, or the config's
    :class:`~gateway.errors.ConfigError`.
    """
    from gateway.config import load_config
    from gateway.index.zipnum_publish import S3Target
    from gateway.storage.s3_config import S3StorageConfig

    storages = load_config(config_path).store.storages
    spec = storages.get(storage)
    if spec is None:
        known = ", ".join(storages) or "none configured"
        raise ValueError(f"--storage {storage!r} is not one of store.storages ({known})")
    config = spec.config
    if not isinstance(config, S3StorageConfig):
        raise ValueError(f"--storage {storage!r} is a {spec.type} storage; expected an s3 one")
    within = f"zipnum/{cluster}/"  # under the storage's own prefix
    base = f"storage:{storage}/{within}"  # read through the store's storage (its settings)
    return S3Target(config.bucket, config.prefix + within, config.endpoint, base, config.region)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.errors import ConfigError
    from gateway.index.zipnum_build import BuildSettings, InputError
    from gateway.index.zipnum_publish import build_cluster, compact_cluster
    from gateway.progress import progress_bar
    from gateway.storage.errors import StorageError

    command = f"gateway zipnum {args.zipnum_command}"
    try:
        settings = BuildSettings(
            lines_per_block=args.lines_per_block,
            shard_bytes=args.shard_size,
            run_bytes=args.memory,
            name=args.name,
            fsync=args.fsync,
        )
        s3 = _s3_target(args.s3) if args.s3 else None
        if args.storage:
            s3 = _storage_target(args.storage, args.config, args.name)
    except (ValueError, ConfigError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    inputs = [Path(p) for p in args.inputs]
    out_dir = Path(args.output)
    run = compact_cluster if args.zipnum_command == "compact" else build_cluster
    try:
        with progress_bar(command, enabled=args.progress) as bar:
            report = run(inputs, out_dir, settings, s3=s3, bar=bar)
    except (InputError, OSError, StorageError) as exc:
        print(f"{command}: {exc}; the previous cluster is unchanged", file=sys.stderr)
        return 1
    print(
        f"{command}: {report.lines:,} lines in {report.blocks:,} blocks and "
        f"{report.shards:,} shard(s), generation {report.generation}, "
        f"summary {report.summary}",
        file=sys.stderr,
    )
    return 0


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="cluster directory")
    parser.add_argument("--name", default="cluster", help="NAME.idx and NAME.loc (default cluster)")
    parser.add_argument(
        "--lines-per-block",
        type=count_arg,
        default=3000,
        metavar="N",
        help="lines per gzip block (default 3000, the IA's)",
    )
    parser.add_argument(
        "--shard-size",
        type=_size_arg,
        default=1 << 30,
        metavar="SIZE",
        help="compressed bytes per shard before a new one starts (default 1G)",
    )
    parser.add_argument(
        "--memory",
        type=_size_arg,
        default=256 << 20,
        metavar="SIZE",
        help="lines sorted in memory at a time; peak memory is about twice this (default 256M)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--s3",
        metavar="LOCATION",
        help="upload the shards to s3://BUCKET/PREFIX/ or s3+http(s)://HOST:PORT/BUCKET/PREFIX/ "
        "(credentials from the environment) instead of keeping them in DIR",
    )
    where.add_argument(
        "--storage",
        metavar="NAME",
        help="upload the shards to the s3 storage NAME of the store (store.storages in "
        "--config), under its prefix + zipnum/CLUSTER-NAME/",
    )
    parser.add_argument(
        "--config",
        default="collections.yaml",
        help="the config whose store.storages --storage names (default collections.yaml)",
    )
    parser.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        help="do not make files durable before switching them in (tests, scratch clusters)",
    )
    add_progress_argument(parser)
    parser.set_defaults(run=_run)


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``zipnum build`` and ``zipnum compact`` to the ``gateway`` parser."""
    zipnum = subparsers.add_parser("zipnum", help="build and compact ZipNum clusters")
    leaves = zipnum.add_subparsers(dest="zipnum_command", required=True, metavar="COMMAND")
    build = leaves.add_parser(
        "build", help="build a ZipNum cluster from CDXJ/CDX files (sorted or not)"
    )
    build.add_argument("inputs", nargs="+", metavar="INPUT", help="CDXJ/CDX files or directories")
    _add_options(build)
    compact = leaves.add_parser(
        "compact", help="merge CDXJ files into the cluster in DIR (a new generation)"
    )
    compact.add_argument("inputs", nargs="+", metavar="TAIL", help="CDXJ/CDX files or directories")
    _add_options(compact)
