"""Progress of long commands on standard error (tqdm), quiet when not on a terminal.

Every command that can run for minutes (``gateway index``, ``store add``,
``check``, ``repair``; ``replicate``, ``migrate``, ``scrub`` as they come)
makes its bar here, so they all look and behave alike::

    with progress_bar("store check", total=2 * size) as bar:
        for name in files:
            verify_file(path, progress=bar.update)   # bar.update(n): n more bytes done

The bar is tqdm's: counted in bytes by default (``unit="B"``, scaled to
kB/MB/GB by 1024), with rate and time left, redrawn at most 10 times a
second. ``enabled``: None (the default) draws it only when the stream is a
terminal, so logs, pipes and cron mail stay clean; True always draws it;
False never does. :func:`add_progress_argument` gives a command the matching
``--progress`` / ``--no-progress`` option. ``bar.update`` may be called from
a worker thread (tqdm locks its writes).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

    #: What :func:`progress_bar` returns: ``update(n)``, ``total``, ``close()``, ``with``.
    Bar = tqdm[Any]

__all__ = ["add_progress_argument", "progress_bar"]


def progress_bar(
    label: str,
    total: int | None = None,
    *,
    unit: str = "B",
    enabled: bool | None = None,
    stream: TextIO | None = None,
) -> Bar:
    """A progress bar for ``total`` units of work (None: unknown, a counter with a rate).

    ``unit="B"`` shows bytes scaled by 1024; any other unit (``"file"``,
    ``"capture"``) is counted as is. ``total`` may be set later
    (``bar.total = n; bar.refresh()``). Close it (or use it in ``with``) to
    end its line.
    """
    from tqdm import tqdm  # imported by the commands that draw a bar, not by --help

    as_bytes = unit == "B"
    return tqdm(
        total=total,
        desc=label,
        unit=unit,
        unit_scale=as_bytes,
        unit_divisor=1024 if as_bytes else 1000,
        file=stream or sys.stderr,
        disable=None if enabled is None else not enabled,
        mininterval=0.1,
    )


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: on a terminal only), as ``args.progress``."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on standard error (default: only when it is a terminal)",
    )
