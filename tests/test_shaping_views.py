"""Shaping on views: ``@limit(..., delay=...)`` lets a request over the rate
wait for its turn, up to the delay, rather than get a 429; checked through
a real app, and under gunicorn with several workers on a real Redis."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from flask import Flask
from helpers import Clock, get, install, join_all, wait_for_gunicorn
from prometheus_client import CollectorRegistry

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle._request.spec import make_spec
from flask_redis_throttle.current import current_limit
from flask_redis_throttle.errors import InvalidLimit
from flask_redis_throttle.testing import free_port, redis_server

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategy": "fixed-window"}, "delay needs strategy='gcra' or 'sliding-log', not 'fixed-window'"),
        ({"strategy": "sliding-window"}, "not 'sliding-window': its count is an estimate"),
        ({"strategy": "sliding-log", "deduct_when": lambda response: True}, "delay= cannot go with deduct_when="),
        ({"cost": 2}, "cost 2 is more than '10/s' lets go at once with a delay"),
        ({"deduct_when": lambda response: True}, "delay= cannot go with deduct_when="),
    ],
)
def test_a_delay_where_it_has_no_meaning_fails_at_decoration(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidLimit, match=message):
        limit("10/s", delay="250ms", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("delay", ["fast", "-1s", "11s", "250 us", 10.5, -0.1, None])
def test_a_bad_delay_fails_at_decoration(delay: object) -> None:
    with pytest.raises(InvalidLimit, match="must be a duration from 0 to 10 s"):
        limit("10/s", delay=delay)  # type: ignore[arg-type]


@pytest.mark.parametrize(("delay", "seconds"), [("250ms", 0.25), ("1.5s", 1.5), (2, 2.0), (True, 0.5), (False, 0)])
def test_delays_are_read_as_seconds(delay: object, seconds: float) -> None:
    made = make_spec("10/s", delay=delay)  # type: ignore[arg-type]
    assert made.delay == seconds
    assert made.strategy == ("gcra" if seconds else None)


def test_a_sliding_log_keeps_its_strategy_and_any_cost() -> None:
    # It lets the whole quota go at once: no burst, and a cost of 3 fits.
    made = make_spec("10/s", delay="250ms", strategy="sliding-log", cost=3)
    assert (made.strategy, made.cost) == ("sliding-log", 3)
    assert made.policy(made.layers or (), "s", "sliding-log").burst == 0
    assert make_spec("10/s", delay=True).policy(made.layers or (), "s", "gcra").burst == 1


def test_a_shaped_view_waits_instead_of_refusing(app: Flask) -> None:
    registry = CollectorRegistry()

    @app.route("/")
    @limit("5/s", delay="500ms")
    def index() -> str:
        found = current_limit()
        assert found is not None
        return str(found.retry_after)

    app.config.update(RATELIMIT_STORAGE_URL=app.config["RATELIMIT_STORAGE_URL"])
    RateLimit(app, metrics=registry)
    client = app.test_client()
    started = time.monotonic()
    responses = [get(client) for _ in range(4)]
    elapsed = time.monotonic() - started
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert [float(r.text) for r in responses[:3]] == pytest.approx([0.0, 0.2, 0.4])
    assert 0.6 <= elapsed < 0.6 + 0.5
    assert registry.get_sample_value("ratelimit_delayed_total", {"endpoint": "index"}) == 2
    assert registry.get_sample_value("ratelimit_delay_seconds_sum") == pytest.approx(0.6)
    assert registry.get_sample_value("ratelimit_delay_seconds_count") == 2


def test_a_shaped_sliding_log_view_waits_for_the_oldest_entry(app: Flask, clock: Clock) -> None:
    registry = CollectorRegistry()

    @app.route("/")
    @limit("2/s", delay="500ms", strategy="sliding-log")
    def index() -> dict[str, float]:
        found = current_limit()
        assert found is not None
        return {"waited": found.retry_after, "remaining": found.remaining}

    RateLimit(app, metrics=registry)
    client = app.test_client()
    assert [get(client).json for _ in range(2)] == [{"waited": 0, "remaining": 1}, {"waited": 0, "remaining": 0}]
    # At 0.6 s the two entries of 0 leave the window in 0.4 s: two requests
    # wait for them, the second seeing the first's turn in its window; the
    # next one's turn would be 1.4 s away.
    clock.set(0.6)
    started = time.monotonic()
    responses = [get(client) for _ in range(3)]
    elapsed = time.monotonic() - started
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert [r.json for r in responses[:2]] == [{"waited": 0.4, "remaining": 1}, {"waited": 0.4, "remaining": 0}]
    assert responses[2].headers["Retry-After"] == "2"
    assert 0.8 <= elapsed < 0.8 + 0.5
    assert registry.get_sample_value("ratelimit_delayed_total", {"endpoint": "index"}) == 2
    assert registry.get_sample_value("ratelimit_delay_seconds_sum") == pytest.approx(0.8)


def test_a_shadow_shaped_limit_does_not_wait(app: Flask) -> None:
    @app.route("/")
    @limit("1/s", delay="1s", shadow=True)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    started = time.monotonic()
    assert [get(client).status_code for _ in range(3)] == [200, 200, 200]
    assert time.monotonic() - started < 0.5


APP = """
import os, time
from flask import Flask, g
from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.current import current_limit

