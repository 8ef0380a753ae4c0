"""Bad configuration fails at init_app, naming the key and the value, so
that it never becomes an error on every request; and settings this
extension does not read are warned about, not silently ignored."""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from helpers import FakeMonotonic, get, install

from flask_redis_throttle import ConfigurationError, RateLimit, limit, refusal_log, testing
from flask_redis_throttle.core.engine.breaker import CircuitBreaker
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


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RATELIMIT_ENABLED", "yes"),
        ("RATELIMIT_HEADERS_ENABLED", 1),
        ("RATELIMIT_FAIL_OPEN", None),
        ("RATELIMIT_STORAGE_URL", "mongodb://localhost"),
        ("RATELIMIT_STORAGE_URL", "localhost:6379"),
        ("RATELIMIT_STORAGE_URL", 6379),
        ("RATELIMIT_STORAGE_URL", "redis://localhost:notaport"),
        ("RATELIMIT_STORAGE_OPTIONS", "socket_timeout=1"),
        ("RATELIMIT_STORAGE_OPTIONS", {"socket_timout": 1}),
        ("RATELIMIT_STORAGE_OPTIONS", {5: 1}),  # a keyword argument is named by a string
        ("RATELIMIT_KEY_PREFIX", "app{1}:"),
        ("RATELIMIT_KEY_PREFIX", 5),
        ("RATELIMIT_DEFAULT", "10 per fortnight"),
        ("RATELIMIT_DEFAULT", ""),
        ("RATELIMIT_IDENTITIES", "ip"),
        ("RATELIMIT_IDENTITIES", []),
        ("RATELIMIT_IDENTITIES", ["ip", "email"]),
        ("RATELIMIT_IPV6_PREFIX", 129),
        ("RATELIMIT_IPV6_PREFIX", True),
        ("RATELIMIT_DEFAULT", 10),
        ("RATELIMIT_DEFAULT_MODE", "merge"),
        ("RATELIMIT_APPLICATION", "1/m;2/m"),
        ("RATELIMIT_DEFAULT", []),
        ("RATELIMIT_DEFAULT", {"per_method": True}),
        ("RATELIMIT_DEFAULT", {"limit": "1/m", "per_methods": True}),
        ("RATELIMIT_DEFAULT", {"limit": "1/m", "override_defaults": True}),
        ("RATELIMIT_APPLICATION", ["1/m", {"limit": "1/h", "cost": -1}]),
        ("RATELIMIT_APPLICATION", [["1/m"]]),
        ("RATELIMIT_DEFAULT_MODE", None),
        ("RATELIMIT_HEADERS_LEGACY", "yes"),
        ("RATELIMIT_HEADER_NAMES", ["X-Limit"]),
        ("RATELIMIT_HEADER_NAMES", {"Retry-After": "Wait"}),
        ("RATELIMIT_HEADER_NAMES", {"X-RateLimit-Limit": "X Limit"}),
        ("RATELIMIT_HEADER_NAMES", {"X-RateLimit-Limit": "X-RateLimit-Reset"}),
        ("RATELIMIT_HEADER_NAMES", {"X-RateLimit-Reset": "ratelimit"}),
        ("RATELIMIT_HEADER_NAMES", {"X-RateLimit-Reset": 1}),
        ("RATELIMIT_HEADER_NAMES", {"X-RateLimit-Reset": "X-Reset"}),  # RATELIMIT_HEADERS_LEGACY is off
        ("RATELIMIT_RETRY_AFTER", "date"),
        ("RATELIMIT_RETRY_AFTER", 1),
        ("RATELIMIT_SHADOW", 1),
        ("RATELIMIT_ON_BREACH", "log"),
        ("RATELIMIT_BREAKER_THRESHOLD", -1),
        ("RATELIMIT_BREAKER_THRESHOLD", 1.5),
        ("RATELIMIT_BREAKER_BACKOFF", 0),
        ("RATELIMIT_BREAKER_BACKOFF", "1s"),
        ("RATELIMIT_BREAKER_MAX_BACKOFF", 0.5),
        ("RATELIMIT_FALLBACK", "memory"),
        *(("RATELIMIT_HEADERS_DRAFT", draft) for draft in (9, 12, "11", 11.0, True)),
        ("RATELIMIT_HEADERS_PARTITION_KEY", "yes"),
        *(("RATELIMIT_NEAR_LIMIT", share) for share in (0, -0.5, 1.5, "80%", True, float("nan"))),
        ("RATELIMIT_HEADERS_PARTITION_KEY", True),  # without RATELIMIT_KEY_SECRET
        *(("RATELIMIT_BLOCK_CACHE_SIZE", size) for size in (-1, "100", 1.5, True, None)),
        *(("RATELIMIT_REFUSAL_LOG_SIZE", size) for size in (-1, "10", 2.5, True, None)),
    ],
)
def test_bad_settings_raise_at_init_app(key: str, value: object) -> None:
    error = refused(**{key: value})  # which checks that nothing was installed
    assert error.key == key
    assert key in str(error)
    assert repr(value)[:40] in str(error)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_partition_key_that_is_no_flag_is_told_to_be_one(value: object) -> None:
    """A value that is not True or False is told so, not only that True
    needs a secret and draft 11, which reads as if it were a flag."""
    assert "True or False" in str(refused(RATELIMIT_HEADERS_PARTITION_KEY=value))


