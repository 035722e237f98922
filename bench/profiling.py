"""Profile a server under wrk load with py-spy and summarize where its time goes.

``py-spy`` (``pip install py-spy``) samples the server process while wrk loads
it (:func:`profile_under_load`); :func:`summarize` reads the "raw" (collapsed
stacks) output and ranks functions by **self** time (the frame on top of the
stack) and by **inclusive** time (anywhere on the stack), in percent of the
samples taken while the process was busy (py-spy leaves idle samples out).

Inclusive figures of coroutines are lower bounds: a coroutine resumed by the
event loop's C code (uvloop) is sampled without the frames that awaited it.
Self time is exact. Time inside a system call (``transport.write`` sending on
a socket) is charged to the Python function that made it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness import Server, WrkResult, run_wrk

_FRAME = re.compile(r"(?P<func>.*) \((?P<path>.*?):\d+\)$")
_TRIM = ("site-packages/", "/work/main/", "lib/python3.11/")


def _frame_name(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file path trimmed to the package)``."""
    m = _FRAME.match(frame)
    if not m:
        return frame or "(unknown)"
    path = m["path"]
    for marker in _TRIM:
        path = path.split(marker)[-1]
    return f"{m['func']} ({path})"


@dataclass(frozen=True, slots=True)
class Profile:
    """Samples and per-function self and inclusive sample counts."""

    samples: int
    self_counts: Counter[str]
    inclusive_counts: Counter[str]

    def top(self, n: int, *, inclusive: bool = False) -> list[tuple[float, str]]:
        """The ``n`` largest shares as (percent of samples, function), largest first."""
        counts = self.inclusive_counts if inclusive else self.self_counts
        total = max(self.samples, 1)
        return [(100 * c / total, name) for name, c in counts.most_common(n)]


def summarize(raw: Path) -> Profile:
    """Read py-spy's ``--format raw`` output (``frame;frame;... count`` per line).

    With ``--nonblocking`` py-spy can read a frame name while the process
    changes it and write garbage (even newlines); lines that are not a stack
    of ``function (file:line)`` frames and a sample count are skipped.
    """
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text("utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        raw_frames = stack.split(";")
        if not count_text.isdigit() or not all(_FRAME.match(f) for f in raw_frames):
            continue
        count = int(count_text)
        total += count
        frames = [_frame_name(f) for f in raw_frames]
        self_counts[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return Profile(total, self_counts, inclusive)


def profile_under_load(
    server: Server,
    paths: Sequence[str],
    out: Path,
    *,
    connections: int,
    duration_s: float,
    workdir: Path,
    rate_hz: int = 250,
) -> tuple[WrkResult, Profile]:
    """Run wrk for ``duration_s`` + 2 s and py-spy on ``server`` for ``duration_s``.

    py-spy runs with ``--nonblocking`` (it does not pause the process), which
    costs the server little; the wrk figures are still somewhat lower than
    unprofiled ones. Raises RuntimeError when py-spy is missing or fails.
    """
    spy = shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    argv = [spy, "record", "-p", str(server.proc.pid), "-d", f"{duration_s:g}"]
    argv += ["-r", str(rate_hz), "-f", "raw", "-o", str(out), "--nonblocking"]
    results: list[WrkResult] = []

    def load() -> None:
        results.append(
            run_wrk(
                server,
                paths,
                connections=connections,
                duration_s=duration_s + 2,
                workdir=workdir,
            )
        )

    thread = threading.Thread(target=load)
    thread.start()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    finally:
        thread.join()
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed ({done.returncode}): {done.stderr[-2000:]}")
    return results[0], summarize(out)


def print_profile(title: str, result: WrkResult, profile: Profile, n: int = 15) -> None:
    """Print the top ``n`` functions by self and by inclusive time."""
    print(
        f"\n## profile: {title} ({result.requests_per_s:,.0f} req/s while profiled, "
        f"{profile.samples} busy samples)"
    )
    print("self %  | function")
    for share, name in profile.top(n):
        print(f"{share:6.1f} | {name}")
    print("incl %  | function (coroutines: lower bound)")
    for share, name in profile.top(n * 2, inclusive=True):
        print(f"{share:6.1f} | {name}")
