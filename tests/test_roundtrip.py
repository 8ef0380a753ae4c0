"""One request, one command, one round trip; and exact counts under threads."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import redis
from flask import Flask
from helpers import Clock, add_login, get, install, join_all

from flask_redis_throttle import limit

pytestmark = pytest.mark.redis

# The commands each strategy's script runs inside itself for one admitted
# request of 2 identities x 3 layers: one key per identity, read once and
# written once whatever its layers. The sliding log counts each layer, and
# adds the new entry with ZADD NX, which says that its number was free: an
# instant no entry was stamped at yet costs no count of the entries there.
PACKED = Counter({"get": 2, "set": 2})
SCRIPT_INNER = {
    "fixed-window": PACKED,
    "sliding-window": PACKED,
    "sliding-log": Counter({"zcount": 6, "zscore": 2, "zremrangebyscore": 2, "zadd": 2, "pexpire": 2}),
    "gcra": PACKED,
}


def commandstats(client: redis.Redis) -> Counter[str]:
    return Counter({name: stats["calls"] for name, stats in client.info("commandstats").items()})


@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
@pytest.mark.parametrize("strategy", SCRIPT_INNER)
def test_one_request_is_one_command_in_one_round_trip(
    app: Flask, redis_client: redis.Redis, monkeypatch, strategy: str, clock: Clock
) -> None:
    add_login(app)

    @app.get("/")
    @limit("100/s;1000/m;10000/h")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_STRATEGY=strategy)
    client = app.test_client()
    # The very first call also loads the script (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA).
    assert get(client, user="alice").status_code == 200

    sends: list[bytes] = []
    original = redis.connection.Connection.send_packed_command

    def spy(self, command, check_health=True):  # type: ignore[no-untyped-def]
        sends.append(b"".join(command) if isinstance(command, list) else command)
        return original(self, command, check_health)

    before = commandstats(redis_client)
    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", spy)
    for _ in range(10):
        clock.advance(0.001)  # each request at an instant of its own, as on Redis's clock
        response = get(client, user="alice")
        assert response.status_code == 200
    monkeypatch.undo()
    after = commandstats(redis_client)

    # Client side: ten requests, ten sends, each a single EVALSHA with two keys.
    assert len(sends) == 10
    assert all(b"EVALSHA" in sent and sent.count(b"rl:{") == 2 for sent in sends)
    # Server side: ten EVALSHA; everything else counted ran inside them (and
    # the INFO that took the first snapshot, and TIME).
    delta = after - before
    assert delta["cmdstat_evalsha"] == 10
    inner = Counter({name: delta[f"cmdstat_{name}"] for name in SCRIPT_INNER[strategy]})
    assert inner == Counter({name: 10 * calls for name, calls in SCRIPT_INNER[strategy].items()})
    assert set(delta) - {f"cmdstat_{name}" for name in {*inner, "time", "evalsha", "info"}} == set()


@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_a_shaped_request_reads_each_key_once(app: Flask, redis_client: redis.Redis) -> None:
    """The wait of a limit with a delay is worked out from the keys' values,
    before the layers are decided from the same values: each key is read
    once for both (see lua/shaping.lua), as an unshaped request reads it."""
    add_login(app)

    @app.get("/")
    @limit("100000/s;1000000/m;10000000/h", delay="250ms")  # a turn every 0.36 ms at most
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_STRATEGY="gcra")
    client = app.test_client()
    assert get(client, user="alice").status_code == 200  # loads the script
    before = commandstats(redis_client)
    for _ in range(10):
        assert get(client, user="alice").status_code == 200
    delta = commandstats(redis_client) - before
    assert delta["cmdstat_evalsha"] == 10
    assert Counter({name: delta[f"cmdstat_{name}"] for name in PACKED}) == Counter({"get": 20, "set": 20})


@pytest.mark.parametrize("storage_url", ["memory", "redis"], indirect=True)
@pytest.mark.parametrize("strategy", SCRIPT_INNER)
def test_threads_hammering_one_identity_get_exactly_the_quota(app: Flask, storage_url: str, strategy: str) -> None:
    @app.get("/")
    @limit("50/d;1000/h")
    def index() -> str:
        return "ok"

    install(app, RATELIMIT_STRATEGY=strategy)

    results: Counter[int] = Counter()
    lock = threading.Lock()

    def hammer() -> None:
        client = app.test_client()
        for _ in range(25):
            status = get(client).status_code
            with lock:
                results[status] += 1

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    join_all(threads, deadline=30, what="8 threads sending 25 requests each")
    assert results == {200: 50, 429: 150}
