"""Storage URLs and client hand-over: every scheme builds the right client,
nothing is sent to Redis at start-up, and bad URLs fail at init_app."""

from __future__ import annotations

import pytest
import redis
from conftest import get, install
from flask import Flask

from flask_redis_throttle import ConfigurationError, RateLimit, limit
from flask_redis_throttle.core.clients import LazyClient, client_from_url
from flask_redis_throttle.core.storage import Storage
from flask_redis_throttle.testing import RedisServer, free_port


def test_cluster_url_builds_a_cluster_client_on_first_use() -> None:
    port = free_port()
    storage = Storage.from_url(f"redis+cluster://u:p%40ss@127.0.0.1:{port},[::1]:{port + 1}")
    assert storage.cluster
    assert isinstance(storage.client, LazyClient)
    # Nothing listens: the cluster client cannot be built, and says so as a
    # connection error, which the throttle turns into StorageUnavailable.
    with pytest.raises(redis.ConnectionError, match="reachable"):
        storage.client.ping()


def test_sentinel_url_names_the_service_and_database() -> None:
    client = client_from_url(
        "redis+sentinel://:secret@127.0.0.1:26379,127.0.0.1:26380/mymaster/2", {"socket_timeout": 0.2}
    )
    pool = client.connection_pool
    assert pool.service_name == "mymaster"
    assert [s.connection_pool.connection_kwargs["port"] for s in pool.sentinel_manager.sentinels] == [26379, 26380]
    assert pool.connection_kwargs["db"] == 2
    assert pool.connection_kwargs["password"] == "secret"
    assert pool.connection_kwargs["socket_timeout"] == 0.2
    # The sentinels get the short timeouts too.
    sentinel = pool.sentinel_manager.sentinels[0]
    assert sentinel.connection_pool.connection_kwargs["socket_timeout"] == 0.2


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://127.0.0.1",
        "redis+cluster://127.0.0.1:7000,:7001",
        "redis+cluster://127.0.0.1:7000/3",
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/mymaster/notadb",
        "redis+sentinel://127.0.0.1:x/mymaster",
        "mongodb://localhost",
    ],
)
def test_malformed_urls_raise_at_init_app(url: str) -> None:
    app = Flask("tests")
    app.config["RATELIMIT_STORAGE_URL"] = url
    with pytest.raises(ConfigurationError, match="RATELIMIT_STORAGE_URL"):
        RateLimit(app)


@pytest.mark.parametrize(
    ("url", "options", "accepted"),
    [
        ("redis+cluster://127.0.0.1:7000", {"read_from_replicas": True}, True),
        ("redis://127.0.0.1:6379/0", {"read_from_replicas": True}, False),
        ("redis+sentinel://127.0.0.1:26379/m", {"sentinel_kwargs": {"password": "x"}}, True),
        ("redis://127.0.0.1:6379/0", {"sentinel_kwargs": {}}, False),
        ("rediss://127.0.0.1:6379/0", {"ssl_ca_certs": "/ca.pem"}, True),
    ],
)
def test_options_are_those_of_the_schemes_client(url: str, options: dict[str, object], accepted: bool) -> None:
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS=options)
    if accepted:
        RateLimit(app)
    else:
        with pytest.raises(ConfigurationError, match="RATELIMIT_STORAGE_OPTIONS"):
            RateLimit(app)


def test_a_cluster_client_handed_over_is_known_as_one() -> None:
    assert Storage(LazyClient(lambda: None), cluster=True).cluster
    assert not Storage(redis.Redis()).cluster


@pytest.mark.redis
@pytest.mark.parametrize("late", [False, True], ids=["RateLimit(app)", "init_app"])
def test_an_apps_own_client_can_be_handed_over(redis_server: RedisServer, late: bool) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    app = Flask("tests")
    # The URL is ignored when a client is given.
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL="redis://127.0.0.1:1/0")

    @app.get("/")
    @limit("2/m")
    def index() -> str:
        return "ok"

    if late:
        RateLimit(redis=client).init_app(app)
    else:
        RateLimit(app, redis=client)
    web = app.test_client()
    assert [get(web).status_code for _ in range(3)] == [200, 200, 429]
    assert any(key.startswith(b"rl:{ip:") for key in client.scan_iter())
    client.close()


def test_install_helper_still_works_without_a_client() -> None:
    app = Flask("tests")
    state = install(app)
    assert state.throttle is not None
    assert state.throttle.storage.url == "memory://"