# Every scheme: a query parameter the client does not take, a bad value of
# one it takes, and a path or database that is not a database number.
BAD_URLS = [
    (f"redis://u:{SECRET}@127.0.0.1:6379/0?bogus=1", "bogus"),
    ("redis://127.0.0.1:6379/0?socket_timeout=fast", "socket_timeout"),
    (f"redis://127.0.0.1:6379/0?password={SECRET}&bogus=1", "bogus"),
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
    ("memory://dev/0", "/0"),
    (f"memory://u:{SECRET}@dev/0", "memory://u:***@dev/0"),
    (f"local://u:{SECRET}@host/tmp", "local://u:***@host/tmp"),
    ("redis+cluster://127.0.0.1", "'127.0.0.1' is not host:port"),
    ("redis+cluster://127.0.0.1:7000,:7001", "':7001' is not host:port"),
    ("redis+cluster://127.0.0.1:7000/3", "'3'"),
    ("redis+sentinel://127.0.0.1:26379", "must name the service"),
    ("redis+sentinel://127.0.0.1:26379/mymaster/notadb", "notadb"),
    ("redis+sentinel://127.0.0.1:x/mymaster", "'127.0.0.1:x' is not host:port"),
    ("mongodb://localhost", "mongodb://localhost"),
]


@pytest.mark.parametrize(("url", "bad"), BAD_URLS)
def test_bad_storage_urls_raise_at_init_app(url: str, bad: str) -> None:
    error = refused(RATELIMIT_STORAGE_URL=url)
    assert error.key == "RATELIMIT_STORAGE_URL"
    assert "RATELIMIT_STORAGE_URL" in str(error)
    assert bad in str(error)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("memory://", {}),
        ("memory://dev", {}),  # a name is a label
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
        ("redis+sentinel://127.0.0.1:26379/m", {"sentinel_kwargs": {"password": "x"}}),
        ("rediss://127.0.0.1:6379/0", {"ssl_ca_certs": "/ca.pem"}),
        ("redis+sentinel://127.0.0.1:26379/mymaster/15", {"sentinel_kwargs": {"socket_timeout": 0.1}}),
        ("redis+sentinel://127.0.0.1:26379/mymaster", {"min_other_sentinels": 1}),
    ],
)
def test_good_storage_urls_and_options_pass(url: str, options: dict[str, Any]) -> None:
    app = make_app(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS=options, RATELIMIT_ENABLED=True)
    RateLimit(app)
    state = app.extensions["ratelimit"]
    assert state.settings.storage_url == url
    assert state.throttle is not None  # built, though nothing is sent to Redis yet
    state.throttle.storage.close()


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
    # Read as true by redis-py: TLS on a plain port, keepalive, retries.
    ({"ssl": "false"}, "ssl"),
    ({"socket_keepalive": "no"}, "socket_keepalive"),
    ({"retry_on_timeout": 1}, "retry_on_timeout"),
    ({"retry_on_error": [5]}, "retry_on_error"),
]


