"""``store.durable_ack``: a complete answer from a recording host means stored (issue 25 §6).

A recording ``gateway serve`` is killed with SIGKILL at random moments while
clients fetch new pages through it. After each kill the store is opened again
(a new server, which recovers it): every capture whose answer a client read
whole is there and loads. Answers cut short by the kill prove nothing either
way and are only counted.
"""

from __future__ import annotations

import functools
import http.client
import itertools
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from tests.e2e.support import get, index_rows, kill9, live_web, serve, until

CONFIG = """\
store:
  root: ./archive/store
  durable_ack: true                     # a complete answer means stored
collections:
  stored: $store
  web:
    index: {type: live, allow_private_networks: true}
    record: true
"""

ROUNDS = 3


def _fetch(port: int, url: str) -> bool:
    """True when the answer came whole: 200 and every byte its Content-Length announced."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", f"/web/resource?url={quote(url, safe='')}")
        response = conn.getresponse()
        body = response.read()
        length = response.getheader("Content-Length")
        return response.status == 200 and length is not None and len(body) == int(length)
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _at_least(items: list[str], n: int) -> bool:
    return len(items) >= n


def _clients(
    port: int,
    prefix: str,
    numbers: Iterator[int],
    stop: threading.Event,
    done: list[str],
    failed: list[int],
) -> None:
    """Fetch new pages (``prefix`` + a number; ``next()`` is atomic: each URL once)
    until ``stop``, noting which answers came whole."""
    while not stop.is_set():
        url = f"{prefix}{next(numbers)}"
        if _fetch(port, url):
            done.append(url)
        else:
            failed[0] += 1


def test_every_answer_completed_before_a_kill_is_stored(tmp_path: Path) -> None:
    (tmp_path / "collections.yaml").write_text(CONFIG)
    rng = random.Random(25)
    completed: list[str] = []
    cut = 0
    with live_web() as web:
        for round_ in range(ROUNDS):
            server, port = serve(tmp_path, name=f"recording-{round_}")
            stop = threading.Event()
            done: list[str] = []
            failed = [0]
            numbers = itertools.count()

            prefix = f"{web.base}/page/{round_}-"
            args = (port, prefix, numbers, stop, done, failed)
            threads = [threading.Thread(target=_clients, args=args) for _ in range(4)]
            for thread in threads:
                thread.start()
            until("answers completed", functools.partial(_at_least, done, 3))
            time.sleep(rng.random() * 0.5)  # then a random moment, answers in flight
            kill9(server)
            stop.set()
            for thread in threads:
                thread.join(60)
            completed += done
            cut += failed[0]
    server, port = serve(tmp_path, name="after")
    try:
        for url in completed:
            rows = index_rows(port, "stored", url)
            assert rows, f"{url}: answered whole, then lost"
            status, _, body = get(port, f"/stored/resource?url={quote(url, safe='')}")
            assert status == 200, body[:300]
    finally:
        server.stop()
    assert len(completed) >= ROUNDS
    print(f"{len(completed)} answers completed and all stored; {cut} cut short by the kills")
