"""Every code example in docs/*.rst compiles, and runs where it can.

Each ``.. code-block:: python`` is compiled, then executed in a prepared
namespace: a Flask app on ``memory://``, the blueprints and helpers the
examples assume (``api``, ``statsd``...), and the package's names. The
blueprints it leaves are registered, the extension is installed if the
example did not, and the plan of every route is compiled, so that a limit
or option the docs show but the code rejects fails here. Each
``.. code-block:: pycon`` runs as a doctest, and so does every example in
the package's docstrings, which the API page shows. A few examples need more
than a namespace can give; :data:`SKIP` lists them, each with its reason.

The examples whose whole point is behaviour (the refusal receiver, the
refusal log's admin view) are also run through real requests on every
storage, below.
"""

from __future__ import annotations

import doctest
import importlib
import logging
import pkgutil
import re
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import flask
import flask_login
import pytest
import redis
from flask import Blueprint, Flask
from helpers import Clock, add_login, get, install

import flask_redis_throttle
from flask_redis_throttle import RateLimit, request_refused

DOCS = Path(__file__).resolve().parent.parent / "docs"

#: Examples that cannot run in a test, by page and the start of their code,
#: each with the reason.
SKIP: dict[tuple[str, str], str] = {
    ("operations.rst", "from prometheus_client import CollectorRegistry, make_wsgi_app, multiprocess"): (
        "MultiProcessCollector needs PROMETHEUS_MULTIPROC_DIR; "
        "test_metrics.py::test_gunicorn_multiprocess_mode_sums_the_workers runs multiprocess mode under gunicorn"
    ),
    ("operations.rst", "from opentelemetry import metrics"): "opentelemetry is not a dependency, even for tests",
    ("operations.rst", "# gunicorn.conf.py"): (
        "it configures the process's logging for good; "
        "test_logging.py::test_the_gunicorn_recipe_logs_with_time_level_and_logger runs it as gunicorn's config"
    ),
}

#: Code run before an example, by page and the start of its code: the
#: state the page's text has built up by then.
SETUP: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {}


@dataclass(frozen=True)
class Example:
    """One code block of one page."""

    page: str
    line: int
    language: str
    source: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def starts(self, prefix: str) -> bool:
        return self.source.startswith(prefix)

    def key(self, table: dict[tuple[str, str], Any]) -> tuple[str, str] | None:
        """The key of this example in ``table``, if it has one."""
        return next((key for key in table if key[0] == self.page and self.starts(key[1])), None)


_BLOCK = re.compile(r"^(?P<indent>\s*)\.\. code-block:: (?P<language>python|pycon)\s*$")


def examples(page: Path) -> Iterator[Example]:
    """The python and pycon code blocks of a page, dedented."""
    lines = page.read_text(encoding="utf-8").splitlines()
    at = 0
    while at < len(lines):
        match = _BLOCK.match(lines[at])
        at += 1
        if match is None:
            continue
        start, indent = at, len(match["indent"])
        while at < len(lines) and (not lines[at].strip() or len(lines[at]) - len(lines[at].lstrip()) > indent):
            at += 1
        source = textwrap.dedent("\n".join(lines[start:at])).strip() + "\n"
        yield Example(page.name, start, match["language"], source)


ALL = [example for page in sorted(DOCS.glob("*.rst")) for example in examples(page)]
PYTHON = [example for example in ALL if example.language == "python"]
PYCON = [example for example in ALL if example.language == "pycon"]


