"""``gateway store migrate``: the command's run (its parser is :mod:`gateway.commands.store`'s).

::

    gateway store migrate [--root DIR | --config FILE] [--continuous [--interval S]]
                          [--resume-from NAME] [--batch-size N] [--progress | --no-progress]

Opens the store shared, beside a running gateway, and runs
:func:`gateway.store.migration.migrator.run_migration` once, or again every
``--interval`` seconds with ``--continuous``, drawing a progress bar on
standard error when it is a terminal. SIGINT/SIGTERM stop it cleanly between
two files; a stopped run says how to resume. Exit status: 0 when the run
left nothing for later and reported nothing, else 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.store.settings import StoreSettings

__all__ = ["cmd_migrate"]


def cmd_migrate(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store migrate`` over the store of ``settings``; returns the exit status."""
    import signal
    import threading

    from gateway.progress import progress_bar
    from gateway.store.db import IndexDB
    from gateway.store.layout import layout_for
    from gateway.store.migration.migrator import MigrationReport, open_shared, run_migration

    layout = layout_for(settings.root)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        stopping.set()

    def once(db: IndexDB, resume: str | None) -> MigrationReport:
        # The bar counts the index pass's files, then every file on disk.
        total = db.count_files_to_move(layout.current) + db.count_files()
        with progress_bar("store migrate", total, unit="file", enabled=args.progress) as bar:
            report = MigrationReport(say=lambda line: bar.write(line, file=sys.stdout))
            run_migration(
                layout,
                db,
                report,
                batch_size=args.batch_size,
                resume_from=resume,
                stop=stopping.is_set,
                on_file=lambda _: bar.update(1),
            )
        print(f"store migrate: {report.summary()}")
        return report

    main = threading.current_thread() is threading.main_thread()  # where signals are handled
    signals = (signal.SIGINT, signal.SIGTERM) if main else ()
    previous = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        with open_shared(layout) as db:
            report = once(db, args.resume_from)
            while args.continuous and not stopping.wait(args.interval):
                report = once(db, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if args.continuous and report.stopped and report.stopped_at is None:
        report.stopped = False  # stopped between passes, or in a pass that runs again anyway
    return 0 if report.clean else 1
