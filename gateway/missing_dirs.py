"""Directories the config names that do not exist yet: created, or only reported.

``gateway serve`` creates a missing index directory (a path ending in
``/``) and a missing local resource prefix, so a fresh default
configuration runs at once. ``gateway check-config`` must change nothing on
disk: inside :func:`report_only` the same code notes each missing
directory instead (a context variable, so the sources and resolvers need no
flag of their own).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["ensure_directory", "report_only"]

_REPORTED: ContextVar[list[str] | None] = ContextVar("gateway_missing_dirs", default=None)


def ensure_directory(path: str, what: str) -> None:
    """Create directory ``path`` (and its parents) unless inside :func:`report_only`,
    where a missing one is noted as ``"<what> <path> does not exist"``.

    Raises :class:`OSError` when it cannot be created.
    """
    reported = _REPORTED.get()
    if reported is None:
        os.makedirs(path, exist_ok=True)
    elif not os.path.isdir(path):
        reported.append(f"{what} {path} does not exist; gateway serve creates it")


@contextlib.contextmanager
def report_only() -> Iterator[list[str]]:
    """Within: :func:`ensure_directory` creates nothing; the list gets one line per
    missing directory."""
    reported: list[str] = []
    token = _REPORTED.set(reported)
    try:
        yield reported
    finally:
        _REPORTED.reset(token)
