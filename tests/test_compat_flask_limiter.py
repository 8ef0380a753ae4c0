"""flask_redis_throttle.compat.flask_limiter: a Flask-Limiter app, its
imports changed, limited by the extension, on memory:// and on Redis."""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Blueprint, Flask, Response, request
from flask.views import MethodView
from helpers import get, limiter_for, statuses
from werkzeug.http import parse_date

from flask_redis_throttle import ConfigurationError, InvalidLimit
from flask_redis_throttle.compat.flask_limiter import (
    ExemptionScope,
    Limit,
    Limiter,
    MetaLimit,
    RequestLimit,
    RouteLimit,
)
from flask_redis_throttle.compat.flask_limiter._extension import LimitArguments
from flask_redis_throttle.compat.flask_limiter.constants import ConfigVars, HeaderNames
from flask_redis_throttle.compat.flask_limiter.util import get_ipaddr, get_remote_address
from flask_redis_throttle.extension import state_of
from flask_redis_throttle.testing import free_port


@pytest.fixture
def flask_app() -> Iterator[Flask]:
    app = Flask("compat")
    app.config["TESTING"] = True

    @app.get("/")
    def index() -> str:
        return "ok"

    yield app
    state = state_of(app, required=False)
    if state is not None and state.throttle is not None:
        state.throttle.storage.close()  # not left to the collector: a test's error may hold the app to the end


def test_default_limits_are_joined_and_a_view_limit_replaces_them(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["3/minute", "2 per second"])

    @flask_app.get("/own")
    @limiter.limit("1/minute")
    def own() -> str:
        return "own"

    client = flask_app.test_client()
    assert statuses(client, 3) == [200, 200, 429]  # 2 per second decides first
    assert statuses(client, 2, "/own") == [200, 429]


def test_default_and_application_limits_take_their_options(flask_app: Flask, url: str) -> None:
    limiter_for(
        flask_app,
        url,
        default_limits=["2/minute"],
        default_limits_per_method=True,
        default_limits_cost=lambda: 2 if request.args else 1,
        application_limits=["3/minute"],
        application_limits_deduct_when=lambda response: response.status_code == 200,
    )

    @flask_app.route("/items", methods=["GET", "POST"])
    def items() -> str:
        return "ok"

    client = flask_app.test_client()
    assert [client.get("/items?big=1").status_code, client.get("/items").status_code] == [200, 429]
    assert [client.post("/items").status_code for _ in range(3)] == [200, 200, 429]
    # The application limit counted the three 200s only.
    assert client.get("/").status_code == 429


def test_a_limit_item_of_the_default_limits_keeps_its_options(flask_app: Flask, url: str) -> None:
    limiter_for(flask_app, url, default_limits=["5/minute", Limit("1/minute", per_method=True, methods=["POST"])])
    flask_app.add_url_rule("/items", "items", lambda: "ok", methods=["GET", "POST"])
    client = flask_app.test_client()
    assert [client.post("/items").status_code, client.post("/items").status_code] == [200, 429]
    assert [client.get("/items").status_code, client.get("/items").status_code] == [200, 200]


def test_a_key_func_counts_each_of_its_values(flask_app: Flask, url: str) -> None:
    def tenant() -> str:
        return request.headers.get("X-Tenant", "none")

    limiter = limiter_for(flask_app, url)

    @flask_app.get("/tenant")
    @limiter.limit("1/minute", key_func=tenant)
    def by_tenant() -> str:
        return "ok"

    client = flask_app.test_client()
    assert statuses(client, 2, "/tenant", headers={"X-Tenant": "a"}) == [200, 429]
    assert statuses(client, 1, "/tenant", headers={"X-Tenant": "b"}) == [200]


def test_a_shared_limit_shares_its_counters_and_a_scoped_limit_does_not(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)
    shared = limiter.shared_limit("2/minute", scope="search")

    @flask_app.get("/a")
    @shared
    def a() -> str:
        return "a"

    @flask_app.get("/b")
    @shared
    def b() -> str:
        return "b"

    @flask_app.get("/c")
    @limiter.limit("1/minute", scope="search")
    def c() -> str:
        return "c"

    client = flask_app.test_client()
    assert statuses(client, 1, "/a") + statuses(client, 2, "/b") == [200, 200, 429]
    assert statuses(client, 1, "/c") == [200]


