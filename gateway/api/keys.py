"""Typed aiohttp AppKeys shared by the app and its handlers."""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from gateway.clients import SharedClients
from gateway.config import GatewayConfig
from gateway.index.collection import Collection

__all__ = [
    "CLIENTS",
    "COLLECTIONS",
    "CONFIG",
    "JOBS",
    "SHOW_PATHS",
    "TIMEMAP_PAGE_SIZE",
    "JobsReporter",
]

COLLECTIONS = web.AppKey("collections", dict[str, Collection])
CLIENTS = web.AppKey("clients", SharedClients)
CONFIG = web.AppKey("config", GatewayConfig)
#: Mementos per TimeMap page (RFC 7089 §5); when absent,
#: :data:`gateway.api.memento.DEFAULT_TIMEMAP_PAGE_SIZE`.
TIMEMAP_PAGE_SIZE = web.AppKey("timemap_page_size", int)
#: The HTML pages show the server's filesystem paths (index files, directories,
#: the store's root); when absent or false they are hidden
#: (:mod:`gateway.api.pages`; ``create_app(show_paths=...)``, ``GATEWAY_SHOW_PATHS``).
SHOW_PATHS = web.AppKey("show_paths", bool)


class JobsReporter(Protocol):
    """What ``GET /_jobs`` asks of the app's background jobs
    (:class:`gateway.server.jobs_service.JobsService`, started and stopped by
    the app's cleanup context)."""

    async def report(self) -> dict[str, Any]: ...


JOBS = web.AppKey("jobs", JobsReporter)
