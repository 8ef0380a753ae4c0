"""What a request costs: fixed costs, cost functions, and deduct_when."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask, Request, Response, abort, g, request
from helpers import extension_records, failing_hits, get, install, packed_records, storage_faults

from flask_redis_throttle import Layer, RefusalEvent, limit
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.extension import RateLimitState


def count_calls(state: RateLimitState) -> list[int]:
    """Record the cost of every script call the app makes."""
    assert state.throttle is not None
    costs: list[int] = []
    hit = state.throttle.hit

    def spy(checks: Any, cost: int = 1) -> Any:
        costs.append(cost)
        return hit(checks, cost)

    state.throttle.hit = spy  # type: ignore[method-assign]
    return costs


def test_a_fixed_cost(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("5/m", cost=2)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert get(client).headers["RateLimit"] == '"1m";r=3;t=60'
    assert statuses(client, 2, "/") == [200, 429]


def test_a_cost_function_of_the_request(app: Flask) -> None:
    @app.post("/batch")
    @limit("10/m", cost=lambda request: len(request.get_json()))
    def batch() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert client.post("/batch", json=[1] * 6).status_code == 200
    assert client.post("/batch", json=[1] * 5).status_code == 429  # 6 + 5 > 10
    assert client.post("/batch", json=[1] * 4).status_code == 200
    assert client.post("/batch", json=[]).status_code == 200  # free, even when full


@pytest.mark.parametrize("bad", [-1, 2.5, "3", None, True])
def test_a_bad_cost_counts_as_one_and_warns(app: Flask, statuses, caplog, bad: object) -> None:
    def cost(request: Request) -> Any:
        return bad

    @app.get("/")
    @limit("2/m", cost=cost)
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert statuses(app.test_client(), 3, "/") == [200, 200, 429]
    warnings = [r.getMessage() for r in caplog.records if "cost function" in r.getMessage()]
    assert len(warnings) == 1  # at most one per interval
    assert repr(bad) in warnings[0]
    assert "counts as 1" in warnings[0]


def request_size(request: Request) -> Any:
    return "big"


class Sized:
    """A cost function that is an object: it has no ``__qualname__`` of its own."""

    def __call__(self, request: Request) -> Any:
        return "big"

    def __repr__(self) -> str:
        return "<Sized cost>"


@pytest.mark.parametrize(
    ("cost", "named"),
    [(request_size, "test_costs.request_size"), (Sized(), "<Sized cost>")],
    ids=["function", "callable-object"],
)
def test_the_bad_cost_warning_names_the_function(app: Flask, caplog, cost: Any, named: str) -> None:
    # docs/limits.rst promises "a warning naming the function and the value"; an object by its repr.
    @app.get("/")
    @limit("2/m", cost=cost)
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert get(app.test_client()).status_code == 200
    [record] = [r for r in caplog.records if "cost function" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        f"the cost function {named} of limit '2/m' (view, scope 'index') returned 'big'; it counts as 1"
    )


def test_limits_of_different_costs_all_apply(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("3/m")
    @limit("10/h", cost=4, scope="expensive")
    def index() -> str:
        return "ok"

    state = install(app)
    costs = count_calls(state)
    assert statuses(app.test_client(), 4, "/") == [200, 200, 429, 429]  # 4 + 4 fit in 10, 12 do not
    assert costs[:2] == [1, 4]


def deduct_app(app: Flask, spec: str = "2/m", **options: Any) -> list[str]:
    """``/`` counts only successful responses; ``?fail`` answers 404."""
    ran: list[str] = []

    @app.get("/")
    @limit(spec, deduct_when=lambda response: response.status_code == 200, **options)
    def index() -> str:
        ran.append(request.args.get("fail", "ok"))
        if "fail" in request.args:
            abort(404)
        return "ok"

    return ran


def test_deduct_when_counts_only_matching_responses(app: Flask) -> None:
    ran = deduct_app(app)
    install(app)
    client = app.test_client()
    assert [get(client, "/?fail=1").status_code for _ in range(5)] == [404] * 5
    assert [get(client).status_code for _ in range(2)] == [200, 200]
    refused = get(client)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "60"
    assert len(ran) == 7  # the refused request never reached the view
    assert get(client, "/?fail=1").status_code == 429  # no room, whatever the outcome would be


def test_deduct_when_costs_one_round_trip_or_two(app: Flask) -> None:
    deduct_app(app, "5/m")
    state = install(app)
    costs = count_calls(state)
    client = app.test_client()
    get(client, "/?fail=1")
    assert costs == [0]  # inspected, not counted
    response = get(client)
    assert costs == [0, 0, 1]  # inspected, then counted
    # The headers show the state after the deduction.
    assert response.headers["RateLimit"].startswith('"1m";r=4;')


def test_deduct_when_with_a_cost_refuses_when_the_cost_would_not_fit(app: Flask) -> None:
    deduct_app(app, "3/m", cost=2)
    install(app)
    client = app.test_client()
    assert get(client).status_code == 200  # 2 of 3 used
    assert get(client).status_code == 429  # 1 left, 2 needed


def test_deduct_when_beside_a_plain_limit(app: Flask) -> None:
    @app.get("/")
    @limit("3/m")
    @limit("1/m", scope="successes", deduct_when=lambda response: response.status_code == 200)
    def index() -> Response:
        return Response("ok", status=int(request.args.get("status", 200)))

    state = install(app)
    costs = count_calls(state)
    client = app.test_client()
    assert get(client, "/?status=500").status_code == 500
    assert get(client).status_code == 200
    assert costs == [0, 1, 0, 1, 1]
    assert get(client, "/?status=500").status_code == 429  # no success left
    # The plain limit counted both earlier requests; the refused one is not counted.
    assert state.throttle is not None
    assert [key.decode().rsplit(":", 2)[-2] for key in sorted(state.throttle.storage.client.keys("*{*"))] == [
        "index",
        "successes",
    ]


def test_a_deduction_lost_to_a_race_is_not_counted(app: Flask) -> None:
    # Two requests are inspected before either is counted: both pass, and
    # the counter never goes over its quota, so the second goes uncounted.
    deduct_app(app, "1/m")
    state = install(app)
    outcomes = []
    for _ in range(2):
        with app.test_request_context("/", environ_base={"REMOTE_ADDR": "192.0.2.1"}):
            state.before_request()
            outcomes.append(g.pop("_ratelimit"))
    for outcome in outcomes:
        with app.test_request_context("/", environ_base={"REMOTE_ADDR": "192.0.2.1"}):
            g._ratelimit = outcome
            assert state.after_request(Response("ok")).headers["RateLimit"].startswith('"1m";r=0;')
    assert state.throttle is not None
    client = state.throttle.storage.client
    [key] = client.keys("*{*")
    [(_window, count)] = packed_records(key, client.get(key)).values()
    assert count == 1
    assert get(app.test_client()).status_code == 429


def batch_size(request: Request) -> int:
    return len(request.get_json())


def test_a_request_costing_more_than_the_quota_can_never_pass(app: Flask, caplog) -> None:
    # No Retry-After: none would be true. The body and a warning say why.
    events: list[RefusalEvent] = []

    @app.post("/batch")
    @limit("5/m;100/h", cost=batch_size, on_breach=events.append)
    def batch() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        refused = client.post("/batch", json=[1] * 6, headers={"Accept": "application/json"})
    assert refused.status_code == 429
    assert "Retry-After" not in refused.headers
    assert refused.headers["RateLimit"] == '"1m";r=5;t=0'  # nothing was counted
    detail = (
        "Rate limit exceeded: this request costs 6, more than the whole quota of 5 per 1 minute; it can never pass."
    )
    assert refused.get_json() == {
        "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "title": "Quota Exceeded",
        "status": 429,
        "detail": detail,
        "violated-policies": ["1m"],
    }
    assert client.post("/batch", json=[1] * 6).get_data(as_text=True) == detail + "\n"
    [warning] = [r.getMessage() for r in caplog.records if "never pass" in r.getMessage()]
    assert warning.startswith(
        "a request to batch costs 6, more than the whole quota of 5 per 1 minute "
        "of limit '5/m;100/h' (view, scope 'batch'): it can never pass; refused without Retry-After"
    )
    assert [(b.layer, b.retry_after, b.scope) for b in events] == [(Layer(5, 60), None, "batch")] * 2
    # The quota is whole: a request that fits it passes.
    assert client.post("/batch", json=[1] * 5).status_code == 200


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("cost", [6, 11], ids=["over-the-minute", "over-both"])
def test_the_body_the_headers_and_the_problem_name_the_first_layer_a_cost_is_over(
    app: Flask, strategy: str, cost: int
) -> None:
    """With 5/m;10/h, a cost of 6 is over the minute's whole quota only, and
    11 over both: the body, the problem details and ``RateLimit`` all name
    the minute, the first layer the cost is over, on every strategy. Its
    ``t`` is the seconds until it is back to its full quota: 0 while nothing
    is counted (a fixed window used to give the window's end), more once
    something is."""

    @app.post("/batch")
    @limit("5/m;10/h", cost=batch_size, strategy=strategy)
    def batch() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    detail = f"Rate limit exceeded: this request costs {cost}, more than the whole quota of 5 per 1 minute"
    text = client.post("/batch", json=[1] * cost)
    problem = client.post("/batch", json=[1] * cost, headers={"Accept": "application/json"})
    for refused in (text, problem):
        assert refused.status_code == 429
        assert "Retry-After" not in refused.headers
        assert refused.headers["RateLimit"] == '"1m";r=5;t=0'
    assert text.get_data(as_text=True).startswith(detail)
    assert problem.get_json()["detail"].startswith(detail)
    assert problem.get_json()["violated-policies"] == ["1m"]
    assert client.post("/batch", json=[1]).status_code == 200
    # (One more: the block cache keeps the refusal of the cost it was.)
    refused = client.post("/batch", json=[1] * (cost + 1), headers={"Accept": "application/json"})
    assert refused.get_json()["detail"].startswith(detail.replace(f"costs {cost}", f"costs {cost + 1}"))
    name, left, reset = refused.headers["RateLimit"].split(";")
    assert (name, left) == ('"1m"', "r=4")
    assert 0 < int(reset.removeprefix("t=")) <= 66


@pytest.mark.parametrize("retry_after", ["seconds", "http-date"])
def test_a_fixed_cost_over_a_dynamic_quota_can_never_pass(app: Flask, caplog, retry_after: str) -> None:
    # A fixed cost is checked against fixed limits when decorating; a
    # dynamic limit's quota is only known per request.
    @app.get("/")
    @limit(lambda request: request.args.get("limit", "2/m;10/h"), cost=3)
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_RETRY_AFTER=retry_after)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        refused = get(client)
    assert refused.status_code == 429
    assert "Retry-After" not in refused.headers
    assert "costs 3, more than the whole quota of 2 per 1 minute; it can never pass" in refused.get_data(as_text=True)
    assert any("of limit test_costs." in r.getMessage() and "costs 3" in r.getMessage() for r in caplog.records)
    assert get(client, "/?limit=3/m").status_code == 200


def test_a_shadow_limit_a_request_could_never_pass_says_so(app: Flask, caplog) -> None:
    events: list[RefusalEvent] = []

    @app.post("/batch")
    @limit("5/m", cost=batch_size, shadow=True, on_breach=events.append)
    def batch() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        response = app.test_client().post("/batch", json=[1] * 6)
    assert response.status_code == 200
    assert "Retry-After" not in response.headers
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("shadow mode: ip:") and "costs 6, more than the whole quota" in m for m in messages)
    assert [(b.layer, b.retry_after, b.shadow) for b in events] == [(Layer(5, 60), None, True)]


def test_a_deferred_request_costing_more_than_the_quota_can_never_pass(app: Flask, caplog) -> None:
    # deduct_when inspects at cost 0, which fits; the real cost never will.
    @app.post("/batch")
    @limit("5/m", cost=batch_size, deduct_when=lambda response: response.status_code == 200)
    def batch() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        refused = client.post("/batch", json=[1] * 6)
    assert refused.status_code == 429
    assert "Retry-After" not in refused.headers
    assert "it can never pass" in refused.get_data(as_text=True)
    assert any("costs 6" in r.getMessage() and "of limit '5/m' (view" in r.getMessage() for r in caplog.records)
    assert client.post("/batch", json=[1] * 5).status_code == 200


@pytest.mark.internal_error
@storage_faults
def test_a_deduction_the_storage_fails_leaves_the_response_and_is_logged_as_lost(
    app: Flask, caplog: pytest.LogCaptureFixture, error: Exception, logged: str
) -> None:
    deduct_app(app, "5/m")
    state = install(app)
    failing_hits(state, error, lambda checks, cost: cost > 0)  # the deduction, not the inspection
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        response = get(client)
    assert response.status_code == 200
    assert response.text == "ok"
    assert response.headers["RateLimit"].startswith('"1m";r=5;')  # the inspection's: nothing was counted
    [record] = [r for r in extension_records(caplog) if "deduction" in r.getMessage()]
    assert logged in record.getMessage()
    assert record.getMessage().endswith("; a response's deduction is lost.")
