"""Storage URLs and client hand-over: every scheme builds the right client,
and nothing is sent to Redis at start-up. Bad URLs and options, which fail
at init_app, are in test_config.py."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

import pytest
import redis
from flask import Flask
from helpers import get

from flask_redis_throttle import ConfigurationError, RateLimit, limit
from flask_redis_throttle.core.storages import clients
from flask_redis_throttle.core.storages.clients import LazyClient, client_from_url
from flask_redis_throttle.core.storages.storage import Storage
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


@pytest.mark.parametrize("storage_url", ["memory", pytest.param("cluster", marks=pytest.mark.redis)], indirect=True)
def test_a_scheme_is_one_row_of_the_table(app: Flask, storage_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row added to SCHEMES is all a new scheme takes: the URL check, the
    option check, the client, the cluster split and the error for an unknown
    scheme read it."""
    scheme = urlsplit(storage_url).scheme
    monkeypatch.setitem(clients.SCHEMES, "spare", dataclasses.replace(clients.SCHEMES[scheme], name="spare"))
    url = "spare" + storage_url.removeprefix(scheme)
    storage = Storage.from_url(url)
    assert storage.cluster is (scheme == "redis+cluster")
    storage.close()
    with pytest.raises(ConfigurationError, match="keyword arguments of the spare client; unknown: nope"):
        client_from_url(url, {"nope": 1})
    with pytest.raises(ConfigurationError, match=r"redis\+sentinel://, spare://"):
        client_from_url("nope://")
    app.config["RATELIMIT_STORAGE_URL"] = url

    @app.get("/")
    @limit("2/m")
    def index() -> str:
        return "ok"

    RateLimit(app)
    web = app.test_client()
    assert [get(web).status_code for _ in range(3)] == [200, 200, 429]
