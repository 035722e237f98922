"""Typed aiohttp AppKeys shared by the app and its handlers."""

from __future__ import annotations

from aiohttp import web

from gateway.aggregate import Collection
from gateway.clients import SharedClients
from gateway.config import GatewayConfig

__all__ = ["CLIENTS", "COLLECTIONS", "CONFIG", "TIMEMAP_PAGE_SIZE"]

COLLECTIONS = web.AppKey("collections", dict[str, Collection])
CLIENTS = web.AppKey("clients", SharedClients)
CONFIG = web.AppKey("config", GatewayConfig)
#: Mementos per TimeMap page (RFC 7089 §5); when absent,
#: :data:`gateway.api.memento.DEFAULT_TIMEMAP_PAGE_SIZE`.
TIMEMAP_PAGE_SIZE = web.AppKey("timemap_page_size", int)
