"""Bad configuration fails at init_app, naming the key and the value, so
that it never becomes an error on every request; and settings this
extension does not read are warned about, not silently ignored."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis
from conftest import get
from flask import Flask

from flask_redis_throttle import ConfigurationError, RateLimit, limit
from flask_redis_throttle.testing import RedisServer

#: A password that must never show in a message.
SECRET = "s3cret"


def make_app(**config: Any) -> Flask:
    app = Flask("tests")
    app.config.update(TESTING=True, **config)

    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    return app


def refused(**config: Any) -> ConfigurationError:
    """The error ``init_app`` raises for ``config``; nothing is installed."""
    app = make_app(**config)
    with pytest.raises(ConfigurationError) as info:
        RateLimit(app)
    assert "ratelimit" not in app.extensions
    assert SECRET not in str(info.value)
    return info.value


# Every scheme: a query parameter the client does not take, a bad value of
# one it takes, and a path or database that is not a database number.
BAD_URLS = [
    (f"redis://u:{SECRET}@127.0.0.1:6379/0?bogus=1", "bogus"),
    ("redis://127.0.0.1:6379/0?socket_timeout=fast", "socket_timeout"),
    ("redis://127.0.0.1:6379/0?socket_timeout=-1", "socket_timeout"),
    (f"redis://:{SECRET}@127.0.0.1:6379/abc", "abc"),
    ("redis://127.0.0.1:6379/99", "99"),
    ("redis://127.0.0.1:6379/16", "16"),
    ("redis://127.0.0.1:6379/-1", "-1"),
    ("redis://127.0.0.1:6379/0/1", "0/1"),
    ("redis://127.0.0.1:6379/?db=99", "99"),
    ("redis://127.0.0.1:6379/?db=-1", "-1"),
    (f"rediss://u:{SECRET}@127.0.0.1:6379/0?ssl_cert_reqs=bogus", "bogus"),
    ("rediss://127.0.0.1:6379/0?bogus=1", "bogus"),
    ("rediss://127.0.0.1:6379/x", "x"),
    ("rediss://127.0.0.1:6379/99", "99"),
    ("unix:///run/redis.sock?bogus=1", "bogus"),
    ("unix:///run/redis.sock?db=abc", "db"),
    ("unix:///run/redis.sock?db=99", "99"),
    ("unix:///run/redis.sock?db=-1", "-1"),
    (f"redis+cluster://u:{SECRET}@127.0.0.1:7000?bogus=1", "bogus"),
    ("redis+cluster://127.0.0.1:7000/?db=0", "db=0"),
    ("redis+cluster://127.0.0.1:7000/abc", "abc"),
    ("redis+cluster://127.0.0.1:7000/1", "1"),
    (f"redis+sentinel://:{SECRET}@127.0.0.1:26379/mymaster?bogus=1", "bogus"),
    ("redis+sentinel://127.0.0.1:26379/mymaster/99", "99"),
    ("redis+sentinel://127.0.0.1:26379/mymaster/-1", "-1"),
    ("redis+sentinel://127.0.0.1:26379/mymaster/abc", "abc"),
    ("redis+sentinel://127.0.0.1:26379/mymaster/0/1", "0/1"),
    ("memory://?bogus=1", "bogus"),
    ("memory:///abc", "abc"),
    ("memory:///1", "1"),
    ("memory://localhost", "localhost"),
]


@pytest.mark.parametrize(("url", "bad"), BAD_URLS)
def test_bad_storage_urls_raise_at_init_app(url: str, bad: str) -> None:
    error = refused(RATELIMIT_STORAGE_URL=url)
    assert error.key == "RATELIMIT_STORAGE_URL"
    assert bad in str(error)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("memory://", {}),
        ("redis://127.0.0.1:6379", {}),
        ("redis://127.0.0.1:6379/", {}),
        ("redis://127.0.0.1:6379/15", {}),
        ("redis://127.0.0.1:6379/0?socket_timeout=0.2&health_check_interval=30", {}),
        ("redis://127.0.0.1:6379?db=15", {}),
        ("redis://127.0.0.1:6379", {"db": 40}),  # beyond 15 only on purpose
        ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=none", {}),
        ("rediss://127.0.0.1:6379/0", {"ssl_cert_reqs": "optional", "ssl_check_hostname": False}),
        ("unix:///run/redis.sock?db=3", {"socket_timeout": None}),
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:7001/0", {"socket_timeout": 0.2}),
        ("redis+cluster://127.0.0.1:7000", {"read_from_replicas": True}),
        ("redis+sentinel://127.0.0.1:26379/mymaster/15", {"sentinel_kwargs": {"socket_timeout": 0.1}}),
        ("redis+sentinel://127.0.0.1:26379/mymaster", {"min_other_sentinels": 1}),
    ],
)
def test_good_storage_urls_and_options_pass(url: str, options: dict[str, Any]) -> None:
    app = make_app(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS=options, RATELIMIT_ENABLED=True)
    RateLimit(app)
    app.extensions["ratelimit"].throttle.storage.close()


SCHEME_URLS = [
    "memory://",
    "redis://127.0.0.1:6379/0",
    "rediss://127.0.0.1:6379/0",
    "unix:///run/redis.sock",
    "redis+cluster://127.0.0.1:7000",
    "redis+sentinel://127.0.0.1:26379/mymaster",
]

BAD_OPTIONS = [
    ({"socket_timeout": "fast"}, "socket_timeout"),
    ({"socket_timeout": -1}, "socket_timeout"),
    ({"socket_timeout": 0}, "socket_timeout"),
    ({"socket_timeout": math.inf}, "socket_timeout"),
    ({"socket_connect_timeout": True}, "socket_connect_timeout"),
    ({"retry": 5}, "retry"),
    ({"ssl_cert_reqs": "bogus"}, "ssl_cert_reqs"),
    ({"health_check_interval": -5}, "health_check_interval"),
    ({"max_connections": 0}, "max_connections"),
    ({"db": -1}, "db"),
    ({"db": "1"}, "db"),
    ({"single_connection_client": True}, "single_connection_client"),
]


@pytest.mark.parametrize("url", SCHEME_URLS)
@pytest.mark.parametrize(("options", "bad"), BAD_OPTIONS)
def test_bad_storage_option_values_raise_at_init_app(url: str, options: dict[str, Any], bad: str) -> None:
    error = refused(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS={"password": SECRET, **options})
    assert error.key == "RATELIMIT_STORAGE_OPTIONS"
    assert f"{bad}" in str(error)
    assert repr(options[bad]) in str(error)


@pytest.mark.parametrize(
    "sentinel_kwargs",
    [{"socket_timeout": "fast"}, {"retry": 5}, {"bogus": 1}],
)
def test_bad_sentinel_kwargs_name_the_options(sentinel_kwargs: dict[str, Any]) -> None:
    error = refused(
        RATELIMIT_STORAGE_URL=f"redis+sentinel://:{SECRET}@127.0.0.1:26379/mymaster",
        RATELIMIT_STORAGE_OPTIONS={"sentinel_kwargs": sentinel_kwargs},
    )
    assert error.key == "RATELIMIT_STORAGE_OPTIONS"
    [name] = sentinel_kwargs
    assert name in str(error)


@pytest.mark.redis
def test_the_highest_url_database_is_the_one_used(redis_server: RedisServer) -> None:
    """Database 15, the highest a URL may name, is where the counters go."""
    url = redis_server.url.rsplit("/", 1)[0] + "/15"
    client = redis.Redis.from_url(url)
    client.flushdb()
    app = make_app(RATELIMIT_STORAGE_URL=url)
    RateLimit(app)
    web = app.test_client()
    assert [get(web).status_code for _ in range(2)] == [200, 429]
    assert any(key.startswith(b"rl:{ip:") for key in client.scan_iter())
    client.flushdb()
    client.close()
    app.extensions["ratelimit"].throttle.storage.close()