app = Flask(__name__)
app.config.update(RATELIMIT_STORAGE_URL=os.environ["FRT_TEST_REDIS_URL"], RATELIMIT_IDENTITIES=["ip"])

@app.before_request
def arrived():  # before the extension's hook: just before the script decides
    g.arrived = time.time()

RateLimit(app)

@app.route("/")
@limit("10/s", delay="300ms", strategy=os.environ.get("FRT_TEST_STRATEGY"))
def index():
    waited = current_limit().retry_after
    return {"turn": g.arrived + waited, "ran": time.time(), "waited": waited, "pid": os.getpid()}

@app.route("/ping")
def ping():
    return "pong"
"""


@pytest.mark.redis
@pytest.mark.real_clock
@pytest.mark.parametrize("strategy", [None, "sliding-log"], ids=["gcra", "sliding-log"])
def test_shaping_keeps_the_quota_across_gunicorn_workers(tmp_path: Path, strategy: str | None) -> None:
    (tmp_path / "served.py").write_text(textwrap.dedent(APP))
    port = free_port()
    with redis_server() as server:
        path = os.pathsep.join([str(tmp_path), str(ROOT)])
        env = {**os.environ, "FRT_TEST_REDIS_URL": server.url, "PYTHONPATH": path}
        if strategy is not None:
            env["FRT_TEST_STRATEGY"] = strategy
        command = [sys.executable, "-m", "gunicorn", "--workers", "4", "--threads", "4", "--bind", f"127.0.0.1:{port}"]
        process = subprocess.Popen(
            [*command, "served:app"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for_gunicorn(port, process, "/ping")
            results: list[tuple[int, dict[str, float]]] = []
            lock = threading.Lock()

            def fetch() -> None:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                connection.request("GET", "/", headers={"Connection": "close"})
                response = connection.getresponse()
                body = response.read()
                with lock:
                    results.append((response.status, json.loads(body) if response.status == 200 else {}))
                connection.close()

            # Bursts of 8 requests at once, every 0.4 s: 20 a second on
            # average, twice the quota, in clumps.
            threads: list[threading.Thread] = []
            for _ in range(6):
                burst = [threading.Thread(target=fetch) for _ in range(8)]
                for thread in burst:
                    thread.start()
                threads += burst
                time.sleep(0.4)
            join_all(threads, 60, "the gunicorn clients")
        finally:
            process.terminate()
            process.wait(timeout=30)
    admitted = [body for status, body in results if status == 200]
    refused = [status for status, _ in results if status != 200]
    assert len(admitted) + len(refused) == 48
    assert refused, "a burst twice the quota must see refusals"
    assert set(refused) == {429}
    delayed = [body["waited"] for body in admitted if body["waited"] > 0]
    assert len(delayed) >= 6, "bursts must be smoothed, not only refused"
    assert max(delayed) <= 0.3
    # Each ran no sooner than its turn: it slept for its wait.
    assert all(body["ran"] >= body["turn"] for body in admitted)
    assert len({body["pid"] for body in admitted}) > 1
    # Never more than 10 turns in any second. A turn is its wait after the
    # moment the script decided, which is a moment after the request's
    # arrival: up to the scheduler's delay on a busy machine.
    runs = sorted(body["turn"] for body in admitted)
    assert all(later - first >= 1 - 0.05 for first, later in zip(runs, runs[10:], strict=False)), runs
