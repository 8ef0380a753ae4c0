"""The refusal log: who hit the limits, through a real app and directly."""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter

import pytest
import redis
import redis.cluster
from flask import Flask, Response, request
from helpers import Clock, add_login, get, install
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import RedisCluster

from flask_redis_throttle import RateLimitExceeded, RefusalLog, limit, refusal_log
from flask_redis_throttle.core.engine.keys import identity_tag
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.core.stores.refusals import CLUSTER_SHARDS, MAX_VALUE_LENGTH, Attribution


def limited(app: Flask, spec: str = "1/m", **options: object) -> None:
    @app.get("/items")
    @limit(spec, **options)  # type: ignore[arg-type]
    def items() -> str:
        return "ok"


def test_a_refusal_is_logged_with_everything_about_it(app: Flask) -> None:
    add_login(app)
    limited(app, "5/s;1/m", strategy="gcra", scope="catalogue")
    # Pinned, so that both identities' counters wait exactly as long even on
    # a cluster, where each node would read its own TIME a moment apart.
    install(app)
    client = app.test_client()
    before = time.time()
    assert get(client, "/items", user="alice").status_code == 200
    with app.app_context():
        assert refusal_log().recent() == []  # admitted requests leave no trace
    assert get(client, "/items", user="alice").status_code == 429
    with app.app_context():
        [refusal] = refusal_log().recent()
    assert refusal.endpoint == "items"
    assert refusal.scope == "catalogue"
    assert refusal.layer == "1/1m"
    assert refusal.strategy == "gcra"
    assert refusal.identity == "ip:192.0.2.1"  # the first counter with the longest wait
    assert refusal.identities == ("ip:192.0.2.1", "user:alice")
    assert 59 < refusal.retry_after <= 60
    assert before - 1 <= refusal.time <= time.time() + 1


def test_a_user_over_its_limit_does_not_make_its_ip_look_refused(app: Flask) -> None:
    add_login(app)
    limited(app)
    install(app)
    client = app.test_client()
    assert get(client, "/items", ip="192.0.2.1", user="alice").status_code == 200
    # From a new IP: only the user's counter is full.
    assert get(client, "/items", ip="192.0.2.2", user="alice").status_code == 429
    log = refusal_log(app)
    assert log.top() == [("user:alice", 1)]
    [refusal] = log.recent()
    assert refusal.identity == "user:alice"
    assert refusal.identities == ("ip:192.0.2.2", "user:alice")
    assert refusal.others == ("ip:192.0.2.2",)
    [found] = log.attributed()
    assert found == Attribution("user:alice", 1, (("ip:192.0.2.2", 1),))


def test_entries_written_before_attribution_are_read_the_same(storage: Storage) -> None:
    # The entry format has not changed: an entry as 0.2.0 wrote it reads
    # with its deciding identity apart from the others.
    log = RefusalLog(storage.client, "test:refusals")
    old = {
        "endpoint": "items",
        "scope": "items",
        "layer": "1/1m",
        "strategy": "fixed-window",
        "identity": "user:alice",
        "identities": '["ip:192.0.2.2", "user:alice"]',
        "retry_after": "59.000000",
    }
    storage.client.xadd("test:refusals", old)
    [refusal] = log.recent()
    assert (refusal.identity, refusal.others) == ("user:alice", ("ip:192.0.2.2",))
    assert log.top() == [("user:alice", 1)]


def test_refusals_per_minute_end_at_the_given_time(storage: Storage) -> None:
    log = RefusalLog(storage.client, "test:refusals")
    client = storage.client
    now = 1_800_000_000.0
    for seconds_ago in (4000, 3601, 3600, 3599, 61, 60.5, 59.9, 30, 0):  # oldest first, as XADD wants
        client.xadd(
            "test:refusals", {"identity": "ip:a", "identities": '["ip:a"]'}, id=f"{int((now - seconds_ago) * 1000)}-0"
        )
    counts = log.per_minute(now)
    assert len(counts) == 60
    # The last minute holds 0, 30 and 59.9 seconds ago; 60.5 and 61 fall in the one before;
    # 3599 and 3600 (the very start) in the first; older ones nowhere.
    assert counts[-1] == 3
    assert counts[-2] == 2
    assert counts[0] == 2
    assert sum(counts) == 7


def test_the_log_is_bounded_newest_first(app: Flask) -> None:
    limited(app)
    install(app, RATELIMIT_REFUSAL_LOG_SIZE=5)
    client = app.test_client()
    for i in range(12):
        get(client, "/items", ip=f"192.0.2.{i}")  # admitted
        get(client, "/items", ip=f"192.0.2.{i}")  # refused
    log = refusal_log(app)
    assert len(log.between()) == 5
    if len(log.keys) == 1:
        assert log.client.xlen(log.key) == 5  # one stream, trimmed exactly
    assert [r.identity for r in log.recent(3)] == ["ip:192.0.2.11", "ip:192.0.2.10", "ip:192.0.2.9"]


