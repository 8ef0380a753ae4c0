"""Keys: hostile identities cannot break a key, share one, or pick a slot."""

from __future__ import annotations

import re

import pytest
from flask import Flask, Request
from helpers import add_login, install
from redis.crc import key_slot

from flask_redis_throttle import limit
from flask_redis_throttle.core.engine.keys import Identity, escape_scope, identity_tag

HOSTILE = [
    "",
    ":",
    "a:b",
    "{}",
    "{evil}",
    "}{",
    "x}:{y",
    "line\nbreak",
    "nul\0byte",
    "\r\n*1\r\n$8\r\nFLUSHALL\r\n",
    "é\u202eü\U0001f600",
    "\ud800",  # a lone surrogate, which strict UTF-8 cannot encode
    "a" * 100_000,
    "%7B",
]
TAG = re.compile(r"(ip|user|key):[A-Za-z0-9_-]{22}")
KEY = re.compile(rb"rl:\{(ip|user):[A-Za-z0-9_-]{22}\}:[A-Za-z0-9._/@+%-]+:fw")


@pytest.mark.parametrize("value", HOSTILE)
def test_tags_are_short_and_safe(value: str) -> None:
    assert TAG.fullmatch(identity_tag("user", value))


@pytest.mark.parametrize(
    "identity",
    [
        Identity("ip", "2001:db8::/64"),
        Identity("user", "a:b"),
        Identity("key:app.limits.api_key", "k:1:{x}"),
        Identity("key:api_key", ""),
        Identity("ip", ""),
    ],
)
def test_an_identity_reads_back_as_str_writes_it(identity: Identity) -> None:
    """What overrides keep, ``str(identity)``, splits into the kind and value
    requests have, a key function's colon-free name and all."""
    assert Identity.written(str(identity)) == identity


def test_tags_are_distinct() -> None:
    tags = {identity_tag("user", value) for value in HOSTILE}
    assert len(tags) == len(HOSTILE)
    assert identity_tag("ip", "5") != identity_tag("user", "5")
    assert identity_tag("key:a", "5") != identity_tag("key:b", "5")


def test_a_secret_keys_the_digest() -> None:
    plain = identity_tag("ip", "2001:db8:1::/64")
    keyed = identity_tag("ip", "2001:db8:1::/64", b"s3cret")
    assert TAG.fullmatch(keyed)
    assert keyed != plain
    assert keyed != identity_tag("ip", "2001:db8:1::/64", b"other")
    assert keyed == identity_tag("ip", "2001:db8:1::/64", b"s3cret")


def test_the_secret_setting_reaches_the_keys(app: Flask, statuses) -> None:
    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    secret = "a secret of at least thirty-two bytes"
    state = install(app, RATELIMIT_KEY_SECRET=secret)
    assert statuses(app.test_client(), 2, "/") == [200, 429]
    [key] = state.throttle.storage.client.scan_iter(match="*{*")  # the counter, not the refusal log
    assert identity_tag("ip", "192.0.2.1", secret.encode()).encode() in key


def test_scopes_escape_without_collisions() -> None:
    scopes = ["api", "api:1s", "api%3A1s", "a b", "a\nb", "{x}", "é", "bp.view"]
    escaped = [escape_scope(scope) for scope in scopes]
    assert len(set(escaped)) == len(scopes)
    assert escaped[0] == "api"
    assert escaped[-1] == "bp.view"
    for text in escaped:
        assert re.fullmatch(r"[A-Za-z0-9._/@+%-]+", text)


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_hostile_users_each_get_their_own_safe_keys_in_one_slot(app: Flask, statuses) -> None:
    add_login(app)

    @app.get("/")
    @limit("2/m;5/h", scope="odd {scope}:\n", identities=["user"])
    def index() -> str:
        return "ok"

    state = install(app)
    client = app.test_client()
    # HTTP headers cannot carry these; the key function test below covers them.
    for user in [u for u in HOSTILE if u.isprintable() and u and len(u) < 5000]:
        assert statuses(client, 3, "/", user=user) == [200, 200, 429], user
    keys = state.throttle.storage.client.keys("*{*")
    assert keys
    for key in keys:
        assert KEY.fullmatch(key), key
        tag = key[key.index(b"{") + 1 : key.index(b"}")]
        assert key_slot(key) == key_slot(tag)


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_any_key_function_value_is_safe(app: Flask) -> None:
    def hostile(req: Request) -> str:
        return HOSTILE[int(req.args["i"])]

    @app.get("/")
    @limit("1/m", identities=[hostile])
    def index() -> str:
        return "ok"

    state = install(app)
    client = app.test_client()
    for i in range(len(HOSTILE)):
        assert client.get("/", query_string={"i": i}).status_code == 200
        assert client.get("/", query_string={"i": i}).status_code == 429
    keys = state.throttle.storage.client.keys("*{*")
    assert len(keys) == len(HOSTILE)
    for key in keys:
        assert re.fullmatch(rb"rl:\{key:[A-Za-z0-9_-]{22}\}:index:fw", key), key