@pytest.mark.parametrize("url", SCHEME_URLS)
@pytest.mark.parametrize(("options", "bad"), BAD_OPTIONS)
def test_bad_storage_option_values_raise_at_init_app(url: str, options: dict[str, Any], bad: str) -> None:
    error = refused(RATELIMIT_STORAGE_URL=url, RATELIMIT_STORAGE_OPTIONS={"password": SECRET, **options})
    assert error.key == "RATELIMIT_STORAGE_OPTIONS"
    assert f"{bad}" in str(error)
    assert repr(options[bad]) in str(error)


@pytest.mark.parametrize("option", [{"read_from_replicas": True}, {"sentinel_kwargs": {}}])
def test_options_of_another_schemes_client_raise_at_init_app(option: dict[str, Any]) -> None:
    # read_from_replicas is a cluster client's, sentinel_kwargs a sentinel's.
    error = refused(RATELIMIT_STORAGE_URL="redis://127.0.0.1:6379/0", RATELIMIT_STORAGE_OPTIONS=option)
    assert error.key == "RATELIMIT_STORAGE_OPTIONS"
    assert "RATELIMIT_STORAGE_OPTIONS" in str(error)
    assert f"unknown: {next(iter(option))}" in str(error)


@pytest.mark.parametrize(
    "sentinel_kwargs",
    [{"socket_timeout": "fast"}, {"retry": 5}, {"bogus": 1}, {"ssl": "no"}],
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


@pytest.mark.redis
def test_the_db_option_reaches_beyond_the_urls_databases() -> None:
    """On a server with more than 16 databases, ``{"db": N}`` selects one above 15."""
    with testing.redis_server(["--databases", "41"]) as server:
        app = make_app(RATELIMIT_STORAGE_URL=f"redis://127.0.0.1:{server.port}", RATELIMIT_STORAGE_OPTIONS={"db": 40})
        RateLimit(app)
        web = app.test_client()
        assert [get(web).status_code for _ in range(2)] == [200, 429]
        app.extensions["ratelimit"].throttle.storage.close()
        with redis.Redis(port=server.port, db=40) as client:
            assert any(key.startswith(b"rl:{ip:") for key in client.scan_iter())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RATELIMIT_REFUSAL_LOG_SIZE", 2**63),
        ("RATELIMIT_REFUSAL_LOG_SIZE", 1_000_001),
        ("RATELIMIT_BREAKER_BACKOFF", 1e308),
        ("RATELIMIT_BREAKER_BACKOFF", math.inf),
        ("RATELIMIT_BREAKER_BACKOFF", 86_401),
        ("RATELIMIT_BREAKER_BACKOFF", math.nan),
        ("RATELIMIT_BREAKER_MAX_BACKOFF", 86_401),
        ("RATELIMIT_BREAKER_MAX_BACKOFF", math.inf),
    ],
)
def test_values_beyond_their_bounds_name_their_own_key(key: str, value: object) -> None:
    error = refused(**{key: value})
    assert error.key == key
    assert str(error).startswith(f"{key} = {value!r} is invalid")


def test_the_refusal_log_keeps_its_largest_size(app: Flask) -> None:
    """RATELIMIT_REFUSAL_LOG_SIZE = 1_000_000 is a MAXLEN every server takes."""

    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_REFUSAL_LOG_SIZE=1_000_000)
    web = app.test_client()
    assert [get(web).status_code for _ in range(2)] == [200, 429]
    [refusal] = refusal_log(app).recent()
    assert refusal.endpoint == "index"