class Statsd:
    """A metrics client that remembers what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    def increment(self, metric: str, tags: list[str] | None = None) -> None:
        self.sent.append((metric, list(tags or [])))


@dataclass
class Customer:
    plan: str = "free"


def api_key(request: flask.Request) -> str | None:
    return request.headers.get("X-Api-Key")


def namespace(app: Flask) -> dict[str, Any]:
    """What the examples assume is already there."""
    names: dict[str, Any] = {name: getattr(flask_redis_throttle, name) for name in flask_redis_throttle.__all__}
    names.update(
        __name__="docs_example",
        app=app,
        Flask=Flask,
        Blueprint=Blueprint,
        LoginManager=flask_login.LoginManager,
        current_user=flask_login.current_user,
        login_required=flask_login.login_required,
        render_template=flask.render_template,
        time=time,
        api=Blueprint("api", "docs_example"),
        web=Blueprint("web", "docs_example"),
        internal=Blueprint("internal", "docs_example"),
        api_key=api_key,
        key_is_valid=lambda key: key.startswith("k-"),
        customer_of=lambda key: Customer(),
        PLAN_LIMITS={"free": "60/h", "pro": "1000/h"},
        SECRET="internal-secret",
        MONITORING_ADDRESSES={"192.0.2.250"},
        statsd=Statsd(),
        security_log=logging.getLogger("docs_example.security"),
    )
    return names


def finish(names: dict[str, Any]) -> Flask:
    """Register the blueprints the example used, install the extension if it
    did not, and compile the plan of every route: what the first request of
    each would do, without running views that are only ``...``."""
    app: Flask = names["app"]
    for name in ("api", "web", "internal"):
        blueprint = names.get(name)
        if isinstance(blueprint, Blueprint) and blueprint.name not in app.blueprints:
            app.register_blueprint(blueprint, url_prefix=f"/{blueprint.name}")
    if "ratelimit" not in app.extensions:
        RateLimit(app)
    state = app.extensions["ratelimit"]
    for rule in app.url_map.iter_rules():
        for method in rule.methods or ():
            state.plan(rule.endpoint, method)
    return app


def close(app: Flask) -> None:
    state = app.extensions.get("ratelimit")
    if state is not None and state.throttle is not None:
        state.throttle.storage.close()


def disconnect_receivers(names: dict[str, Any]) -> None:
    """Disconnect whatever the example connected to the signal."""
    for value in list(names.values()):
        if callable(value):
            request_refused.disconnect(value)


def test_the_docs_have_examples() -> None:
    assert len(PYTHON) > 40
    assert {example.page for example in PYCON} >= {"grammar.rst", "limits.rst", "config.rst"}
    for table in (SKIP, SETUP):
        for page, prefix in table:
            assert any(e.page == page and e.starts(prefix) for e in ALL), f"{page}: no example starts {prefix!r}"


@pytest.mark.parametrize("example", PYTHON, ids=lambda example: example.id)
def test_every_python_example_compiles(example: Example) -> None:
    assert compile(example.source, example.id, "exec").co_filename == example.id


@pytest.mark.parametrize("example", PYTHON, ids=lambda example: example.id)
def test_every_python_example_runs(example: Example, monkeypatch: pytest.MonkeyPatch) -> None:
    skip = example.key(SKIP)
    if skip is not None:
        pytest.skip(SKIP[skip])
    # An example that builds its own Redis client gets an in-process one.
    monkeypatch.setattr(redis, "Redis", fakeredis.FakeRedis)
    names = namespace(Flask("docs_example"))
    setup = example.key(SETUP)
    if setup is not None:
        SETUP[setup](names)
    try:
        exec(compile(example.source, example.id, "exec"), names)
        app = finish(names)
    finally:
        disconnect_receivers(names)
    # The example ran to its end, and its app is the one the extension is installed on.
    assert app.extensions["ratelimit"].app is app
    close(app)


def _plan_setup(names: dict[str, Any]) -> None:
    """The views of the first example of limits.rst, registered."""
    [first] = [e for e in PYTHON if e.page == "limits.rst" and e.starts("from flask_redis_throttle import exempt")]
    exec(compile(first.source, first.id, "exec"), names)
    finish(names)


SETUP[("limits.rst", '>>> plan = app.extensions["ratelimit"].plan(')] = _plan_setup


def _create_app_setup(names: dict[str, Any]) -> None:
    """quickstart.rst's application factory, which its test example goes on to use."""
    [factory] = [e for e in PYTHON if e.page == "quickstart.rst" and "def create_app(" in e.source]
    exec(compile(factory.source, factory.id, "exec"), names)


SETUP[("quickstart.rst", "from flask_redis_throttle.testing import redis_server")] = _create_app_setup