def test_exempt_drops_what_its_flags_say(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"], application_limits=["4/minute"])

    @flask_app.get("/health")
    @limiter.exempt
    def health() -> str:
        return "ok"

    @flask_app.get("/search")
    @limiter.exempt(flags=ExemptionScope.DEFAULT)
    def search() -> str:
        return "ok"

    blueprint = Blueprint("internal", __name__)

    @blueprint.get("/internal")
    def internal() -> str:
        return "ok"

    limiter.exempt(blueprint, flags=ExemptionScope.DEFAULT | ExemptionScope.APPLICATION | ExemptionScope.ANCESTORS)
    flask_app.register_blueprint(blueprint)
    with pytest.raises(ValueError, match="exempts from nothing"):
        limiter.exempt(flags=ExemptionScope.META)
    client = flask_app.test_client()
    assert statuses(client, 3, "/health") + statuses(client, 3, "/internal") == [200] * 6
    assert statuses(client, 2) == [200, 429]
    assert statuses(client, 4, "/search") == [200, 200, 200, 429]  # the application limit: / took 1 of its 4


def test_functions_of_nothing_read_the_request(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(
        flask_app,
        url,
        default_limits=[lambda: request.headers.get("X-Quota", "1/minute")],
        default_limits_exempt_when=lambda: request.headers.get("X-Internal") == "1",
    )
    limiter.request_filter(lambda: request.headers.get("X-Filtered") == "1")

    @flask_app.get("/costly")
    @limiter.limit("3/minute", cost=lambda: int(request.args.get("n", "1")), exempt_when=lambda: "free" in request.args)
    def costly() -> str:
        return "ok"

    client = flask_app.test_client()
    assert statuses(client, 3, headers={"X-Quota": "2/minute"}) == [200, 200, 429]
    assert statuses(client, 2, headers={"X-Internal": "1"}) == [200, 200]
    assert statuses(client, 2, headers={"X-Filtered": "1"}) == [200, 200]
    assert statuses(client, 2, "/costly?n=2") == [200, 429]
    assert statuses(client, 2, "/costly?free") == [200, 200]


def test_headers_are_flask_limiters_when_enabled(flask_app: Flask, url: str) -> None:
    limiter_for(flask_app, url, default_limits=["5/minute"], headers_enabled=True)
    response = get(flask_app.test_client())
    assert response.headers["X-RateLimit-Limit"] == "5"
    assert response.headers["X-RateLimit-Remaining"] == "4"


def test_header_names_follow_the_mapping_and_the_settings(flask_app: Flask, url: str) -> None:
    flask_app.config[ConfigVars.HEADER_RESET] = "X-Reset"
    mapping = {HeaderNames.LIMIT: "X-Limit", HeaderNames.REMAINING: "X-RateLimit-Remaining"}
    limiter_for(flask_app, url, default_limits=["5/minute"], headers_enabled=True, header_name_mapping=mapping)
    response = get(flask_app.test_client())
    assert [response.headers.get(name) for name in ("X-Limit", "X-RateLimit-Remaining")] == ["5", "4"]
    assert "X-Reset" in response.headers
    assert "X-RateLimit-Limit" not in response.headers


def test_headers_are_off_by_default_as_in_flask_limiter(flask_app: Flask, url: str) -> None:
    limiter_for(flask_app, url, default_limits=["5/minute"])
    assert "X-RateLimit-Limit" not in get(flask_app.test_client()).headers


def test_flask_limiters_settings_are_read_without_a_warning(flask_app: Flask, url: str, caplog) -> None:
    flask_app.config.update(
        {
            ConfigVars.STORAGE_URI: url,
            ConfigVars.DEFAULT_LIMITS: "1/minute",
            ConfigVars.STRATEGY: "moving-window",
            ConfigVars.SWALLOW_ERRORS: True,
        }
    )
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        Limiter(get_remote_address, app=flask_app)
    assert not [record for record in caplog.records if "Flask-Limiter setting" in record.getMessage()]
    assert flask_app.config["RATELIMIT_STRATEGY"] == "sliding-log"
    assert flask_app.config["RATELIMIT_STORAGE_URL"] == url
    assert flask_app.config[ConfigVars.STORAGE_URI] == url  # kept for the app's own use
    assert statuses(flask_app.test_client(), 2) == [200, 429]


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ({"meta_limits": [MetaLimit("2/day", cost=2)]}, "RATELIMIT_META"),
        ({"storage_uri": "memcached://localhost:11211"}, ConfigVars.STORAGE_URI),
        ({"header_name_mapping": {"Retry-After": "X-Wait"}}, "header_name_mapping"),
        ({"auto_check": False}, "auto_check"),
        ({"fail_on_first_breach": False}, ConfigVars.FAIL_ON_FIRST_BREACH),
        ({"in_memory_fallback": ["1/minute"]}, ConfigVars.IN_MEMORY_FALLBACK),
        ({"strategy": "leaky-bucket"}, ConfigVars.STRATEGY),
    ],
)
def test_what_has_no_counterpart_is_refused_at_init_app(flask_app: Flask, arguments: Any, refused: str) -> None:
    if "header_name_mapping" in arguments:
        from flask_redis_throttle.compat.flask_limiter import HeaderNames

        arguments = {"header_name_mapping": {HeaderNames.RETRY_AFTER: "X-Wait"}}
    limiter = Limiter(get_remote_address, **arguments)
    with pytest.raises(ConfigurationError, match=refused):
        limiter.init_app(flask_app)


