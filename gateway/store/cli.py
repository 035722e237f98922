"""``gateway store add | history | check | repair``.

::

    gateway store add [--root DIR | --config FILE] [--no-wait] WARC...
    gateway store history [--root DIR | --config FILE] URL
                          [--at TS | --from TS --to TS | --latest | --all] [--output cdxj|json]
    gateway store check [--root DIR | --config FILE] [--progress | --no-progress]
    gateway store repair [--root DIR | --config FILE]

``--root`` defaults to ``./archive``; ``--config`` takes the ``store:``
section of a collections.yaml (through ``gateway.config``, the only YAML
reader). Exit status: 0 success, 1 problems found or a file rejected, 2 bad
usage or the store is in use / missing.

``check`` never changes anything; ``repair`` needs the store to itself
(stop the gateway first); ``add`` and ``history`` work while a gateway runs
(``add`` hands the files to the store as import objects and imports them
itself, unless ``--no-wait`` leaves them to the gateway's or a worker's
import actor; see :mod:`gateway.store.online_import`).
Also runnable alone: ``python -m gateway.store.cli check --root DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.errors import ConfigError
from gateway.store.errors import StoreError, StoreLocked
from gateway.store.settings import StoreSettings

if TYPE_CHECKING:
    from gateway.jobs.settings import JobsSettings

# The commands import the store itself when they run (warcio, SQLite and
# the writer are not needed to print ``--help``).

__all__ = ["SettingsLoader", "add_store_commands", "add_subcommands", "main"]

#: ``loader(config_path) -> StoreSettings``: reads the ``store:`` section.
SettingsLoader = Callable[[str], StoreSettings]

_TS = re.compile(r"\d{1,14}")


def _default_loader(path: str) -> StoreSettings:
    from gateway.config import load_config  # the only YAML reader

    config = load_config(path)
    settings = getattr(config, "store", None)
    if not isinstance(settings, StoreSettings):
        raise StoreError(f"{path}: this gateway's config has no store: section")
    return settings


def _settings(args: argparse.Namespace) -> StoreSettings:
    if args.config:
        loader: SettingsLoader = args.settings_loader or _default_loader
        return loader(args.config)
    return StoreSettings(root=args.root)


def _jobs_settings(args: argparse.Namespace) -> JobsSettings:
    """The ``jobs:`` section of ``--config`` (tick limits of the import), else the defaults."""
    from gateway.jobs.settings import JobsSettings

    if args.config and args.settings_loader is None:
        from gateway.config import load_config

        return load_config(args.config).jobs
    return JobsSettings()


def _timestamp(text: str) -> str:
    if not _TS.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a timestamp; expected 1 to 14 digits")
    return text


def _err(command: str, message: object) -> None:
    print(f"gateway store {command}: {message}", file=sys.stderr)


# ------------------------------------------------------------------ commands
def _cmd_add(args: argparse.Namespace) -> int:
    from gateway.jobs.db import JobObject
    from gateway.store.online_import import add_files
    from gateway.store.progress import ProgressBar

    settings = _settings(args)
    sources = [Path(name).absolute() for name in args.warcs]
    total = sum(p.stat().st_size for p in sources if p.is_file())
    bar = ProgressBar(total * 3, label="store add", enabled=args.progress)
    waiting_for: set[tuple[int, str]] = set()

    def on_final(obj: JobObject) -> None:
        source, name = obj["source_path"], obj["name"]
        if obj.status == "imported":
            print(f"{source}: added as warcs/{name}, {obj['records']} captures indexed")
        elif obj.status == "present":
            print(f"{source}: already in the store as warcs/{name}")
        elif obj.status == "refused":
            _err("add", f"{source}: refused:")
            for line in str(obj["reason"]).splitlines():
                print(f"  {line}", file=sys.stderr)
        else:
            _err("add", f"{source}: failed, gave up: {obj.last_error}")

    def on_waiting(pending: list[JobObject]) -> None:
        for obj in pending:
            key = (obj.id, obj.lease_owner or obj.last_error or "")
            if key in waiting_for:
                continue
            waiting_for.add(key)
            if obj.lease_owner and not obj.lease_owner.startswith("store-add"):
                print(f"{obj['source_path']}: being imported by {obj.lease_owner}", file=sys.stderr)
            elif obj.last_error:
                print(f"{obj['source_path']}: retrying after: {obj.last_error}", file=sys.stderr)

    report = asyncio.run(
        add_files(
            settings.root_path,
            sources,
            settings=_jobs_settings(args),
            wait=not args.no_wait,
            on_final=on_final,
            on_waiting=on_waiting,
            progress=bar.advance,
        )
    )
    bar.finish()
    if args.no_wait:
        print(
            f"store add: handed in {len(sources)} file(s) (batch {report.batch});"
            " a running `gateway serve` or `gateway worker` imports them;"
            " `gateway jobs` shows how far they are"
        )
        return 0
    counts = [
        f"{report.count('imported')} imported",
        f"{report.count('present')} already present",
        f"{report.count('refused')} refused",
    ]
    if report.count("failed"):
        counts.append(f"{report.count('failed')} failed")
    print(f"store add: {', '.join(counts)}")
    return 0 if report.ok else 1


def _cmd_history(args: argparse.Namespace) -> int:
    if (args.at or args.latest) and (args.from_ts or args.to_ts):
        _err("history", "--from/--to cannot be combined with --at or --latest")
        return 2
    from gateway.store.layout import Layout
    from gateway.store.reader import StoreReader

    settings = _settings(args)
    layout = Layout(settings.root_path)
    if not layout.db_path.exists():
        _err("history", f"no store at {layout.root}")
        return 2

    async def run() -> int:
        reader = StoreReader(layout.db_path)
        try:
            records = await reader.history(
                args.url,
                at=args.at,
                from_ts=args.from_ts,
                to_ts=args.to_ts,
                latest=args.latest,
            )
        finally:
            reader.close()
        for record in records:
            sys.stdout.write(record.to_json() if args.output == "json" else record.to_cdxj())
        return 0

    try:
        return asyncio.run(run())
    except ValueError as exc:
        _err("history", exc)
        return 2


def _cmd_check(args: argparse.Namespace) -> int:
    from gateway.store.check import check_store
    from gateway.store.layout import Layout

    settings = _settings(args)
    report = check_store(Layout(settings.root_path), progress=args.progress)
    for problem in report.problems:
        print(problem)
    print(f"store check: {report.summary()}")
    return 0 if report.ok else 1


def _cmd_repair(args: argparse.Namespace) -> int:
    from gateway.store.layout import Layout
    from gateway.store.repair import repair_store

    settings = _settings(args)
    report = repair_store(Layout(settings.root_path))
    for line in report.recovery.describe() + report.actions:
        print(f"repair: {line}")
    for problem in report.final.problems:
        print(f"not repaired: {problem}")
    print(f"store repair: {report.final.summary()}")
    return 0 if report.final.ok else 1


def _guarded(command: str, func: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except StoreLocked as exc:
            _err(command, exc)
            return 2
        except StoreError as exc:
            _err(command, exc)
            return 2 if "no store" in exc.message else 1
        except ConfigError as exc:
            _err(command, f"bad config {args.config}: {exc}")
            return 2

    return run


# ------------------------------------------------------------------- parsers
def _common(parser: argparse.ArgumentParser, settings_loader: SettingsLoader | None) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--root", default="./archive", help="store directory (default ./archive)")
    where.add_argument("--config", help="take the store: section of this collections.yaml")
    parser.set_defaults(settings_loader=settings_loader)


def add_store_commands(
    leaves: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    settings_loader: SettingsLoader | None = None,
) -> None:
    """Register ``add``, ``history``, ``check``, ``repair``; each sets ``run(args) -> int``."""
    add = leaves.add_parser(
        "add", help="import WARC files (verify with warcio, copy, index), also while serving"
    )
    _common(add, settings_loader)
    add.add_argument("warcs", nargs="+", metavar="WARC", help=".warc or .warc.gz files")
    add.add_argument(
        "--no-wait",
        action="store_true",
        help="hand the files in and return; a running gateway serve or worker imports them",
    )
    add.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: on a terminal or a long run)",
    )
    add.set_defaults(run=_guarded("add", _cmd_add))

    history = leaves.add_parser("history", help="list the stored versions of a URL")
    _common(history, settings_loader)
    history.add_argument("url", metavar="URL")
    when = history.add_mutually_exclusive_group()
    when.add_argument(
        "--at",
        type=_timestamp,
        metavar="TS",
        help="the nearest capture at or before TS (1-14 digits)",
    )
    when.add_argument("--latest", action="store_true", help="only the latest capture")
    when.add_argument("--all", action="store_true", help="every capture (the default)")
    history.add_argument(
        "--from", dest="from_ts", type=_timestamp, metavar="TS", help="captures at or after TS"
    )
    history.add_argument(
        "--to", dest="to_ts", type=_timestamp, metavar="TS", help="captures at or before TS"
    )
    history.add_argument("--output", choices=("cdxj", "json"), default="cdxj")
    history.set_defaults(run=_guarded("history", _cmd_history))

    check = leaves.add_parser(
        "check", help="verify every record and index entry; exits 1 on problems"
    )
    _common(check, settings_loader)
    check.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: on a terminal or a long run)",
    )
    check.set_defaults(run=_guarded("check", _cmd_check))

    repair = leaves.add_parser("repair", help="fix what check finds (stop the gateway first)")
    _common(repair, settings_loader)
    repair.set_defaults(run=_guarded("repair", _cmd_repair))


def add_subcommands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    settings_loader: SettingsLoader | None = None,
) -> None:
    """Add ``store`` and its commands to the ``gateway`` parser's subcommands.

    Each leaf sets ``run`` (``args.run(args) -> int``, the exit status), as
    the other ``gateway`` commands do.
    """
    store = subparsers.add_parser("store", help="the snapshot store: add, history, check, repair")
    leaves = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    add_store_commands(leaves, settings_loader=settings_loader)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gateway.store.cli COMMAND ...``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="gateway store", description=__doc__.split("\n")[0])
    leaves = parser.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    add_store_commands(leaves)
    args = parser.parse_args(argv)
    status: int = args.run(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
