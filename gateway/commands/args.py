"""Option value types shared by the ``gateway`` commands (argparse ``type=`` callables)."""

from __future__ import annotations

import argparse

__all__ = ["count_arg"]


def count_arg(text: str) -> int:
    """A count option's value: a whole number, at least 1 (``3000``).

    Raises :class:`argparse.ArgumentTypeError` naming the value, which
    argparse reports as a usage error (exit status 2).
    """
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return count
