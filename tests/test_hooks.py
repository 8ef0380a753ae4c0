"""Breach hooks: the rate_limited signal and on_breach functions."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, Response, jsonify
from helpers import get, install

from flask_redis_throttle import Breach, Identity, Rate, RateLimitExceeded, limit, rate_limited


@pytest.fixture
def received() -> Iterator[list[tuple[Any, dict[str, Any]]]]:
    """What the rate_limited signal sends, while the test runs."""
    seen: list[tuple[Any, dict[str, Any]]] = []

    def receiver(sender: Any, **fields: Any) -> None:
        seen.append((sender, fields))

    rate_limited.connect(receiver)
    yield seen
    rate_limited.disconnect(receiver)


def test_the_signal_tells_who_hit_which_limit(app: Flask, received) -> None:
    @app.get("/")
    @limit("1/m", identities=["ip"], scope="search")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    get(client)
    assert received == []
    assert get(client).status_code == 429
    [(sender, fields)] = received
    assert sender is app
    assert fields["request"].path == "/"
    assert fields["identity"] == Identity("ip", "192.0.2.1")
    assert fields["layer"] == Rate(1, 60)
    assert fields["retry_after"] == 60
    assert (fields["scope"], fields["endpoint"], fields["shadow"]) == ("search", "index", False)


def test_on_breach_per_limit_and_for_the_app(app: Flask) -> None:
    calls: list[tuple[str, Breach]] = []

    @app.get("/")
    @limit("1/m", on_breach=lambda breach: calls.append(("limit", breach)))
    def index() -> str:
        return "ok"

    @app.get("/other")
    @limit("1/m", shadow=True)
    def other() -> str:
        return "ok"

    install(app, RATELIMIT_ON_BREACH=lambda breach: calls.append(("app", breach)))
    client = app.test_client()
    for path in ("/", "/", "/other", "/other"):
        get(client, path)
    assert [(where, breach.endpoint, breach.shadow) for where, breach in calls] == [
        ("limit", "index", False),
        ("app", "index", False),
        ("app", "other", True),
    ]
    assert calls[0][1].identity == Identity("ip", "192.0.2.1")


def test_a_failing_hook_does_not_turn_the_429_into_a_500(app: Flask, caplog) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("hook bug")

    after: list[str] = []

    def later(sender: Any, **fields: Any) -> None:
        after.append(fields["endpoint"])

    rate_limited.connect(broken)
    rate_limited.connect(later)
    try:

        @app.get("/")
        @limit("1/m", on_breach=broken)
        def index() -> str:
            return "ok"

        install(app, RATELIMIT_ON_BREACH=broken)
        client = app.test_client()
        get(client)
        with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
            response = get(client)
    finally:
        rate_limited.disconnect(broken)
        rate_limited.disconnect(later)
    assert response.status_code == 429
    failures = [r for r in caplog.records if r.exc_info and "hook bug" in str(r.exc_info[1])]
    assert len(failures) == 3  # the limit's hook, the app's, and the receiver
    assert after == ["index"]  # the hooks after the broken one still ran


def test_a_receiver_that_does_not_take_every_field_is_told_to_add_extra(app: Flask, caplog) -> None:
    # The signature docs/responses.rst showed before 0.3, without penalized.
    def count(sender, request, endpoint, scope, identity, layer, retry_after, shadow):  # type: ignore[no-untyped-def]
        raise AssertionError("never called: blinker passes penalized too")

    rate_limited.connect(count)
    try:

        @app.get("/")
        @limit("1/m")
        def index() -> str:
            return "ok"

        install(app)
        client = app.test_client()
        get(client)
        with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
            assert get(client).status_code == 429
    finally:
        rate_limited.disconnect(count)
    [record] = [r for r in caplog.records if r.exc_info]
    assert isinstance(record.exc_info[1], TypeError)  # type: ignore[index]
    assert "penalized" in str(record.exc_info[1])  # type: ignore[index]
    assert record.getMessage().endswith(
        "as a keyword argument (request, endpoint, scope, identity, layer, retry_after, shadow, penalized): "
        "if it does not take them all, add **extra"
    )


def test_on_breach_may_return_a_response_that_replaces_the_429(app: Flask, clock) -> None:
    def friendly(breach: Breach) -> Response:
        return jsonify(error="slow down", identity=str(breach.identity), retry_after=breach.retry_after)

    @app.get("/")
    @limit("1/m", identities=["ip"], on_breach=friendly)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    get(client)
    clock.set(20)
    response = get(client)
    assert response.status_code == 200  # the hook's status, as in Flask-Limiter
    assert response.get_json() == {"error": "slow down", "identity": "ip:192.0.2.1", "retry_after": 40}
    assert response.headers["Retry-After"] == "40"
    assert response.headers["RateLimit"] == '"1m";r=0;t=40'


def test_the_limits_response_wins_over_the_apps(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", on_breach=lambda breach: Response("limit", status=429))
    def index() -> str:
        return "ok"

    @app.get("/other")
    @limit("1/m", on_breach=lambda breach: None)
    def other() -> str:
        return "ok"

    @app.get("/ignored")
    @limit("1/m", on_breach=lambda breach: "not a response")
    def ignored() -> str:
        return "ok"

    install(app, RATELIMIT_ON_BREACH=lambda breach: Response("app", status=503))
    client = app.test_client()
    bodies = []
    for path in ("/", "/other", "/ignored"):
        get(client, path)
        response = get(client, path)
        bodies.append((response.status_code, response.get_data(as_text=True)))
    assert bodies == [(429, "limit"), (503, "app"), (503, "app")]


def test_a_hooks_response_is_ignored_in_shadow_mode_and_when_not_a_response(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", shadow=True, on_breach=lambda breach: Response("blocked", status=403))
    def index() -> str:
        return "ok"

    @app.get("/text")
    @limit("1/m", on_breach=lambda breach: "blocked")
    def text() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [get(client).get_data(as_text=True) for _ in range(2)] == ["ok", "ok"]
    get(client, "/text")
    response = get(client, "/text")
    assert response.status_code == 429
    assert response.get_data(as_text=True).startswith("Rate limit exceeded")


def test_a_failing_hook_does_not_stop_the_next_ones_response(app: Flask, caplog) -> None:
    def broken(breach: Breach) -> None:
        raise RuntimeError("hook bug")

    @app.get("/")
    @limit("1/m", on_breach=broken)
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_ON_BREACH=lambda breach: Response("app", status=429))
    client = app.test_client()
    get(client)
    with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
        response = get(client)
    assert (response.status_code, response.get_data(as_text=True)) == (429, "app")
    assert [r for r in caplog.records if r.exc_info and "hook bug" in str(r.exc_info[1])]


def test_an_error_handler_still_sees_the_refusal_first(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", on_breach=lambda breach: Response("hook", status=429))
    def index() -> str:
        return "ok"

    @app.errorhandler(429)
    def handler(error: Any) -> Any:
        assert isinstance(error, RateLimitExceeded)
        assert error.get_response().get_data(as_text=True) == "hook"
        return "handler", 429

    install(app)
    client = app.test_client()
    get(client)
    assert get(client).get_data(as_text=True) == "handler"


def test_a_response_for_a_request_that_can_never_pass(app: Flask) -> None:
    @app.post("/batch")
    @limit(lambda request: "2/m", cost=3, on_breach=lambda breach: jsonify(never=breach.retry_after is None))
    def batch() -> str:
        return "ok"

    install(app)
    response = app.test_client().post("/batch")
    assert response.get_json() == {"never": True}
    assert "Retry-After" not in response.headers
