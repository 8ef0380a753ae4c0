"""The dashboard blueprint, through a real app on every storage with Flask's
test client: who may see it, what it shows, and its reset's CSRF check.
The same page in a real browser is in test_browser.py."""

from __future__ import annotations

import html as markup
import re
import time
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest
import redis
from flask import Flask, request
from flask_login import LoginManager, current_user, login_user
from helpers import User, add_login, get, install

from flask_redis_throttle import dashboard, exempt, limit, testing
from flask_redis_throttle.core.engine.keys import MAX_VALUE_LENGTH
from flask_redis_throttle.extension import RateLimitState

PREFIX = "/admin/limits"


def admin_only() -> bool:
    return request.headers.get("X-User") == "admin"


def shop(app: Flask, authorize: Callable[[], bool] | None = admin_only, **config: Any) -> RateLimitState:
    """``/items`` limited to 1/m per IP and per user, and the dashboard for ``admin``."""
    add_login(app)

    @app.get("/items")
    @limit("1/m")
    def items() -> str:
        return "ok"

    app.register_blueprint(dashboard.blueprint(authorize=authorize), url_prefix=PREFIX)
    return install(app, RATELIMIT_BLOCK_CACHE_SIZE=0, **config)


def page(client: Any, query: str = "", status: int = 200) -> str:
    response = get(client, f"{PREFIX}/{query}", user="admin")
    assert response.status_code == status, response.text
    assert response.mimetype == "text/html"
    text: str = response.text
    return text


class _Tables(HTMLParser):
    """The text of each cell of each table with an id, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.current: list[list[str]] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.current = self.tables.setdefault(dict(attrs).get("id") or "", [])
        elif tag == "tr" and self.current is not None:
            self.current.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.current = None
        elif tag in ("td", "th") and self.current is not None and self.cell is not None:
            self.current[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def tables(html: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def refuse_alice(client: Any) -> None:
    """alice's user counter fills from one IP, and refuses her from another."""
    assert get(client, "/items", ip="192.0.2.1", user="alice").status_code == 200
    assert get(client, "/items", ip="192.0.2.2", user="alice").status_code == 429


def token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no reset form"
    return found.group(1)


# who may see it


@pytest.mark.parametrize("path", ["/", "/?identity=ip:192.0.2.1", "/reset", "/nothing"])
def test_without_authorize_every_url_answers_404(app: Flask, path: str) -> None:
    shop(app, authorize=None)
    client = app.test_client()
    assert get(client, PREFIX + path, user="admin").status_code == 404
    # Not even a 405 for a method the URL does not take: that would tell a
    # prober the dashboard is there.
    for method in ("POST", "PUT", "DELETE"):
        assert client.open(PREFIX + path, method=method, headers={"X-User": "admin"}).status_code == 404
    assert client.post(f"{PREFIX}/reset", data={"identity": "ip:192.0.2.1"}).status_code == 404


