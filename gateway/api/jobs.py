"""``GET /_jobs``: the background work of the store, as ``gateway jobs --json`` shows it.

The body is :meth:`JobsService.report <gateway.server.jobs_service.JobsService.report>`:
``{"now", "types": {type: {"states", "due", "oldest_due", "running",
"last_errors", "attention"}}, "orchestrator": {"enabled", "role", "pid",
"active", "running", "queues"}}``. The database is read in a worker thread.
"""

from __future__ import annotations

import sqlite3

from aiohttp import web

from gateway.api.keys import JOBS
from gateway.errors import JobsUnavailable

__all__ = ["jobs_handler"]


async def jobs_handler(request: web.Request) -> web.Response:
    """The jobs report (see the module docstring); 503 when the database cannot be read."""
    try:
        body = await request.app[JOBS].report()
    except sqlite3.Error as exc:
        raise JobsUnavailable(f"cannot read the jobs database: {exc}") from exc
    return web.json_response(body)