@pytest.mark.parametrize(
    ("setting", "value", "takes"),
    [
        (ConfigVars.STORAGE_OPTIONS, "x", "a dict of options"),
        (ConfigVars.STRATEGY, {"name": "moving-window"}, "one of fixed-window"),
        (ConfigVars.HEADER_RETRY_AFTER_VALUE, ["http-date"], "one of http-date"),
        (ConfigVars.DEFAULT_LIMITS, 5, "a limit string"),
        (ConfigVars.APPLICATION_LIMITS, 5, "a limit string"),
        (ConfigVars.META_LIMITS, 5, "a limit string"),
        (ConfigVars.DEFAULT_LIMITS, [5], "a limit string"),
        (ConfigVars.DEFAULT_LIMITS_EXEMPT_WHEN, True, "a function"),
        (ConfigVars.APPLICATION_LIMITS_DEDUCT_WHEN, "yes", "a function"),
        (ConfigVars.ON_BREACH, "log", "a function"),
        (ConfigVars.ON_META_BREACH, 5, "a function"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused_at_init_app_by_name(
    flask_app: Flask, url: str, setting: str, value: Any, takes: str
) -> None:
    flask_app.config.update(
        {ConfigVars.STORAGE_URI: url, setting: value},
        **{key: "5/minute" for key in ("RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION") if key != setting},
    )
    config = dict(flask_app.config)
    with pytest.raises(ConfigurationError, match=f"^{setting} = .* expected {takes}"):
        Limiter(get_remote_address, app=flask_app)
    assert flask_app.config == config
    assert statuses(flask_app.test_client(), 1) == [200]  # no extension, no 500


@pytest.mark.parametrize("mapping", [5, "X-Limit", {"X-Limit": "X-Quota"}, [HeaderNames.LIMIT]])
def test_a_header_name_mapping_that_is_no_mapping_of_headers_is_refused_at_init_app(
    flask_app: Flask, url: str, mapping: Any
) -> None:
    limiter = Limiter(get_remote_address, storage_uri=url, header_name_mapping=mapping)
    with pytest.raises(ConfigurationError, match=r"^header_name_mapping = .* expected a dict of HeaderNames"):
        limiter.init_app(flask_app)
    assert statuses(flask_app.test_client(), 1) == [200]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("exempt_when", True),
        ("deduct_when", "yes"),
        ("methods", 5),
        ("meta_limits", 5),
        ("key_func", "ip"),
        ("cost", "many"),
    ],
)
def test_a_limit_option_of_the_wrong_type_is_refused_where_it_is_written(
    flask_app: Flask, url: str, option: str, value: Any
) -> None:
    limiter = limiter_for(flask_app, url)
    with pytest.raises(InvalidLimit, match=f"^{option} {value!r} must be"):
        limiter.limit("1/minute", **{option: value})
    with pytest.raises(InvalidLimit, match=f"^{option} {value!r} must be"):
        limiter.shared_limit("1/minute", scope="shared", **{option: value})


def test_one_method_written_as_a_string_is_that_method(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)

    @flask_app.route("/items", methods=["GET", "POST"])
    @limiter.limit("1/minute", methods="POST")
    def items() -> str:
        return "ok"

    client = flask_app.test_client()
    assert [client.post("/items").status_code for _ in range(2)] == [200, 429]
    assert statuses(client, 2, "/items") == [200, 200]


def test_a_key_prefix_that_is_not_a_string_is_refused_at_init_app(flask_app: Flask) -> None:
    flask_app.config[ConfigVars.KEY_PREFIX] = 5
    with pytest.raises(ConfigurationError, match=ConfigVars.KEY_PREFIX):
        Limiter(get_remote_address, app=flask_app)


def test_on_breach_gets_a_request_limit_and_its_response_is_sent(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)
    seen: list[RequestLimit] = []

    def on_breach(limit: RequestLimit) -> Response:
        seen.append(limit)
        return Response("slow down", 429)

    @flask_app.get("/hook")
    @limiter.limit("1/minute", on_breach=on_breach)
    def hooked() -> str:
        return "ok"

    @flask_app.get("/message")
    @limiter.limit("1/minute", error_message=lambda: "no more today")
    def message() -> str:
        return "ok"

    client = flask_app.test_client()
    get(client, "/hook")
    assert get(client, "/hook").get_data(as_text=True) == "slow down"
    assert seen[0].breached
    assert seen[0].key == "LIMITER/192.0.2.1/hooked/1/1/minute"
    assert str(seen[0].limit) == "1 per 1 minute"
    get(client, "/message")
    refused = get(client, "/message")
    assert (refused.status_code, refused.get_data(as_text=True)) == (429, "no more today\n")


def test_current_limit_is_a_request_limit(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)

    @flask_app.get("/left")
    @limiter.limit("5/minute")
    def left() -> dict[str, Any]:
        found = limiter.current_limit
        assert found is not None
        return {"remaining": found.remaining, "breached": found.breached, "shared": found.shared}

    assert get(flask_app.test_client(), "/left").json == {"remaining": 4, "breached": False, "shared": False}


def test_a_limited_function_that_is_not_a_view_is_decided_when_called(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)

    @limiter.limit("2/minute")
    def send() -> str:
        return "sent"

    @flask_app.get("/a")
    @limiter.limit("5/minute")
    def a() -> str:
        return send()

    class Items(MethodView):
        @limiter.limit("3/minute")
        def get(self) -> str:
            return send()

    flask_app.add_url_rule("/items", view_func=Items.as_view("items"))
    client = flask_app.test_client()
    # send() counts under its own name, whichever view calls it; a view's
    # own limit is decided before it, once.
    assert statuses(client, 1, "/a") + statuses(client, 2, "/items") == [200, 200, 429]
    assert statuses(client, 2, "/items", ip="192.0.2.9") == [200, 200]
    assert statuses(client, 2, "/items", ip="192.0.2.9") == [429, 429]  # 3/minute, then send()'s


def test_an_async_view_limited_by_the_limiter_is_counted_once(flask_app: Flask, url: str) -> None:
    pytest.importorskip("asgiref")
    limiter = limiter_for(flask_app, url)

    @flask_app.get("/async")
    @limiter.limit("2/minute")
    async def slow() -> str:
        return "ok"

    assert statuses(flask_app.test_client(), 3, "/async") == [200, 200, 429]


def test_the_limit_as_a_context_manager_counts_per_scope(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)

    @flask_app.get("/t/<int:item>")
    def item(item: int) -> str:
        with limiter.limit("1/minute", scope=item):
            return "ok"

    client = flask_app.test_client()
    assert statuses(client, 2, "/t/1") + statuses(client, 2, "/t/2") == [200, 429, 200, 429]


def test_a_scope_function_takes_the_endpoint(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)
    by_item = limiter.limit("1/minute", scope=lambda endpoint: request.view_args["item"])
    shared = limiter.shared_limit("1/minute", scope=lambda endpoint: "all" if endpoint != "c" else "c")
    flask_app.add_url_rule("/item/<item>", "item", by_item(lambda item: item))
    flask_app.add_url_rule("/a", "a", shared(lambda: "a"))
    flask_app.add_url_rule("/b", "b", shared(lambda: "b"))
    flask_app.add_url_rule("/c", "c", shared(lambda: "c"))
    client = flask_app.test_client()
    assert statuses(client, 2, "/item/1") + statuses(client, 2, "/item/2") == [200, 429, 200, 429]
    assert statuses(client, 1, "/a") + statuses(client, 1, "/b") + statuses(client, 1, "/c") == [200, 429, 200]


def test_meta_limits_count_refusals(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, meta_limits=["1/hour"], on_meta_breach=lambda limit: Response("tea?", 429))

    @flask_app.get("/own")
    @limiter.limit("1/minute", meta_limits=["1/hour"])
    def own() -> str:
        return "own"

    @flask_app.get("/other")
    @limiter.limit("5/minute")
    def other() -> str:
        return "other"

    with pytest.raises(InvalidLimit, match="meta_limits"):
        limiter.limit("1/minute", meta_limits=[lambda: "1/hour"])
    client = flask_app.test_client()
    assert statuses(client, 3, "/own") == [200, 429, 429]  # the third by its own meta limit
    assert get(client, "/other").text == "tea?"  # the Limiter's, on every limited view
    assert get(client, "/other", ip="192.0.2.7").text == "other"


def test_what_is_refused_at_use_says_so(flask_app: Flask) -> None:
    limiter = Limiter(get_remote_address, app=flask_app, storage_uri="memory://")
    with pytest.raises(NotImplementedError, match=r"flask_redis_throttle\.check"):
        limiter.check()


def test_the_util_functions_read_the_request(flask_app: Flask) -> None:
    with flask_app.test_request_context(
        "/", environ_base={"REMOTE_ADDR": "192.0.2.9"}, headers={"X-Forwarded-For": "198.51.100.1, 10.0.0.1"}
    ):
        assert get_remote_address() == "192.0.2.9"
        assert get_ipaddr() == "198.51.100.1"


def test_a_route_limit_made_by_hand_limits_its_view(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)

    @flask_app.get("/by-hand")
    @RouteLimit("1/minute", limiter=limiter)
    def by_hand() -> str:
        return "ok"

    assert statuses(flask_app.test_client(), 2, "/by-hand") == [200, 429]
    assert limiter.logger.name == "flask_redis_throttle"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, [503, 503]),  # Flask-Limiter's default: errors are not swallowed
        ({"swallow_errors": True}, [200, 200]),
        ({"in_memory_fallback_enabled": True}, [200, 429]),
    ],
)
def test_a_storage_outage_follows_swallow_errors_and_the_fallback(
    flask_app: Flask, arguments: dict[str, Any], expected: list[int]
) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    limiter_for(
        flask_app, down, default_limits=["1/minute"], storage_options={"socket_connect_timeout": 0.2}, **arguments
    )
    assert statuses(flask_app.test_client(), 2) == expected


