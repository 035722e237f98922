"""Typed aiohttp AppKeys shared by the app and its handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.aggregate import Collection
from gateway.clients import SharedClients
from gateway.config import GatewayConfig
from gateway.metrics import Metrics
from gateway.readiness import Readiness

if TYPE_CHECKING:
    from gateway.jobs.service import JobsService

__all__ = [
    "CLIENTS",
    "COLLECTIONS",
    "CONFIG",
    "JOBS",
    "METRICS",
    "READINESS",
    "TIMEMAP_PAGE_SIZE",
]

COLLECTIONS = web.AppKey("collections", dict[str, Collection])
CLIENTS = web.AppKey("clients", SharedClients)
CONFIG = web.AppKey("config", GatewayConfig)
#: Mementos per TimeMap page (RFC 7089 §5); when absent,
#: :data:`gateway.api.memento.DEFAULT_TIMEMAP_PAGE_SIZE`.
TIMEMAP_PAGE_SIZE = web.AppKey("timemap_page_size", int)
#: The app's metrics: route counters and the ``/metrics`` registry (:mod:`gateway.metrics`).
METRICS = web.AppKey("metrics", Metrics)
#: What keeps ``/_ready`` from answering 200 (:mod:`gateway.readiness`).
READINESS = web.AppKey("readiness", Readiness)
#: The app's background jobs (:mod:`gateway.jobs.service`), started and
#: stopped by its cleanup context; typed without importing the jobs (and the
#: store) with this module.
JOBS: web.AppKey[JobsService] = web.AppKey("jobs")
