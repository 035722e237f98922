"""``gateway worker`` and ``gateway jobs``.

::

    gateway worker [--config FILE] [--log-level L] [--log-format text|json]
                                            run the store's background work until SIGTERM
    gateway jobs [--config FILE] [--json]   per object type: states, due, running, errors

Both read the ``store:`` and ``jobs:`` sections of the config (default
``collections.yaml``). ``worker`` runs an orchestrator of its own beside any
``gateway serve`` or other worker on the same store (claims are
compare-and-swap writes); SIGTERM or SIGINT stops claiming, lets the ticks
in hand finish within their limits, and exits 0. Exit status: 0 success, 1
a failure while running, 2 a bad config, a config that uses no store (both
say so, and neither creates one), or no store yet (``jobs``).

This module imports nothing heavy at import time: the ``gateway`` parser
registers these commands without loading the jobs machinery.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gateway.server.logs import add_logging_arguments

if TYPE_CHECKING:
    from gateway.server.jobs_service import JobsService

__all__ = ["add_subcommands"]

DEFAULT_CONFIG = "collections.yaml"


def _service(config_path: str, command: str) -> JobsService | None:
    from gateway.config import load_config
    from gateway.errors import ConfigError
    from gateway.server.jobs_service import JobsService

    try:
        config = load_config(config_path)
        if not config.uses_store:
            print(
                f"gateway {command}: {config_path} uses no store (no `store:` section, no "
                "$store source, no step that records): there is no background work here; "
                "add a `store:` section to run it",
                file=sys.stderr,
            )
            return None
        return JobsService.from_config(config, role="worker")
    except ConfigError as exc:
        print(f"gateway {command}: bad config {config_path}: {exc}", file=sys.stderr)
        return None


def _worker(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from gateway.server.logs import configure_logging

    service = _service(args.config, "worker")
    if service is None:
        return 2
    configure_logging(args.log_level, args.log_format)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, service.request_stop)
        await service.start()
        try:
            await service.wait()
        finally:
            await service.stop()

    print(
        f"gateway worker: running the jobs of {service.layout.root}"
        f" ({', '.join(t.name for t in service.actor_types) or 'no actor types'})",
        file=sys.stderr,
    )
    from gateway.store.errors import StoreError

    try:
        asyncio.run(run())
    except StoreError as exc:  # the store cannot be opened (repair runs, newer index, I/O)
        print(f"gateway worker: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"gateway worker: stopped on an error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _jobs(args: argparse.Namespace) -> int:
    import json

    from gateway.jobs.report import format_report

    service = _service(args.config, "jobs")
    if service is None:
        return 2
    if not service.db_path.exists():
        print(f"gateway jobs: no store at {service.layout.root}", file=sys.stderr)
        return 2
    report = service.read_report()
    body, line = _safety(service)
    if args.json:
        report["store_safety"] = body
        print(json.dumps(report, indent=2))
    else:
        print(f"jobs of {service.layout.root} at {report['now']}")
        print(format_report(report))
        print(f"store safety: {line}")
    return 0


def _safety(service: JobsService) -> tuple[dict[str, Any] | str, str]:
    """The store's safety now (:mod:`gateway.store.integrity.safety`), as the other
    reports give it: ``(its JSON, its line)``, or why it cannot be read (an index
    without the store's tables) twice."""
    import sqlite3
    import time

    from gateway.store.integrity.safety import policy_for, read_safety_at

    now = time.time()
    policy = policy_for(service.store_settings, service.settings.scrub_interval_days, now)
    try:
        safety = read_safety_at(service.db_path, policy, now)
    except sqlite3.Error as exc:
        why = f"not known: the index cannot be read for it ({exc})"
        return why, why
    return safety.to_json(), safety.summary_line()


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``worker`` and ``jobs`` to the ``gateway`` parser (each sets ``run``)."""
    worker = subparsers.add_parser(
        "worker", help="run the store's background work (imports, scrubs) until SIGTERM"
    )
    worker.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml to read")
    add_logging_arguments(
        worker, access_log=False, json_help=" (job records carry job_type, job_id, ...)"
    )
    worker.set_defaults(run=_worker)

    jobs = subparsers.add_parser(
        "jobs", help="background work per object type: states, due, running, last errors"
    )
    jobs.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml to read")
    jobs.add_argument("--json", action="store_true", help="print the report as JSON")
    jobs.set_defaults(run=_jobs)