def test_the_longest_key_prefix_counts_and_a_longer_one_is_refused_in_one_line(app: Flask) -> None:
    """A 100,000-character RATELIMIT_KEY_PREFIX was taken, sent in every key
    of every request; its error would quote it whole."""
    for prefix in ("p" * 257, "rl:" * 40_000):
        error = refused(RATELIMIT_KEY_PREFIX=prefix)
        assert error.key == "RATELIMIT_KEY_PREFIX"
        assert "at most 256 characters" in str(error)
        assert len(str(error)) < 400  # the value is cut, not quoted whole
        assert error.value == prefix  # but kept whole on the error

    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_KEY_PREFIX="p" * 256)
    web = app.test_client()
    assert [get(web).status_code for _ in range(2)] == [200, 429]


def test_the_breaker_probes_again_after_its_longest_backoff() -> None:
    clock = FakeMonotonic()
    breaker = CircuitBreaker(threshold=1, backoff=86_400, max_backoff=86_400, clock=clock)
    breaker.failure()
    assert not breaker.allow()
    clock.now += 86_400.0
    assert breaker.allow()  # the probe


def test_largest_bounds_pass() -> None:
    app = make_app(
        RATELIMIT_REFUSAL_LOG_SIZE=1_000_000,
        RATELIMIT_BREAKER_BACKOFF=86_400,
        RATELIMIT_BREAKER_MAX_BACKOFF=86_400.0,
        RATELIMIT_ENABLED=False,
    )
    RateLimit(app)
    settings = app.extensions["ratelimit"].settings
    assert (settings.refusal_log_size, settings.breaker_backoff, settings.breaker_max_backoff) == (
        1_000_000,
        86_400,
        86_400.0,
    )


