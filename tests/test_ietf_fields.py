"""The IETF fields at draft-11: quota units, partition keys, the
``quota-exceeded`` problem type, and the draft-10 form kept by a setting."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import pytest
from flask import Flask, request
from helpers import Clock, flask_command, get, install

from flask_redis_throttle import ConfigurationError, InvalidLimit, RateLimit, limit
from flask_redis_throttle._request.headers import DRAFTS, LayerNames
from flask_redis_throttle.core.engine.rates import parse_limits
from flask_redis_throttle.core.engine.throttle import Policy

JSON = {"Accept": "application/json"}
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
#: An SF Byte Sequence: base64 between colons.
BYTE_SEQUENCE = re.compile(r":([A-Za-z0-9+/=]*):")
#: A RATELIMIT_KEY_SECRET as long as one must be: 32 bytes.
SECRET = "0123456789abcdef0123456789abcdef"


def uploads(app: Flask, **config: object) -> None:
    """``/upload``, limited to 2 requests a minute and 100 bytes of body a
    minute, each request costing its body's length."""

    @app.post("/upload")
    @limit("2/m")
    @limit("100/m", scope="upload-bytes", cost=lambda req: len(req.get_data()), unit="content-bytes")
    def upload() -> str:
        return "stored"

    install(app, **config)


def test_the_policy_says_the_unit_of_a_limit_that_does_not_count_requests(app: Flask) -> None:
    uploads(app)
    response = app.test_client().post("/upload", data=b"x" * 30)
    assert response.status_code == 200
    # The layer in requests says no unit: it is the draft's default.
    assert response.headers["RateLimit-Policy"] == '"1m";q=2;w=60, "1m-2";q=100;qu="content-bytes";w=60'


def test_a_dynamic_limit_has_its_unit_too(app: Flask) -> None:
    @app.post("/upload")
    @limit(lambda req: req.headers.get("X-Plan", "50/m"), cost=lambda req: len(req.get_data()), unit="content-bytes")
    def upload() -> str:
        return "stored"

    install(app)
    response = app.test_client().post("/upload", data=b"x" * 10, headers={"X-Plan": "500/h"})
    assert response.headers["RateLimit-Policy"] == '"1h";q=500;qu="content-bytes";w=3600'
    assert response.headers["RateLimit"] == '"1h";r=490;t=3600'


def test_a_block_limit_keeps_the_unit_of_the_view_s(app: Flask) -> None:
    # The names are made again with the block's layers: the view's layer
    # in bytes lost its qu there.
    @app.post("/upload")
    @limit("100/m", cost=lambda req: len(req.get_data()), unit="content-bytes")
    def upload() -> str:
        with limit("5/m", scope="inner"):
            return "stored"

    install(app)
    response = app.test_client().post("/upload", data=b"x" * 30)
    assert response.headers["RateLimit-Policy"] == '"1m";q=100;qu="content-bytes";w=60, "1m-2";q=5;w=60'


def test_an_override_keeps_the_unit_of_the_limit_it_stands_for(app: Flask) -> None:
    # The names are made again with the override's layers: they lost the
    # limit's qu there.
    uploads(app)
    out = flask_command(app, "ratelimit", "override", "ip:192.0.2.9", "500/h", "--scope", "upload-bytes", "--for", "1h")
    assert out.exit_code == 0, out.output
    client = app.test_client()
    response = client.post("/upload", data=b"x" * 30, environ_base={"REMOTE_ADDR": "192.0.2.9"})
    assert response.status_code == 200
    assert response.headers["RateLimit-Policy"] == '"1m";q=2;w=60, "1h";q=500;qu="content-bytes";w=3600'


def test_a_concurrency_cap_keeps_its_unit_in_draft_10(app: Flask) -> None:
    @app.get("/")
    @limit("5/m", concurrent=3, unit="content-bytes", cost=1)
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_HEADERS_DRAFT=10)
    response = get(app.test_client())
    assert response.headers["RateLimit-Policy"] == '"1m";q=5;w=60, "conc";q=3;qu="concurrent-requests"'


def test_a_bad_unit_is_refused_when_the_limit_is_written() -> None:
    for unit in ("bytes", "concurrent-requests", None, 1):
        with pytest.raises(InvalidLimit, match="unit"):
            limit("1/s", unit=unit)  # type: ignore[arg-type]


