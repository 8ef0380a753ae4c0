"""Setting the extension up: app factories, settings, and bad settings."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest
from conftest import get, install
from flask import Blueprint, Flask

from flask_redis_throttle import ConfigurationError, InvalidLimit, RateLimit, limit


def make_app(**config: Any) -> Flask:
    app = Flask("tests")
    app.config.update(TESTING=True, **config)

    @app.get("/limited")
    @limit("1/m")
    def limited() -> str:
        return "ok"

    @app.get("/free")
    def free() -> str:
        return "ok"

    return app


def test_constructor_with_app() -> None:
    app = make_app()
    RateLimit(app)
    client = app.test_client()
    assert [get(client, "/limited").status_code for _ in range(2)] == [200, 429]


def test_app_factory_one_instance_serves_many_apps() -> None:
    ratelimit = RateLimit()
    first = make_app(RATELIMIT_KEY_PREFIX="one:")
    second = make_app(RATELIMIT_DEFAULT="2/m")
    ratelimit.init_app(first)
    ratelimit.init_app(second)
    assert first.extensions["ratelimit"] is not second.extensions["ratelimit"]
    assert not hasattr(ratelimit, "app")
    one, two = first.test_client(), second.test_client()
    assert get(one, "/limited").status_code == 200
    # The second app keeps its own counters and its own settings.
    assert get(two, "/limited").status_code == 200
    assert get(one, "/limited").status_code == 429
    assert [get(one, "/free").status_code for _ in range(3)] == [200, 200, 200]
    assert [get(two, "/free").status_code for _ in range(3)] == [200, 200, 429]


def test_init_app_twice_raises() -> None:
    app = make_app()
    ratelimit = RateLimit(app)
    with pytest.raises(RuntimeError, match="already set up"):
        ratelimit.init_app(app)


def test_defaults_are_filled_in_config() -> None:
    app = make_app()
    RateLimit(app)
    assert app.config["RATELIMIT_STORAGE_URL"] == "memory://"
    assert app.config["RATELIMIT_ENABLED"] is True
    assert app.config["RATELIMIT_IDENTITIES"] == ("ip", "user")


def test_memory_store_warns_once_that_counts_are_per_process(caplog: pytest.LogCaptureFixture) -> None:
    app = make_app()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        RateLimit(app)
        client = app.test_client()
        for _ in range(3):
            get(client, "/limited")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "per process" in messages[0]


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
        ("RATELIMIT_KEY_PREFIX", "app{1}:"),
        ("RATELIMIT_KEY_PREFIX", 5),
        ("RATELIMIT_DEFAULT", "10 per fortnight"),
        ("RATELIMIT_DEFAULT", ""),
        ("RATELIMIT_IDENTITIES", "ip"),
        ("RATELIMIT_IDENTITIES", []),
        ("RATELIMIT_IDENTITIES", ["ip", "email"]),
        ("RATELIMIT_IPV6_PREFIX", 129),
        ("RATELIMIT_IPV6_PREFIX", True),
        ("RATELIMIT_KEY_SECRET", ""),
        ("RATELIMIT_KEY_SECRET", 42),
        ("RATELIMIT_DEFAULT", 10),
        ("RATELIMIT_DEFAULT_MODE", "merge"),
        ("RATELIMIT_APPLICATION", "1/m;2/m"),
        ("RATELIMIT_DEFAULT_MODE", None),
        ("RATELIMIT_HEADERS_LEGACY", "yes"),
        ("RATELIMIT_RETRY_AFTER", "date"),
        ("RATELIMIT_RETRY_AFTER", 1),
        ("RATELIMIT_SHADOW", 1),
        ("RATELIMIT_ON_BREACH", "log"),
    ],
)
def test_bad_settings_raise_at_init_app(key: str, value: object) -> None:
    app = make_app(**{key: value})
    with pytest.raises(ConfigurationError) as info:
        RateLimit(app)
    assert info.value.key == key
    assert key in str(info.value)
    assert repr(value)[:40] in str(info.value)
    assert "ratelimit" not in app.extensions


def test_disabled_limits_nothing_and_needs_no_storage() -> None:
    app = make_app(RATELIMIT_ENABLED=False, RATELIMIT_STORAGE_URL="redis://127.0.0.1:1/0")
    RateLimit(app)
    assert app.extensions["ratelimit"].throttle is None
    client = app.test_client()
    responses = [get(client, "/limited") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert "RateLimit" not in responses[0].headers


def test_headers_can_be_turned_off() -> None:
    app = make_app(RATELIMIT_HEADERS_ENABLED=False)
    RateLimit(app)
    client = app.test_client()
    assert "RateLimit-Policy" not in get(client, "/limited").headers
    refused = get(client, "/limited")
    assert refused.status_code == 429
    assert 0 < int(refused.headers["Retry-After"]) <= 60
    assert "RateLimit" not in refused.headers


def test_default_limits_apply_to_views_without_their_own() -> None:
    app = make_app(RATELIMIT_DEFAULT="2/m")
    RateLimit(app)
    client = app.test_client()
    assert [get(client, "/free").status_code for _ in range(3)] == [200, 200, 429]
    assert [get(client, "/limited").status_code for _ in range(2)] == [200, 429]


def test_static_files_are_exempt_from_default_limits(tmp_path: Any) -> None:
    (tmp_path / "a.txt").write_text("a")
    app = Flask("tests", static_folder=str(tmp_path), static_url_path="/static")
    app.config.update(RATELIMIT_DEFAULT="1/m")
    blueprint = Blueprint("bp", __name__, static_folder=str(tmp_path), static_url_path="/static")
    app.register_blueprint(blueprint, url_prefix="/bp")
    RateLimit(app)
    client = app.test_client()
    for path in ("/static/a.txt", "/bp/static/a.txt"):
        for _ in range(3):
            with client.get(path) as response:
                assert response.status_code == 200


def test_unknown_urls_are_not_limited() -> None:
    app = make_app(RATELIMIT_DEFAULT="1/m")
    RateLimit(app)
    client = app.test_client()
    assert [get(client, "/nowhere").status_code for _ in range(3)] == [404, 404, 404]


def test_decorator_order_does_not_matter() -> None:
    app = Flask("tests")

    @limit("1/m")
    @app.get("/above")
    def above() -> str:
        return "ok"

    def logged(view: Any) -> Any:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return view(*args, **kwargs)

        return wrapper

    @app.get("/wrapped")
    @logged
    @limit("1/m")
    def wrapped() -> str:
        return "ok"

    RateLimit(app)
    client = app.test_client()
    for path in ("/above", "/wrapped"):
        assert [get(client, path).status_code for _ in range(2)] == [200, 429]


def test_a_wrapper_does_not_leak_limits_to_the_view_it_wraps() -> None:
    def plain() -> str:
        return "ok"

    wrapped = limit("1/m")(functools.wraps(plain)(lambda: plain()))
    assert not hasattr(plain, "__ratelimits__")
    assert len(wrapped.__ratelimits__) == 1


def test_async_views_are_limited() -> None:
    pytest.importorskip("asgiref")
    app = Flask("tests")

    @app.get("/")
    @limit("1/m")
    async def index() -> str:
        return "ok"

    RateLimit(app)
    client = app.test_client()
    assert [get(client).status_code for _ in range(2)] == [200, 429]


@pytest.mark.parametrize(
    "options",
    [
        {"scope": ""},
        {"scope": 5},
        {"identities": "ip"},
        {"identities": []},
        {"identities": ["ip", "mac-address"]},
    ],
)
def test_bad_limit_options_raise_when_decorating(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidLimit):
        limit("1/s", **options)


def test_unknown_limit_options_raise_when_decorating() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'error_message'"):
        limit("1/s", error_message="slow down")  # type: ignore[call-arg]


def test_install_helper_returns_state(app: Flask) -> None:
    state = install(app, RATELIMIT_KEY_PREFIX="x:")
    assert state.settings.key_prefix == "x:"
