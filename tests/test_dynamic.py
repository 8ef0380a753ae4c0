"""Limits decided per request: dynamic limits, exempt_when, request filters."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask, Request, request
from helpers import get, install

from flask_redis_throttle import RateLimit, RateLimitExceeded, limit
from flask_redis_throttle._request import plan as plan_module

PLANS = {"free": "1/m", "pro": "3/m", "broken": "3 per fortnight", "odd": 42}


def plan_limit(request: Request) -> Any:
    """The limit of the client's pricing plan, from a header; none for staff."""
    name = request.headers.get("X-Plan", "free")
    return None if name == "staff" else PLANS[name]


def dynamic_app(app: Flask) -> None:
    @app.get("/")
    @limit(plan_limit)
    def index() -> str:
        return "ok"


def by_plan(client: Any, name: str, n: int, ip: str = "192.0.2.1") -> list[int]:
    return [get(client, headers={"X-Plan": name}, ip=ip).status_code for _ in range(n)]


def test_a_dynamic_limit_is_chosen_per_request(app: Flask) -> None:
    dynamic_app(app)
    install(app)
    client = app.test_client()
    assert by_plan(client, "free", 2, ip="192.0.2.1") == [200, 429]
    assert by_plan(client, "pro", 4, ip="192.0.2.2") == [200, 200, 200, 429]
    assert by_plan(client, "staff", 3, ip="192.0.2.3") == [200, 200, 200]
    response = get(client, headers={"X-Plan": "pro"}, ip="192.0.2.4")
    assert response.headers["RateLimit-Policy"] == '"1m";q=3;w=60'
    # An upgrade keeps what was used: the counters are the same.
    assert by_plan(client, "pro", 3, ip="192.0.2.1") == [200, 200, 429]


def test_dynamic_limit_strings_are_parsed_once(app: Flask, monkeypatch) -> None:
    parsed: list[str] = []
    parse = plan_module.parse_limits
    monkeypatch.setattr(plan_module, "parse_limits", lambda spec: parsed.append(spec) or parse(spec))
    dynamic_app(app)
    install(app)
    client = app.test_client()
    for n in range(3):
        by_plan(client, "pro", 1, ip=f"192.0.2.{n}")
        by_plan(client, "free", 1, ip=f"192.0.2.{n}")
    assert parsed == ["3/m", "1/m"]


@pytest.mark.parametrize("name", ["broken", "odd"])
def test_a_bad_dynamic_limit_is_skipped_when_failing_open(app: Flask, caplog, name: str) -> None:
    dynamic_app(app)
    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert by_plan(app.test_client(), name, 3) == [200, 200, 200]
    [warning] = [r.getMessage() for r in caplog.records if "dynamic" in r.getMessage()]
    assert "plan_limit" in warning
    assert repr(PLANS[name]) in warning
    assert "skipping it for this request" in warning


def test_a_bad_dynamic_limit_answers_503_when_failing_closed(app: Flask) -> None:
    dynamic_app(app)
    install(app, RATELIMIT_FAIL_OPEN=False)
    response = get(app.test_client(), headers={"X-Plan": "broken"})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"


def test_a_bad_dynamic_limit_leaves_the_others_in_force(app: Flask) -> None:
    @app.get("/")
    @limit(plan_limit)
    @limit("2/h")
    def index() -> str:
        return "ok"

    install(app)
    assert by_plan(app.test_client(), "broken", 3) == [200, 200, 429]


def test_a_dynamic_default(app: Flask, statuses) -> None:
    app.add_url_rule("/", "index", lambda: "ok")
    install(app, RATELIMIT_DEFAULT=plan_limit)
    client = app.test_client()
    assert by_plan(client, "free", 2) == [200, 429]


def test_exempt_when_skips_one_limit(app: Flask) -> None:
    def trusted(request: Request) -> bool:
        return request.headers.get("X-Trusted") == "yes"

    @app.get("/")
    @limit("1/m", exempt_when=trusted)
    @limit("3/m", scope="everyone")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    trusted_statuses = [get(client, headers={"X-Trusted": "yes"}).status_code for _ in range(4)]
    assert trusted_statuses == [200, 200, 200, 429]  # only the 3/m applies
    assert get(client, ip="192.0.2.2").status_code == 200
    assert get(client, ip="192.0.2.2").status_code == 429


