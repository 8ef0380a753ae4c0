"""RateLimit.reset(): the CLI's reset, from Python."""

from __future__ import annotations

import pytest
from flask import Flask
from helpers import add_login, get, install

from flask_redis_throttle import Identity, RateLimit, limit
from flask_redis_throttle.core.engine.throttle import StorageUnavailable
from flask_redis_throttle.testing import free_port


def limited(app: Flask) -> None:
    @app.post("/login")
    @limit("2/m", identities=["ip"], scope="login", penalty="1h")
    def login() -> str:
        return "ok"

    @app.get("/items")
    @limit("1/m;10/h")
    def items() -> str:
        return "ok"


def login(client, ip: str = "192.0.2.1") -> int:  # type: ignore[no-untyped-def]
    return int(client.post("/login", environ_base={"REMOTE_ADDR": ip}).status_code)


def test_reset_an_identity_in_every_scope(app: Flask) -> None:
    limited(app)
    install(app, RATELIMIT_BLOCK_CACHE_SIZE=1000)
    ratelimit = RateLimit()  # any instance will do: the state is the app's
    client = app.test_client()
    assert [login(client) for _ in range(3)] == [200, 200, 429]  # refused, and now blocked for an hour
    assert [login(client, "192.0.2.2") for _ in range(3)] == [200, 200, 429]
    get(client, "/items")
    with app.app_context():
        # login's counter and penalty, and items' counter (both its layers).
        assert ratelimit.reset("ip:192.0.2.1") == 3
        assert ratelimit.reset("ip:192.0.2.1") == 0
    # This process's block cache is cleared too: admitted at once.
    assert login(client) == 200
    assert get(client, "/items").status_code == 200
    assert login(client, "192.0.2.2") == 429  # the other identity is untouched


def test_reset_one_scope(app: Flask) -> None:
    limited(app)
    install(app)
    client = app.test_client()
    ratelimit = RateLimit()
    assert [login(client) for _ in range(3)] == [200, 200, 429]
    assert [get(client, "/items").status_code for _ in range(2)] == [200, 429]
    assert ratelimit.reset(Identity("ip", "192.0.2.1"), scope="login", app=app) == 2
    assert login(client) == 200
    assert get(client, "/items").status_code == 429


def test_reset_every_identity_in_every_scope_or_one(app: Flask) -> None:
    limited(app)
    other = Flask("other")  # another app on the same storage, with a prefix of its own
    other.config.update(RATELIMIT_STORAGE_URL=app.config["RATELIMIT_STORAGE_URL"], RATELIMIT_KEY_PREFIX="rl:other:")
    other.add_url_rule("/items", "items", limit("1/m")(lambda: "ok"))
    install(app)
    install(other)
    client, others = app.test_client(), other.test_client()
    assert [get(others, "/items").status_code for _ in range(2)] == [200, 429]
    for ip in ("192.0.2.1", "192.0.2.2"):
        assert [login(client, ip) for _ in range(3)] == [200, 200, 429]
        assert [get(client, "/items", ip=ip).status_code for _ in range(2)] == [200, 429]
    ratelimit = RateLimit()
    # Both identities' login counters and penalties, and nothing else.
    assert ratelimit.reset(scope="login", app=app) == 4
    assert login(client) == 200
    assert get(client, "/items").status_code == 429
    assert ratelimit.reset(app=app) == 3  # the rest: a key per identity for items, and the new login count
    assert [get(client, "/items", ip=ip).status_code for ip in ("192.0.2.1", "192.0.2.2")] == [200, 200]
    assert get(others, "/items").status_code == 429  # the other app's prefix is untouched
    assert app.extensions["ratelimit"].refusals.top(10)  # and the refusal log is kept


def test_reset_of_every_counter_keeps_the_overrides_and_their_log(app: Flask) -> None:
    """The overrides' log lives under the prefix too, as ``{overrides}:log``:
    a reset of every identity's counters matched it as one and deleted who
    set which override when, while the overrides themselves stayed."""
    limited(app)
    install(app)
    ratelimit = RateLimit()
    ratelimit.block("ip:192.0.2.9", duration="1h", by="ops", app=app)
    assert get(app.test_client(), "/items").status_code == 200
    assert ratelimit.reset(app=app) == 1  # the one counter of /items
    assert [change.by for change in ratelimit.override_changes(app=app)] == ["ops"]
    assert [o.describe() for o in ratelimit.overrides(app=app)] == ["ip:192.0.2.9 blocked on every scope"]


def test_reset_a_user_and_an_ipv6_network(app: Flask) -> None:
    add_login(app)
    limited(app)
    install(app)
    client = app.test_client()
    ratelimit = RateLimit()
    assert [get(client, "/items", ip="2001:db8::1", user="42").status_code for _ in range(2)] == [200, 429]
    assert ratelimit.reset("user:42", app=app) == 1  # one key holds both layers
    assert get(client, "/items", ip="2001:db8::2", user="42").status_code == 429  # the /64 still counts
    assert ratelimit.reset("ip:[2001:db8::99]:443", app=app) == 1  # grouped as requests are
    assert get(client, "/items", ip="2001:db8::1", user="42").status_code == 200


def test_reset_refuses_what_it_cannot_do(app: Flask) -> None:
    limited(app)
    ratelimit = RateLimit()
    with pytest.raises(RuntimeError, match="not set up"):
        ratelimit.reset("ip:192.0.2.1", app=app)
    install(app)
    with pytest.raises(ValueError, match=r"'192\.0\.2\.1' has no kind"):
        ratelimit.reset("192.0.2.1", app=app)
    with pytest.raises(ValueError, match="'nope' is not an IP address"):
        ratelimit.reset("ip:nope", app=app)
    with pytest.raises(ValueError, match="scope '' must be a non-empty string"):
        ratelimit.reset("ip:192.0.2.1", scope="", app=app)
    disabled = Flask("disabled")
    install(disabled, RATELIMIT_ENABLED=False)
    with pytest.raises(RuntimeError, match="RATELIMIT_ENABLED is False"):
        ratelimit.reset("ip:192.0.2.1", app=disabled)


def test_reset_while_redis_is_down_raises_storage_unavailable() -> None:
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=f"redis://127.0.0.1:{free_port()}/0")
    install(app)
    with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1"):
        RateLimit().reset("ip:192.0.2.1", app=app)
