"""``GET /`` (collections and their steps), ``/_status`` (circuit breakers), ``/_health``."""

from __future__ import annotations

from aiohttp import web

from gateway.keys import COLLECTIONS

__all__ = ["health_handler", "root_handler", "status_handler"]


async def root_handler(request: web.Request) -> web.Response:
    """``{"collections": {name: {"steps": [{"name", "sources": {member: description}}]}}}``."""
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
    """Circuit-breaker state of every member: ``{coll: {step: {member: state}}}``."""
    body = {
        name: {
            step.name: {member: breaker.state() for member, breaker in step.index.breakers.items()}
            for step in collection.steps
        }
        for name, collection in request.app[COLLECTIONS].items()
    }
    return web.json_response({"breakers": body})


async def health_handler(request: web.Request) -> web.Response:
    """Liveness: ``{"ok": true}``."""
    return web.json_response({"ok": True})