def _overrides_setup(names: dict[str, Any]) -> None:
    """The app overrides.rst steers: ``ratelimit`` on it, and a limit of scope ``api``."""
    app = names["app"]
    app.get("/api/items")(flask_redis_throttle.limit("10/s", scope="api")(lambda: "ok"))
    names["ratelimit"] = RateLimit(app)


SETUP[("overrides.rst", "ratelimit.override(")] = _overrides_setup
SETUP[("overrides.rst", "from datetime import timedelta")] = _overrides_setup


@pytest.mark.parametrize("example", PYCON, ids=lambda example: example.id)
def test_every_pycon_example_runs_as_a_doctest(example: Example) -> None:
    names = namespace(Flask("docs_example"))
    setup = example.key(SETUP)
    if setup is not None:
        SETUP[setup](names)
    test = doctest.DocTestParser().get_doctest(example.source, names, example.id, example.page, example.line)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    runner.run(test, out=report.append)
    close(names["app"])
    assert runner.tries > 0
    assert runner.failures == 0, "".join(report)


def example_of(page: str, prefix: str) -> Example:
    [example] = [e for e in PYTHON if e.page == page and e.starts(prefix)]
    return example


def answer_placeholders(app: Flask) -> None:
    """Let the views whose body is the docs' ``...`` (so they return None) answer "ok"."""
    app.make_response = lambda rv: Flask.make_response(app, "ok" if rv is None else rv)  # type: ignore[method-assign]


def post(client: Any, path: str, ip: str = "192.0.2.1", **kwargs: Any) -> int:
    return int(client.post(path, environ_base={"REMOTE_ADDR": ip}, **kwargs).status_code)


def test_the_breach_receiver_in_the_docs_counts_every_refusal(app: Flask) -> None:
    # docs/responses.rst, exactly as written: a receiver that leaves out a
    # field the signal sends raises TypeError and never counts.
    example = example_of("responses.rst", "from flask_redis_throttle import limit, request_refused")
    names = namespace(app)
    add_login(app)
    answer_placeholders(app)
    install(app)
    exec(compile(example.source, example.id, "exec"), names)
    try:
        client = app.test_client()
        statuses = [post(client, "/login") for _ in range(7)]
    finally:
        disconnect_receivers(names)
    assert statuses == [200] * 5 + [429] * 2
    assert (
        names["statsd"].sent
        == [
            ("request_refused", ["endpoint:login", "shadow:False", "penalized:False"]),
        ]
        * 2
    )


def test_the_breach_hooks_in_the_docs_see_the_user(app: Flask, caplog) -> None:
    example = example_of("responses.rst", "from flask_redis_throttle import limit, request_refused")
    names = namespace(app)
    add_login(app)
    answer_placeholders(app)
    install(app)
    exec(compile(example.source, example.id, "exec"), names)
    try:
        client = app.test_client()
        with caplog.at_level(logging.WARNING, "docs_example.security"):
            # From a new IP each time, so that only the user's counter fills.
            statuses = [post(client, "/login", f"192.0.2.{n}", headers={"X-User": "alice"}) for n in range(1, 8)]
    finally:
        disconnect_receivers(names)
    assert statuses == [200] * 5 + [429] * 2
    assert [r.getMessage() for r in caplog.records if r.name == "docs_example.security"] == [
        "user alice over 5 per 1 minute"
    ] * 2


def test_the_queue_consumer_runs_each_customers_quota_and_defers_the_rest(clock: Clock) -> None:
    # docs/core.rst, exactly as written: the core alone, on memory://, no app.
    example = example_of("core.rst", "from flask_redis_throttle import Identity, StorageUnavailable")
    names: dict[str, Any] = {}
    exec(compile(example.source, example.id, "exec"), names)
    ran: list[tuple[str, int]] = []
    waiting: list[tuple[tuple[str, int], float]] = []

    def handle(customer: str, number: int) -> None:
        job = {"customer": customer, "number": number}
        names["handle"](
            job,
            lambda job: ran.append((job["customer"], job["number"])),
            lambda job, seconds: waiting.append(((job["customer"], job["number"]), seconds)),
        )

    for number in range(6):
        handle("acme", number)
    handle("globex", 0)
    assert ran == [("acme", 0), ("acme", 1), ("acme", 2), ("acme", 3), ("acme", 4), ("globex", 0)]
    [(job, seconds)] = waiting
    assert job == ("acme", 5)
    assert 0 < seconds <= 120
    clock.advance(seconds)
    handle("acme", 5)
    assert ran[-1] == ("acme", 5)


