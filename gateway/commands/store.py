"""``gateway store add | history | check | repair | migrate | replicate | copies | scrub``.

::

    gateway store add [--root DIR | --config FILE] [--progress | --no-progress] [--no-wait]
                      WARC|WACZ...
    gateway store history [--root DIR | --config FILE] URL
                          [--at TS | --from TS --to TS | --latest | --all] [--output cdxj|json]
    gateway store check [--root DIR | --config FILE] [--progress | --no-progress]
    gateway store repair [--root DIR | --config FILE] [--progress | --no-progress]
                         [--replace-copies]
    gateway store migrate [--root DIR | --config FILE] [--continuous [--interval S]]
                          [--resume-from NAME] [--batch-size N] [--progress | --no-progress]
    gateway store replicate [--config FILE] [--once] [--progress | --no-progress]
    gateway store copies [--config FILE] [--json] [FILE...]
    gateway store scrub [--config FILE] [--max-duration SECONDS] [--progress | --no-progress]

``replicate``, ``copies`` and ``scrub`` are :mod:`gateway.commands.replication`;
``migrate`` runs in :mod:`gateway.commands.migration`.

``--root`` defaults to ``./archive/store``; ``--config`` takes the
``store:`` section of a collections.yaml (through ``gateway.config``, the
only YAML reader). Exit status: 0 success, 1 problems found or a file
rejected, 2 bad usage or the store is in use / missing. ``add``, ``check``
and ``repair`` draw a progress bar on standard error when it is a terminal
(:mod:`gateway.progress`).

``check`` never changes anything; ``add``, ``history`` and ``migrate``
work beside a running gateway (they open the store shared); ``repair``
needs the store to itself (stop every process using it first). ``add``
hands the files to the store as ``import`` objects of its background work
and imports them itself (an import actor over its own files), unless
``--no-wait`` leaves them to a running ``gateway serve`` or ``gateway
worker``; see :mod:`gateway.store.online_import`. ``migrate`` moves files
to the current layout and reconciles disk and index
(:mod:`gateway.store.migration.migrator`); it exits 1 when something was left for
later or reported, and stops cleanly between two files on SIGINT/SIGTERM,
saying how to resume. Also runnable alone:
``python -m gateway.commands.store check --root DIR``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from gateway.commands.args import count_arg
from gateway.errors import ConfigError
from gateway.progress import add_progress_argument
from gateway.store.errors import StoreError, StoreLocked
from gateway.store.layout import DEFAULT_ROOT, Layout

if TYPE_CHECKING:
    from gateway.jobs.db import JobObject
    from gateway.jobs.settings import JobsSettings
    from gateway.progress import Bar
    from gateway.store.job_rows import ImportColumns
    from gateway.store.settings import StoreSettings

# The commands import the store itself when they run (warcio, SQLite and
# the writer are not needed to print ``--help``).

__all__ = ["SettingsLoader", "add_store_commands", "add_subcommands", "main"]

#: ``loader(config_path) -> StoreSettings``: reads the ``store:`` section.
SettingsLoader = Callable[[str], "StoreSettings"]

#: What ``add_store_commands`` adds its commands to.
_Leaves: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_TS = re.compile(r"\d{1,14}")


def _default_loader(path: str) -> StoreSettings:
    from gateway.config import load_config  # the only YAML reader
    from gateway.store.settings import StoreSettings

    config = load_config(path)
    settings = getattr(config, "store", None)
    if not isinstance(settings, StoreSettings):
        raise StoreError(f"{path}: this gateway's config has no store: section")
    return settings


def _settings(args: argparse.Namespace) -> StoreSettings:
    if args.config:
        loader: SettingsLoader = args.settings_loader or _default_loader
        return loader(args.config)
    from gateway.store.settings import StoreSettings  # (with the storages' settings)

    return StoreSettings(root=args.root)


def _timestamp(text: str) -> str:
    if not _TS.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a timestamp; expected 1 to 14 digits")
    return text


def _err(command: str, message: object) -> None:
    print(f"gateway store {command}: {message}", file=sys.stderr)


def _no_store(command: str, layout: Layout) -> bool:
    """True, after saying so on standard error, when there is no store at ``layout``.

    A missing store is bad usage (exit 2), not a problem to repair: ``store add``
    or a recording gateway creates one.
    """
    if layout.db_path.exists():
        return False
    _err(command, f"no store at {layout.root} (`gateway store add` or recording creates one)")
    return True


# ------------------------------------------------------------------ commands
def _jobs_settings(args: argparse.Namespace) -> JobsSettings:
    """The ``jobs:`` section of ``--config`` (the import's tick limit), else the defaults."""
    from gateway.jobs.settings import JobsSettings

    if args.config and args.settings_loader is None:
        from gateway.config import load_config

        return load_config(args.config).jobs
    return JobsSettings()


def _cmd_add(args: argparse.Namespace) -> int:
    """``store add``: WARC files as they are, WACZ files verified and staged first,
    their page lists kept once imported (:mod:`gateway.commands.store_wacz`)."""
    from gateway.commands.store_wacz import add_with_waczs

    settings = _settings(args)

    def add(sources: list[Path]) -> int:
        return _add_files(args, settings, sources)

    return add_with_waczs(args.warcs, Path(settings.root), no_wait=args.no_wait, add=add)


def _add_files(args: argparse.Namespace, settings: StoreSettings, sources: list[Path]) -> int:
    import asyncio

    from gateway.progress import progress_bar
    from gateway.store.online_import import Settled, add_files

    # Verification reads each file three times (framing, warcio's digests, SHA-256).
    total = 3 * sum(p.stat().st_size for p in sources if p.is_file())
    waiting_for: set[tuple[int, str]] = set()

    with progress_bar("store add", total, enabled=args.progress) as bar:

        def on_final(obj: JobObject[ImportColumns]) -> None:
            _report_import(bar, obj)

        def on_settled(item: Settled) -> None:
            path, status, detail = item
            if status == "present":
                bar.write(f"{path}: already in the store as warcs/{detail}", file=sys.stdout)
            else:
                _report_refused(bar, path, detail)

        def on_waiting(pending: list[JobObject[ImportColumns]]) -> None:
            for obj in pending:
                owner = obj.lease_owner or ""
                key = (obj.id, owner or obj.last_error or "")
                if key in waiting_for:
                    continue
                waiting_for.add(key)
                if owner and not owner.startswith("store-add"):
                    line = f"{obj.row.source_path}: being imported by {owner}"
                    bar.write(line, file=sys.stderr)
                elif obj.last_error:
                    line = f"{obj.row.source_path}: trying again after: {obj.last_error}"
                    bar.write(line, file=sys.stderr)

        report = asyncio.run(
            add_files(
                settings,
                sources,
                settings=_jobs_settings(args),
                wait=not args.no_wait,
                on_final=on_final,
                on_settled=on_settled,
                on_waiting=on_waiting,
                progress=bar.update,
            )
        )
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


#: What a refusal for a wrong Content-Length advises (docs/store.md, "What store add accepts").
_RECOMPRESS_HINT = (
    "  warcio and pywb read past a wrong Content-Length (so `gateway index` indexes such a "
    "file and the gateway serves it from where it is); the store keeps only records it can "
    "frame. To store it: `warcio recompress {source} FIXED.warc.gz` rewrites every record "
    "with its true length, then `gateway store add FIXED.warc.gz`"
)


def _report_refused(bar: Bar, source: object, reason: str) -> None:
    problems = "".join(f"\n  {line}" for line in reason.splitlines())
    if "wrong Content-Length" in reason:
        problems += "\n" + _RECOMPRESS_HINT.format(source=source)
    bar.write(
        f"gateway store add: {source}: refused, nothing was changed:{problems}", file=sys.stderr
    )


def _report_import(bar: Bar, obj: JobObject[ImportColumns]) -> None:
    """The line ``store add`` prints above its bar when a file's import ends."""
    row = obj.row
    source = row.source_path
    if obj.status == "imported":
        line = f"{source}: added as warcs/{row.stored_as}, {row.captures} captures indexed"
        bar.write(line, file=sys.stdout)
        for note in row.notes:
            bar.write(f"  note: {note}", file=sys.stdout)
    elif obj.status == "present":
        bar.write(f"{source}: already in the store as warcs/{row.stored_as}", file=sys.stdout)
    elif obj.status == "refused":
        _report_refused(bar, source, row.reason)
    else:
        bar.write(
            f"gateway store add: {source}: failed, gave up: {obj.last_error}", file=sys.stderr
        )


def _cmd_history(args: argparse.Namespace) -> int:
    if (args.at or args.latest) and (args.from_ts or args.to_ts):
        _err("history", "--from/--to cannot be combined with --at or --latest")
        return 2
    from gateway.store.layout import layout_for
    from gateway.store.store import Store

    settings = _settings(args)
    layout = layout_for(settings.root)
    if _no_store("history", layout):
        return 2

    async def run() -> int:
        async with await Store.open(settings, mode="shared") as store:
            records = await store.history(
                args.url,
                at=args.at,
                from_ts=args.from_ts,
                to_ts=args.to_ts,
                latest=args.latest,
            )
        for record in records:
            sys.stdout.write(record.to_json() if args.output == "json" else record.to_cdxj())
        return 0

    import asyncio

    try:
        return asyncio.run(run())
    except ValueError as exc:
        _err("history", exc)
        return 2


def _cmd_check(args: argparse.Namespace) -> int:
    from gateway.store.integrity.check import check_store
    from gateway.store.layout import layout_for

    settings = _settings(args)
    layout = layout_for(settings.root)
    if _no_store("check", layout):
        return 2
    import time

    from gateway.store.integrity.safety import policy_for

    policy = policy_for(settings, _jobs_settings(args).scrub_interval_days, time.time())
    report = check_store(layout, progress=args.progress, policy=policy)
    for note in report.notes:
        print(f"note: {note}")
    for problem in report.problems:
        print(problem)
    print(f"store check: {report.summary()}")
    if report.safety is not None:  # whole records are not yet replicated ones
        print(f"store check: safety: {report.safety.summary_line()}")
    return 0 if report.ok else 1


def _cmd_repair(args: argparse.Namespace) -> int:
    from gateway.store.integrity.repair import repair_store
    from gateway.store.layout import layout_for

    settings = _settings(args)
    layout = layout_for(settings.root)
    if _no_store("repair", layout):
        return 2
    if settings.storages:
        from gateway.store.integrity.restore import Restorer

        with Restorer(settings, layout) as restorer:
            report = repair_store(layout, progress=args.progress, restorer=restorer)
    else:
        report = repair_store(layout, progress=args.progress)
    for line in report.recovery.describe() + report.actions:
        print(f"repair: {line}")
    for problem in report.final.problems:
        print(f"not repaired: {problem}")
    print(f"store repair: {report.final.summary()}")
    status = 0 if report.final.ok else 1
    if args.replace_copies:
        from gateway.commands.replication import cmd_replace_copies

        status = max(status, cmd_replace_copies(args, settings))
    return status


def _cmd_replicate(args: argparse.Namespace) -> int:
    from gateway.commands.replication import cmd_replicate

    return cmd_replicate(args, _settings(args), _jobs_settings(args))


def _cmd_copies(args: argparse.Namespace) -> int:
    from gateway.commands.replication import cmd_copies

    return cmd_copies(args, _settings(args), _jobs_settings(args))


def _cmd_scrub(args: argparse.Namespace) -> int:
    from gateway.commands.replication import cmd_scrub

    return cmd_scrub(args, _settings(args), _jobs_settings(args))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; expected seconds > 0")
    return value


def _cmd_migrate(args: argparse.Namespace) -> int:
    from gateway.commands.migration import cmd_migrate

    return cmd_migrate(args, _settings(args))


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
    where.add_argument(
        "--root", default=DEFAULT_ROOT, help=f"store directory (default {DEFAULT_ROOT})"
    )
    where.add_argument("--config", help="take the store: section of this collections.yaml")
    parser.set_defaults(settings_loader=settings_loader)


def add_store_commands(
    leaves: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    settings_loader: SettingsLoader | None = None,
) -> None:
    """Register ``add``, ``history``, ``check``, ``repair``, ``migrate``; each sets ``run``."""
    _register_add(leaves, settings_loader)
    _register_history(leaves, settings_loader)
    _register_check(leaves, settings_loader)
    _register_repair(leaves, settings_loader)
    _register_migrate(leaves, settings_loader)
    _register_replicate(leaves, settings_loader)
    _register_copies(leaves, settings_loader)
    _register_scrub(leaves, settings_loader)


def _register_add(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store add``: import WARC/ARC files."""
    add = leaves.add_parser(
        "add",
        help="import WARC/ARC files (verify with warcio, copy, index), or a WACZ's WARCs and "
        "its pages; beside a gateway too",
    )
    _common(add, settings_loader)
    add_progress_argument(add)
    add.add_argument(
        "warcs",
        nargs="+",
        metavar="WARC",
        help=".warc, .warc.gz, .arc or .arc.gz files, or .wacz files (verified first)",
    )
    add.add_argument(
        "--no-wait",
        action="store_true",
        help="hand the files in and return; a running gateway serve or worker imports them",
    )
    add.set_defaults(run=_guarded("add", _cmd_add))


def _register_history(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store history``: the stored versions of a URL."""
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


def _register_check(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store check``: verify every record and index entry."""
    check = leaves.add_parser(
        "check", help="verify every record and index entry; exits 1 on problems"
    )
    _common(check, settings_loader)
    add_progress_argument(check)
    check.set_defaults(run=_guarded("check", _cmd_check))


def _register_repair(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store repair``: fix what check finds."""
    repair = leaves.add_parser(
        "repair", help="fix what check finds (stop every process using the store first)"
    )
    _common(repair, settings_loader)
    add_progress_argument(repair)
    repair.add_argument(
        "--replace-copies",
        action="store_true",
        help="then replace objects on the storages (store.storages of --config) that hold "
        "other bytes under a file's name with the file's verified copy",
    )
    repair.set_defaults(run=_guarded("repair", _cmd_repair))


def _register_migrate(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store migrate``: move files to the current layout."""
    migrate = leaves.add_parser(
        "migrate",
        help="move files to the current layout, import orphans, merge duplicates; "
        "beside a gateway too",
    )
    _common(migrate, settings_loader)
    add_progress_argument(migrate)
    migrate.add_argument(
        "--continuous",
        action="store_true",
        help="run again every --interval seconds until SIGINT/SIGTERM",
    )
    migrate.add_argument(
        "--interval",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="seconds between two runs with --continuous (default 60)",
    )
    migrate.add_argument(
        "--resume-from",
        metavar="NAME",
        help="start the index pass at this file (as a stopped run printed it)",
    )
    migrate.add_argument(
        "--batch-size",
        type=count_arg,
        default=100,
        metavar="N",
        help="files read from the index at a time (default 100)",
    )
    migrate.set_defaults(run=_guarded("migrate", _cmd_migrate))


def _register_replicate(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store replicate``: copy closed WARC files to the storages."""
    replicate = leaves.add_parser(
        "replicate",
        help="copy closed WARC files to the storages until the retention policy holds",
    )
    _common(replicate, settings_loader)
    add_progress_argument(replicate)
    replicate.add_argument(
        "--once", action="store_true", help="one pass of the director and workers, then exit"
    )
    replicate.set_defaults(run=_guarded("replicate", _cmd_replicate))


def _register_copies(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store copies``: where each file's copies are."""
    copies = leaves.add_parser(
        "copies", help="where each file's copies are (status per storage) and a summary"
    )
    _common(copies, settings_loader)
    copies.add_argument("--json", action="store_true", help="one JSON object on standard output")
    copies.add_argument("files", nargs="*", metavar="FILE", help="only these files (names)")
    copies.set_defaults(run=_guarded("copies", _cmd_copies))


def _register_scrub(leaves: _Leaves, settings_loader: SettingsLoader | None) -> None:
    """``store scrub``: verify copies, time-boxed."""
    scrub = leaves.add_parser(
        "scrub", help="verify copies (SHA-256), least recently verified first, time-boxed"
    )
    _common(scrub, settings_loader)
    add_progress_argument(scrub)
    scrub.add_argument(
        "--max-duration",
        type=_seconds,
        metavar="SECONDS",
        help="start no copy's verification after this many seconds (default: no limit)",
    )
    scrub.set_defaults(run=_guarded("scrub", _cmd_scrub))


def add_subcommands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    settings_loader: SettingsLoader | None = None,
) -> None:
    """Add ``store`` and its commands to the ``gateway`` parser's subcommands.

    Each leaf sets ``run`` (``args.run(args) -> int``, the exit status), as
    the other ``gateway`` commands do.
    """
    store = subparsers.add_parser(
        "store",
        help="the snapshot store: add, history, check, repair, migrate, replicate, copies, scrub",
    )
    leaves = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    add_store_commands(leaves, settings_loader=settings_loader)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gateway.commands.store COMMAND ...``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="gateway store", description=__doc__.split("\n")[0])
    leaves = parser.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    add_store_commands(leaves)
    args = parser.parse_args(argv)
    status: int = args.run(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
