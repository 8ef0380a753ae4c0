"""Setting the extension up: app factories and settings. Bad settings,
which fail at init_app, are in test_config.py."""

from __future__ import annotations

import functools
import logging
import typing
from typing import Any

import pytest
from flask import Flask
from helpers import get

from flask_redis_throttle import RateLimit, limit


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
    assert first.extensions["ratelimit"].settings.key_prefix == "one:"
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
    state = app.extensions["ratelimit"]
    assert state.throttle is not None
    assert state.throttle.storage.url == "memory://"
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


def test_every_lookup_of_an_apps_state_fails_one_way_without_the_extension() -> None:
    """An app without RateLimit: each API that needs its state says the same thing, naming the fix."""
    from flask_redis_throttle import near_limit_log, refusal_log
    from flask_redis_throttle.extension import state_of

    app = Flask("bare")
    ratelimit = RateLimit()
    message = r"^rate limiting is not set up on this app \(RateLimit\(app\) or init_app\(app\)\)$"
    calls = [
        lambda: state_of(app),
        lambda: refusal_log(app),
        lambda: near_limit_log(app),
        lambda: ratelimit.reset("ip:192.0.2.1", app=app),
        lambda: ratelimit.overrides(app=app),
        lambda: ratelimit.override_changes(app=app),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match=message):
            call()
    with app.test_request_context("/"):
        with pytest.raises(RuntimeError, match=message), limit("1/m"):
            pass
        assert state_of(required=False) is None


def test_keyword_options_type_hints_resolve_on_every_python() -> None:
    """typing.Unpack came in 3.11: on 3.10 the hints of override(), allow(),
    block() and limit() named an Unpack imported only for the type checker,
    so get_type_hints() (an IDE's or a docs tool's) failed with a NameError."""
    from flask_redis_throttle._request.spec import LimitOptions
    from flask_redis_throttle.extension import OverrideOptions

    for function in (RateLimit.override, RateLimit.allow, RateLimit.block):
        assert typing.get_type_hints(function)["options"].__args__ == (OverrideOptions,)
    assert typing.get_type_hints(limit)["options"].__args__ == (LimitOptions,)
    app = make_app(RATELIMIT_STORAGE_URL="memory://")
    ratelimit = RateLimit(app)
    options = dict.fromkeys(typing.get_type_hints(OverrideOptions))
    options.update(duration="1h", by="test", app=app)
    ratelimit.block("ip:192.0.2.1", **options)  # type: ignore[arg-type]
    assert app.test_client().get("/limited", environ_base={"REMOTE_ADDR": "192.0.2.1"}).status_code == 429
