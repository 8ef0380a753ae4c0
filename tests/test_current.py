"""The request-time API: current_limit() in views, templates and error
handlers, and check(), which decides without counting."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask, jsonify, render_template_string
from helpers import Clock, get, install

from flask_redis_throttle import CurrentLimit, Layer, check, current_limit, current_limits, exempt, limit
from flask_redis_throttle.testing import RedisServer, free_port


def describe(found: CurrentLimit | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "scope": found.scope,
        "layer": str(found.layer),
        "identity": str(found.identity),
        "remaining": found.remaining,
        "reset": found.reset,
        "breached": found.breached,
        "retry_after": found.retry_after,
        "source": found.limit.source if found.limit is not None else None,
    }


def test_a_view_reads_its_deciding_limit(app: Flask) -> None:
    @app.get("/search")
    @limit("3/m;10/h", identities=["ip"])
    def search() -> Any:
        return jsonify(describe(current_limit()))

    install(app)
    client = app.test_client()
    first = get(client, "/search").get_json()
    assert first == {
        "scope": "search",
        "layer": "3 per 1 minute",
        "identity": "ip:192.0.2.1",
        "remaining": 2,
        "reset": 60.0,
        "breached": False,
        "retry_after": 0.0,
        "source": "view",
    }
    assert get(client, "/search").get_json()["remaining"] == 1


def test_a_template_reads_it_as_a_global(app: Flask) -> None:
    @app.get("/")
    @limit("5/m")
    def index() -> str:
        return render_template_string(
            "{% set found = current_limit() %}{{ found.remaining }} of {{ found.layer.quota }} left"
        )

    @app.get("/free")
    @exempt
    def free() -> str:
        return render_template_string("{{ current_limit() is none }}")

    install(app)
    client = app.test_client()
    assert get(client).get_data(as_text=True) == "4 of 5 left"
    assert get(client).get_data(as_text=True) == "3 of 5 left"
    assert get(client, "/free").get_data(as_text=True) == "True"


def test_an_error_handler_reads_the_refusal(app: Flask, clock: Clock) -> None:
    @app.get("/")
    @limit("1/m", identities=["ip"])
    def index() -> str:
        return "ok"

    @app.errorhandler(429)
    def refused(error: Any) -> Any:
        return jsonify(describe(current_limit())), 429

    install(app)
    client = app.test_client()
    get(client)
    clock.set(15)
    body = get(client).get_json()
    assert body["breached"] is True
    assert body["remaining"] == 0
    assert body["retry_after"] == pytest.approx(45)
    assert body["scope"] == "index"


def test_the_deciding_limit_of_a_dynamic_limit(app: Flask) -> None:
    @app.get("/")
    @limit(lambda request: "2/m", identities=["ip"])
    @limit("10/m", cost=lambda request: 1)
    def index() -> Any:
        found = current_limit()
        assert found is not None
        assert found.limit is not None
        return {"dynamic": found.limit.dynamic, "remaining": found.remaining}

    install(app)
    assert get(app.test_client()).get_json() == {"dynamic": True, "remaining": 1}


def test_none_outside_a_limited_request(app: Flask) -> None:
    @app.get("/free")
    def free() -> Any:
        return {"current": current_limit() is None, "check": check() is None}

    install(app)
    assert get(app.test_client(), "/free").get_json() == {"current": True, "check": True}
    with app.app_context():
        assert current_limit() is None


def test_check_decides_without_counting(app: Flask) -> None:
    @app.get("/search")
    @limit("2/m", identities=["ip"])
    def search() -> str:
        return "ok"

    @app.get("/preview")
    def preview() -> Any:
        return jsonify([describe(check("search", "GET")) for _ in range(3)])

    install(app)
    client = app.test_client()
    checks = get(client, "/preview").get_json()
    assert [c["remaining"] for c in checks] == [2, 2, 2]  # nothing counted
    assert {c["breached"] for c in checks} == {False}
    assert [get(client, "/search").status_code for _ in range(2)] == [200, 200]
    [found, *_] = get(client, "/preview").get_json()
    assert (found["remaining"], found["breached"], found["scope"]) == (0, True, "search")
    assert found["retry_after"] == pytest.approx(60)
    assert get(client, "/search").status_code == 429


def test_check_in_the_view_sees_what_the_request_left(app: Flask) -> None:
    @app.get("/")
    @limit("3/m", cost=2, identities=["ip"])
    def index() -> Any:
        found = check()
        assert found is not None
        return {"remaining": found.remaining, "breached": found.breached}

    install(app)
    # After the first request 1 is left, less than the cost of 2.
    assert get(app.test_client()).get_json() == {"remaining": 1, "breached": True}


def test_check_leaves_out_shadow_limits_and_filtered_requests(app: Flask) -> None:
    @app.get("/")
    @limit("1/m", shadow=True)
    def index() -> Any:
        return {"check": check() is None}

    @app.get("/both")
    @limit("1/m", shadow=True)
    @limit("5/m", scope="enforced", identities=["ip"])
    def both() -> Any:
        found = check()
        assert found is not None
        return {"scope": found.scope, "breached": found.breached}

    @app.get("/filtered")
    @limit("1/m")
    def filtered() -> Any:
        return {"check": check() is None}

    state = install(app)
    state.filters.append(lambda request: request.path == "/filtered")
    client = app.test_client()
    assert get(client).get_json() == {"check": True}
    get(client, "/both")
    assert get(client, "/both").get_json() == {"scope": "enforced", "breached": False}
    assert get(client, "/filtered").get_json() == {"check": True}


def test_check_returns_none_when_redis_is_down(caplog) -> None:
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=f"redis://127.0.0.1:{free_port()}/0")

    @app.get("/")
    @limit("1/m")
    def index() -> Any:
        return {"check": check() is None, "current": current_limit() is None}

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(app.test_client()).get_json() == {"check": True, "current": True}
    assert any("unavailable" in record.getMessage() for record in caplog.records)


def test_current_limit_names_the_identity_and_layer_that_decide(app: Flask) -> None:
    @app.get("/")
    @limit("10/m;2/h")
    def index() -> Any:
        found = current_limit()
        assert found is not None
        return {"identity": str(found.identity), "layer": str(found.layer)}

    install(app)
    assert get(app.test_client()).get_json() == {"identity": "ip:192.0.2.1", "layer": str(Layer(2, 3600))}


def test_the_scope_of_a_per_method_limit(app: Flask) -> None:
    @app.route("/items", methods=["GET", "POST"])
    @limit("5/m", per_method=True)
    def items() -> Any:
        found = current_limit()
        assert found is not None
        return {"scope": found.scope}

    install(app)
    assert app.test_client().post("/items").get_json() == {"scope": "items@POST"}


def test_current_limits_lists_every_limit_with_its_own_state(app: Flask) -> None:
    seen: list[list[tuple[str, int, bool]]] = []

    @app.get("/")
    @limit("1/m", scope="tight")
    @limit("5/m;50/h")
    def index() -> str:
        return "ok"

    install(app)

    @app.after_request
    def collect(response: Any) -> Any:  # registered after init_app, so it runs before the extension's
        seen.append([(str(found.layer), found.remaining, found.breached) for found in current_limits()])
        return response

    client = app.test_client()
    assert [get(client).status_code, get(client).status_code] == [200, 429]
    assert get(client, "/nowhere").status_code == 404
    assert seen == [
        [("1 per 1 minute", 0, False), ("5 per 1 minute", 4, False)],
        [("1 per 1 minute", 0, True), ("5 per 1 minute", 4, False)],  # the refusal, then the rest as they are
        [],
    ]


@pytest.mark.redis
def test_current_limits_keeps_what_it_read_when_redis_goes_down(caplog) -> None:
    server = RedisServer()
    server.start()
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=server.url, RATELIMIT_BREAKER_THRESHOLD=0)

    @app.get("/")
    @limit("1/m", scope="tight")
    @limit("5/m")
    def index() -> Any:
        server.stop()
        return {"limits": len(current_limits()), "down": current_limit() is not None}

    install(app)
    try:
        with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
            assert get(app.test_client()).get_json() == {"limits": 0, "down": True}
    finally:
        server.close()
    assert "current_limits() knows no limit" in caplog.text


def test_the_headers_and_check_show_the_same_deciding_layer_across_batches(app: Flask, clock: Clock) -> None:
    # Two batches: the request's, and a deduct_when limit counted after the
    # response. Both layers have 1 left; the one that resets later decides,
    # in the header after the deduction and in check() alike (one rule).
    @app.get("/search")
    @limit("2/m", scope="minute")
    @limit("2/h", scope="hour", deduct_when=lambda response: True)
    def search() -> str:
        return "ok"

    @app.get("/preview")
    def preview() -> Any:
        return describe(check("search", "GET"))

    install(app)
    clock.set(0)
    client = app.test_client()
    assert get(client, "/search").headers["RateLimit"] == '"1h";r=1;t=3600'
    found = get(client, "/preview").get_json()
    assert (found["scope"], found["remaining"], found["breached"]) == ("hour", 1, False)


def test_check_and_current_limit_are_none_while_rate_limiting_is_disabled(app: Flask) -> None:
    @app.get("/")
    @limit("1/m")
    def index() -> Any:
        return {"check": check() is None, "current": current_limit() is None}

    install(app, RATELIMIT_ENABLED=False)
    client = app.test_client()
    assert [get(client).get_json() for _ in range(2)] == [{"check": True, "current": True}] * 2


@pytest.mark.internal_error
def test_a_bug_in_check_s_call_is_an_internal_error_and_it_knows_no_limit(
    app: Flask, internal_errors: list[logging.LogRecord]
) -> None:
    @app.get("/search")
    @limit("2/m")
    def search() -> str:
        return "ok"

    @app.get("/preview")
    def preview() -> Any:
        return {"check": check("search", "GET") is None}

    state = install(app)

    def broken(*args: Any) -> Any:
        raise TypeError("a bug")

    state.throttle.sender.evaluate = broken  # below the throttle, which makes a bug an UnexpectedError
    assert get(app.test_client(), "/preview").get_json() == {"check": True}
    [record] = internal_errors
    assert record.getMessage() == (
        f"internal error in rate limiting ({state.throttle.url}: unexpected TypeError: a bug); check() knows no limit."
    )


def bad_plan(req: Any) -> Any:
    return 5


def test_check_warns_of_a_dynamic_limit_s_bad_value_and_knows_no_limit_of_it(app: Flask, caplog) -> None:
    @app.get("/plans")
    @limit(bad_plan)
    def plans() -> str:
        return "ok"

    @app.get("/preview")
    def preview() -> Any:
        return {"check": check("plans", "GET") is None}

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(app.test_client(), "/preview").get_json() == {"check": True}
    warned = [r.getMessage() for r in caplog.records if "a dynamic limit must return a limit string" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    assert "not 5" in warned[0]