def test_top_identities(app: Flask) -> None:
    add_login(app)
    limited(app)
    install(app, RATELIMIT_BLOCK_CACHE_SIZE=0)  # so that every refusal asks Redis, and is logged
    client = app.test_client()
    for ip, user, times in [("192.0.2.1", None, 4), ("192.0.2.2", "bob", 3), ("192.0.2.3", None, 1)]:
        for _ in range(times + 1):
            get(client, "/items", ip=ip, user=user)
    log = refusal_log(app)
    # bob's counter and his IP's fill together; the IP's, checked first, refuses.
    assert log.top(3) == [("ip:192.0.2.1", 4), ("ip:192.0.2.2", 3), ("ip:192.0.2.3", 1)]
    assert log.top(1) == [("ip:192.0.2.1", 4)]
    assert log.top(since=time.time() + 60) == []


def test_time_ranges(storage: Storage) -> None:
    log = RefusalLog(storage.client, "test:refusals", size=10)
    fields = {"endpoint": "e", "scope": "s", "layer": "1/1s", "strategy": "gcra", "retry_after": 1.0}
    log.record(identity="ip:a", identities=["ip:a"], **fields)  # type: ignore[arg-type]
    time.sleep(0.01)
    log.record(identity="ip:b", identities=["ip:b", "user:b"], **fields)  # type: ignore[arg-type]
    first, second = reversed(log.recent())
    assert second.time > first.time
    assert [r.identity for r in log.recent(since=second.time)] == ["ip:b"]
    assert log.top(until=first.time) == [("ip:a", 1)]
    assert log.top(since=second.time) == [("ip:b", 1)]
    log.clear()
    assert log.recent() == []


def test_hostile_identities_are_kept_short_and_readable(storage: Storage) -> None:
    log = RefusalLog(storage.client, "test:refusals")
    huge, broken = "x" * 100_000, "a\ud800b\n{}:"
    fields = {"endpoint": "e", "scope": "s" * 5000, "layer": "1/1s", "strategy": "gcra", "retry_after": 1.0}
    log.record(identity=f"key:{huge}", identities=[f"key:{huge}", broken], **fields)  # type: ignore[arg-type]
    [refusal] = log.recent()
    assert len(refusal.identity) == len(refusal.scope) == MAX_VALUE_LENGTH
    assert refusal.identities == (refusal.identity, broken)


@pytest.mark.parametrize(
    "identity",
    ["user:a\nb", "user:\u202eevil", "key:k:a\ud800b", "user: x ", "user:" + "é" * (MAX_VALUE_LENGTH - 5)],
)
def test_identities_are_kept_exactly_unless_cut(storage: Storage, identity: str) -> None:
    log = RefusalLog(storage.client, "test:refusals")
    fields = {"endpoint": "e", "scope": "s", "layer": "1/1s", "strategy": "gcra", "retry_after": 1.0}
    log.record(identity=identity, identities=[identity, "ip:a"], **fields)  # type: ignore[arg-type]
    log.record(identity=identity + "!", identities=[identity + "!"], **fields)  # type: ignore[arg-type]
    longer, exact = log.recent()
    assert (exact.identity, exact.cut, exact.others) == (identity, False, ("ip:a",))
    assert log.attributed()[0] == Attribution(identity, 1, (("ip:a", 1),))
    if len(identity) == MAX_VALUE_LENGTH:  # one more character is cut
        assert (longer.identity, longer.cut) == (identity[:-1] + "…", True)
        assert log.attributed()[1] == Attribution(identity[:-1] + "…", 1, (), cut=True)
    else:
        assert (longer.identity, longer.cut) == (identity + "!", False)


def test_no_log_when_its_size_is_zero(app: Flask) -> None:
    limited(app)
    state = install(app, RATELIMIT_REFUSAL_LOG_SIZE=0)
    client = app.test_client()
    assert [get(client, "/items").status_code for _ in range(2)] == [200, 429]
    assert state.refusals is None
    assert state.throttle.storage.client.keys("*refusals*") == []
    with pytest.raises(RuntimeError, match="RATELIMIT_REFUSAL_LOG_SIZE"):
        refusal_log(app)


def test_a_log_that_cannot_be_written_does_not_change_the_answer(app: Flask, monkeypatch, caplog) -> None:
    limited(app)
    state = install(app)

    def broken(**fields: object) -> None:
        raise redis.ConnectionError("gone")

    monkeypatch.setattr(state.refusals, "record", broken)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, logger="flask_redis_throttle"):
        assert [get(client, "/items").status_code for _ in range(2)] == [200, 429]
    assert "refusal log unavailable (gone)" in caplog.text