def test_a_json_refusal_is_of_the_quota_exceeded_type(app: Flask, clock: Clock) -> None:
    uploads(app)
    clock.set(0.5)
    client = app.test_client()
    assert client.post("/upload", data=b"x" * 60).status_code == 200
    refused = client.post("/upload", data=b"x" * 60, headers=JSON)
    assert refused.status_code == 429
    assert refused.mimetype == "application/problem+json"
    # The bytes layer refused it: it is named as RateLimit-Policy names it.
    assert json.loads(refused.text) == {
        "type": QUOTA_EXCEEDED,
        "title": "Quota Exceeded",
        "status": 429,
        "detail": "Rate limit exceeded: 100 per 1 minute. Try again in 60 seconds.",
        "violated-policies": ["1m-2"],
        "retry_after": 60,
    }
    assert refused.headers["RateLimit"] == '"1m-2";r=40;t=60'
    # Another client, over the layer in requests.
    other = {"REMOTE_ADDR": "192.0.2.9"}
    for _ in range(2):
        assert client.post("/upload", data=b"x", environ_base=other).status_code == 200
    refused = client.post("/upload", data=b"x", headers=JSON, environ_base=other)
    assert json.loads(refused.text)["violated-policies"] == ["1m"]


def draft_11_as_10(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make draft 11's record the same as draft 10's: what the responses
    and the settings make of a draft is read from its record alone."""
    monkeypatch.setitem(DRAFTS, 11, replace(DRAFTS[10], number=11))


@pytest.mark.parametrize("draft", [10, 11], ids=["draft-10", "draft-11-recorded-as-10"])
def test_draft_10_keeps_the_form_of_0_2(app: Flask, clock: Clock, draft: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if draft == 11:
        draft_11_as_10(monkeypatch)
    uploads(app, RATELIMIT_HEADERS_DRAFT=draft)
    clock.set(0.5)
    client = app.test_client()
    client.post("/upload")
    client.post("/upload")
    refused = client.post("/upload", headers=JSON)
    assert refused.status_code == 429
    assert refused.headers["RateLimit-Policy"] == '"1m";q=2;w=60, "1m-2";q=100;w=60'
    assert refused.headers["RateLimit"] == '"1m";r=0;t=60'
    assert json.loads(refused.text) == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "Rate limit exceeded: 2 per 1 minute. Try again in 60 seconds.",
        "retry_after": 60,
    }


def partitioned(app: Flask, secret: str = SECRET, **config: object) -> None:
    @app.get("/")
    @limit("5/m")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_KEY_SECRET=secret, RATELIMIT_HEADERS_PARTITION_KEY=True, **config)


def partition_of(response: object) -> bytes:
    """The ``pk`` of a response's ``RateLimit``, decoded."""
    value = response.headers["RateLimit"]  # type: ignore[attr-defined]
    head, _, pk = value.partition(";pk=")
    assert re.fullmatch(r'"1m";r=\d+;t=\d+', head), value
    match = BYTE_SEQUENCE.fullmatch(pk)
    assert match, value
    return base64.b64decode(match.group(1), validate=True)


def test_no_partition_key_by_default(app: Flask) -> None:
    @app.get("/")
    @limit("5/m")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_KEY_SECRET=SECRET)
    response = get(app.test_client())
    assert "pk=" not in response.headers["RateLimit"]
    assert "pk=" not in response.headers["RateLimit-Policy"]


def test_the_partition_key_is_a_keyed_digest_of_the_identity(app: Flask) -> None:
    partitioned(app)
    client = app.test_client()
    first, again = get(client, ip="192.0.2.1"), get(client, ip="192.0.2.1")
    other = get(client, ip="192.0.2.2")
    key = partition_of(first)
    assert len(key) == 12
    # Stable for one identity, so a client can tell its partitions apart...
    assert partition_of(again) == key
    # ...and different for another.
    assert partition_of(other) != key
    # It does not carry the address; and the policy has none.
    assert b"192.0.2.1" not in key
    assert "192.0.2.1" not in first.headers["RateLimit"]
    assert "pk=" not in first.headers["RateLimit-Policy"]


def test_the_partition_key_depends_on_the_secret(storage_url: str) -> None:
    keys = []
    for secret in (SECRET, "another secret, just as long and random"):
        app = Flask("tests")
        app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=storage_url, RATELIMIT_KEY_PREFIX=f"{len(keys)}:")
        partitioned(app, secret)
        keys.append(partition_of(get(app.test_client())))
    # Without the secret, trying every address finds nothing.
    assert keys[0] != keys[1]


