"""flask_redis_throttle.compat.flask_limiter in apps built as real
Flask-Limiter apps are: an app factory that calls
``limiter.init_app(current_app)``, a module that builds its ``Limiter`` with
``app=current_app`` at import time, a set-up that fails and is tried again,
a test that switches the limiter off, an ``on_breach`` page that says when
to come back; on memory://, Redis and a cluster."""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, Response, current_app
from helpers import get, statuses

from flask_redis_throttle import ConfigurationError
from flask_redis_throttle.compat.flask_limiter import Limiter, RequestLimit
from flask_redis_throttle.compat.flask_limiter.util import get_remote_address


@pytest.fixture
def made() -> Iterator[list[Flask]]:
    """The apps a test makes, whose storages are closed after it (a cluster
    client's sockets are not closed when it is collected)."""
    apps: list[Flask] = []
    yield apps
    for app in apps:
        state = app.extensions.get("ratelimit")
        if state is not None and state.throttle is not None:
            state.throttle.storage.close()


def views(app: Flask, limiter: Limiter) -> None:
    @app.get("/login")
    @limiter.limit("2/minute")
    def login() -> str:
        return "login"


def test_a_factory_sets_the_limiter_up_on_current_app(storage_url: str, made: list[Flask]) -> None:
    # Flask-Limiter takes the proxy and works with its app; the shim kept the
    # proxy in a WeakSet: "cannot create weak reference to 'LocalProxy' object".
    limiter = Limiter(get_remote_address, storage_uri=storage_url)

    def create_app() -> Flask:
        app = Flask("factory")
        with app.app_context():
            limiter.init_app(current_app)
            views(app, limiter)
        return app

    app = create_app()
    made.append(app)
    # Outside any app context, the limiter still reaches the app itself.
    assert list(limiter.apps) == [app]
    assert "ratelimit" in app.extensions
    limiter.forget_plans()
    assert statuses(app.test_client(), 3, "/login") == [200, 200, 429]


def test_a_module_builds_its_limiter_with_current_app_at_import_time(
    storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: list[Flask]
) -> None:
    # Flask-Limiter tests `if app:`, false for a proxy bound to no app: the
    # shim read it, "Working outside of application context".
    (tmp_path / "limits_module.py").write_text(
        textwrap.dedent(
            """
            from flask import current_app
            from flask_redis_throttle.compat.flask_limiter import Limiter
            from flask_redis_throttle.compat.flask_limiter.util import get_remote_address

            limiter = Limiter(get_remote_address, app=current_app, storage_uri=STORAGE)
            """
        ).replace("STORAGE", repr(storage_url))
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "limits_module", raising=False)
    module = importlib.import_module("limits_module")
    limiter: Limiter = module.limiter
    assert list(limiter.apps) == []
    app = Flask("later")
    made.append(app)
    limiter.init_app(app)
    views(app, limiter)
    assert statuses(app.test_client(), 3, "/login") == [200, 200, 429]
    # Given to init_app outside an app context, it names the problem.
    with pytest.raises(RuntimeError, match="application context"):
        limiter.init_app(current_app)


def limited(app: Flask, storage_url: str, **arguments: Any) -> Limiter:
    limiter = Limiter(get_remote_address, app=app, storage_uri=storage_url, **arguments)
    views(app, limiter)
    return limiter


def test_a_failed_init_app_changes_nothing(storage_url: str, made: list[Flask]) -> None:
    app = Flask("retried")
    made.append(app)
    config, extensions = dict(app.config), dict(app.extensions)
    # Refused when it warns (pytest turns warnings into errors, as many apps'
    # tests do): the shim had set the extension up first, and the next
    # Limiter was refused as a second one.
    with pytest.raises(UserWarning, match="no storage_uri was given"):
        Limiter(get_remote_address, app=app, default_limits=["1/minute"])
    assert (dict(app.config), app.extensions) == (config, extensions)
    assert not app.before_request_funcs
    assert not app.after_request_funcs
    # Refused for a bad storage URL: the shim had left its own settings in
    # the config, which the next Limiter read as Flask-Limiter's.
    with pytest.raises(ConfigurationError, match="RATELIMIT_STORAGE_URL"):
        Limiter(get_remote_address, app=app, storage_uri="redis://localhost:notaport", default_limits=["1/minute"])
    assert (dict(app.config), app.extensions) == (config, extensions)
    assert list(app.cli.commands) == []
    limited(app, storage_url)
    assert statuses(app.test_client(), 3, "/login") == [200, 200, 429]


