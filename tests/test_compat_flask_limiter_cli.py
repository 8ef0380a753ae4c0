"""``flask limiter``: Flask-Limiter's ``config``, ``limits`` and ``clear``
commands, translated onto the extension, beside ``flask ratelimit``'s
others; run through Flask's CLI runner on memory:// and on Redis."""

from __future__ import annotations

import re
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from flask import Blueprint, Flask, request
from flask.cli import FlaskGroup
from helpers import get

from flask_redis_throttle import RateLimit
from flask_redis_throttle.cli import ratelimit
from flask_redis_throttle.compat.flask_limiter import ExemptionScope, Limiter
from flask_redis_throttle.compat.flask_limiter.commands import cli
from flask_redis_throttle.compat.flask_limiter.util import get_remote_address

#: A Redis no one listens on.
DOWN_URL = "redis://:secret@127.0.0.1:1/0"


def plan_limit() -> str:
    return "30/minute" if request.headers.get("X-Plan") == "pro" else "10/minute"


def shop(url: str, **arguments: Any) -> Flask:
    """A Flask-Limiter app: default, application and meta limits, a view
    limited per method, a shared limit, and two exemptions."""
    app = Flask("shop")
    limiter = Limiter(
        get_remote_address,
        app=app,
        storage_uri=url,
        default_limits=["100/hour", plan_limit],
        application_limits=["1000/day"],
        meta_limits=["3/hour"],
        **arguments,
    )

    @app.get("/")
    def home() -> str:
        return "home"

    @app.route("/cart", methods=["GET", "POST"])
    @limiter.limit("2/minute", per_method=True)
    def cart() -> str:
        return "cart"

    @app.get("/items/<int:item>")
    @limiter.shared_limit("5/minute", scope="catalogue")
    def item(item: int) -> str:
        return "item"

    @app.get("/free")
    @limiter.exempt
    def free() -> str:
        return "free"

    admin = Blueprint("admin", __name__, url_prefix="/admin")

    @admin.get("/")
    def ping() -> str:
        return "pong"

    limiter.exempt(admin, flags=ExemptionScope.DEFAULT | ExemptionScope.APPLICATION | ExemptionScope.ANCESTORS)
    app.register_blueprint(admin)
    return app


def run(app: Flask, *args: str, input: str | None = None) -> Result:
    return app.test_cli_runner().invoke(cli, list(args), input=input)


def ok(app: Flask, *args: str, input: str | None = None) -> str:
    result = run(app, *args, input=input)
    assert result.exit_code == 0, result.output
    return result.output


def fails(app: Flask, *args: str, code: int = 1) -> str:
    """Run a command that must fail with a message, not a traceback."""
    result = run(app, *args)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)
    return result.output


def send(app: Flask, path: str, times: int, ip: str = "192.0.2.1", method: str = "GET") -> list[int]:
    client = app.test_client()
    return [client.open(path, method=method, environ_base={"REMOTE_ADDR": ip}).status_code for _ in range(times)]


def test_the_group_has_flask_limiters_commands_and_the_extensions_others() -> None:
    assert cli.name == "limiter"
    assert set(cli.commands) == {"config", "limits", "clear"} | set(ratelimit.commands) - {"limits"}
    assert cli.commands["status"] is ratelimit.commands["status"]
    assert cli.commands["limits"] is not ratelimit.commands["limits"]


def test_the_group_is_added_to_the_apps_own_command_line() -> None:
    app = shop("memory://")
    app.cli.add_command(cli)
    result = app.test_cli_runner().invoke(args=["limiter", "limits", "--endpoint", "free"])
    assert result.exit_code == 0, result.output
    assert result.output == "shop\n└── free: /free\n    └── Exempt\n"


