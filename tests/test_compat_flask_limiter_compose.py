"""flask_redis_throttle.compat.flask_limiter: which limits apply to a
request, as in Flask-Limiter: dynamic limits counted per limit string, an
exempt view without its own limits, limits put on a view at run time,
the default per method, a view's or a nested blueprint's limits replacing
its blueprints', and several Limiters on one app."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from flask import Blueprint, Flask, g, request
from flask.views import MethodView
from helpers import evalsha_calls, get, limiter_for, statuses

from flask_redis_throttle import ConfigurationError, exempt
from flask_redis_throttle.compat.flask_limiter import ExemptionScope, HeaderNames, Limiter
from flask_redis_throttle.compat.flask_limiter.util import get_remote_address
from flask_redis_throttle.decorators import Exemption, exemption_of
from flask_redis_throttle.testing import RedisServer


@pytest.fixture
def flask_app() -> Flask:
    app = Flask("compat_compose")
    app.config["TESTING"] = True

    @app.get("/")
    def index() -> str:
        return "ok"

    return app


def plan_of(header: str | None) -> str:
    return "1/minute" if header else "3/minute"


def test_a_dynamic_limit_counts_each_limit_string_apart(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, application_limits=[lambda: plan_of(request.headers.get("suspect"))])

    @flask_app.get("/own")
    @limiter.limit(lambda: plan_of(request.headers.get("suspect")))
    def own() -> str:
        return "own"

    client = flask_app.test_client()
    assert statuses(client, 2, "/own") == [200, 200]
    # "1/minute" has a counter of its own: the two requests above are not in it.
    assert statuses(client, 2, "/own", headers={"suspect": "1"}) == [200, 429]
    assert statuses(client, 2, "/own") == [200, 429]  # back in the 3/minute ones, which had 2
    assert statuses(client, 2, headers={"suspect": "1"}) == [429, 429]  # the application's 1/minute


def test_a_dynamic_limit_calls_its_function_once_per_request(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)
    calls = []

    def limit_value() -> str:
        calls.append(request.path)
        return "5/minute"

    @flask_app.get("/own")
    @limiter.limit(limit_value)
    def own() -> str:
        return "own"

    assert statuses(flask_app.test_client(), 2, "/own") == [200, 200]
    assert calls == ["/own", "/own"]


def test_an_exempt_view_loses_its_own_limits(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"])

    @flask_app.get("/under")
    @limiter.limit("1/minute")
    @limiter.exempt
    def under() -> str:
        return "ok"

    @flask_app.get("/over")
    @limiter.exempt
    @limiter.limit("1/minute")
    def over() -> str:
        return "ok"

    client = flask_app.test_client()
    assert statuses(client, 3, "/under") + statuses(client, 3, "/over") == [200] * 6
    assert statuses(client, 2) == [200, 429]


def test_a_limit_put_on_a_view_after_its_first_request_applies(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)

    @flask_app.get("/late")
    def late() -> str:
        return "ok"

    client = flask_app.test_client()
    assert statuses(client, 3, "/late") == [200] * 3
    limiter.limit("2/minute")(late)
    assert statuses(client, 3, "/late") == [200, 200, 429]


def test_the_default_stays_on_the_methods_a_view_limit_leaves_out(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"])

    class Items(MethodView):
        decorators = (limiter.limit("2/minute", methods=["get"]),)

        def get(self) -> str:
            return "get"

        def post(self) -> str:
            return "post"

    flask_app.add_url_rule("/items", view_func=Items.as_view("items"))
    client = flask_app.test_client()
    assert statuses(client, 3, "/items") == [200, 200, 429]  # its own limit, without the default
    assert [client.post("/items").status_code for _ in range(2)] == [200, 429]  # the default


def test_a_views_limits_replace_its_blueprints_unless_they_keep_the_default(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"])
    blueprint = Blueprint("api", __name__)

    @blueprint.get("/inherits")
    def inherits() -> str:
        return "ok"

    @blueprint.get("/replaces")
    @limiter.limit("3/minute")
    def replaces() -> str:
        return "ok"

    @blueprint.get("/adds")
    @limiter.limit("3/minute", override_defaults=False)
    def adds() -> str:
        return "ok"

    limiter.limit("2/minute")(blueprint)
    flask_app.register_blueprint(blueprint)
    client = flask_app.test_client()
    assert statuses(client, 3, "/inherits") == [200, 200, 429]  # the blueprint's, which replaces the default
    assert statuses(client, 4, "/replaces") == [200, 200, 200, 429]  # its own only
    assert statuses(client, 3, "/adds") == [200, 200, 429]  # its own and the blueprint's


def test_a_nested_blueprints_limits_replace_the_enclosing_ones_for_its_own_views(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, application_limits=["100/minute"])
    parent, child, grandchild, other = (Blueprint(name, __name__) for name in ("parent", "child", "grandchild", "o"))
    for blueprint, name in ((child, "c"), (grandchild, "g"), (other, "o")):
        blueprint.add_url_rule(f"/{name}", name, lambda: "ok")
    limiter.limit("1/minute")(parent)
    limiter.limit("3/minute")(child)  # replaces the parent's, for its own views only
    limiter.limit("5/minute", override_defaults=False)(grandchild)  # keeps the child's and the parent's
    limiter.exempt(other, flags=ExemptionScope.APPLICATION)
    limiter.limit("2/minute")(other)  # replaces the parent's, and keeps out of the application limit
    child.register_blueprint(grandchild)
    parent.register_blueprint(child)
    parent.register_blueprint(other)
    flask_app.register_blueprint(parent)
    client = flask_app.test_client()
    assert statuses(client, 4, "/c") == [200, 200, 200, 429]
    assert statuses(client, 2, "/g") == [200, 429]  # the parent's 1/minute
    assert statuses(client, 3, "/o") == [200, 200, 429]
    plan = flask_app.extensions["ratelimit"].plan("parent.o.o", "GET")
    assert [limit.source for limit in plan.limits] == ["blueprint parent.o"]


def test_a_view_limit_whose_function_raises_before_the_view_is_decided_when_the_view_runs(
    flask_app: Flask, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"])

    def with_plan(view: Callable[[], str]) -> Callable[[], str]:
        @functools.wraps(view)
        def planned() -> str:
            g.plan = "2/minute"
            return view()

        return planned

    @flask_app.get("/planned")
    @with_plan
    @limiter.limit(lambda: g.plan)
    def planned() -> str:
        return "ok"

    assert statuses(flask_app.test_client(), 3, "/planned") == [200, 200, 429]
    assert "raised; its limit is left out" in caplog.text  # before the view, where g.plan is not set


def test_a_limited_function_that_overrides_the_default_takes_it_from_the_endpoints_it_runs_in(
    flask_app: Flask, url: str
) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"])

    @limiter.limit("3/minute")
    def search() -> str:
        return "found"

    @flask_app.get("/search")
    def view() -> str:
        return search()

    @flask_app.get("/native")
    @exempt(keep=["application"])
    def native() -> str:
        return search()

    client = flask_app.test_client()
    # The default counts the first request, before the endpoint is known to call search().
    assert statuses(client, 4, "/search") == [200, 200, 200, 429]
    assert statuses(client, 1, "/native") == [429]  # search()'s counters are its own, shared
    assert flask_app.extensions["ratelimit"].plan("native", "GET") is None  # its own exemption stays


def test_a_limited_function_takes_the_default_from_an_exempt_view_keeping_its_exemption(
    flask_app: Flask, url: str
) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"], application_limits=["2/minute"])

    @limiter.limit("5/minute")
    def search() -> str:
        return "found"

    @flask_app.get("/kept")
    @exempt(keep=["default", "blueprints"], own_limits=True)  # drops the application's, and its own
    def kept() -> str:
        return search()

    client = flask_app.test_client()
    # The default counts the first request, before the endpoint is known to call search();
    # from then on only search()'s 5/minute: the view still drops the application's 2/minute.
    assert statuses(client, 5, "/kept") == [200, 200, 200, 200, 200]
    assert exemption_of(kept) == Exemption(frozenset({"default", "application"}), own_limits=True)


def test_a_second_limiter_adds_its_limits_decided_in_the_same_call(flask_app: Flask, url: str) -> None:
    limiter_for(flask_app, url, default_limits=["1/second"], application_limits=["100/minute"])
    second = Limiter(
        lambda: request.headers.get("X-Team", ""),
        app=flask_app,
        key_prefix="second",
        default_limits=["3/minute"],
        application_limits=["50/minute"],
    )

    @flask_app.get("/team")
    @second.limit("2/minute")  # counts the second limiter's key_func
    def team() -> str:
        return "ok"

    second.request_filter(lambda: request.headers.get("X-Internal") == "1")
    client = flask_app.test_client()
    assert statuses(client, 2) == [200, 429]  # the first's 1/second
    plan = flask_app.extensions["ratelimit"].plan("index", "GET")
    assert [str(limit.policy.layers[0]) for limit in plan.limits] == [
        "1 per 1 second",
        "3 per 1 minute",
        "100 per 1 minute",
        "50 per 1 minute",
    ]
    # None shares a counter with another: a scope or a window of its own.
    assert len({(limit.scope, limit.policy.layers[0].window) for limit in plan.limits}) == 4
    assert statuses(client, 3, "/team", headers={"X-Team": "a"}) == [200, 200, 429]
    assert statuses(client, 1, "/team", headers={"X-Team": "b"}) == [200]  # another team, from the same address
    assert statuses(client, 3, "/team", headers={"X-Team": "a", "X-Internal": "1"}) == [200] * 3


@pytest.mark.redis
def test_two_limiters_decide_a_request_in_one_script_call(
    flask_app: Flask, redis_client: Any, redis_server: RedisServer
) -> None:
    limiter_for(flask_app, redis_server.url, default_limits=["5/second"])
    Limiter(get_remote_address, app=flask_app, default_limits=["10/minute"])
    client = flask_app.test_client()
    get(client, "/")  # loads the script
    before = evalsha_calls(redis_client)
    assert statuses(client, 3) == [200] * 3
    assert evalsha_calls(redis_client) - before == 3


def test_a_second_limiter_refuses_what_only_the_first_may_give(flask_app: Flask) -> None:
    limiter_for(flask_app, "memory://")
    with pytest.raises(ConfigurationError, match="second Limiter"):
        Limiter(get_remote_address, app=flask_app, storage_uri="redis://localhost:6379")
    with pytest.raises(ConfigurationError, match="second Limiter"):
        Limiter(get_remote_address, app=flask_app, strategy="moving-window")
    for only_the_first in ({"header_name_mapping": {HeaderNames.LIMIT: "X-Quota"}}, {"auto_check": False}):
        with pytest.raises(ConfigurationError, match=r"^header_name_mapping = .* expected the first Limiter's"):
            Limiter(get_remote_address, app=flask_app, **only_the_first)


def test_a_dynamic_limit_counted_per_string_is_not_reported_as_shared(flask_app: Flask, url: str) -> None:
    """Its scope is the endpoint's and the string; RequestLimit.shared says
    whether the limit is shared, as in Flask-Limiter, in current_limit and
    on_breach alike."""
    limiter = limiter_for(flask_app, url)
    breaches: list[Any] = []
    seen: list[Any] = []

    @flask_app.get("/plan")
    @limiter.limit(lambda: "1/minute", on_breach=breaches.append)
    def plan() -> str:
        seen.append(limiter.current_limit)
        return "ok"

    @flask_app.get("/together")
    @limiter.shared_limit(lambda: "1/minute", scope="team", on_breach=breaches.append)
    def together() -> str:
        return "ok"

    client = flask_app.test_client()
    assert statuses(client, 2, "/plan") == [200, 429]
    assert statuses(client, 2, "/together") == [200, 429]
    assert [limit.shared for limit in seen] == [False]
    assert [limit.shared for limit in breaches] == [False, True]