def test_request_filters_leave_requests_unlimited(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    ratelimit = RateLimit()

    @ratelimit.request_filter
    def internal(request: Request) -> bool:
        return request.remote_addr == "10.0.0.1"

    ratelimit.init_app(app)
    late: list[str] = []
    # A filter registered after init_app applies too.
    ratelimit.request_filter(lambda request: late.append(request.path) or request.headers.get("X-Probe") == "1")
    client = app.test_client()
    assert statuses(client, 3, "/", ip="10.0.0.1") == [200, 200, 200]
    assert "RateLimit" not in get(client, ip="10.0.0.1").headers
    assert statuses(client, 3, "/", headers={"X-Probe": "1"}) == [200, 200, 200]
    assert statuses(client, 2, "/") == [200, 429]
    assert late  # called for requests the first filter did not exempt


def test_request_filters_must_be_callable() -> None:
    with pytest.raises(TypeError, match="function of the request"):
        RateLimit().request_filter("internal")  # type: ignore[arg-type]


def test_an_api_key_recipe(app: Flask) -> None:
    """docs/identity.rst: each known key its own quota, anonymous clients by IP."""
    known_keys = {"k-alice", "k-bob"}

    def api_key(request: Request) -> str | None:
        key = request.headers.get("X-API-Key")
        return key if key in known_keys else None

    def has_api_key(request: Request) -> bool:
        return api_key(request) is not None

    @app.get("/api/items")
    @limit("3/m", identities=[api_key])
    @limit("1/m", identities=["ip"], exempt_when=has_api_key, scope="anonymous")
    def items() -> str:
        return "ok"

    install(app)
    client = app.test_client()

    def call(key: str | None, ip: str = "192.0.2.1") -> int:
        headers = {"X-API-Key": key} if key else {}
        return int(get(client, "/api/items", ip=ip, headers=headers).status_code)

    assert [call("k-alice") for _ in range(4)] == [200, 200, 200, 429]
    assert [call("k-bob", ip="192.0.2.9") for _ in range(3)] == [200, 200, 200]
    # Without a key, or with a made-up one, a client is limited by its IP.
    assert [call(None), call("k-made-up"), call(None, ip="192.0.2.2")] == [200, 429, 200]


def test_a_dynamic_policy_made_again_after_its_cache_was_forgotten_gets_its_own_header_names(
    app: Flask, monkeypatch
) -> None:
    """The header names of a request's policies are kept by those policies'
    identity, not by their equality: a dynamic limit's string whose policy
    was forgotten (its cache filled up) and made again is a new, equal
    policy, and names kept for the old one do not name its layers. Keyed by
    equality, this request's headers failed with a KeyError."""
    monkeypatch.setattr(plan_module, "DYNAMIC_CACHE_SIZE", 4)

    @app.get("/")
    @limit(lambda request: request.headers["X-A"])
    @limit(lambda request: request.headers["X-B"], scope="b")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()

    def send(a: str, b: str) -> Any:
        response = get(client, headers={"X-A": a, "X-B": b})
        assert response.status_code == 200
        return response

    steps = [("100/h", f"{1000 + i}/d") for i in range(3)]  # the names of 3 pairs kept
    steps += [(f"{200 + i}/h", "1000/d") for i in range(2)]  # 4 kept, then forgotten: 1 left
    steps += [("100/h", "1000/d")]  # kept again, with A's first policy
    steps += [(f"{300 + i}/h", "1000/d") for i in range(2)]  # A's policies forgotten, not those names
    for a, b in steps:
        send(a, b)
    response = send("100/h", "1000/d")  # A's policy made again, equal to the first
    assert response.headers["RateLimit"].startswith('"1h";r=')
    assert response.headers["RateLimit-Policy"] == '"1h";q=100;w=3600, "1d";q=1000;w=86400'


def test_a_with_block_decides_its_limit_when_it_runs(app: Flask, statuses) -> None:
    @app.get("/export")
    @limit("5/m")
    def export() -> str:
        if "X-Big" not in request.headers:
            return "small"
        with limit("1/m"):
            return "big"

    install(app)
    client = app.test_client()
    assert statuses(client, 2, "/export") == [200, 200]  # the block never ran
    response = get(client, "/export", headers={"X-Big": "1"})
    assert response.text == "big"
    # The view's limit and the block's, each on its own counter of a minute.
    assert response.headers["RateLimit-Policy"] == '"1m";q=5;w=60, "1m-2";q=1;w=60'
    assert response.headers["RateLimit"] == '"1m-2";r=0;t=60'
    refused = get(client, "/export", headers={"X-Big": "1"})
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "60"
    assert statuses(client, 1, "/export") == [200]  # 5 of 5: the refused one counted in the view's limit
    assert statuses(client, 1, "/export") == [429]


def test_a_block_refusal_can_be_caught_and_costs_nothing(app: Flask, statuses) -> None:
    @app.get("/report")
    def report() -> str:
        text = "summary"
        try:
            with limit("1/m", cost=lambda request: int(request.args.get("cost", 1))):
                text += "+details"
        except RateLimitExceeded:
            pass
        return text

    install(app)
    client = app.test_client()
    assert get(client, "/report?cost=2").text == "summary"  # over the quota: refused, counted nowhere
    assert get(client, "/report").text == "summary+details"
    assert get(client, "/report").text == "summary"


def test_blocks_share_counters_by_scope_and_follow_filters(app: Flask, statuses) -> None:
    def send() -> str:
        with limit("2/m", scope="mail"):
            return "sent"

    app.add_url_rule("/a", "a", send)
    app.add_url_rule("/b", "b", send)
    RateLimit(app).request_filter(lambda request: "X-Staff" in request.headers)
    client = app.test_client()
    assert statuses(client, 1, "/a") + statuses(client, 2, "/b") == [200, 200, 429]
    assert statuses(client, 1, "/a", headers={"X-Staff": "1"}) == [200]
    plan = app.extensions["ratelimit"].plan("a")
    assert plan is None  # the view itself has no limit


def test_a_block_with_deduct_when_counts_after_the_response(app: Flask, statuses) -> None:
    @app.get("/login")
    def login() -> Any:
        with limit("1/m", deduct_when=lambda response: response.status_code == 401):
            return ("no", 401) if "X-Wrong" in request.headers else "yes"

    install(app)
    client = app.test_client()
    assert statuses(client, 3, "/login") == [200, 200, 200]
    assert statuses(client, 2, "/login", headers={"X-Wrong": "1"}) == [401, 429]
    assert statuses(client, 1, "/login") == [429]


def test_a_block_is_unlimited_when_disabled_and_refused_without_the_extension() -> None:
    app = Flask("blocks")
    app.config["RATELIMIT_ENABLED"] = False

    @app.get("/")
    def index() -> str:
        with limit("1/m"):
            return "ok"

    with app.test_request_context("/"), pytest.raises(RuntimeError, match="rate limiting is not set up on this app"):
        index()
    RateLimit(app)
    client = app.test_client()
    assert [client.get("/").status_code for _ in range(3)] == [200, 200, 200]


def plan_by_user(req: Request) -> str:
    return "5/m"


def test_a_limit_and_its_plan_say_whether_the_limit_comes_from_a_function(app: Flask) -> None:
    fixed, dynamic = limit("2/m"), limit(plan_by_user, scope="plans")

    @app.get("/")
    @fixed
    @dynamic
    def index() -> str:
        return "ok"

    state = install(app)
    assert (fixed.spec.dynamic, dynamic.spec.dynamic) == (False, True)
    plan = state.plan("index", "GET")
    assert plan is not None
    assert sorted((planned.scope, planned.dynamic) for planned in plan.limits) == [("index", False), ("plans", True)]
