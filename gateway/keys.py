"""Typed aiohttp AppKeys shared by the app and its handlers."""

from __future__ import annotations

from aiohttp import web

from gateway.aggregate import Collection
from gateway.clients import SharedClients
from gateway.config import GatewayConfig

__all__ = ["CLIENTS", "COLLECTIONS", "CONFIG"]

COLLECTIONS = web.AppKey("collections", dict[str, Collection])
CLIENTS = web.AppKey("clients", SharedClients)
CONFIG = web.AppKey("config", GatewayConfig)
