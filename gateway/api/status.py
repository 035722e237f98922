"""``GET /`` (collections and their steps), ``/_status`` (circuit breakers), ``/_health``,
``/_ready`` (readiness, :mod:`gateway.api.readiness`) and ``/metrics``
(:mod:`gateway.api.metrics`)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.api.keys import CLIENTS, COLLECTIONS, CONFIG
from gateway.api.metrics import METRICS
from gateway.api.pages import home_page, wants_html
from gateway.api.readiness import READINESS, collections_down

__all__ = [
    "health_handler",
    "metrics_handler",
    "ready_handler",
    "root_handler",
    "status_handler",
]

#: The Prometheus text exposition format, version 0.0.4.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def root_handler(request: web.Request) -> web.Response:
    """``{"collections": {name: {"steps": [{"name", "sources": {member: description}}]}}}``.

    A client asking for ``text/html`` (a browser) gets the collections page
    instead (:func:`gateway.api.pages.home_page`).
    """
    if wants_html(request):
        return await home_page(request)
    body = {
        name: {
            "sequence": collection.is_sequence,
            "steps": [
                {
                    "name": step.name,
                    "timeout_s": step.index.timeout_s,
                    "sources": dict(step.index.describe_members()),
                    "loaders": [loader.describe() for loader in step.loaders],
                }
                for step in collection.steps
            ],
        }
        for name, collection in request.app[COLLECTIONS].items()
    }
    return web.json_response({"collections": body})


async def status_handler(request: web.Request) -> web.Response:
    """Circuit-breaker state of every member: ``{"breakers": {coll: {step: {member: state}}}}``,
    and of every resource loader that has loaded: ``{"loaders": {coll: {step: {loader: state}}}}``.

    With a store, also ``"store"``: whether every capture is safe, files by
    safety, the captures not yet safe and the oldest one's wait, copies by
    place, storages that cannot be opened, and reads from replicas
    (:func:`gateway.store.integrity.status.store_status`).
    """
    breakers = {
        name: {
            step.name: {member: breaker.state() for member, breaker in step.index.breakers.items()}
            for step in collection.steps
        }
        for name, collection in request.app[COLLECTIONS].items()
    }
    loaders = {
        name: {
            step.name: {loader: breaker.state() for loader, breaker in step.load_breakers.items()}
            for step in collection.steps
        }
        for name, collection in request.app[COLLECTIONS].items()
    }
    body: dict[str, object] = {"breakers": breakers, "loaders": loaders}
    clients = request.app[CLIENTS]
    if clients.store is not None and clients.store_safety is not None:
        from gateway.store.integrity.status import store_status

        body["store"] = await asyncio.to_thread(
            store_status, clients.store.replicas, clients.store_safety
        )
    return web.json_response(body)


async def health_handler(request: web.Request) -> web.Response:
    """Liveness: ``{"ok": true}``."""
    return web.json_response({"ok": True})


async def ready_handler(request: web.Request) -> web.Response:
    """Readiness: ``{"ready": true}`` (200), or 503 ``{"ready": false, "reasons": {name: why}}``.

    Not ready while starting or stopping, while the store is not open, while a
    subsystem blocks readiness, or while a collection has every source down
    (see :mod:`gateway.api.readiness`).
    """
    app = request.app
    reasons = app[READINESS].reasons()
    if app[CONFIG].uses_store and app[CLIENTS].store is None and "startup" not in reasons:
        reasons["store"] = "the snapshot store is not open"
    collections = app[COLLECTIONS]
    reasons.update(collections_down(collections))
    if reasons:
        return web.json_response({"ready": False, "reasons": reasons}, status=503)
    return web.json_response({"ready": True})


async def metrics_handler(request: web.Request) -> web.Response:
    """Every metric family in the Prometheus text format 0.0.4 (:mod:`gateway.api.metrics`).

    Rendered in a worker thread: registered collectors may block briefly.
    """
    metrics = request.app[METRICS]
    metrics.registry(request.app)  # made once, here on the event loop, not in two threads
    body = await asyncio.to_thread(metrics.render, request.app)
    response = web.Response(body=body)
    response.headers["Content-Type"] = METRICS_CONTENT_TYPE
    return response