def answer(client: Any, method: str, path: str, user: str | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    """Everything a client can see of a response, but its date."""
    headers = {"X-User": user} if user else {}
    response = client.open(path, method=method, headers=headers, environ_base={"REMOTE_ADDR": "192.0.2.9"})
    return response.status_code, sorted((k, v) for k, v in response.headers if k != "Date"), response.data


@pytest.mark.parametrize("authorize", [None, admin_only], ids=["no-authorize", "refused"])
def test_an_unauthorized_client_cannot_tell_the_dashboard_from_an_unknown_url(
    app: Flask, authorize: Callable[[], bool] | None
) -> None:
    # As the docs set it up: a default limit, the dashboard not exempted.
    @app.after_request
    def seen(response: Any) -> Any:
        response.headers["X-Endpoint"] = str(request.endpoint)
        return response

    shop(app, authorize=authorize, RATELIMIT_DEFAULT="3/m")
    client = app.test_client()
    for path in ("", "/", "/reset", "/reset/", "/nothing"):
        for method in ("GET", "HEAD", "OPTIONS", "POST", "DELETE"):
            unknown = answer(client, method, "/unknown" + path)
            assert unknown[0] == 404
            for user in (None, "alice"):
                # Five times: the default limit would refuse the fourth.
                for _ in range(5):
                    assert answer(client, method, PREFIX + path, user) == unknown, (method, path, user)


def test_with_flask_login_sessions_as_the_docs_show_it_the_dashboard_is_hidden(app: Flask) -> None:
    # Reading current_user reads the session, which a response says with
    # Vary: Cookie; an unknown URL's reads nothing.
    manager = LoginManager(app)
    manager.user_loader(User)

    @app.get("/login/<name>")
    @exempt
    def log_in(name: str) -> str:
        login_user(User(name))
        return "ok"

    def is_admin() -> bool:
        return bool(current_user.is_authenticated and current_user.id == "admin")

    app.register_blueprint(dashboard.blueprint(authorize=is_admin), url_prefix=PREFIX)
    install(app, RATELIMIT_DEFAULT="3/m")
    for user in (None, "alice"):
        client = app.test_client()
        if user is not None:
            assert client.get(f"/login/{user}").status_code == 200
        for path in ("", "/", "/reset"):
            for method in ("GET", "HEAD", "OPTIONS", "POST"):
                unknown = answer(client, method, "/unknown" + path)
                for _ in range(5):
                    assert answer(client, method, PREFIX + path) == unknown, (method, path, user)
    admin = app.test_client()
    assert admin.get("/login/admin").status_code == 200
    response = admin.get(f"{PREFIX}/")
    assert response.status_code == 200
    assert "Cookie" in response.vary


def test_an_authorized_client_is_limited_as_before(app: Flask) -> None:
    shop(app, RATELIMIT_DEFAULT="3/m")
    client = app.test_client()
    assert client.get(PREFIX, headers={"X-User": "admin"}).status_code == 308
    assert client.delete(f"{PREFIX}/", headers={"X-User": "admin"}).status_code == 405
    responses = [client.get(f"{PREFIX}/", headers={"X-User": "admin"}) for _ in range(4)]
    assert [response.status_code for response in responses] == [200, 200, 200, 429]
    assert all("RateLimit" in response.headers for response in responses)
    assert "Retry-After" in responses[-1].headers


def test_a_refused_authorization_answers_404_as_if_there_were_no_dashboard(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    for user in (None, "alice"):
        assert get(client, f"{PREFIX}/", user=user).status_code == 404
        response = client.post(f"{PREFIX}/reset", data={"identity": "ip:192.0.2.1"})
        assert response.status_code == 404
    assert get(client, f"{PREFIX}/", user="admin").status_code == 200
    assert client.delete(f"{PREFIX}/", headers={"X-User": "alice"}).status_code == 404
    assert client.delete(f"{PREFIX}/", headers={"X-User": "admin"}).status_code == 405


# what it shows


def test_it_shows_each_endpoints_limits_as_the_cli_does(app: Flask) -> None:
    shop(app)
    limits = tables(page(app.test_client()))["limits-table"]
    assert limits[0] == ["RULE", "METHODS", "ENDPOINT", "LIMIT", "STRATEGY", "SCOPE", "IDENTITIES"]
    assert ["/items", "GET", "items", "1/1m", "fixed-window", "items", "ip, user"] in limits
    assert [f"{PREFIX}/", "GET", "ratelimit_dashboard.index", "no limit", "", "", ""] in limits


def test_its_limits_show_a_concurrency_cap_as_the_cli_does(app: Flask) -> None:
    @app.get("/export")
    @limit("10/m", concurrent=3)
    def export() -> str:
        return "ok"

    shop(app)
    limits = tables(page(app.test_client()))["limits-table"]
    assert [
        "/export",
        "GET",
        "export",
        "10/1m (3 concurrent, lease 60s)",
        "fixed-window",
        "export",
        "ip, user",
    ] in limits


def test_it_names_the_refused_identity_apart_from_the_others_present(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    refuse_alice(client)
    html = page(client)
    found = tables(html)
    assert found["top-table"][1:] == [["user:alice", "1", "ip:192.0.2.2 (1)"]]
    [refusal] = found["recent-table"][1:]
    assert refusal[1:7] == ["items", "items", "1/1m", "user:alice", "ip:192.0.2.2", "1m00s"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", refusal[0])


def test_it_draws_refusals_per_minute_as_inline_svg_without_scripts(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    html = page(client)
    assert "<svg" in html
    assert 'class="bar"' not in html
    refuse_alice(client)
    html = page(client)
    assert html.count('<rect class="bar"') == 1
    assert "<title>1 refusal, in the last minute</title>" in html
    assert "<script" not in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html


def test_a_lookup_shows_an_identitys_counters_as_the_cli_does(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    get(client, "/items", ip="192.0.2.1", user="alice")
    html = page(client, "?identity=user:alice")
    status = tables(html)["status"]
    assert status[0] == ["ENDPOINT", "SCOPE", "STRATEGY", "LAYER", "USED", "REMAINING", "RESETS IN"]
    assert status[1] == ["items", "items", "fixed-window", "1/1m", "1", "0", "1m00s"]
    html = page(client, "?identity=user:bob&view=items")
    assert tables(html)["status"][1][4:6] == ["0", "1"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?identity=nobody", "nobody"),
        ("?identity=ip:192.0.2.1&view=itemz", "no endpoint &#39;itemz&#39;; did you mean &#39;items&#39;?"),
    ],
)
def test_a_bad_lookup_says_why(app: Flask, query: str, message: str) -> None:
    shop(app)
    html = page(app.test_client(), query, status=400)
    assert re.search(r'<p class="problem" id="problem">[^<]*' + re.escape(message), html)


def test_what_a_client_chose_is_escaped(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    html = page(client, "?identity=ip:<script>alert(1)</script>", status=400)
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_without_a_refusal_log_the_page_says_so(app: Flask) -> None:
    shop(app, RATELIMIT_REFUSAL_LOG_SIZE=0)
    html = page(app.test_client())
    assert "This app keeps no refusal log (RATELIMIT_REFUSAL_LOG_SIZE is 0)." in html


def test_with_rate_limiting_disabled_the_page_says_so(app: Flask) -> None:
    shop(app, RATELIMIT_ENABLED=False)
    client = app.test_client()
    html = page(client)
    assert "RATELIMIT_ENABLED is False: none of these limits is enforced." in html
    assert ["/items", "GET", "items", "1/1m", "fixed-window", "items", "ip, user"] in tables(html)["limits-table"]
    html = page(client, "?identity=user:alice", status=400)
    assert "rate limiting is disabled on this app (RATELIMIT_ENABLED is False)" in html


def test_an_unreachable_log_answers_503_with_the_reason(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    state = shop(app)

    def broken(*args: object, **kwargs: object) -> None:
        raise redis.ConnectionError("gone")

    assert state.refusals is not None
    monkeypatch.setattr(state.refusals, "recent", broken)
    html = page(app.test_client(), status=503)
    assert "rate limit storage unavailable: gone" in html
    assert "limits-table" in html  # what needs no Redis is still shown


# the reset


def test_the_reset_button_deletes_the_counters(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    refuse_alice(client)
    html = page(client, "?identity=user:alice")
    response = client.post(
        f"{PREFIX}/reset",
        data={"csrf_token": token(html), "identity": "user:alice", "view": ""},
        headers={"X-User": "admin"},
    )
    assert response.status_code == 302
    assert response.location == f"{PREFIX}/?identity=user:alice#lookup"
    html = page(client, "?identity=user:alice")
    assert "Deleted 1 counter key of user:alice in every scope." in html
    assert tables(html)["status"][1][4:6] == ["0", "1"]
    assert get(client, "/items", ip="192.0.2.3", user="alice").status_code == 200


def test_a_reset_of_one_endpoint(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    refuse_alice(client)
    html = page(client, "?identity=ip:192.0.2.1&view=items")
    response = client.post(
        f"{PREFIX}/reset",
        data={"csrf_token": token(html), "identity": "ip:192.0.2.1", "view": "items"},
        headers={"X-User": "admin"},
    )
    assert response.location == f"{PREFIX}/?identity=ip:192.0.2.1&view=items#lookup"
    assert "Deleted 1 counter key of ip:192.0.2.1 in scope &#39;items&#39;." in page(client)


@pytest.mark.parametrize("sent", [None, "", "forged", "a" * 43])
def test_a_reset_without_this_sessions_token_is_refused(app: Flask, sent: str | None) -> None:
    shop(app)
    client = app.test_client()
    refuse_alice(client)
    page(client)  # the session has a token now
    data = {"identity": "user:alice"} | ({} if sent is None else {"csrf_token": sent})
    response = client.post(f"{PREFIX}/reset", data=data, headers={"X-User": "admin"})
    assert response.status_code == 400
    assert "token is missing or stale" in response.text
    assert get(client, "/items", ip="192.0.2.3", user="alice").status_code == 429  # nothing was reset


def test_another_sessions_token_is_refused(app: Flask) -> None:
    shop(app)
    theirs, ours = app.test_client(), app.test_client()
    refuse_alice(ours)
    stolen = token(page(theirs, "?identity=user:alice"))
    page(ours)
    response = ours.post(
        f"{PREFIX}/reset", data={"csrf_token": stolen, "identity": "user:alice"}, headers={"X-User": "admin"}
    )
    assert response.status_code == 400


def test_a_reset_is_a_post(app: Flask) -> None:
    shop(app)
    assert get(app.test_client(), f"{PREFIX}/reset?identity=user:alice", user="admin").status_code == 405


def test_without_a_secret_key_there_is_no_reset_form(app: Flask) -> None:
    app.config["SECRET_KEY"] = None
    shop(app)
    client = app.test_client()
    html = page(client, "?identity=user:alice")
    assert "csrf_token" not in html
    assert "Set the app's SECRET_KEY to reset counters here" in html
    response = client.post(f"{PREFIX}/reset", data={"identity": "user:alice"}, headers={"X-User": "admin"})
    assert response.status_code == 400


def test_a_bad_identity_to_reset_is_refused_with_the_reason(app: Flask) -> None:
    shop(app)
    client = app.test_client()
    html = page(client)
    response = client.post(
        f"{PREFIX}/reset",
        data={"csrf_token": token_of(client, html), "identity": "nobody"},
        headers={"X-User": "admin"},
    )
    assert response.status_code == 400
    assert "nobody" in response.text
    response = client.post(
        f"{PREFIX}/reset", data={"csrf_token": token_of(client, html), "identity": " "}, headers={"X-User": "admin"}
    )
    assert response.status_code == 400
    assert "no identity to reset" in response.text


def token_of(client: Any, html: str) -> str:
    """The session's token, from a lookup page (the index has no form without one)."""
    return token(page(client, "?identity=ip:192.0.2.1"))


@pytest.mark.redis
def test_a_dead_redis_answers_503_and_the_page_still_shows_the_limits() -> None:
    with testing.redis_server() as server:
        app = Flask("dead")
        app.config.update(SECRET_KEY="test", RATELIMIT_STORAGE_URL=server.url)
        state = shop(app)
        client = app.test_client()
        refuse_alice(client)
        form = token(page(client, "?identity=user:alice"))
        server.stop()
        try:
            started = time.monotonic()
            html = page(client, "?identity=user:alice", status=503)
            assert "rate limit storage unavailable" in html
            assert ["/items", "GET", "items", "1/1m", "fixed-window", "items", "ip, user"] in tables(html)[
                "limits-table"
            ]
            response = client.post(
                f"{PREFIX}/reset", data={"csrf_token": form, "identity": "user:alice"}, headers={"X-User": "admin"}
            )
            assert response.status_code == 503
            assert "rate limit storage unavailable" in response.text
            assert time.monotonic() - started < 10  # refused connections, not timeouts
        finally:
            assert state.throttle is not None
            state.throttle.storage.close()


# links from the refusal log name the identity exactly


def hostile_shop(app: Flask) -> RateLimitState:
    """:func:`shop`, with users logged in by ``?as=<id>`` too, so that a
    user id may hold anything a URL can carry; and ``/keyed?k=<n>``,
    limited 1/m per :data:`ODD_KEYS` item."""
    manager = LoginManager(app)

    @manager.request_loader
    def load(req: Any) -> User | None:
        name = request.args.get("as") or request.headers.get("X-User")
        return User(name) if name else None

    @app.get("/items")
    @limit("1/m")
    def items() -> str:
        return "ok"

    @app.get("/keyed")
    @limit("1/m", identities=[odd_key])
    def keyed() -> str:
        return "ok"

    app.register_blueprint(dashboard.blueprint(authorize=admin_only), url_prefix=PREFIX)
    return install(app, RATELIMIT_BLOCK_CACHE_SIZE=0)


#: Values no URL can carry: lone surrogates, as a key function decoding
#: bytes with ``surrogateescape`` returns them.
ODD_KEYS = ["a\udcff\nb", "\ud800" * 100 + " "]


def odd_key(req: Any) -> str:
    return ODD_KEYS[int(req.args["k"])]


HOSTILE_USERS = [
    "mallory\nadmin",
    "\u202eevil",
    "  spaced  ",
    "\r\n",
    "é" * (MAX_VALUE_LENGTH - 5),  # as long as the log keeps, once with its "user:"
]


def links(html: str, table: str) -> list[str | None]:
    """The href of each row's "Refused by" link in ``table``; None for a row without one."""
    body = html.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
    rows = body.split("<tr>")[2:]
    found = [re.search(r'<a href="([^"]+)"', row) for row in rows]
    return [markup.unescape(link.group(1)) if link else None for link in found]


def reset_form(html: str) -> dict[str, str]:
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', html)
    return {name: markup.unescape(value) for name, value in fields}


def follow_and_reset(client: Any, link: str) -> str:
    """Follow a dashboard link, check that the lookup shows the refusing
    counter in use, press reset; the page it leads back to."""
    response = client.get(link, headers={"X-User": "admin"})
    assert response.status_code == 200, response.text
    [row] = tables(response.text)["status"][1:]
    assert row[4:6] == ["1", "0"], row  # used 1: the real counter
    response = client.post(f"{PREFIX}/reset", data=reset_form(response.text), headers={"X-User": "admin"})
    assert response.status_code == 302, response.text
    assert response.location == link
    after = client.get(link, headers={"X-User": "admin"})
    assert "Deleted 1 counter key of " in after.text
    return str(after.text)


@pytest.mark.parametrize("user", HOSTILE_USERS, ids=["newline", "rlo", "spaces", "crlf", "longest-kept"])
def test_a_link_from_the_log_looks_up_and_resets_the_user_exactly(app: Flask, user: str) -> None:
    hostile_shop(app)
    client = app.test_client()
    assert get(client, "/items", ip="192.0.2.1", query_string={"as": user}).status_code == 200
    assert get(client, "/items", ip="192.0.2.2", query_string={"as": user}).status_code == 429
    html = page(client)
    [link] = links(html, "top-table")
    assert links(html, "recent-table") == [link]
    if not user.isprintable():
        assert user not in html  # shown escaped
    follow_and_reset(client, link)
    assert get(client, "/items", ip="192.0.2.3", query_string={"as": user}).status_code == 200


@pytest.mark.parametrize(
    ("address", "plain"),
    [("{}:::garbage", False), ("1.2.3.4%eth0", False), ("2001:db8::1", True), ("198.51.100.7", True)],
)
def test_a_link_names_an_ip_exactly_even_if_it_is_no_address(app: Flask, address: str, plain: bool) -> None:
    # What a misconfigured proxy passes on is counted as it is: the link
    # must not read it as an address, which it is not.
    hostile_shop(app)
    client = app.test_client()
    assert [get(client, "/items", ip=address).status_code for _ in range(2)] == [200, 429]
    html = page(client)
    [link] = links(html, "recent-table")
    assert ("?identity=ip:" in link) is plain
    follow_and_reset(client, link)
    assert get(client, "/items", ip=address).status_code == 200


@pytest.mark.parametrize("k", range(len(ODD_KEYS)))
def test_a_link_names_lone_surrogates_exactly(app: Flask, k: int) -> None:
    hostile_shop(app)
    client = app.test_client()
    assert [get(client, "/keyed", query_string={"k": k}).status_code for _ in range(2)] == [200, 429]
    html = page(client)
    [link] = links(html, "recent-table")
    assert "exact=" in link
    follow_and_reset(client, link)
    assert get(client, "/keyed", query_string={"k": k}).status_code == 200


def test_a_value_the_log_cut_is_shown_cut_without_a_link(app: Flask) -> None:
    hostile_shop(app)
    client = app.test_client()
    user = "x" * (MAX_VALUE_LENGTH + 50)
    assert get(client, "/items", ip="192.0.2.1", query_string={"as": user}).status_code == 200
    assert get(client, "/items", ip="192.0.2.2", query_string={"as": user}).status_code == 429
    html = page(client)
    assert links(html, "top-table") == links(html, "recent-table") == [None]
    note = f"(cut by the log, which keeps {MAX_VALUE_LENGTH} characters: look it up by its whole value)"
    assert tables(html)["top-table"][1][0] == f"user:{user[: MAX_VALUE_LENGTH - 6]}… {note}"
    assert html.count(note) == 2
    # Its whole value finds it.
    whole = page(client, f"?identity=user:{user}")
    assert tables(whole)["status"][1][4:6] == ["1", "0"]


def test_a_value_the_log_kept_whole_is_shown_whole_and_escaped(app: Flask) -> None:
    hostile_shop(app)
    client = app.test_client()
    user = "\n" * (MAX_VALUE_LENGTH - len("user:"))  # kept whole; twice as long escaped
    for status in (200, 429):  # the second is refused by its IP, the user present
        assert get(client, "/items", ip="192.0.2.1", query_string={"as": user}).status_code == status
    found = tables(page(client))
    shown = "user:" + "\\n" * len(user)
    assert found["top-table"][1] == ["ip:192.0.2.1", "1", f"{shown} (1)"]
    assert found["recent-table"][1][5] == shown


def test_a_forged_exact_link_says_why(app: Flask) -> None:
    hostile_shop(app)
    html = page(app.test_client(), "?exact=%2F%2F%2F%2F", status=400)
    assert "names no identity" in html


# the near-limit log


def near_shop(app: Flask) -> RateLimitState:
    """:func:`hostile_shop`, and ``/reports``, 5/m per user, which the
    fourth request in a minute takes past ``RATELIMIT_NEAR_LIMIT``."""

    @app.get("/reports")
    @limit("5/m", identities=["user"])
    def reports() -> str:
        return "ok"

    return hostile_shop(app)


def come_near(client: Any, user: str, times: int = 4) -> None:
    """``times`` requests of ``user`` to ``/reports``, each response closed,
    as a server closes it once sent: the near-limit entry is written then."""
    for _ in range(times):
        response = get(client, "/reports", query_string={"as": user})
        assert response.status_code == 200
        response.close()


def test_it_lists_who_came_near_the_limit(app: Flask) -> None:
    near_shop(app)
    client = app.test_client()
    come_near(client, "alice", times=3)  # 3 of 5: not yet
    html = page(client)
    assert "near-table" not in html
    assert "No identity came near its limit." in html
    come_near(client, "alice", times=1)  # 4 of 5: 80 %
    html = page(client)
    [entry] = tables(html)["near-table"][1:]
    assert entry[1:] == ["reports", "reports", "5/1m", "user:alice", ""]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", entry[0])
    assert links(html, "near-table") == [f"{PREFIX}/?identity=user:alice#lookup"]
    # Behind the same authorize as the rest of the page.
    hidden = get(client, f"{PREFIX}/", user="alice")
    assert hidden.status_code == 404
    assert "user:alice" not in hidden.text


@pytest.mark.parametrize("user", HOSTILE_USERS, ids=["newline", "rlo", "spaces", "crlf", "longest-kept"])
def test_a_near_limit_link_is_escaped_and_opens_the_exact_identity(app: Flask, user: str) -> None:
    near_shop(app)
    client = app.test_client()
    come_near(client, user)
    html = page(client)
    [entry] = tables(html)["near-table"][1:]
    shown = "".join(char if char.isprintable() else repr(char)[1:-1] for char in f"user:{user}")
    assert entry[4] == " ".join(shown.split())  # as tables() reads a cell
    if not user.isprintable():
        assert user not in html
    [link] = links(html, "near-table")
    assert link is not None
    lookup = client.get(link, headers={"X-User": "admin"})
    assert lookup.status_code == 200, lookup.text
    # The link names the user exactly: its own counter, 4 of 5 used.
    assert [row[4:6] for row in tables(lookup.text)["status"][1:] if row[0] == "reports"] == [["4", "1"]]


def test_a_near_limit_identity_the_log_cut_is_shown_escaped_without_a_link(app: Flask) -> None:
    near_shop(app)
    client = app.test_client()
    user = "\u202e" + "x" * MAX_VALUE_LENGTH + "\n"
    come_near(client, user)
    html = page(client)
    assert "\u202e" not in html
    assert links(html, "near-table") == [None]
    note = f"(cut by the log, which keeps {MAX_VALUE_LENGTH} characters: look it up by its whole value)"
    cut = f"user:\\u202e{'x' * (MAX_VALUE_LENGTH - 7)}…"
    assert tables(html)["near-table"][1][4] == f"{cut} {note}"


def test_without_a_near_limit_log_the_page_says_so(app: Flask) -> None:
    shop(app, RATELIMIT_NEAR_LIMIT=None)
    html = page(app.test_client())
    assert "This app keeps no near-limit log (RATELIMIT_NEAR_LIMIT is None)." in html