def test_the_commands_are_on_the_flask_command_line_even_with_flask_limiter_installed(storage_url: str) -> None:
    # The test extra installs Flask-Limiter, whose entry point claims
    # `flask limiter`: Flask looks its plugins' commands up before the app's,
    # so `flask limiter config` ran Flask-Limiter's group, which failed.
    app = shop(storage_url)  # Limiter(...) puts the commands on the app's command line itself
    flask_command = FlaskGroup(create_app=lambda: app, load_dotenv=False, set_debug_flag=False)
    result = CliRunner().invoke(flask_command, ["limiter-compat", "config"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].split() == ["FLASK-LIMITER", "SETTING", "VALUE"]
    flask_limiters = entry_points(group="flask.commands", name="limiter")
    claimed = CliRunner().invoke(flask_command, ["limiter", "config"])
    if flask_limiters:  # the group is Flask-Limiter's, whatever the app adds
        assert "FLASK-LIMITER SETTING" not in claimed.output
    else:
        assert claimed.exit_code == 0, claimed.output
        assert claimed.output == result.output
    # The app's own command line (what app.test_cli_runner() runs) has both names.
    for name in ("limiter", "limiter-compat"):
        assert app.test_cli_runner().invoke(args=[name, "config"]).output == result.output


def test_a_command_the_app_named_limiter_is_left_to_it() -> None:
    app = Flask("own")

    @app.cli.command("limiter")
    def own() -> None:
        print("the app's own")

    Limiter(get_remote_address, app=app, storage_uri="memory://")
    assert app.test_cli_runner().invoke(args=["limiter"]).output == "the app's own\n"
    assert app.test_cli_runner().invoke(args=["limiter-compat", "config"]).exit_code == 0


def test_without_an_extension_every_command_says_so() -> None:
    app = Flask("bare")
    for args in (["config"], ["limits"], ["limits", "--key", "192.0.2.1"], ["clear", "--key", "192.0.2.1", "-y"]):
        assert fails(app, *args) == (
            "Error: No Flask-Limiter extension installed on <Flask 'bare'>: "
            "set one up with Limiter(key_func, app=app)\n"
        )


def refused(limit: Any) -> None:
    return None


def test_config_shows_the_settings_under_flask_limiters_names(url: str) -> None:
    app = shop(url, strategy="moving-window", key_prefix="shop", headers_enabled=True, on_breach=refused)
    lines = ok(app, "config").splitlines()
    assert lines[0].split() == ["FLASK-LIMITER", "SETTING", "VALUE"]
    rows = {label: rest for label, *rest in (re.split(r"  +", line.strip()) for line in lines[1:])}
    assert rows["Enabled"] == ["RATELIMIT_ENABLED", "True"]
    assert rows["Identities"] == ["RATELIMIT_KEY_FUNC", "ip"]
    assert rows["Key prefix"] == ["RATELIMIT_KEY_PREFIX", "'shop'"]
    assert rows["Strategy"] == ["RATELIMIT_STRATEGY", "sliding-log"]  # the extension's, that does moving-window's job
    assert rows["Storage"] == ["RATELIMIT_STORAGE_URI", url]
    assert rows["Storage status"] == ["OK"]
    assert rows["Application limits"] == ["RATELIMIT_APPLICATION", "1000 per 1 day"]
    assert rows["Default limits"] == ["RATELIMIT_DEFAULT", f"100 per 1 hour, {__name__}.plan_limit()"]
    assert rows["Meta limits"] == ["RATELIMIT_META", "3 per 1 hour"]
    assert rows["Headers"] == ["RATELIMIT_HEADERS_ENABLED", "True"]
    assert rows["Swallow errors"] == ["RATELIMIT_SWALLOW_ERRORS", "False"]


def test_config_says_when_the_storage_does_not_answer_and_hides_its_password() -> None:
    app = shop(DOWN_URL, storage_options={"password": "hidden", "socket_timeout": 1, "client_name": "shop-api"})
    output = ok(app, "config")
    assert "secret" not in output
    assert "hidden" not in output
    assert "redis://:***@127.0.0.1:1/0" in output
    [status] = [line for line in output.splitlines() if line.startswith("Storage status")]
    assert status.split(None, 2)[2].startswith("Error: ")


def test_limits_lists_the_meta_application_and_every_routes_limits(url: str) -> None:
    app = shop(url)
    assert ok(app, "limits") == (
        "Meta limits\n"
        "└── 3 per 1 hour\n"
        "Application limits\n"
        "└── 1000 per 1 day\n"
        "shop\n"
        f"├── home: /\n"
        "│   ├── 100 per 1 hour\n"
        f"│   └── dynamic: {__name__}.plan_limit()\n"
        "├── cart: /cart\n"
        "│   ├── GET\n"
        "│   │   └── 2 per 1 minute\n"
        "│   └── POST\n"
        "│       └── 2 per 1 minute\n"
        "├── free: /free\n"
        "│   └── Exempt\n"
        "└── item: /items/<int:item>\n"
        "    └── 5 per 1 minute\n"
        "admin\n"
        "└── admin.ping: /admin/\n"
        "    └── Exempt\n"
    )


def test_limits_draws_the_routes_of_flask_ratelimit_limits() -> None:
    app = shop("memory://")
    table = app.test_cli_runner().invoke(ratelimit, ["limits"]).output.splitlines()[1:]
    routes = {(line.split()[2], line.split()[0]) for line in table if not line.startswith(" ")}
    drawn = set(re.findall(r"── ([\w.]+): (/\S*)\n", ok(app, "limits")))
    assert drawn == routes - {("static", "/static/<path:filename>")}


def test_limits_with_a_key_shows_what_it_has_left(url: str) -> None:
    app = shop(url)
    assert send(app, "/cart", 3) == [200, 200, 429]
    assert send(app, "/items/1", 1) == [200]
    output = ok(app, "limits", "--key", "192.0.2.1")
    assert "Meta limits\n└── 3 per 1 hour: Pass (2 out of 3 remaining), full again in 1h00m\n" in output
    # The pinned clock is 16 hours before the end of a day.
    assert "└── 1000 per 1 day: Pass (997 out of 1000 remaining), full again in 16h00m\n" in output
    assert "│   ├── 100 per 1 hour: Pass (100 out of 100 remaining)\n" in output
    assert "│   │   └── 2 per 1 minute: Fail (0 out of 2 remaining), full again in 1m00s\n" in output
    assert "│       └── 2 per 1 minute: Pass (2 out of 2 remaining)\n" in output
    shared = "    └── 5 per 1 minute: Pass (4 out of 5 remaining), full again in 1m00s\n"
    assert shared in output
    # Another key has used nothing.
    other = ok(app, "limits", "--key", "192.0.2.2", "--endpoint", "cart")
    assert other == (
        "shop\n"
        "└── cart: /cart\n"
        "    ├── GET\n"
        "    │   └── 2 per 1 minute: Pass (2 out of 2 remaining)\n"
        "    └── POST\n"
        "        └── 2 per 1 minute: Pass (2 out of 2 remaining)\n"
    )


def test_a_key_no_limit_counts_is_refused() -> None:
    output = fails(shop("memory://"), "limits", "--key", "alice", code=2)
    assert "Error: Invalid value for '--key': no limit counts key 'alice': 'alice' is not an IP address" in output


def test_limits_and_clear_say_when_the_storage_is_down() -> None:
    app = shop(DOWN_URL)
    output = fails(app, "limits", "--key", "192.0.2.1", "--endpoint", "cart")
    assert "│   └── 2 per 1 minute: Storage not available\n" in output
    assert "Error: rate limit storage not available: " in output
    assert "secret" not in output
    output = fails(app, "clear", "--key", "192.0.2.1", "-y")
    assert output.startswith("Error: rate limit storage unavailable at redis://:***@127.0.0.1:1/0: ")


def test_endpoint_path_and_method_choose_the_routes() -> None:
    app = shop("memory://")
    only_post = "shop\n└── cart: /cart\n    └── 2 per 1 minute\n"
    assert ok(app, "limits", "--endpoint", "cart", "--method", "post") == only_post
    assert ok(app, "limits", "--path", "/cart?page=2", "--method", "POST") == only_post
    shared = "shop\n└── item: /items/<int:item>\n    └── 5 per 1 minute\n"
    assert ok(app, "limits", "--path", "/items/42") == shared
    # /admin redirects to /admin/: its route.
    assert ok(app, "limits", "--path", "/admin") == "admin\n└── admin.ping: /admin/\n    └── Exempt\n"
    assert fails(app, "limits", "--endpoint", "carts") == (
        "Error: endpoint carts not found; `flask limiter limits` lists every route\n"
    )
    assert fails(app, "limits", "--path", "/cart", "--method", "DELETE") == (
        "Error: DELETE: /cart could not be matched to any route\n"
    )
    assert fails(app, "clear", "--key", "192.0.2.1", "--path", "/items/x", "-y") == (
        "Error: GET: /items/x could not be matched to any route\n"
    )
    unknown = fails(app, "limits", "--watch", code=2)
    assert "No such option" in unknown
    assert "--watch" in unknown
    assert "Error: give --endpoint or --path, not both" in fails(
        app, "limits", "--endpoint", "cart", "--path", "/cart", code=2
    )


def test_clear_clears_every_limit_of_the_key_and_only_its_counters(url: str) -> None:
    app = shop(url)
    for ip in ("192.0.2.1", "192.0.2.2"):
        assert send(app, "/cart", 3, ip) == [200, 200, 429]
        assert send(app, "/cart", 3, ip, "POST") == [200, 200, 429]
    assert ok(app, "clear", "--key", "192.0.2.1", "-y") == (
        "Meta limits\n"
        "└── 3 per 1 hour: Cleared\n"
        "Application limits\n"
        "└── 1000 per 1 day: Cleared\n"
        "shop\n"
        "├── home: /\n"
        "│   ├── 100 per 1 hour: Cleared\n"
        f"│   └── dynamic: {__name__}.plan_limit(): Cleared\n"
        "├── cart: /cart\n"
        "│   ├── GET\n"
        "│   │   └── 2 per 1 minute: Cleared\n"
        "│   └── POST\n"
        "│       └── 2 per 1 minute: Cleared\n"
        "└── item: /items/<int:item>\n"
        "    └── 5 per 1 minute: Cleared\n"
        "Deleted 4 counter keys of key 192.0.2.1.\n"
        "App servers' block caches may go on refusing it for up to 1 second.\n"
    )
    # The meta limit, which had counted a refusal, is full again too.
    assert "Meta limits\n└── 3 per 1 hour: Pass (3 out of 3 remaining)\n" in ok(app, "limits", "--key", "192.0.2.1")
    assert send(app, "/cart", 3, "192.0.2.1") == [200, 200, 429]
    assert send(app, "/cart", 1, "192.0.2.2") == [429]
    assert "2 per 1 minute: Pass (2 out of 2 remaining)" not in ok(app, "limits", "--key", "192.0.2.2")


#: Keys a client may send that are special to Redis's glob patterns, or to our keys' layout.
HOSTILE_KEYS = ["*", "?", "[a]", "[", "\\", "\\*", "a:b", ":", "", "{", "}", "%2A"]


def header_key() -> str:
    return request.headers.get("X-Key", "")


def test_clear_of_a_hostile_key_clears_that_key_alone(storage_url: str) -> None:
    """Every limit chosen, clear resets every scope of the key's identities:
    a key such as ``*`` or ``[a]``, under a key prefix of glob characters
    and in a scope named with one, matches its own counters only, on
    memory://, Redis and the cluster."""
    app = Flask("hostile")
    limiter = Limiter(header_key, app=app, storage_uri=storage_url, key_prefix="r*[l]?\\:")

    @app.get("/")
    @limiter.limit("1/minute", scope="x*")
    def home() -> str:
        return "home"

    client = app.test_client()

    def status(key: str) -> int:
        return client.get("/", headers={"X-Key": key}).status_code

    assert [status(key) for key in HOSTILE_KEYS] == [200] * len(HOSTILE_KEYS)
    for target in HOSTILE_KEYS:
        ok(app, "clear", "--key", target, "-y")
        assert [status(key) for key in HOSTILE_KEYS] == [200 if key == target else 429 for key in HOSTILE_KEYS]


def test_clear_with_an_endpoint_clears_only_that_routes_limits(url: str) -> None:
    app = shop(url)
    assert send(app, "/cart", 3) == [200, 200, 429]
    assert send(app, "/items/1", 5) == [200] * 5
    assert ok(app, "clear", "--key", "192.0.2.1", "--endpoint", "cart", "--method", "GET", "-y") == (
        "shop\n└── cart: /cart\n    └── 2 per 1 minute: Cleared\nDeleted 1 counter key of key 192.0.2.1.\n"
        "App servers' block caches may go on refusing it for up to 1 second.\n"
    )
    assert send(app, "/cart", 1) == [200]
    assert send(app, "/items/2", 1) == [429]  # the shared limit kept its count
    assert "1000 per 1 day: Pass (992 out of 1000 remaining)" in ok(app, "limits", "--key", "192.0.2.1")


def test_clear_asks_first_unless_told_yes() -> None:
    app = shop("memory://")
    assert send(app, "/cart", 3) == [200, 200, 429]
    result = run(app, "clear", "--key", "192.0.2.1", "--endpoint", "cart", input="n\n")
    assert result.exit_code == 1
    assert result.output == (
        "shop\n"
        "└── cart: /cart\n"
        "    ├── GET\n"
        "    │   └── 2 per 1 minute: Fail (0 out of 2 remaining), full again in 1m00s\n"
        "    └── POST\n"
        "        └── 2 per 1 minute: Pass (2 out of 2 remaining)\n"
        "Clear these limits for key 192.0.2.1? [y/N]: n\n"
        "Aborted!\n"
    )
    assert send(app, "/cart", 1) == [429]
    output = ok(app, "clear", "--key", "192.0.2.1", "--endpoint", "cart", input="y\n")
    assert "Deleted 1 counter key of key 192.0.2.1." in output
    assert send(app, "/cart", 1) == [200]


def broken_limit() -> str:
    return request.headers["X-Plan"]  # raises KeyError outside a real request


def test_a_dynamic_limit_unknown_outside_a_request_is_shown_so_and_still_cleared(url: str) -> None:
    app = Flask("plans")
    limiter = Limiter(get_remote_address, app=app, storage_uri=url)

    @app.get("/")
    @limiter.limit(broken_limit)
    def home() -> str:
        return "home"

    client = app.test_client()
    assert [get(client, "/", headers={"X-Plan": "1/minute"}).status_code for _ in range(2)] == [200, 429]
    label = f"dynamic: {__name__}.broken_limit()"
    assert (
        ok(app, "limits", "--key", "192.0.2.1") == f"plans\n└── home: /\n    └── {label}: not known outside a request\n"
    )
    # Cleared beneath the endpoint: the shim counts each limit string a function returns under a scope of its own.
    cleared = ok(app, "clear", "--key", "192.0.2.1", "--endpoint", "home", "-y")
    assert f"└── {label}: Cleared\nDeleted 1 counter key" in cleared
    assert get(client, "/", headers={"X-Plan": "1/minute"}).status_code == 200


def bucket(endpoint: str) -> str:
    return f"{endpoint}-bucket"


def test_a_scope_functions_counters_are_cleared_with_every_limit_not_with_one_routes(url: str) -> None:
    app = Flask("scoped")
    limiter = Limiter(get_remote_address, app=app, storage_uri=url)

    @app.get("/items/<int:item>")
    @limiter.shared_limit("1/minute", scope=bucket)
    def item(item: int) -> str:
        return "item"

    assert send(app, "/items/1", 2) == [200, 429]
    label = f"dynamic: {__name__}.bucket()"
    expected = f"scoped\n└── item: /items/<int:item>\n    └── {label}: not known outside a request\n"
    assert ok(app, "limits", "--key", "192.0.2.1") == expected
    unknown = f"└── {label}: not cleared, its scope function gives each request its own\nDeleted 0 counter keys"
    assert unknown in ok(app, "clear", "--key", "192.0.2.1", "--endpoint", "item", "-y")
    assert send(app, "/items/2", 1) == [429]
    assert f"└── {label}: Cleared\nDeleted 1 counter key" in ok(app, "clear", "--key", "192.0.2.1", "-y")
    assert send(app, "/items/2", 1) == [200]


def test_on_an_app_of_the_native_extension_the_commands_work_too(url: str) -> None:
    app = Flask("native")
    app.config.update(RATELIMIT_STORAGE_URL=url, RATELIMIT_DEFAULT="2/minute", RATELIMIT_ENABLED=True)
    RateLimit(app)

    @app.get("/")
    def home() -> str:
        return "home"

    assert send(app, "/", 3) == [200, 200, 429]
    assert ok(app, "limits", "--key", "192.0.2.1") == (
        "native\n└── home: /\n    └── 2 per 1 minute: Fail (0 out of 2 remaining), full again in 1m00s\n"
    )
    assert re.search(r"Identities +RATELIMIT_KEY_FUNC +ip, user\n", ok(app, "config"))


def test_with_rate_limiting_disabled_the_limits_are_listed_and_nothing_is_cleared() -> None:
    app = shop("memory://")
    app.config["RATELIMIT_ENABLED"] = False
    disabled = Flask("off")
    disabled.config["RATELIMIT_ENABLED"] = False
    Limiter(get_remote_address, app=disabled, default_limits=["1/minute"], storage_uri="memory://")

    @disabled.get("/")
    def home() -> str:
        return "home"

    assert ok(disabled, "limits") == "off\n└── home: /\n    └── 1 per 1 minute\n"
    assert re.search(r"Storage status +off: RATELIMIT_ENABLED is False\n", ok(disabled, "config"))
    assert "└── 1 per 1 minute: Storage not available\n" in fails(disabled, "limits", "--key", "192.0.2.1")
    assert fails(disabled, "clear", "--key", "192.0.2.1", "-y") == (
        "Error: rate limiting is disabled on this app (RATELIMIT_ENABLED is False)\n"
    )


def test_the_cli_pages_samples_are_what_the_commands_print() -> None:
    # docs/cli.rst's samples of `flask limiter ...`, run on this module's app
    # after the requests they follow: the GET of /cart refused once.
    page = (Path(__file__).resolve().parent.parent / "docs" / "cli.rst").read_text(encoding="utf-8")
    samples = re.findall(r"\n        \$ flask limiter (.*)\n((?:        .*\n)+)", page)
    assert len(samples) == 2
    app = shop("memory://")
    assert send(app, "/cart", 3) == [200, 200, 429]
    for command, output in samples:
        assert ok(app, *command.split()) == textwrap.dedent(output)