def test_a_failed_init_app_on_an_app_that_served_a_request_changes_nothing(storage_url: str) -> None:
    app = Flask("late")
    app.add_url_rule("/", view_func=lambda: "ok")
    assert get(app.test_client()).status_code == 200
    config, extensions = dict(app.config), dict(app.extensions)
    with pytest.raises(AssertionError, match="already handled its first request"):
        Limiter(get_remote_address, app=app, storage_uri=storage_url)
    assert (dict(app.config), app.extensions) == (config, extensions)


def test_enabled_is_read_at_each_request(storage_url: str, made: list[Flask]) -> None:
    # An app's test switches the limiter off, and still got its "too many
    # attempts" page: the shim read enabled once, at init_app.
    app = Flask("switched")
    made.append(app)
    limiter = limited(app, storage_url, headers_enabled=True)
    client = app.test_client()
    assert statuses(client, 3, "/login") == [200, 200, 429]
    limiter.enabled = False
    off = [get(client, "/login") for _ in range(3)]
    assert [response.status_code for response in off] == [200, 200, 200]
    assert not any("X-RateLimit-Limit" in response.headers for response in off)
    limiter.enabled = True
    assert statuses(client, 1, "/login") == [429]  # uncounted while off


def test_a_second_limiter_on_an_app_follows_the_first_ones_switch(storage_url: str, made: list[Flask]) -> None:
    app = Flask("two")
    made.append(app)
    first = limited(app, storage_url)
    second = Limiter(get_remote_address, app=app, application_limits=["5/minute"])
    second.enabled = False  # its limits are the first's: the first's switch decides
    client = app.test_client()
    assert statuses(client, 3, "/login") == [200, 200, 429]
    first.enabled = False
    assert statuses(client, 6, "/login") == [200] * 6


def test_on_breach_gets_the_real_reset(storage_url: str, clock: Any, made: list[Flask]) -> None:
    # An app that shows "retry after <reset_at>" showed 1 January 1970.
    seen: list[RequestLimit] = []

    def on_breach(limit: RequestLimit) -> Response:
        seen.append(limit)
        return Response(f"retry after {time.strftime('%Y-%m-%d %H:%M', time.gmtime(limit.reset_at))}", 429)

    app = Flask("breached")
    made.append(app)
    limited(app, storage_url, on_breach=on_breach)
    clock.set(15)  # 45 seconds before the minute's window resets
    client = app.test_client()
    before = time.time()
    refused = [get(client, "/login") for _ in range(3)][-1]
    after = time.time()
    assert refused.status_code == 429
    [limit] = seen
    assert limit.breached
    assert limit.remaining == 0
    assert int(before + 45) - 1 <= limit.reset_at <= after + 45
    assert "1970" not in refused.text
    # A response on_breach returns gets Flask-Limiter's Retry-After too.
    assert refused.headers["Retry-After"] == "45"


def test_a_429_for_any_type_is_plain_text(storage_url: str, made: list[Flask]) -> None:
    # Flask-Limiter answers werkzeug's HTML page whatever the client accepts;
    # the extension answers what the client asks for, and text for */*.
    app = Flask("typed")
    made.append(app)
    limited(app, storage_url)
    client = app.test_client()
    statuses(client, 2, "/login")
    plain = get(client, "/login", headers={"Accept": "*/*"})
    assert (plain.status_code, plain.mimetype, plain.text) == (429, "text/plain", "2 per 1 minute\n")
    assert get(client, "/login", headers={"Accept": "text/html"}).mimetype == "text/html"


def test_an_unknown_setting_is_warned_about_once(
    storage_url: str, made: list[Flask], caplog: pytest.LogCaptureFixture
) -> None:
    # init_app checks every setting before it warns about memory://, and
    # does not say twice what the extension's own check says.
    app = Flask("typo")
    made.append(app)
    app.config["RATELIMIT_STORAGE_URL_TYPO"] = "redis://"
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        limited(app, storage_url)
    assert [record.getMessage() for record in caplog.records if "TYPO" in record.getMessage()] == [
        "RATELIMIT_STORAGE_URL_TYPO is not a setting of flask-redis-throttle, and is ignored; "
        "did you mean RATELIMIT_STORAGE_URL?"
    ]