def test_the_refusal_log_admin_view_in_the_docs_works(app: Flask) -> None:
    # docs/refusals.rst, exactly as written: Refusal has slots, so the view
    # needs as_dict(), and the JSON has every field of the docs' table.
    example = example_of("refusals.rst", "import time")
    names = namespace(app)
    add_login(app)

    @app.get("/search")
    @flask_redis_throttle.limit("1/m", scope="search")
    def search() -> str:
        return "ok"

    install(app)
    exec(compile(example.source, example.id, "exec"), names)
    client = app.test_client()
    assert [get(client, "/search", user="42").status_code for _ in range(2)] == [200, 429]
    assert get(client, "/admin/refusals").status_code == 401  # login_required, as written
    response = get(client, "/admin/refusals", user="admin")
    assert response.status_code == 200
    body = response.get_json()
    [recent] = body["recent"]
    assert set(recent) == set(refusal_fields())
    assert recent["endpoint"] == "search"
    assert recent["layer"] == "1/1m"
    assert recent["identities"] == ["ip:192.0.2.1", "user:42"]
    assert (recent["shadow"], recent["penalized"]) == (False, False)
    # Both counters filled together; the IP's, checked first, refused: only it counts.
    assert body["top"] == [["ip:192.0.2.1", 1]]


def refusal_fields() -> list[str]:
    """The fields docs/refusals.rst's table lists, in order."""
    text = (DOCS / "refusals.rst").read_text(encoding="utf-8")
    table = text[text.index("   * - Field") : text.index("What it costs")]
    return re.findall(r"^   \* - ``(\w+)``", table, re.MULTILINE)


def test_the_refusal_field_table_lists_every_field_in_order() -> None:
    assert refusal_fields() == list(flask_redis_throttle.Refusal.__slots__)


MODULES = sorted(f"flask_redis_throttle.{m.name}" for m in pkgutil.iter_modules(flask_redis_throttle.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_every_docstring_example_runs_as_a_doctest(name: str) -> None:
    # The API pages show the package's docstrings, examples included.
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, report=False)
    assert results.failed == 0


def test_the_dashboard_example_in_the_docs_works(app: Flask) -> None:
    # docs/dashboard.rst, exactly as written: only the admin sees it.
    example = example_of("dashboard.rst", "from flask_login import current_user")
    names = namespace(app)
    add_login(app)
    install(app)
    exec(compile(example.source, example.id, "exec"), names)
    client = app.test_client()
    assert get(client, "/admin/ratelimit/").status_code == 404
    assert get(client, "/admin/ratelimit/", user="alice").status_code == 404
    response = get(client, "/admin/ratelimit/", user="admin")
    assert response.status_code == 200
    assert "<h1>Rate limits</h1>" in response.text


def timeit_commands(page: Path) -> list[tuple[str, str]]:
    """The ``python -m timeit -s SETUP STATEMENT`` commands of ``page``, with
    the setups the page names in capitals (``POLICY``) written out."""
    text = page.read_text("utf-8")
    named = {
        name: " ".join(code.split())
        for name, code in re.findall(r"``([A-Z]+)`` (?:standing )?for ``(.*?)``", text, re.S)
    }
    commands = []
    for setup, statement in re.findall(r'python -m timeit -s "([^"]*)" "([^"]*)"', text):
        for name, code in named.items():
            setup = re.sub(rf"\b{name}\b", code, setup)
        commands.append((setup, statement))
    return commands


@pytest.mark.parametrize(
    ("setup", "statement"), timeit_commands(DOCS / "architecture.rst"), ids=lambda value: value[-60:]
)
def test_every_timing_command_of_the_architecture_page_runs(setup: str, statement: str) -> None:
    """The cache table's figures come from these commands: a name they
    import that has moved would leave a figure nobody can measure again."""
    names: dict[str, Any] = {}
    exec(setup, names)
    exec(statement, names)
