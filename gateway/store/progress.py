"""A byte-counting progress bar on stderr for long store commands.

On a terminal the bar is redrawn in place (at most 10 times a second). On
anything else it stays silent for the first ``quiet_s`` seconds, then prints
one plain line every ``every_s`` seconds, so short runs and test logs stay
clean while a long ``store check`` in a cron job still shows it is alive.
"""

from __future__ import annotations

import sys
import time
from typing import Final, TextIO

__all__ = ["ProgressBar"]

_WIDTH: Final = 30


class ProgressBar:
    """``advance(n)`` adds ``n`` bytes out of ``total``; ``finish()`` ends the line.

    ``enabled``: None decides by the stream (a TTY) and the run's length;
    False never draws; True always draws (even when not a TTY).
    """

    def __init__(
        self,
        total: int,
        *,
        label: str = "",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        quiet_s: float = 2.0,
        every_s: float = 5.0,
    ) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.quiet_s = quiet_s if enabled is None else 0.0
        self.every_s = every_s
        self._start = time.monotonic()
        self._last = 0.0
        self._drawn = False

    def advance(self, count: int) -> None:
        self.done = min(self.total, self.done + max(count, 0))
        if self.enabled is False:
            return
        now = time.monotonic()
        if now - self._start < self.quiet_s and not self.tty:
            return
        interval = 0.1 if self.tty else self.every_s
        if self._drawn and now - self._last < interval:
            return
        self._last = now
        self._draw()

    def _draw(self) -> None:
        fraction = self.done / self.total
        filled = int(fraction * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        text = (
            f"{self.label} [{bar}] {fraction * 100:5.1f}% "
            f"{self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB"
        )
        if self.tty:
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self.enabled is False or not self._drawn:
            return
        self.done = self.total
        self._draw()
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