def test_a_refusal_has_the_partition_key_too(app: Flask) -> None:
    partitioned(app)
    client = app.test_client()
    admitted = [get(client) for _ in range(5)]
    refused = get(client)
    assert refused.status_code == 429
    assert partition_of(refused) == partition_of(admitted[0])


@pytest.mark.parametrize(
    "config",
    [
        {"RATELIMIT_HEADERS_PARTITION_KEY": True},
        {"RATELIMIT_HEADERS_PARTITION_KEY": True, "RATELIMIT_KEY_SECRET": SECRET, "RATELIMIT_HEADERS_DRAFT": 10},
    ],
)
def test_a_partition_key_needs_a_secret_and_draft_11(config: dict[str, object]) -> None:
    refused_partition_key(config)


def test_a_partition_key_needs_a_draft_whose_record_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    draft_11_as_10(monkeypatch)
    refused_partition_key({"RATELIMIT_HEADERS_PARTITION_KEY": True, "RATELIMIT_KEY_SECRET": SECRET})


def refused_partition_key(config: dict[str, object]) -> None:
    """Check that ``config`` is refused at ``init_app``, naming the partition key and the secret."""
    app = Flask("tests")
    app.config.update(config)
    with pytest.raises(ConfigurationError, match="RATELIMIT_HEADERS_PARTITION_KEY") as raised:
        RateLimit(app)
    assert "RATELIMIT_KEY_SECRET" in str(raised.value)
    assert "ratelimit" not in app.extensions


@pytest.mark.parametrize(
    "secret", ["k9", "", b"\x00", SECRET[:-1], SECRET[:-1].encode(), "\N{LATIN SMALL LETTER E WITH ACUTE}" * 15]
)
def test_a_short_key_secret_is_refused_at_init_app(storage_url: str, secret: str | bytes) -> None:
    # With "k9", one pk of the attacker's own address was enough to find the
    # secret by brute force, and then a scan of a /16 named the victim's
    # address from its pk: a secret short enough to search is refused.
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=storage_url)
    with pytest.raises(ConfigurationError, match="RATELIMIT_KEY_SECRET") as raised:
        partitioned(app, secret)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "at least 32 bytes" in message
    assert "secrets.token_hex(32)" in message  # how to make one
    assert f"of {len(secret.encode() if isinstance(secret, str) else secret)} bytes" in message
    assert repr(secret) not in message  # the secret is never quoted
    assert "ratelimit" not in app.extensions


@pytest.mark.parametrize("secret", [42, bytearray(SECRET.encode()), memoryview(b"k9"), ["k9"]])
def test_a_key_secret_of_another_type_is_refused_unquoted(secret: object) -> None:
    app = Flask("tests")
    app.config.update(TESTING=True)
    with pytest.raises(ConfigurationError, match="RATELIMIT_KEY_SECRET") as raised:
        partitioned(app, secret)  # type: ignore[arg-type]
    message = str(raised.value)
    assert f"<a secret of type {type(secret).__name__}, not shown>" in message  # not "of a int"
    assert "k9" not in message
    assert "0123456789abcdef" not in message
    assert repr(secret) not in message  # the secret is never quoted
    assert "ratelimit" not in app.extensions


@pytest.mark.parametrize("secret", [SECRET, SECRET.encode(), "\N{LATIN SMALL LETTER E WITH ACUTE}" * 16])
def test_a_key_secret_of_32_bytes_is_enough(storage_url: str, secret: str | bytes) -> None:
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=storage_url)
    partitioned(app, secret)  # type: ignore[arg-type]
    assert len(partition_of(get(app.test_client()))) == 12


def test_a_refusal_the_app_handles_names_the_layers_too(app: Flask) -> None:
    @app.get("/")
    @limit("1/m")
    def index() -> str:
        return "ok"

    @app.errorhandler(429)
    def handled(error: object) -> tuple[dict[str, object], int]:
        return {"violated": list(error.violated_policies), "path": request.path}, 429  # type: ignore[attr-defined]

    install(app)
    client = app.test_client()
    get(client)
    assert get(client).get_json() == {"violated": ["1m"], "path": "/"}


def test_a_layer_of_a_policy_not_named_is_given_its_own_name() -> None:
    """A refusal by a policy the header names were not made for names the
    layer by its window, rather than failing in the middle of the 429."""
    named = Policy(parse_limits("5/m"), "named")
    other = Policy(parse_limits("3/h"), "other")
    labels = LayerNames.of([named])
    assert labels.name(named, named.layers[0]) == "1m"
    assert labels.name(other, other.layers[0]) == "1h"
