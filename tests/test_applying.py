"""Where limits come from: defaults, blueprints, exemptions, scopes and methods."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Blueprint, Flask, request
from flask.views import MethodView, View
from helpers import get, install

from flask_redis_throttle import ConfigurationError, InvalidLimit, exempt, limit
from flask_redis_throttle._request.plan import Plan
from flask_redis_throttle._request.spec import make_spec
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.decorators import Exemption, exemption_of


def views(app: Flask | Blueprint, *names: str) -> None:
    """A plain GET view ``/<name>`` for each name."""
    for name in names:
        app.add_url_rule(f"/{name}", name, lambda: "ok")


def test_own_limits_replace_the_default(app: Flask, statuses) -> None:
    @app.get("/own")
    @limit("1/m")
    def own() -> str:
        return "ok"

    views(app, "free")
    install(app, RATELIMIT_DEFAULT="2/m")
    client = app.test_client()
    assert statuses(client, 2, "/own") == [200, 429]
    assert statuses(client, 3, "/free") == [200, 200, 429]


def test_default_mode_add_applies_the_default_to_limited_views_too(app: Flask, statuses) -> None:
    @app.get("/own")
    @limit("5/m")
    def own() -> str:
        return "ok"

    state = install(app, RATELIMIT_DEFAULT="3/m", RATELIMIT_DEFAULT_MODE="add")
    client = app.test_client()
    response = get(client, "/own")
    assert response.headers["RateLimit-Policy"] == '"1m";q=5;w=60, "1m-2";q=3;w=60'
    assert statuses(client, 3, "/own") == [200, 200, 429]
    # Both count one minute, per endpoint, yet each has a counter of its own.
    plan = state.plan("own")
    assert plan is not None
    assert [(limit.source, limit.scope) for limit in plan.limits] == [("view", "own"), ("RATELIMIT_DEFAULT", "own+2")]


def test_the_application_limit_is_shared_by_every_view(app: Flask, statuses) -> None:
    @app.get("/own")
    @limit("5/m")
    def own() -> str:
        return "ok"

    @app.get("/health")
    @exempt
    def health() -> str:
        return "ok"

    views(app, "free")
    state = install(app, RATELIMIT_APPLICATION="3/m", RATELIMIT_DEFAULT="10/m")
    client = app.test_client()
    assert statuses(client, 3, "/health") == [200, 200, 200]
    assert statuses(client, 2, "/own") + statuses(client, 2, "/free") == [200, 200, 200, 429]
    plan = state.plan("free")
    assert plan is not None
    assert [(limit.source, limit.scope) for limit in plan.limits] == [
        ("RATELIMIT_DEFAULT", "free"),
        ("RATELIMIT_APPLICATION", "@app"),
    ]


def test_the_default_takes_a_limit_with_options(app: Flask, statuses) -> None:
    app.add_url_rule("/items", "items", lambda: "ok", methods=["GET", "POST"])
    state = install(app, RATELIMIT_DEFAULT={"limit": "1/m", "per_method": True, "exempt_when": is_internal})
    client = app.test_client()
    assert [client.get("/items").status_code, client.get("/items").status_code] == [200, 429]
    assert [client.post("/items").status_code, client.post("/items").status_code] == [200, 429]
    assert client.post("/items", headers={"X-Internal": "1"}).status_code == 200
    plan = state.plan("items", "POST")
    assert plan is not None
    assert [(limit.source, limit.scope) for limit in plan.limits] == [("RATELIMIT_DEFAULT", "items@POST")]


def is_internal(request: Any) -> bool:
    return "X-Internal" in request.headers


def test_a_list_of_default_limits_each_with_its_options(app: Flask, statuses) -> None:
    @app.get("/items")
    def items() -> Any:
        return "ok", 400 if "X-Bad" in request.headers else 200

    costly = {"limit": "3/h", "cost": lambda request: 2 if "X-Costly" in request.headers else 1}
    failures = {"limit": "1/d", "deduct_when": lambda response: response.status_code >= 400}
    state = install(app, RATELIMIT_DEFAULT=["5/m", costly, failures])
    client = app.test_client()
    assert statuses(client, 1, "/items", headers={"X-Costly": "1"}) == [200]  # 2 of 3/h
    assert statuses(client, 1, "/items", headers={"X-Bad": "1"}) == [400]  # 3 of 3/h, 1 of 1/d
    assert statuses(client, 1, "/items") == [429]
    plan = state.plan("items")
    assert plan is not None
    assert [limit.source for limit in plan.limits] == ["RATELIMIT_DEFAULT"] * 3


def test_application_limits_with_options_count_apart(app: Flask, statuses) -> None:
    views(app, "a", "b")
    app.add_url_rule("/write", "write", lambda: "ok", methods=["POST"])
    application = [{"limit": "2/m", "per_method": True}, {"limit": "3/h", "methods": ["POST"]}]
    state = install(app, RATELIMIT_APPLICATION=application)
    client = app.test_client()
    assert statuses(client, 1, "/a") + statuses(client, 2, "/b") == [200, 200, 429]
    assert [client.post("/write").status_code for _ in range(3)] == [200, 200, 429]
    plan = state.plan("write", "POST")
    assert plan is not None
    assert [(limit.source, limit.scope) for limit in plan.limits] == [
        ("RATELIMIT_APPLICATION", "@app@POST"),
        ("RATELIMIT_APPLICATION", "@app+2"),
    ]


def test_an_exemption_keeps_what_it_is_told_to(app: Flask, statuses) -> None:
    api = Blueprint("api", __name__)
    limit("3/m", scope="api")(api)

    @api.get("/search")
    @exempt(keep=["application", "blueprints"])
    def search() -> str:
        return "ok"

    @api.get("/upload")
    @exempt(keep=["default"])
    def upload() -> str:
        return "ok"

    @api.get("/health")
    @exempt
    def health() -> str:
        return "ok"

    app.register_blueprint(api, url_prefix="/api")
    state = install(app, RATELIMIT_DEFAULT="1/m", RATELIMIT_APPLICATION="10/m")
    sources = {
        endpoint: [limit.source for limit in state.plan(f"api.{endpoint}").limits]  # type: ignore[union-attr]
        for endpoint in ("search", "upload")
    }
    assert sources == {"search": ["blueprint api", "RATELIMIT_APPLICATION"], "upload": ["RATELIMIT_DEFAULT"]}
    assert state.plan("api.health") is None
    client = app.test_client()
    assert statuses(client, 2, "/api/upload") == [200, 429]
    assert statuses(client, 4, "/api/search") == [200, 200, 200, 429]


def test_a_blueprints_exemption_covers_nested_blueprints_unless_told_not_to(app: Flask, statuses) -> None:
    for nested in (True, False):
        parent, child = Blueprint(f"parent{nested}", __name__), Blueprint("child", __name__)
        views(parent, "p")
        views(child, "c")
        exempt(parent, keep=["application"], nested=nested)
        parent.register_blueprint(child, url_prefix="/child")
        app.register_blueprint(parent, url_prefix=f"/{nested}")
    state = install(app, RATELIMIT_DEFAULT="1/m", RATELIMIT_APPLICATION="50/m")
    client = app.test_client()
    assert statuses(client, 2, "/True/p") + statuses(client, 2, "/True/child/c") == [200, 200, 200, 200]
    assert statuses(client, 2, "/False/p") + statuses(client, 2, "/False/child/c") == [200, 200, 200, 429]
    plan = state.plan("parentFalse.child.c")
    assert plan is not None
    assert [limit.source for limit in plan.limits] == ["RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION"]


def test_an_exemption_with_own_limits_drops_the_limits_put_on_the_exempt_object_too(app: Flask, statuses) -> None:
    @app.get("/before")
    @limit("1/m")
    @exempt(own_limits=True)
    def before() -> str:
        return "ok"

    @app.get("/after")
    @exempt(own_limits=True)
    @limit("1/m")
    def after() -> str:
        return "ok"

    class Items(MethodView):
        @limit("1/m")
        def get(self) -> str:
            return "ok"

    app.add_url_rule("/items", view_func=exempt(own_limits=True)(Items.as_view("items")))

    @app.get("/default")
    @exempt(keep=["default", "application", "blueprints"], own_limits=True)
    @limit("1/m")
    def default() -> str:
        return "ok"

    api, inner = Blueprint("api", __name__), Blueprint("inner", __name__)
    limit("1/m", scope="api")(api)
    exempt(api, keep=["default", "application"], own_limits=True)
    views(api, "a")
    views(inner, "b")
    limit("2/m")(inner)
    api.register_blueprint(inner, url_prefix="/inner")
    app.register_blueprint(api, url_prefix="/api")
    state = install(app, RATELIMIT_DEFAULT="3/m")
    client = app.test_client()
    for path in ("/before", "/after", "/items"):
        assert statuses(client, 3, path) == [200] * 3
        assert state.plan(path.lstrip("/")) is None
    # Only its own limit dropped: it keeps the default.
    assert statuses(client, 4, "/default") == [200, 200, 200, 429]
    # A blueprint's own limit is dropped for its views and its nested
    # blueprints' views; the nested blueprint's own limit still applies.
    assert statuses(client, 4, "/api/a") == [200, 200, 200, 429]
    assert statuses(client, 3, "/api/inner/b") == [200, 200, 429]


def test_exemption_of_reads_what_exempt_recorded_for_a_front_end_to_add_to(app: Flask, statuses) -> None:
    @app.get("/search")
    @exempt(keep=["application"], nested=False)
    def search() -> str:
        return "ok"

    views(app, "free")
    api = Blueprint("api", __name__)
    exempt(api, keep=["default"], own_limits=True)
    views(api, "a")
    app.register_blueprint(api, url_prefix="/api")
    assert exemption_of(search) == Exemption(frozenset({"default", "blueprints"}), nested=False)
    assert exemption_of(api) == Exemption(frozenset({"application", "blueprints"}), own_limits=True)
    assert exemption_of(app.view_functions["free"]) is None
    assert exemption_of(app) is None
    # Flask-Limiter's shim drops the default from a view at run time this way,
    # keeping what the view's exemption (none here) already drops.
    free = app.view_functions["free"]
    before = exemption_of(free) or Exemption(frozenset())
    exempt(keep=[kind for kind in ("application", "blueprints") if kind not in before.drops])(free)
    install(app, RATELIMIT_DEFAULT="1/m", RATELIMIT_APPLICATION="4/m")
    client = app.test_client()
    assert statuses(client, 2, "/search") == [200, 200]  # not the default's 1/m
    assert statuses(client, 3, "/free") == [200, 200, 429]  # nor here: the app's 4/m, shared with /search
    assert exemption_of(free) == Exemption(frozenset({"default"}))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"keep": "default"}, "keep a list of"),
        ({"keep": ["defaults"]}, "keep a list of"),
        ({"keep": ["default", "application", "blueprints"]}, "exempts from nothing"),
        ({"nested": "yes"}, "True or False"),
        ({"own_limits": 1}, "True or False"),
    ],
)
def test_an_exemption_that_cannot_be_honoured_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        exempt(**options)


def test_a_blueprint_limit_counts_each_view_on_its_own(app: Flask, statuses) -> None:
    api = Blueprint("api", __name__)
    views(api, "a", "b")
    limit("2/m")(api)
    app.register_blueprint(api, url_prefix="/api")
    install(app)
    client = app.test_client()
    assert statuses(client, 3, "/api/a") == [200, 200, 429]
    assert statuses(client, 3, "/api/b") == [200, 200, 429]


def test_a_blueprint_limit_with_a_scope_is_shared_by_its_views(app: Flask, statuses) -> None:
    api = Blueprint("api", __name__)
    views(api, "a", "b")
    limit("3/m", scope="api")(api)
    app.register_blueprint(api, url_prefix="/api")
    install(app)
    client = app.test_client()
    assert statuses(client, 2, "/api/a") + statuses(client, 2, "/api/b") == [200, 200, 200, 429]


def test_nested_blueprints_and_views_add_their_limits(app: Flask, statuses) -> None:
    parent = Blueprint("parent", __name__)
    child = Blueprint("child", __name__)
    views(parent, "p")
    views(child, "c")

    @child.get("/own")
    @limit("1/m", scope="own")
    def own() -> str:
        return "ok"

    limit("3/m;10/h")(parent)
    limit("2/m", scope="child")(child)
    parent.register_blueprint(child, url_prefix="/child")
    app.register_blueprint(parent, url_prefix="/parent")
    install(app)
    client = app.test_client()
    response = get(client, "/parent/child/own")
    assert response.headers["RateLimit-Policy"] == '"1m";q=1;w=60, "1m-2";q=2;w=60, "1m-3";q=3;w=60, "1h";q=10;w=3600'
    assert statuses(client, 1, "/parent/child/own") == [429]  # its own 1/m
    # The child's shared 2/m has one left, spent by /c; the parent's 3/m counts per view.
    assert statuses(client, 2, "/parent/child/c") == [200, 429]
    assert statuses(client, 4, "/parent/p") == [200, 200, 200, 429]


def test_a_blueprint_registered_twice_limits_under_each_name(app: Flask, statuses) -> None:
    shop = Blueprint("shop", __name__)
    views(shop, "cart")
    limit("1/m")(shop)
    app.register_blueprint(shop, url_prefix="/eu")
    app.register_blueprint(shop, url_prefix="/us", name="shop_us")
    install(app)
    client = app.test_client()
    assert statuses(client, 2, "/eu/cart") == [200, 429]
    assert statuses(client, 2, "/us/cart") == [200, 429]


@pytest.mark.parametrize(("mode", "expected"), [("replace", [200, 200, 429]), ("add", [200, 429, 429])])
def test_blueprint_limits_count_as_own_limits_for_the_default(app: Flask, statuses, mode, expected) -> None:
    api = Blueprint("api", __name__)
    views(api, "a")
    limit("2/m")(api)
    app.register_blueprint(api, url_prefix="/api")
    install(app, RATELIMIT_DEFAULT="1/m", RATELIMIT_DEFAULT_MODE=mode)
    assert statuses(app.test_client(), 3, "/api/a") == expected


def test_exempt_views_inherit_nothing(app: Flask, statuses) -> None:
    api = Blueprint("api", __name__)

    @api.get("/health")
    @exempt
    def health() -> str:
        return "ok"

    @api.get("/special")
    @exempt
    @limit("2/m")
    def special() -> str:
        return "ok"

    @app.get("/status")
    @exempt
    def status() -> str:
        return "ok"

    limit("1/m")(api)
    app.register_blueprint(api, url_prefix="/api")
    state = install(app, RATELIMIT_DEFAULT="1/m", RATELIMIT_DEFAULT_MODE="add")
    client = app.test_client()
    assert statuses(client, 3, "/api/health") == [200, 200, 200]
    assert statuses(client, 3, "/status") == [200, 200, 200]
    assert "RateLimit" not in get(client, "/status").headers
    # Only its own limit: neither the blueprint's 1/m nor the default.
    assert statuses(client, 3, "/api/special") == [200, 200, 429]
    assert state.plan("api.health") is None


def test_an_exempt_blueprint_keeps_its_own_limits_and_those_below(app: Flask, statuses) -> None:
    outer = Blueprint("outer", __name__)
    quiet = Blueprint("quiet", __name__)
    loud = Blueprint("loud", __name__)
    views(quiet, "q")
    views(loud, "l")
    limit("1/m")(outer)
    exempt(quiet)
    exempt(loud)
    limit("2/m")(loud)
    outer.register_blueprint(quiet, url_prefix="/quiet")
    outer.register_blueprint(loud, url_prefix="/loud")
    app.register_blueprint(outer, url_prefix="/outer")
    install(app, RATELIMIT_DEFAULT="1/m")
    client = app.test_client()
    assert statuses(client, 3, "/outer/quiet/q") == [200, 200, 200]
    assert statuses(client, 3, "/outer/loud/l") == [200, 200, 429]


@pytest.mark.parametrize("mode", ["replace", "add"])
def test_static_files_are_never_limited(tmp_path: Any, mode: str) -> None:
    """Not by the default, nor by a blueprint's limit: the app's static
    files, a plain blueprint's and a limited blueprint's."""
    (tmp_path / "a.txt").write_text("a")
    app = Flask("tests", static_folder=str(tmp_path), static_url_path="/static")
    plain = Blueprint("bp", __name__, static_folder=str(tmp_path), static_url_path="/static")
    app.register_blueprint(plain, url_prefix="/bp")
    assets = Blueprint("assets", __name__, static_folder=str(tmp_path), static_url_path="/static")
    limit("1/m")(assets)
    app.register_blueprint(assets, url_prefix="/assets")
    state = install(app, RATELIMIT_DEFAULT="1/m", RATELIMIT_DEFAULT_MODE=mode)
    client = app.test_client()
    for path in ("/static/a.txt", "/bp/static/a.txt", "/assets/static/a.txt"):
        for _ in range(3):
            with client.get(path) as response:
                assert response.status_code == 200
    assert state.plan("static") is None
    assert state.plan("bp.static") is None
    assert state.plan("assets.static") is None


def document_scope(request: Any) -> Any:
    return {"a": "document:a", "b": "document:b", "none": None}.get(request.view_args["name"], "")


def test_a_scope_function_gives_each_request_its_scope(app: Flask, statuses) -> None:
    @app.route("/documents/<name>", methods=["GET", "POST"])
    @limit("1/m", scope=document_scope)
    def document(name: str) -> str:
        return name

    @app.route("/other/<name>", methods=["GET", "POST"])
    @limit("1/m", scope=document_scope, per_method=True)
    def other(name: str) -> str:
        return name

    state = install(app)
    client = app.test_client()
    assert statuses(client, 2, "/documents/a") + statuses(client, 2, "/documents/b") == [200, 429, 200, 429]
    assert statuses(client, 2, "/other/a") == [200, 429]  # document:a@GET
    assert [client.post("/other/a").status_code, client.post("/other/a").status_code] == [200, 429]
    plan = state.plan("document")
    assert plan is not None
    assert plan.limits[0].scope == "test_applying.document_scope()"


@pytest.mark.parametrize("fail_open", [True, False])
def test_a_scope_function_that_returns_no_name_is_a_bad_limit(app: Flask, caplog, fail_open: bool) -> None:
    @app.get("/documents/<name>")
    @limit("1/m", scope=document_scope)
    def document(name: str) -> str:
        return name

    install(app, RATELIMIT_FAIL_OPEN=fail_open)
    client = app.test_client()
    expected = [200, 200] if fail_open else [503, 503]
    assert [client.get("/documents/none").status_code, client.get("/documents/empty").status_code] == expected
    assert "a scope function must return a non-empty string, not None" in caplog.text


def test_views_in_different_blueprints_share_a_scope(app: Flask, statuses) -> None:
    web = Blueprint("web", __name__)
    api = Blueprint("api", __name__)
    for blueprint in (web, api):
        blueprint.add_url_rule("/search", "search", limit("3/m", scope="search")(lambda: "ok"))
    app.register_blueprint(web, url_prefix="/web")
    app.register_blueprint(api, url_prefix="/api")
    install(app)
    client = app.test_client()
    assert statuses(client, 2, "/web/search") + statuses(client, 2, "/api/search") == [200, 200, 200, 429]


def test_limits_per_method(app: Flask) -> None:
    @app.route("/items", methods=["GET", "POST"])
    @limit("1/m", methods=["post"])
    def items() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [client.get("/items").status_code for _ in range(3)] == [200, 200, 200]
    assert [client.post("/items").status_code for _ in range(2)] == [200, 429]


def test_a_get_limit_covers_head(app: Flask) -> None:
    @app.get("/page")
    @limit("1/m", methods=["GET"])
    def page() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert client.head("/page").status_code == 200
    assert client.get("/page").status_code == 429


def test_limits_of_different_methods_keep_their_own_counters(app: Flask) -> None:
    @app.route("/items", methods=["GET", "POST"])
    @limit("1/m", methods=["POST"])
    @limit("2/m", methods=["GET"])
    def items() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert client.post("/items").status_code == 200
    assert [client.get("/items").status_code for _ in range(3)] == [200, 200, 429]
    assert client.post("/items").status_code == 429


def test_plan_describes_each_limit(app: Flask) -> None:
    def api_key(request: Any) -> str | None:
        return request.headers.get("X-Api-Key")

    def quota(request: Any) -> str:
        return "5/m"

    api = Blueprint("api", __name__)

    @api.route("/items", methods=["GET", "POST"])
    @limit("10/s;100/m", identities=[api_key], strategy="gcra")
    @limit(quota, methods=["POST"], cost=3, shadow=True)
    def items() -> str:
        return "ok"

    limit("1000/h", scope="api")(api)
    app.register_blueprint(api, url_prefix="/api")
    state = install(app)
    get_plan = state.plan("api.items")
    post_plan = state.plan("api.items", "post")
    assert isinstance(get_plan, Plan)
    assert isinstance(post_plan, Plan)
    assert get_plan.simple
    assert not post_plan.simple
    assert [limit.source for limit in post_plan.limits] == ["view", "view", "blueprint api"]
    first, dynamic, shared = post_plan.limits
    assert first.policy is not None
    assert [str(layer) for layer in first.policy.layers] == ["10 per 1 second", "100 per 1 minute"]
    assert (first.scope, first.strategy, first.identities) == ("api.items", "gcra", (api_key,))
    assert dynamic.dynamic
    assert dynamic.policy is None
    assert dynamic.spec.limit is quota
    assert (dynamic.shadow, dynamic.spec.cost, dynamic.spec.methods) == (True, 3, frozenset({"POST"}))
    assert dynamic.identities == ("ip", "user")
    assert shared.scope == "api"
    assert state.plan("api.items", "GET") is get_plan  # compiled once, kept
    assert len(get_plan.limits) == 2
    assert state.plan("nowhere") is None
    assert state.plan(None) is None


def test_plan_works_when_disabled() -> None:
    app = Flask("tests")
    views(app, "free")
    state = install(app, RATELIMIT_ENABLED=False, RATELIMIT_DEFAULT="1/m")
    plan = state.plan("free")
    assert plan is not None
    assert plan.limits[0].source == "RATELIMIT_DEFAULT"


def test_class_based_views_take_limits_through_decorators(app: Flask, statuses) -> None:
    class Items(MethodView):
        decorators = (limit("1/m"),)

        def get(self) -> str:
            return "ok"

    app.add_url_rule("/items", view_func=Items.as_view("items"))
    install(app)
    assert statuses(app.test_client(), 2, "/items") == [200, 429]


def test_limits_on_a_method_views_handlers_apply_to_their_method(app: Flask) -> None:
    class Items(MethodView):
        decorators = (limit("3/m", scope="items-all"),)

        @limit("1/m")
        def get(self) -> str:
            return "ok"

        @limit("1/m", scope="writes")
        def post(self) -> str:
            return "ok"

        def delete(self) -> str:
            return "ok"

    app.add_url_rule("/items", view_func=Items.as_view("items"))
    state = install(app)
    client = app.test_client()
    assert [client.get("/items").status_code for _ in range(2)] == [200, 429]  # get's 1/m
    assert [client.post("/items").status_code for _ in range(2)] == [200, 429]  # post's 1/m
    # delete() has only the decorators' 3/m, which the first GET and POST used too.
    assert [client.delete("/items").status_code for _ in range(2)] == [200, 429]
    plan = state.plan("items", "POST")
    assert plan is not None
    assert [(limit.scope, limit.spec.methods) for limit in plan.limits] == [
        ("items-all", None),
        ("writes", frozenset({"POST"})),
    ]


def test_a_method_views_get_limit_covers_head(app: Flask) -> None:
    class Page(MethodView):
        @limit("1/m")
        def get(self) -> str:
            return "ok"

    app.add_url_rule("/page", view_func=Page.as_view("page"))
    install(app)
    client = app.test_client()
    assert client.head("/page").status_code == 200
    assert client.get("/page").status_code == 429


def test_limits_on_a_views_dispatch_request_apply_to_every_method(app: Flask) -> None:
    class Echo(View):
        methods = ("GET", "POST")

        @limit("2/m")
        def dispatch_request(self) -> str:
            return "ok"

    app.add_url_rule("/echo", view_func=Echo.as_view("echo"))
    install(app)
    client = app.test_client()
    assert [client.get("/echo").status_code, client.post("/echo").status_code] == [200, 200]
    assert client.get("/echo").status_code == 429


def test_method_view_handler_limits_replace_the_default(app: Flask, statuses) -> None:
    class Items(MethodView):
        @limit("3/m")
        def get(self) -> str:
            return "ok"

    app.add_url_rule("/items", view_func=Items.as_view("items"))
    install(app, RATELIMIT_DEFAULT="1/m")
    assert statuses(app.test_client(), 4, "/items") == [200, 200, 200, 429]


def test_a_limit_a_class_based_view_would_ignore_raises(app: Flask) -> None:
    class Helper(MethodView):
        def get(self) -> str:
            return self.render()

        @limit("1/m")
        def render(self) -> str:
            return "ok"

    class Exempted(MethodView):
        @exempt
        def get(self) -> str:
            return "ok"

    class Mismatched(MethodView):
        @limit("1/m", methods=["POST"])
        def get(self) -> str:
            return "ok"

    app.add_url_rule("/helper", view_func=Helper.as_view("helper"))
    app.add_url_rule("/exempted", view_func=Exempted.as_view("exempted"))
    app.add_url_rule("/mismatched", view_func=Mismatched.as_view("mismatched"))
    state = install(app)
    with pytest.raises(TypeError, match=r"Helper\.render\(\) is never applied: render\(\) handles no request"):
        app.test_client().get("/helper")
    with pytest.raises(TypeError, match=r"`decorators = \[exempt\]` on .*Exempted"):
        state.plan("exempted")
    with pytest.raises(TypeError, match=r"leave out GET: it would never apply"):
        state.plan("mismatched")


def test_per_method_gives_each_method_its_own_counters(app: Flask) -> None:
    @app.route("/items", methods=["GET", "POST", "PUT"])
    @limit("1/m", per_method=True)
    def items() -> str:
        return "ok"

    state = install(app)
    client = app.test_client()
    assert [client.post("/items").status_code for _ in range(2)] == [200, 429]
    assert client.head("/items").status_code == 200
    assert client.get("/items").status_code == 429  # HEAD counts with GET
    assert client.put("/items").status_code == 200
    plan = state.plan("items", "PUT")
    assert plan is not None
    assert plan.limits[0].scope == "items@PUT"


def test_per_method_with_a_shared_scope(app: Flask) -> None:
    @app.route("/a", methods=["GET", "POST"])
    @limit("1/m", scope="shared", per_method=True)
    def a() -> str:
        return "ok"

    @app.route("/b", methods=["GET", "POST"])
    @limit("1/m", scope="shared", per_method=True)
    def b() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [client.get("/a").status_code, client.post("/a").status_code] == [200, 200]
    assert [client.get("/b").status_code, client.post("/b").status_code] == [429, 429]


def test_per_method_with_methods_counts_only_those(app: Flask) -> None:
    @app.route("/items", methods=["GET", "POST", "PUT"])
    @limit("1/m", methods=["POST", "PUT"], per_method=True)
    def items() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [client.post("/items").status_code, client.put("/items").status_code] == [200, 200]
    assert [client.post("/items").status_code, client.put("/items").status_code] == [429, 429]
    assert [client.get("/items").status_code for _ in range(3)] == [200, 200, 200]


@pytest.mark.parametrize(
    ("mode", "override", "expected"),
    [
        ("replace", None, [200, 200, 200, 429]),  # the view's 3/m alone
        ("replace", True, [200, 200, 200, 429]),
        ("replace", False, [200, 200, 429, 429]),  # the default's 2/m too
        ("add", None, [200, 200, 429, 429]),
        ("add", False, [200, 200, 429, 429]),
        ("add", True, [200, 200, 200, 429]),
    ],
)
def test_override_defaults_per_limit(
    app: Flask, statuses, mode: str, override: bool | None, expected: list[int]
) -> None:
    @app.get("/own")
    @limit("3/m", override_defaults=override)
    def own() -> str:
        return "ok"

    install(app, RATELIMIT_DEFAULT="2/m", RATELIMIT_DEFAULT_MODE=mode)
    assert statuses(app.test_client(), 4, "/own") == expected


def test_the_default_stays_only_if_no_limit_overrides_it(app: Flask, statuses) -> None:
    api = Blueprint("api", __name__)

    @api.get("/kept")
    @limit("3/m", override_defaults=False)
    def kept() -> str:
        return "ok"

    @api.get("/dropped")
    @limit("3/m")  # None: "replace" overrides
    def dropped() -> str:
        return "ok"

    limit("10/m", override_defaults=False)(api)
    app.register_blueprint(api)
    install(app, RATELIMIT_DEFAULT="2/m")
    client = app.test_client()
    assert statuses(client, 3, "/kept") == [200, 200, 429]
    assert statuses(client, 4, "/dropped") == [200, 200, 200, 429]


@pytest.mark.parametrize(
    "options",
    [
        {"per_method": "yes"},
        {"override_defaults": "no"},
        {"methods": "POST"},
        {"methods": []},
        {"methods": [1]},
        {"methods": ["PO ST"]},
        {"cost": -1},
        {"cost": True},
        {"cost": 2.5},
        {"cost": "2"},
        {"cost": 11},  # more than the 10/s layer: no request could ever pass
        {"deduct_when": 200},
        {"exempt_when": "never"},
        {"on_breach": "log"},
        {"shadow": "yes"},
        {"scope": ""},
        {"scope": 5},
        {"identities": "ip"},
        {"identities": []},
        {"identities": ["ip", "mac-address"]},
        {"strategy": "leaky"},
        {"strategy": ["gcra"]},
        {"penalty": ""},
        {"penalty": "1 fortnight"},
        {"penalty": "0s"},
        {"penalty": "1m;x0"},
        {"penalty": "1m;x1001"},
        {"penalty": "1m;x1.5"},
        {"penalty": "1m;x2;max=30s"},
        {"penalty": "1m;y2"},
        {"penalty": "1m;x2;max=400d"},
        {"penalty": "400d"},
        {"penalty": 5},
        {"delay": 10**400},  # past a float: refused, not an OverflowError
        {"delay": float("nan")},
    ],
)
def test_bad_options_raise_when_decorating(options: dict[str, Any]) -> None:
    """Every option of :func:`limit` is checked when the decorator runs, and
    the error quotes the bad value."""
    with pytest.raises(InvalidLimit) as info:
        limit("10/s;100/m", **options)
    assert repr(next(iter(options.values()))) in str(info.value)


class _FalseCheck:
    """A deduct_when that is a callable object whose truth is false, as an
    object with ``__len__`` of 0 is: in use all the same."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer

    def __len__(self) -> int:
        return 0

    def __call__(self, response_or_request: object) -> bool:
        return self.answer


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrent": 2}, "concurrent= cannot go with deduct_when="),
        ({"delay": "250ms"}, "delay= cannot go with deduct_when="),
        ({"prefetch": True}, "prefetch= cannot go with deduct_when="),
    ],
)
def test_options_that_cannot_go_together_are_refused_whatever_their_truth(
    options: dict[str, Any], message: str
) -> None:
    """A deduct_when given is in use whether or not it is true as a value,
    as the request path takes it (not None): so it is refused beside the
    options it cannot go with, rather than deferring a concurrent slot or a
    shaped turn to after the response."""
    with pytest.raises(InvalidLimit, match=message):
        limit("10/s", deduct_when=_FalseCheck(), **options)


