"""The failure policy: what a request gets when Redis is away, flushed or
restarted, or the storage path fails unexpectedly (RATELIMIT_FAIL_OPEN, the
rare warning, 503 with Retry-After): never a 500, never a hang.

One request at a time; ``test_server_faults.py`` breaks a server while
threads send requests.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import redis
from flask import Flask
from helpers import extension_records, get, install

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.core.engine.throttle import UnexpectedError
from flask_redis_throttle.testing import RedisServer, free_port


def limited(app: Flask, spec: str = "2/m") -> None:
    @app.get("/")
    @limit(spec)
    def index() -> str:
        return "ok"


@pytest.fixture
def down_app() -> Flask:
    """An app whose Redis URL points at a port nothing listens on."""
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=f"redis://127.0.0.1:{free_port()}/0")
    limited(app)
    return app


def test_fail_open_lets_requests_through_and_warns_rarely(down_app: Flask, caplog, monkeypatch) -> None:
    connects = []
    original = redis.connection.Connection._connect
    monkeypatch.setattr(redis.connection.Connection, "_connect", lambda self: connects.append(1) or original(self))
    install(down_app)
    client = down_app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        responses = [get(client) for _ in range(20)]
    assert [r.status_code for r in responses] == [200] * 20
    assert "RateLimit" not in responses[0].headers
    warnings = [r.getMessage() for r in extension_records(caplog)]
    assert len(warnings) == 1
    assert "unavailable" in warnings[0]
    assert "letting requests through" in warnings[0]
    # A refused connection is tried at most twice per request (one immediate
    # retry), with no back-off sleeping: redis-py's own default would try 11
    # times and sleep about 4 seconds in between.
    assert len(connects) <= 2 * 20


def test_the_warning_repeats_after_its_interval(down_app: Flask, caplog, monkeypatch) -> None:
    import flask_redis_throttle._ops.notices as notices

    monkeypatch.setattr(notices, "WARNING_INTERVAL", 0.0)
    install(down_app)
    client = down_app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        for _ in range(3):
            get(client)
    assert len(extension_records(caplog)) == 3


def test_fail_closed_answers_503_with_retry_after(down_app: Flask) -> None:
    install(down_app, RATELIMIT_FAIL_OPEN=False)
    response = get(down_app.test_client())
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_script_flush_is_survived(app: Flask, redis_client: redis.Redis, statuses) -> None:
    limited(app, "3/m")
    install(app)
    client = app.test_client()
    assert statuses(client, 1, "/") == [200]
    redis_client.script_flush()
    # NOSCRIPT is answered by loading the script again; the counts stay.
    assert statuses(client, 3, "/") == [200, 200, 429]


@pytest.mark.redis
def test_redis_restart_is_survived(caplog) -> None:
    server = RedisServer()
    server.start()
    try:
        app = Flask("tests")
        # Without the block cache, which would (rightly) go on refusing the
        # blocked client for up to a second, whatever Redis's state; and with
        # a short circuit breaker back-off, to wait out below.
        app.config.update(
            TESTING=True,
            RATELIMIT_STORAGE_URL=server.url,
            RATELIMIT_BLOCK_CACHE_SIZE=0,
            RATELIMIT_BREAKER_BACKOFF=0.05,
        )
        limited(app, "2/m")
        install(app)
        client = app.test_client()
        assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
        server.stop()
        with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
            assert [get(client).status_code for _ in range(3)] == [200, 200, 200]
        assert len(extension_records(caplog)) == 1
        server.start()
        time.sleep(0.06)  # the breaker opened after 3 failures; its back-off ends
        # The restart lost the counts (no persistence) and the script cache;
        # the pooled connection is dead. The first request probes: it
        # reconnects, reloads the script and is counted, with no 500 on the way.
        assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
    finally:
        server.close()


def test_an_error_in_a_view_is_not_ours(app: Flask) -> None:
    @app.get("/")
    @limit("5/m")
    def index() -> Any:
        raise ValueError("the view's own bug")

    install(app)
    app.config["TESTING"] = False
    response = get(app.test_client())
    assert response.status_code == 500  # the view's, and it still has our headers
    assert response.headers["RateLimit"] == '"1m";r=4;t=' + response.headers["RateLimit"].rsplit("=", 1)[1]


def _broken_client(server: RedisServer) -> redis.Redis:
    """A client on a real server, built with an option redis-py takes at
    construction and trips over on every call (an AttributeError)."""
    return redis.Redis.from_url(server.url, retry=5)


def _raising_evaluate(*args: Any) -> Any:
    raise TypeError("a bug in the storage path")


@pytest.mark.redis
@pytest.mark.internal_error
@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
@pytest.mark.parametrize("fault", ["bad-client-option", "storage-bug", "throttle-bug"])
def test_an_unexpected_error_in_the_storage_follows_the_failure_policy(
    redis_server: RedisServer, fault: str, fail_open: bool, caplog, monkeypatch, internal_errors
) -> None:
    """A bug is not an outage: the failure policy answers the request, never
    with a 500, but the error is logged at ERROR (once, however many
    requests meet it), counted apart in the metrics, and the breaker does
    not count it as Redis failing."""
    from prometheus_client import CollectorRegistry

    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_FAIL_OPEN=fail_open, RATELIMIT_STORAGE_URL=redis_server.url)
    limited(app, "2/m")
    client = _broken_client(redis_server) if fault == "bad-client-option" else None
    registry = CollectorRegistry()
    RateLimit(app, redis=client, metrics=registry)
    state = app.extensions["ratelimit"]
    if fault == "storage-bug":
        monkeypatch.setattr(state.throttle.sender, "evaluate", _raising_evaluate)
    elif fault == "throttle-bug":  # before the call to Redis, outside any breaker
        monkeypatch.setattr(state.throttle, "_prepare", _raising_evaluate)
    web = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        responses = [get(web) for _ in range(5)]  # TESTING: an escaping error would raise here
    if fail_open:
        assert [(r.status_code, "RateLimit" in r.headers) for r in responses] == [(200, False)] * 5
    else:
        assert [r.status_code for r in responses] == [503] * 5
        assert all(int(r.headers["Retry-After"]) >= 1 for r in responses)
    [record] = extension_records(caplog)
    assert record.levelno == logging.ERROR
    assert "unavailable" not in record.getMessage()
    expected = "unexpected AttributeError" if fault == "bad-client-option" else "unexpected TypeError: a bug"
    assert isinstance(record.exc_info[1], UnexpectedError)
    assert isinstance(record.exc_info[1].__cause__, AttributeError if fault == "bad-client-option" else TypeError)
    assert f"internal error in rate limiting ({redis_server.url}: {expected}" in record.getMessage()
    assert ("letting requests through" if fail_open else "answering 503") in record.getMessage()
    assert record.exc_info is not None  # the traceback, to find the cause
    assert internal_errors == [record]
    assert not state.throttle.breaker.open  # 5 failures in a row would open it: Redis did not fail
    assert not state._failing  # no outage, so no "recovered" line later
    labels = {"endpoint": "index", "scope": "index", "outcome": "internal_error"}
    assert registry.get_sample_value("ratelimit_decisions_total", labels) == 5
    if client is not None:
        client.close()


@pytest.mark.redis
@pytest.mark.internal_error
def test_an_unexpected_error_is_not_decided_by_the_fallback(redis_server: RedisServer, monkeypatch) -> None:
    """The fallback stands in for an unavailable Redis, not for a bug:
    RATELIMIT_FAIL_OPEN answers an internal error, with or without it."""
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_FALLBACK=True, RATELIMIT_STORAGE_URL=redis_server.url)
    limited(app, "2/m")
    state = install(app)
    monkeypatch.setattr(state.throttle.sender, "evaluate", _raising_evaluate)
    responses = [get(app.test_client()) for _ in range(3)]
    # The fallback would have refused the third request, with headers.
    assert [(r.status_code, "RateLimit" in r.headers) for r in responses] == [(200, False)] * 3
