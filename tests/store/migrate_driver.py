"""Crash-test driver: ``gateway store migrate`` in a process that waits to be told to start.

Run as ``python -m tests.store.migrate_driver ROOT`` from the repository
root. It imports everything the command needs, prints ``ready``, waits for
one line on standard input, then runs ``gateway store migrate --root ROOT``
(:func:`gateway.commands.store.main`, the command's own code) and exits with its
status. Spawning the next process while the test verifies the previous
kill keeps Python's start-up out of the test's time.
"""

from __future__ import annotations

import sys

import gateway.store.migration.migrator  # noqa: F401  (imported before "ready": what the run needs)
from gateway.commands.store import main


def run(root: str) -> int:
    print("ready", flush=True)
    sys.stdin.readline()
    return main(["migrate", "--root", root, "--no-progress"])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