@pytest.mark.parametrize(
    ("option", "answer", "expected"),
    [
        ("deduct_when", False, [200, 200, 200]),
        ("exempt_when", True, [200, 200, 200]),
        ("exempt_when", False, [200, 429, 429]),
    ],
)
def test_a_function_false_as_a_value_is_asked_all_the_same(
    app: Flask, statuses, option: str, answer: bool, expected: list[int]
) -> None:
    """A deduct_when or exempt_when that is a callable object false as a
    value is in use, as the option checks take it: the plan asks it on each
    request rather than counting every request as if it were not given."""

    @app.get("/checked")
    @limit("1/m", **{option: _FalseCheck(answer)})
    def checked() -> str:
        return "ok"

    install(app)
    assert statuses(app.test_client(), 3, "/checked") == expected


def test_methods_are_read_once_from_any_iterable() -> None:
    """The methods are read from what is given once: a generator is not
    exhausted by their check before they are kept."""
    made = make_spec("10/s", methods=(method for method in ["post", "Get"]))
    assert made.methods == frozenset({"POST", "GET"})


def test_unknown_limit_options_raise_when_decorating() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'error_messages'"):
        limit("1/s", error_messages="slow down")  # type: ignore[call-arg]


def test_limit_and_exempt_refuse_what_they_cannot_apply_to() -> None:
    with pytest.raises(TypeError, match="RATELIMIT_DEFAULT"):
        limit("1/m")(Flask("tests"))
    with pytest.raises(TypeError, match="decorators"):

        @limit("1/m")
        class Items(MethodView): ...

    with pytest.raises(TypeError, match="view function or a blueprint"):
        exempt("index")  # type: ignore[type-var]