def test_the_migration_page_lists_every_argument_and_setting() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "flask-limiter.rst").read_text(encoding="utf-8")
    arguments = page.split("``Limiter`` arguments with the shim\n")[1].split("\nFlask-Limiter's settings with")[0]
    settings = page.split("Flask-Limiter's settings with the shim\n")[1].split("\n``limit``, ``shared_limit``")[0]
    documented = set(re.findall(r"``(\w+)``", arguments))
    assert set(inspect.signature(Limiter).parameters) <= documented
    names = {value for name, value in vars(ConfigVars).items() if name.isupper()}
    assert names <= set(re.findall(r"``(RATELIMIT_\w+)``", settings))
    # limit and shared_limit take the same keyword arguments, typed once.
    options = set(inspect.signature(Limiter.limit).parameters) - {"self", "options"} | set(
        LimitArguments.__annotations__
    )
    assert options <= set(re.findall(r"``(\w+)``", page.split("``limiter.limit(...)`` option")[1]))


@pytest.mark.parametrize(
    ("theirs", "ours", "options"),
    [
        ("redis+unix:///tmp/redis.sock", "unix:///tmp/redis.sock", {}),
        ("rediss+cluster://127.0.0.1:7000", "redis+cluster://127.0.0.1:7000", {"ssl": True}),
        ("redis+sentinel://127.0.0.1:26379/primary", "redis+sentinel://127.0.0.1:26379/primary", {}),
    ],
)
def test_storage_uris_are_translated_without_connecting(
    flask_app: Flask, theirs: str, ours: str, options: dict[str, Any]
) -> None:
    Limiter(get_remote_address, app=flask_app, storage_uri=theirs)
    assert flask_app.config["RATELIMIT_STORAGE_URL"] == ours
    assert flask_app.config["RATELIMIT_STORAGE_OPTIONS"] == options