def warnings_at_init(caplog: pytest.LogCaptureFixture, **config: Any) -> list[str]:
    """The warnings ``init_app`` logs for ``config``, on a disabled app (which
    logs nothing else: it builds no storage)."""
    app = make_app(RATELIMIT_ENABLED=False, **config)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        RateLimit(app)
    return [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize(
    ("key", "advice"),
    [
        ("RATELIMIT_STORAGE_URI", "use RATELIMIT_STORAGE_URL"),
        ("RATELIMIT_KEY_FUNC", "use RATELIMIT_IDENTITIES"),
        ("RATELIMIT_SWALLOW_ERRORS", "use RATELIMIT_FAIL_OPEN"),
        ("RATELIMIT_ON_BREACH_CALLBACK", "use RATELIMIT_ON_BREACH"),
        ("RATELIMIT_IN_MEMORY_FALLBACK_ENABLED", "use RATELIMIT_FALLBACK"),
        ("RATELIMIT_HEADER_RETRY_AFTER_VALUE", "use RATELIMIT_RETRY_AFTER"),
        ("RATELIMIT_DEFAULTS_PER_METHOD", "use RATELIMIT_DEFAULT ({'limit': ..., 'per_method': True})"),
        ("RATELIMIT_HEADER_REMAINING", "use RATELIMIT_HEADER_NAMES"),
        ("RATELIMIT_HEADER_RETRY_AFTER", "no equivalent"),
        ("RATELIMIT_ON_META_BREACH_CALLBACK", "use RATELIMIT_META"),
    ],
)
def test_flask_limiters_settings_are_warned_about(caplog: pytest.LogCaptureFixture, key: str, advice: str) -> None:
    [message] = warnings_at_init(caplog, **{key: "x"})
    assert f"{key} is a Flask-Limiter setting" in message
    assert advice in message
    assert "Coming from Flask-Limiter" in message


@pytest.mark.parametrize(
    ("key", "nearest"),
    [
        ("RATELIMIT_DEFAULTS", "RATELIMIT_DEFAULT"),
        ("RATELIMIT_STORAGE_URLS", "RATELIMIT_STORAGE_URL"),
        ("RATELIMIT_FAILOPEN", "RATELIMIT_FAIL_OPEN"),
        ("RATELIMIT_IDENTITY", "RATELIMIT_IDENTITIES"),
    ],
)
def test_misspelt_settings_suggest_the_nearest(caplog: pytest.LogCaptureFixture, key: str, nearest: str) -> None:
    [message] = warnings_at_init(caplog, **{key: "x"})
    assert message.startswith(f"{key} is not a setting of flask-redis-throttle")
    assert f"did you mean {nearest}?" in message


def test_an_unknown_setting_like_no_other_is_still_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    [message] = warnings_at_init(caplog, RATELIMIT_XYZZY=1)
    assert message.startswith("RATELIMIT_XYZZY is not a setting of flask-redis-throttle")
    assert "ignored" in message


def test_a_config_key_that_is_not_a_string_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    """Flask's config is a dict, and an app may keep a key of any type in it:
    the unknown settings' warning looks only at strings, rather than raise
    AttributeError at init_app."""
    app = make_app(RATELIMIT_ENABLED=False)
    app.config.update({5: "five", ("RATELIMIT_X",): 1})
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        RateLimit(app)
    assert [record.getMessage() for record in caplog.records] == []


def test_known_settings_and_other_extensions_settings_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    assert warnings_at_init(caplog, RATELIMIT_DEFAULT="1/s", SQLALCHEMY_DATABASE_URI="sqlite://", RATELIMITS=1) == []


def test_the_warnings_follow_the_migration_page() -> None:
    """The table the warnings come from is the one docs/flask-limiter.rst shows."""
    from flask_redis_throttle._request.config import DEFAULTS, FLASK_LIMITER_SETTINGS

    page = (Path(__file__).parent.parent / "docs" / "flask-limiter.rst").read_text()
    section = page.split("The RATELIMIT settings\n")[1].split("\nDecorators\n")[0]
    rows = re.split(r"\n   \* - ", section)[2:]  # the header row and the text before it
    documented: dict[str, str] = {}
    for row in rows:
        theirs, _, ours = row.partition("\n     - ")
        for key in re.findall(r"``(RATELIMIT_\w+)``", theirs):
            documented[key] = ours
    theirs_only = {key: ours for key, ours in documented.items() if key not in DEFAULTS}
    assert set(theirs_only) == set(FLASK_LIMITER_SETTINGS)
    for key, (equivalent, _hint) in FLASK_LIMITER_SETTINGS.items():
        if equivalent is not None:
            assert theirs_only[key].startswith(f":data:`{equivalent}`"), key
        else:
            assert theirs_only[key].startswith("none"), key


def test_every_setting_is_listed_in_init_app_and_in_the_config_page() -> None:
    """The settings init_app reads are the ones its docstring and docs/config.rst name, no more, no fewer."""
    from flask_redis_throttle._request.config import DEFAULTS

    docstring = RateLimit.init_app.__doc__ or ""
    assert set(re.findall(r"``(RATELIMIT_\w+)``", docstring)) == set(DEFAULTS)
    page = (Path(__file__).parent.parent / "docs" / "config.rst").read_text()
    assert set(re.findall(r"^\.\. data:: (RATELIMIT_\w+)$", page, re.MULTILINE)) == set(DEFAULTS)


def test_sentinel_kwargs_that_are_not_a_dict_are_refused() -> None:
    error = refused(
        RATELIMIT_STORAGE_URL="redis+sentinel://127.0.0.1:26379/mymaster",
        RATELIMIT_STORAGE_OPTIONS={"sentinel_kwargs": "socket_timeout=1"},
    )
    assert error.key == "RATELIMIT_STORAGE_OPTIONS"
    assert "sentinel_kwargs" in str(error)
    assert "'socket_timeout=1'" in str(error)


def test_a_setting_from_an_enum_of_strings_or_integers_is_taken() -> None:
    """A str or int subclass (an app's own enum) is the value it equals, as a bool is not."""
    import enum

    class Mode(str, enum.Enum):
        ADD = "add"

    class Draft(enum.IntEnum):
        CURRENT = 11

    app = make_app(
        RATELIMIT_DEFAULT_MODE=Mode.ADD, RATELIMIT_HEADERS_DRAFT=Draft.CURRENT, RATELIMIT_RETRY_AFTER="seconds"
    )
    RateLimit(app)
    settings = app.extensions["ratelimit"].settings
    assert settings.default_mode == "add"
    assert settings.draft.number == 11