def test_a_limit_on_some_methods_overrides_the_default_for_those_only(app: Flask, statuses) -> None:
    @app.route("/items", methods=["GET", "POST"])
    @limit("5/m", methods=["POST"])
    def items() -> str:
        return "ok"

    @app.route("/kept", methods=["GET", "POST"])
    @limit("5/m", methods=["POST"], override_defaults=False)
    def kept() -> str:
        return "ok"

    install(app, RATELIMIT_DEFAULT="1/m")
    client = app.test_client()
    assert statuses(client, 2, "/items") == [200, 429]  # GET keeps the default, which the POST limit overrides
    assert [client.post("/items", environ_base={"REMOTE_ADDR": "192.0.2.1"}).status_code for _ in range(6)] == [
        200
    ] * 5 + [429]
    assert statuses(client, 2, "/kept") == [200, 429]
    assert (
        client.post("/kept", environ_base={"REMOTE_ADDR": "192.0.2.1"}).status_code == 429
    )  # the default too, whose counter GET used


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_limits_on_one_key_count_each_request_once(app: Flask, statuses, strategy: str) -> None:
    """Two limits of one view in one scope and strategy share each
    identity's key: the script reads it once, keeps both limits' layers in
    it, and counts a request once in each, so 3/s admits three, not four."""

    @app.get("/")
    @limit("3/s", scope="shared", strategy=strategy)
    @limit("10/m", scope="shared", strategy=strategy)
    def view() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert statuses(client, 5) == [200, 200, 200, 429, 429]
    response = get(client, "/", ip="192.0.2.9")
    assert response.headers["RateLimit"].startswith('"1s";r=2;')


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # A view's own limit replaces its blueprints'; a blueprint's, the
        # blueprints around it for its own views; override_defaults=False keeps them.
        (
            "replace",
            {
                "/p/c/own": [200, 200, 429],
                "/p/c/kept": [200, 200, 200, 429],
                "/p/c/bare": [200, 200, 200, 429],
                "/p/c/post": [200, 200, 200, 429],  # its POST limit does not apply to GET: the child's does
            },
        ),
        # By default every limit of every enclosing blueprint adds up: the parent's 1/m decides.
        ("add", {"/p/c/own": [200, 429], "/p/c/kept": [200, 429], "/p/c/bare": [200, 429], "/p/c/post": [200, 429]}),
    ],
)
def test_blueprint_mode_replace_lets_own_limits_replace_the_blueprints_around(app: Flask, statuses, mode, expected):
    parent, child = Blueprint("parent", __name__), Blueprint("child", __name__)
    limit("1/m")(parent)
    limit("3/m")(child)
    child.add_url_rule("/own", "own", limit("2/m")(lambda: "ok"))
    child.add_url_rule("/kept", "kept", limit("5/m", override_defaults=False)(lambda: "ok"))
    child.add_url_rule("/bare", "bare", lambda: "ok")
    child.add_url_rule("/post", "post", limit("2/m", methods=["POST"])(lambda: "ok"), methods=["GET", "POST"])
    parent.register_blueprint(child, url_prefix="/c")
    app.register_blueprint(parent, url_prefix="/p")
    install(app, RATELIMIT_BLUEPRINT_MODE=mode)
    client = app.test_client()
    assert {path: statuses(client, len(codes), path) for path, codes in expected.items()} == expected


def test_blueprint_mode_takes_replace_or_add_only() -> None:
    with pytest.raises(ConfigurationError, match="RATELIMIT_BLUEPRINT_MODE"):
        install(Flask(__name__), RATELIMIT_BLUEPRINT_MODE="sometimes")