@pytest.mark.internal_error
def test_a_bug_writing_the_log_is_an_internal_error_and_does_not_change_the_answer(
    app: Flask, monkeypatch: pytest.MonkeyPatch, internal_errors: list[logging.LogRecord]
) -> None:
    limited(app)
    state = install(app)

    def broken(**fields: object) -> None:
        raise TypeError("a bug")

    monkeypatch.setattr(state.refusals, "record", broken)
    client = app.test_client()
    refused = [get(client, "/items") for _ in range(3)][1:]
    assert [(r.status_code, r.headers["Retry-After"]) for r in refused] == [(429, "60")] * 2
    [record] = internal_errors  # logged once, however many refusals meet it
    assert record.getMessage() == (
        f"internal error in the refusal log ({state.throttle.url}: unexpected TypeError: a bug); "
        "the refusal is not logged."
    )
    assert isinstance(record.exc_info[1].__cause__, TypeError)


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_a_refusal_costs_one_more_command_and_an_admission_none(app: Flask, redis_client: redis.Redis) -> None:
    limited(app, "2/m")
    install(app)
    client = app.test_client()
    get(client, "/items")  # loads the script
    before = redis_client.info("commandstats")
    get(client, "/items")
    middle = redis_client.info("commandstats")
    get(client, "/items")
    after = redis_client.info("commandstats")

    def calls(stats: dict, name: str) -> int:
        return stats.get(f"cmdstat_{name}", {}).get("calls", 0)

    assert calls(middle, "xadd") - calls(before, "xadd") == 0
    assert calls(after, "xadd") - calls(middle, "xadd") == 1
    assert calls(after, "evalsha") - calls(middle, "evalsha") == 1


_prefixes = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    strategy=st.sampled_from(list(STRATEGIES)),
    size=st.integers(1, 8),
    requests=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([None, "ann", "bob"]), st.integers(0, 400_000)), max_size=30
    ),
)
def test_the_log_holds_exactly_the_latest_refusals(
    storage_url: str, strategy: str, size: int, requests: list[tuple[int, str | None, int]], clock: Clock
) -> None:
    """Random traffic from a few IPs and users: the log holds the last
    ``size`` refusals, as the 429s described them, and ``top`` counts them."""
    app = Flask("log")
    app.config.update(RATELIMIT_STORAGE_URL=storage_url, RATELIMIT_KEY_PREFIX=f"t{next(_prefixes)}:")
    add_login(app)
    limited(app, "2/s;3/m")
    refused: list[tuple[str, str, tuple[str, ...]]] = []

    @app.errorhandler(RateLimitExceeded)
    def remember(error: RateLimitExceeded) -> Response:
        ids = (f"ip:{request.remote_addr}",) + (
            (f"user:{request.headers['X-User']}",) if "X-User" in request.headers else ()
        )
        refused.append((str(error.identity), f"{error.layer.quota}/{error.layer.name}", ids))
        return error.get_response()

    install(app, RATELIMIT_STRATEGY=strategy, RATELIMIT_REFUSAL_LOG_SIZE=size, RATELIMIT_BLOCK_CACHE_SIZE=0)
    client = app.test_client()
    at = 0.0
    for ip, user, gap in requests:
        at += gap / 1e6
        clock.set(at)
        get(client, "/items", ip=f"192.0.2.{ip}", user=user)
    log = refusal_log(app)
    kept = refused[-size:]
    assert [(r.identity, r.layer, r.identities) for r in reversed(log.recent(100))] == kept
    assert all(r.strategy == strategy and r.endpoint == "items" for r in log.recent(100))
    assert sorted(log.top(100)) == sorted(Counter(identity for identity, _, _ in kept).items())


def test_a_log_needs_room_for_one_entry(storage: Storage) -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        RefusalLog(storage.client, "test:refusals", size=0)


def cluster_nodes_of(cluster_client: redis.cluster.RedisCluster, keys: list[str]) -> dict[str, str]:
    """The node (``host:port``) that serves each key, from the slot map."""
    return {key: cluster_client.get_node_from_key(key).name for key in keys}