# --- What a Flask-Limiter app sees: Retry-After, the 429's text, on_breach errors,
# --- the log, and the limits library's grammar (see "Shown as Flask-Limiter shows it"
# --- in docs/flask-limiter.rst).


def test_retry_after_is_on_every_limited_response(flask_app: Flask, url: str, clock: Any) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["5/minute"], headers_enabled=True)

    @flask_app.get("/own")
    def own() -> Response:
        return Response("ok", headers={"Retry-After": request.args["after"]})

    @flask_app.get("/free")
    @limiter.exempt
    def free() -> str:
        return "ok"

    client = flask_app.test_client()
    clock.set(15)
    assert get(client).headers["Retry-After"] == "45"  # when the minute's window resets
    assert get(client, "/own?after=3600").headers["Retry-After"] == "3600"  # the app's own, later
    assert get(client, "/own?after=5").headers["Retry-After"] == "45"
    assert get(client, "/own?after=Sun, 06 Nov 2095 08:49:37 GMT").headers["Retry-After"].isdigit()
    assert get(client, "/own?after=soon").headers["Retry-After"] == "45"  # not a Retry-After
    assert "Retry-After" not in get(client, "/free").headers
    statuses(client, 5)
    refused = get(client)
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, "45")


def test_retry_after_follows_retry_after_http_date(flask_app: Flask, url: str) -> None:
    limiter_for(flask_app, url, default_limits=["5/minute"], headers_enabled=True, retry_after="http-date")
    value = get(flask_app.test_client()).headers["Retry-After"]
    assert value.endswith(" GMT")
    assert parse_date(value) is not None


