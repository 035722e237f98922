"""The ``jobs:`` section, the jobs of a serving app, ``GET /_jobs`` and the host lock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.cli import build_parser
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.jobs.db import utcnow, write_objects
from gateway.jobs.schema import connect, create_schema
from gateway.jobs.settings import JobsSettings
from gateway.server.app import create_app
from gateway.server.jobs_service import JobsService
from gateway.store.settings import StoreSettings
from tests.api.test_metrics import scrape, value
from tests.jobs import probe_plugin
from tests.jobs.probe_plugin import PROBE, ProbeColumns

Client = TestClient[web.Request, web.Application]


@pytest.mark.parametrize(
    ("yaml_text", "problem"),
    [
        ("jobs: {pool_s: 1}", "jobs.pool_s: unknown key; expected one of enabled, import_max_"),
        ("jobs: {poll_s: 0}", "jobs: poll_s: 0 is not a positive number"),
        ("jobs: {enabled: maybe}", "jobs.enabled: expected true or false, got 'maybe'"),
        ("jobs: {plugins: ['']}", "jobs: plugins[0]: empty; expected a plugin name"),
        ("jobs: {scrub_max_concurrent: 0}", "jobs: scrub_max_concurrent: 0 is below 1"),
    ],
)
def test_a_bad_jobs_section_names_its_yaml_path(yaml_text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml_text)
    assert problem in str(caught.value)


def test_jobs_run_by_default_when_the_store_is_used(tmp_path: Path) -> None:
    plain = parse_config("collections: {web: ./indexes/}")
    assert JobsService.from_config(plain, role="serve").enabled is False
    assert JobsService.from_config(plain, role="worker").enabled is True
    stored = parse_config(f"store: {{root: {tmp_path}}}\ncollections: {{s: $store}}")
    assert JobsService.from_config(stored, role="serve").enabled is True
    off = parse_config(f"store: {{root: {tmp_path}}}\njobs: {{enabled: false}}")
    assert JobsService.from_config(off, role="serve").enabled is False
    one = parse_config("jobs: {plugins: tests.jobs.probe_plugin}")
    assert one.jobs.plugins == ("tests.jobs.probe_plugin",)


def test_the_commands_are_registered() -> None:
    help_text = build_parser().format_help()
    assert "worker" in help_text
    assert "jobs" in help_text


async def test_jobs_of_an_app_without_a_store_are_off(
    aiohttp_client: Callable[..., Awaitable[Client]], tmp_path: Path
) -> None:
    config = parse_config(f"store: {{root: {tmp_path / 'unused'}}}\ncollections: {{}}")
    client = await aiohttp_client(create_app(config))
    response = await client.get("/_jobs")
    assert response.status == 200
    body = await response.json()
    assert body["orchestrator"]["enabled"] is True  # a store: section was given
    config = parse_config("collections: {}")
    client = await aiohttp_client(create_app(config))
    body = await (await client.get("/_jobs")).json()
    assert body["orchestrator"] == {
        "enabled": False,
        "role": "serve",
        "pid": body["orchestrator"]["pid"],
        "active": False,
        "running": {},
        "queues": {},
    }


async def test_the_serving_app_runs_its_jobs_and_reports_them(
    aiohttp_client: Callable[..., Awaitable[Client]], tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    config = parse_config(
        f"store: {{root: {root}, fsync: never}}\n"
        "jobs: {plugins: [tests.jobs.probe_plugin], poll_s: 0.1}\n"
        "collections: {stored: $store}\n"
    )
    app = create_app(config)
    client = await aiohttp_client(app)
    service = JobsService.from_config(config, role="worker")  # a second process, in effect
    assert service.db_path.exists()
    conn = connect(service.db_path)
    write_objects(conn, PROBE, utcnow(), [ProbeColumns()] * 5)
    conn.close()
    deadline = time.monotonic() + 30
    while True:
        body = await (await client.get("/_jobs")).json()
        if body["types"]["probe"]["states"]["done"] == 5:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)
    assert body["orchestrator"]["active"] is True
    assert body["types"]["probe"]["due"] == 0


async def test_one_serving_process_per_host_runs_the_orchestrator(tmp_path: Path) -> None:
    settings = JobsSettings(poll_s=0.05)
    store = StoreSettings(root=str(tmp_path))
    first = JobsService(settings, store, role="serve", plugins=[probe_plugin], host_lock=True)
    second = JobsService(settings, store, role="serve", plugins=[probe_plugin], host_lock=True)
    await first.start()
    await second.start()
    try:
        await _until(lambda: first.active)
        await asyncio.sleep(0.3)
        assert not second.active  # standing by
        await first.stop()
        await _until(lambda: second.active)  # took over within 10 * poll_s
    finally:
        await first.stop()
        await second.stop()


async def _until(condition: Callable[[], bool], within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


async def test_metrics_show_the_jobs_by_type_and_state(
    aiohttp_client: Callable[..., Awaitable[Client]], tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    config = parse_config(
        f"store: {{root: {root}, fsync: never}}\n"
        "jobs: {enabled: false, plugins: [tests.jobs.probe_plugin]}\n"
        "collections: {stored: $store}\n"
    )
    client = await aiohttp_client(create_app(config))
    conn = connect(root / "index.sqlite3")
    create_schema(conn, [PROBE])  # the probe plugin's table (its jobs do not run here)
    now = utcnow()
    write_objects(conn, PROBE, now, [ProbeColumns()] * 3, retry_at=now - timedelta(minutes=2))
    write_objects(conn, PROBE, now, [ProbeColumns()], status="done")
    conn.close()
    families = await scrape(client)
    assert value(families, "gateway_jobs_objects", type="probe", state="queued") == 3
    assert value(families, "gateway_jobs_objects", type="probe", state="done") == 1
    assert value(families, "gateway_jobs_objects", type="scrub", state="good") == 0
    assert value(families, "gateway_jobs_due", type="probe") == 3
    assert value(families, "gateway_jobs_running", type="probe") == 0
    assert 110 < value(families, "gateway_jobs_oldest_due_seconds", type="probe") < 3600
