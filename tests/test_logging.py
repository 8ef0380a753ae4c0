"""The operator's log: the start-up line, the breaker's opening and closing,
recovery, and the counts of warnings left out, on a real Redis that is
killed and restarted."""

from __future__ import annotations

import http.client
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import get, install
from flask import Flask

from flask_redis_throttle import limit, testing
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import RedisServer, free_port

pytestmark = pytest.mark.redis


class FakeMonotonic:
    """A monotonic clock the test moves, for the breaker's back-off and the
    warnings' interval, so that no assertion depends on how fast the
    machine runs."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A Redis of this test's own, to kill and restart."""
    with testing.redis_server() as server:
        yield server


def limited_app(url: str) -> Flask:
    app = Flask("tests")
    app.config["RATELIMIT_STORAGE_URL"] = url

    @app.route("/")
    @limit("1000/m")
    def index() -> str:
        return "ok"

    return app


def messages(caplog: pytest.LogCaptureFixture, level: int, logger: str = "flask_redis_throttle") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


BREAKER = "flask_redis_throttle.breaker"


def watched(state: RateLimitState) -> FakeMonotonic:
    """Put the state's warnings and its breaker on one fake clock."""
    clock = FakeMonotonic()
    state.clock = clock  # type: ignore[method-assign]
    assert state.throttle is not None
    if state.throttle.breaker is not None:
        state.throttle.breaker.clock = clock
    return clock


def test_the_start_up_line_names_storage_strategy_and_limited_endpoints(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://operator:s3cret@127.0.0.1:{server.port}/0"
    app = limited_app(url)
    install(app, RATELIMIT_STRATEGY="gcra")

    # Registered after init_app: counted all the same, since the line is
    # logged at the first request.
    @app.route("/later")
    @limit("5/m")
    def later() -> str:
        return "ok"

    @app.route("/free")
    def free() -> str:
        return "ok"

    client = app.test_client()
    with caplog.at_level(logging.INFO, "flask_redis_throttle"):
        assert get(client, "/free").status_code == 200
        assert get(client, "/free").status_code == 200
    lines = messages(caplog, logging.INFO)
    assert lines == [
        f"flask-redis-throttle: storage redis://operator:***@127.0.0.1:{server.port}/0, strategy gcra, "
        "2 limited endpoint(s); fail open when the storage is unavailable"
    ]
    assert "s3cret" not in caplog.text


def test_the_breaker_opening_and_closing_are_logged_once_each(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = limited_app(server.url)
    state = install(app, RATELIMIT_BREAKER_THRESHOLD=2, RATELIMIT_BREAKER_BACKOFF=5.0)
    clock = watched(state)
    client = app.test_client()
    assert get(client).status_code == 200
    server.stop()
    with caplog.at_level(logging.INFO, "flask_redis_throttle"):
        for _ in range(6):  # 2 failures open it; the others are held back
            assert get(client).status_code == 200
        opened = messages(caplog, logging.WARNING, BREAKER)
        assert opened == [
            f"circuit breaker opened for {server.url} after 2 failure(s) in a row: "
            "not calling it for 5.0 s, then probing it"
        ]
        clock.now += 5.0  # the probe fails: it reopens for 10 s, which is no new event
        assert get(client).status_code == 200
        server.start()
        clock.now += 10.0
        assert get(client).status_code == 200  # the probe succeeds
        assert get(client).status_code == 200
    assert messages(caplog, logging.WARNING, BREAKER) == opened
    closed = messages(caplog, logging.INFO, BREAKER)
    assert closed == [f"circuit breaker closed for {server.url}: it answered a probe after 3 failure(s) in a row"]


def test_recovery_is_logged_and_the_next_outage_counts_afresh(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = limited_app(server.url)
    state = install(app, RATELIMIT_BREAKER_THRESHOLD=0)
    clock = watched(state)
    client = app.test_client()
    with caplog.at_level(logging.INFO, "flask_redis_throttle"):
        assert get(client).status_code == 200
        server.stop()
        for _ in range(4):
            assert get(client).status_code == 200
        first = messages(caplog, logging.WARNING)
        assert len(first) == 1
        # The first warning has no count: none were left out before it.
        assert first[0].endswith("; letting requests through.")
        assert "similar" not in first[0]

        server.start()
        assert get(client).status_code == 200
        assert get(client).status_code == 200
        assert messages(caplog, logging.INFO)[-1] == (
            f"rate limit storage {server.url} recovered: it decides requests again, after failing 4"
        )
        assert len([m for m in messages(caplog, logging.INFO) if "recovered" in m]) == 1

        clock.now += 60.0
        server.stop()
        assert get(client).status_code == 200
        assert get(client).status_code == 200
        clock.now += 60.0
        assert get(client).status_code == 200
    second = messages(caplog, logging.WARNING)[1:]
    # The 3 left out of the first outage do not carry into the second.
    assert len(second) == 2
    assert "similar" not in second[0]
    assert second[1].endswith("; letting requests through. 1 similar warning(s) were not logged since the last one.")


def test_a_refusal_from_the_block_cache_is_no_recovery(server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    app = Flask("tests")
    app.config["RATELIMIT_STORAGE_URL"] = server.url

    @app.route("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    state = install(app, RATELIMIT_BREAKER_THRESHOLD=0)
    watched(state)
    client = app.test_client()
    assert [get(client, ip="192.0.2.7").status_code for _ in range(2)] == [200, 429]  # now in the block cache
    server.stop()
    with caplog.at_level(logging.INFO, "flask_redis_throttle"):
        assert get(client, ip="192.0.2.8").status_code == 200  # Redis is asked, and fails
        assert get(client, ip="192.0.2.7").status_code == 429  # the cache refuses it, without Redis
    assert [m for m in messages(caplog, logging.INFO) if "recovered" in m] == []


ROOT = Path(__file__).resolve().parent.parent

SERVED = """\
import os
from flask import Flask
from flask_redis_throttle import RateLimit, limit

app = Flask("served")
app.config["RATELIMIT_STORAGE_URL"] = os.environ["FRT_TEST_REDIS_URL"]

@app.route("/")
@limit("1000/m")
def index():
    return "ok"

RateLimit(app)
"""


def docs_block(page: str, first_line: str) -> str:
    """The code block of ``docs/<page>`` whose first line is ``first_line``, dedented."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    start = lines.index(f"    {first_line}")
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block).rstrip() + "\n"


def test_the_gunicorn_recipe_logs_with_time_level_and_logger(server: RedisServer, tmp_path: Path) -> None:
    (tmp_path / "gunicorn.conf.py").write_text(docs_block("operations.rst", "# gunicorn.conf.py"))
    (tmp_path / "served.py").write_text(SERVED)
    port = free_port()
    env = {
        **os.environ,
        "FRT_TEST_REDIS_URL": server.url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--bind", f"127.0.0.1:{port}", "served:app"]
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as sink:
        process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=sink)
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, stderr.read_text()
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    connection.request("GET", "/")
                    assert connection.getresponse().status == 200
                    connection.close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "gunicorn did not answer within 30 s"
                    time.sleep(0.1)
        finally:
            process.terminate()
            process.wait(timeout=30)
    lines = [line for line in stderr.read_text().splitlines() if "flask_redis_throttle" in line]
    pattern = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[\d+\] \[INFO\] flask_redis_throttle: " + re.escape(
        f"flask-redis-throttle: storage {server.url}, strategy fixed-window, 1 limited endpoint(s); "
    )
    assert len(lines) == 1, lines
    assert re.match(pattern, lines[0]), lines[0]