def test_retry_after_is_on_a_429_only_without_headers(flask_app: Flask, url: str) -> None:
    limiter_for(flask_app, url, default_limits=["1/minute"])
    client = flask_app.test_client()
    assert "Retry-After" not in get(client).headers
    assert get(client).headers["Retry-After"] == "60"


def test_a_refusal_is_described_by_its_layer(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1 per day"])

    @flask_app.errorhandler(429)
    def refused(error: Any) -> tuple[str, int]:
        return f"limit {error.description}", 429

    @flask_app.get("/told")
    @limiter.limit("1/hour", error_message="come back later")
    def told() -> str:
        return "ok"

    client = flask_app.test_client()
    assert [get(client).text for _ in range(2)] == ["ok", "limit 1 per 1 day"]
    assert [get(client, "/told").text for _ in range(2)] == ["ok", "limit come back later"]


def test_an_on_breach_that_raises_gives_a_500_unless_errors_are_swallowed(
    flask_app: Flask, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def on_breach(limit: RequestLimit) -> None:
        raise ZeroDivisionError("no room")

    flask_app.config["TESTING"] = False  # a 500, not the error raised into the test
    limiter = limiter_for(flask_app, url, on_breach=on_breach)

    @flask_app.get("/hook")
    @limiter.limit("1/minute")
    def hook() -> str:
        return "ok"

    assert statuses(flask_app.test_client(), 2, "/hook") == [200, 500]
    swallowing = Flask("swallowing")
    swallowing.add_url_rule("/hook", view_func=hook)
    limiter_for(swallowing, url, on_breach=on_breach, swallow_errors=True)
    with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
        assert statuses(swallowing.test_client(), 2, "/hook", ip="192.0.2.2") == [200, 429]
    [record] = [record for record in caplog.records if record.name == "flask_redis_throttle"]
    assert record.getMessage() == "on_breach callback failed with error no room"
    assert record.exc_info is not None
    assert record.exc_info[0] is ZeroDivisionError


def test_swallow_errors_lets_a_request_through_when_the_key_func_raises(
    flask_app: Flask, storage_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Flask-Limiter 4.1.1 logs the error and answers 200; the shim gave a 500.
    def broken_key() -> str:
        raise KeyError("no tenant header")

    flask_app.config["TESTING"] = False  # a 500, not the error raised into the test
    limiter = Limiter(broken_key, app=flask_app, storage_uri=storage_url, default_limits=["1/minute"])

    @flask_app.get("/own")
    @limiter.limit("1/minute", key_func=broken_key)
    def own() -> str:
        return "own"

    assert statuses(flask_app.test_client(), 1) == [500]
    swallowing = Flask("swallowing")
    swallowing.add_url_rule("/", view_func=lambda: "ok")
    swallowing.add_url_rule("/own", view_func=own)
    Limiter(broken_key, app=swallowing, storage_uri=storage_url, default_limits=["1/minute"], swallow_errors=True)
    client = swallowing.test_client()
    with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
        assert statuses(client, 3) == [200, 200, 200]
        assert statuses(client, 3, "/own") == [200, 200, 200]
    records = [record for record in caplog.records if record.name == "flask_redis_throttle"]
    assert [record.getMessage() for record in records] == ["Failed to rate limit. Swallowing error"] * 6
    assert all(record.exc_info is not None and record.exc_info[0] is KeyError for record in records)


def test_request_limit_keys_are_flask_limiters(flask_app: Flask, url: str) -> None:
    keys: list[str] = []
    limiter = limiter_for(
        flask_app,
        url,
        default_limits=["2 per 2 hours"],
        key_prefix="app",
        on_breach=lambda limit: keys.append(limit.key),
    )

    @flask_app.get("/shared")
    @limiter.shared_limit("1/day", scope="group")
    def shared() -> str:
        return limiter.current_limit.key if limiter.current_limit else ""

    client = flask_app.test_client()
    statuses(client, 3)
    assert get(client, "/shared").text == "LIMITER/192.0.2.1/group/1/1/day"
    get(client, "/shared")
    assert keys == ["LIMITER/192.0.2.1/index/2/2/hour", "LIMITER/192.0.2.1/group/1/1/day"]


def test_the_log_is_flask_limiters(flask_app: Flask, url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        limiter_for(flask_app, url, default_limits=["1/minute"])
        statuses(flask_app.test_client(), 2)
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("INFO", "ratelimit 1 per 1 minute (192.0.2.1) exceeded at endpoint: index")
    ]


def test_memory_without_a_storage_uri_is_a_warning_not_a_log_line(
    flask_app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="no storage_uri was given"):
        Limiter(get_remote_address, app=flask_app)
    assert not caplog.records
    flask_app.config[ConfigVars.STORAGE_URI] = "memory://"
    Limiter(get_remote_address, app=Flask("given"), storage_uri="memory://")  # no warning: it was given


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("1 per minute | 1/hour", [200, 429]),
        ("1/2 minutes, 5 per day", [200, 429]),
        ("1 PER MINUTES", [200, 429]),
        ("3/month", [200, 200, 200, 429]),
        ("3/second;1/1 second", [200, 429]),  # two limits of one window: the smaller decides
    ],
)
def test_limit_strings_are_the_limits_librarys(flask_app: Flask, url: str, written: str, expected: list[int]) -> None:
    limiter = limiter_for(flask_app, url)

    @flask_app.get("/limited")
    @limiter.limit(written)
    def limited() -> str:
        return "ok"

    assert statuses(flask_app.test_client(), len(expected), "/limited") == expected


def test_a_limit_string_the_limits_library_rejects_is_logged_and_the_defaults_apply(
    flask_app: Flask, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["1/minute"])
    flask_app.config["VIEW_LIMIT"] = "5/min"
    blueprint = Blueprint("part", __name__)

    @blueprint.get("/in-part")
    def in_part() -> str:
        return "ok"

    limiter.limit("5/m")(blueprint)
    flask_app.register_blueprint(blueprint)

    @flask_app.get("/static-limit")
    @limiter.limit("5/sec")
    def static_limit() -> str:
        return "ok"

    @flask_app.get("/dynamic-limit")
    @limiter.limit(lambda: flask_app.config["VIEW_LIMIT"])
    def dynamic_limit() -> str:
        return "ok"

    @flask_app.get("/no-limit")
    @limiter.limit(lambda: "")
    def no_limit() -> str:
        return "ok"

    with caplog.at_level(logging.ERROR, "flask_redis_throttle"):
        client = flask_app.test_client()
        for path in ("/in-part", "/static-limit", "/dynamic-limit", "/no-limit"):
            assert statuses(client, 2, path) == [200, 429]
    assert [record.getMessage() for record in caplog.records] == [
        "failed to load ratelimit for blueprint part: couldn't parse rate limit string '5/m'",
        f"failed to load ratelimit for function {__name__}.{static_limit.__qualname__}: "
        "couldn't parse rate limit string '5/sec'",
        *["failed to load ratelimit for endpoint dynamic_limit: couldn't parse rate limit string '5/min'"] * 2,
    ]
    flask_app.config["VIEW_LIMIT"] = "5/minute"
    assert statuses(client, 2, "/dynamic-limit") == [200, 200]  # its own now: 3 of 5 left


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ({"default_limits": ["5/sec"]}, "RATELIMIT_DEFAULT"),
        ({"application_limits": ["1/s"]}, "RATELIMIT_APPLICATION"),
        ({"default_limits": [Limit("10 per fortnight")]}, "RATELIMIT_DEFAULT"),
        ({"meta_limits": ["2/d"]}, "RATELIMIT_META"),
    ],
)
def test_a_default_limit_the_limits_library_rejects_is_refused_at_init_app(
    flask_app: Flask, arguments: dict[str, Any], refused: str
) -> None:
    limiter = Limiter(get_remote_address, storage_uri="memory://", **arguments)
    with pytest.raises(ConfigurationError, match=f"{refused}.*couldn't parse rate limit string"):
        limiter.init_app(flask_app)