@pytest.mark.redis
def test_on_a_cluster_refusals_go_to_their_identitys_node_and_read_merged_in_order(
    redis_cluster: RedisCluster,
) -> None:
    """Refusals of addresses spread over every slot land in several streams,
    on every node, each on the node of its address's counters; every read
    merges them back into the order they were refused in."""
    redis_cluster.flushall()
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL=redis_cluster.url, RATELIMIT_BLOCK_CACHE_SIZE=0)
    limited(app)
    state = install(app)
    web = app.test_client()
    ips = [f"198.51.100.{i}" for i in range(60)]
    for ip in ips:
        assert [get(web, "/items", ip=ip).status_code for _ in range(2)] == [200, 429]
    log = refusal_log(app)
    assert len(log.keys) == CLUSTER_SHARDS
    slots = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(host, port) for host, port in redis_cluster.startup_nodes]
    )
    try:
        where = cluster_nodes_of(slots, list(log.keys))
        written = {key: slots.xrange(key) for key in log.keys}
        # Every master holds some streams, and took some refusals.
        masters = {f"127.0.0.1:{node.port}" for node in redis_cluster.masters()}
        assert {where[key] for key in log.keys if written[key]} == masters
        for key, entries in written.items():
            for _, fields in entries:
                refused = fields[b"identity"].decode()
                tag = identity_tag("ip", refused.removeprefix("ip:"), state.throttle.secret)
                assert slots.get_node_from_key(tag).name == where[key], refused
    finally:
        slots.close()
    expected = [f"ip:{ip}" for ip in ips]
    assert [r.identity for r in log.recent(100)] == expected[::-1]
    assert [r.identity for r in log.recent(5)] == expected[:-6:-1]
    between = log.between()
    assert [r.identity for r in between] == expected
    since, until = between[10].time, between[20].time
    part = [r.identity for r in log.between(since=since, until=until)]
    assert part == [r.identity for r in between if since <= r.time <= until]
    assert expected[10:21] == part[part.index(expected[10]) :][:11]
    assert sorted(log.top(100)) == sorted((identity, 1) for identity in expected)
    assert sum(log.per_minute(time.time() + 1)) == 60
    log.clear()
    assert log.recent() == []


@pytest.mark.redis
def test_on_a_cluster_the_log_keeps_its_size(redis_cluster: RedisCluster) -> None:
    """Thousands of refusals into a log of 5: reads show the newest 5, in
    order, and each stream is trimmed to about 5 (a stream node at most
    more), so Redis holds a bounded number whatever the traffic."""
    redis_cluster.flushall()
    client = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(host, port) for host, port in redis_cluster.startup_nodes]
    )
    try:
        log = RefusalLog(client, "test:refusals", size=5, shards=CLUSTER_SHARDS)
        fields = {"endpoint": "e", "scope": "s", "layer": "1/1s", "strategy": "gcra", "retry_after": 1.0}
        written = 200 * CLUSTER_SHARDS
        for i in range(written):
            log.record(identity=f"ip:{i}", identities=[f"ip:{i}"], **fields)  # type: ignore[arg-type]
        newest = [f"ip:{i}" for i in range(written - 5, written)]
        assert [r.identity for r in log.between()] == newest
        assert [r.identity for r in log.recent(100)] == newest[::-1]
        assert sorted(log.top(100)) == sorted((identity, 1) for identity in newest)
        node_entries = max(
            int(client.config_get("stream-node-max-entries", target_nodes=node)["stream-node-max-entries"])
            for node in client.get_primaries()
        )
        kept = [client.xlen(key) for key in log.keys]
        assert all(5 <= n <= 5 + node_entries - 1 for n in kept), kept
        assert sum(kept) < written // 2
    finally:
        client.close()


def test_a_sharded_log_needs_a_key_without_braces(storage: Storage) -> None:
    with pytest.raises(ValueError, match=r"'rl:\{x\}:refusals'.*braces"):
        RefusalLog(storage.client, "rl:{x}:refusals", shards=4)
    with pytest.raises(ValueError, match="1 to 16384 shards, not 0"):
        RefusalLog(storage.client, "rl:refusals", shards=0)


def test_a_refusal_goes_to_the_stream_it_is_given_only_if_it_is_one_of_the_log_s(app: Flask) -> None:
    limited(app)
    install(app)
    log = refusal_log(app)
    entry = {
        "endpoint": "items",
        "scope": "items",
        "layer": "1/1m",
        "strategy": "fixed-window",
        "identity": "ip:192.0.2.1",
        "identities": ["ip:192.0.2.1"],
        "retry_after": 60.0,
    }
    with pytest.raises(ValueError, match=rf"^stream 'elsewhere' is not one of this refusal log's {len(log.keys)} "):
        log.record(**entry, stream="elsewhere")  # type: ignore[arg-type]
    assert log.recent() == []
    log.record(**entry, stream=log.keys[-1])  # type: ignore[arg-type]
    assert log.client.xlen(log.keys[-1]) == 1
    assert [r.identity for r in log.recent()] == ["ip:192.0.2.1"]


def test_recent_of_none_or_fewer_is_empty(app: Flask) -> None:
    limited(app)
    install(app)
    client = app.test_client()
    assert [get(client, "/items").status_code for _ in range(2)] == [200, 429]
    log = refusal_log(app)
    assert len(log.recent(1)) == 1
    assert log.recent(0) == log.recent(-5) == []