@pytest.mark.parametrize("written", ["0/second", "1 per 2 years"])
def test_a_limit_the_extension_cannot_keep_is_refused_where_it_is_written(flask_app: Flask, written: str) -> None:
    limiter = Limiter(get_remote_address, app=flask_app, storage_uri="memory://")
    with pytest.raises(InvalidLimit):
        limiter.limit(written)
    with pytest.raises(InvalidLimit, match="couldn't parse rate limit string '5/sec'"):
        limiter.limit("1/second", meta_limits=["5/sec"])


def test_a_dynamic_limit_that_comes_to_nothing_falls_back_on_a_view_only(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url, default_limits=["2/minute"])
    block = limiter.limit(lambda: request.args.get("limit", ""), cost=2)

    @flask_app.get("/block")
    def in_block() -> str:
        with block:
            return "ok"

    @flask_app.get("/exempt")
    @limiter.limit(lambda: "")
    @limiter.exempt(flags=ExemptionScope.DEFAULT)
    def exempt() -> str:
        return "ok"

    part = Blueprint("part", __name__)

    @part.get("/own")
    @limiter.limit("3/minute")
    def own() -> str:
        return "ok"

    limiter.limit(lambda: "")(part)
    flask_app.register_blueprint(part)

    # A view's own limits decide instead of its blueprint's: no default.
    assert statuses(flask_app.test_client(), 4, "/own") == [200, 200, 200, 429]
    # The default counts each request once, before the view; the block adds nothing.
    assert statuses(flask_app.test_client(), 3, "/block") == [200, 200, 429]
    assert statuses(flask_app.test_client(), 2, "/block?limit=3/minute", ip="192.0.2.2") == [200, 429]
    assert statuses(flask_app.test_client(), 3, "/exempt") == [200, 200, 200]


def test_limiter_check_is_refused_naming_its_counterpart(flask_app: Flask, url: str) -> None:
    limiter = limiter_for(flask_app, url)
    with pytest.raises(NotImplementedError, match=r"flask_redis_throttle\.check\(\) tells whether it would pass"):
        limiter.check()
