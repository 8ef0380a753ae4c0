"""A Redis Cluster's script calls on redis-py's public API: one command (or
plain pipeline) per node, on the node's own client, routed by redis-py's
slot map.
They decide as one call on a single node would, and every call that meets a
redirect, a flushed script cache, a dead node or a timeout is sent again
(through redis-py's cluster client) only where the node did not run it, so
that nothing is counted twice.

Counts are judged by requests through a Flask app, never by reading keys."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from flask import Flask
from helpers import get, join_all, limited_app, spy_sends
from redis.crc import key_slot
from servers import RedisCluster, redis_cluster, redis_command

from flask_redis_throttle import Identity
from flask_redis_throttle.core.engine.codec import entry, merge, split
from flask_redis_throttle.core.engine.rates import Layer, parse_limits
from flask_redis_throttle.core.engine.scripts import ScriptCache
from flask_redis_throttle.core.engine.throttle import Policy
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.testing import RedisServer

pytestmark = pytest.mark.redis

SPEC = "5/m"


def storage_of(app: Flask) -> Storage:
    storage: Storage = app.extensions["ratelimit"].throttle.storage
    return storage


def slot_of(app: Flask, identity: Identity, spec: str = SPEC) -> int:
    """The cluster slot of ``identity``'s counters under ``/``."""
    throttle = app.extensions["ratelimit"].throttle
    key = throttle.key(Policy(parse_limits(spec), "index"), identity)
    return key_slot(key.encode())


def owner(cluster: RedisCluster, slot: int) -> RedisServer:
    """The master that serves ``slot`` now, by the first master's word."""
    for start, end, master, *_ in redis_command(cluster.masters()[0].port, "CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            return next(node for node in cluster.masters() if node.port == int(master[1]))
    raise AssertionError(f"no master serves slot {slot}")


def on_two_nodes(app: Flask, cluster: RedisCluster, user: str = "ann") -> tuple[str, RedisServer, RedisServer]:
    """An IP whose counters live on another master than ``user``'s, and the
    two masters (the IP's first)."""
    user_node = owner(cluster, slot_of(app, Identity("user", user)))
    for i in range(1, 200):
        ip = f"192.0.2.{i}"
        ip_node = owner(cluster, slot_of(app, Identity("ip", ip)))
        if ip_node.port != user_node.port:
            return ip, ip_node, user_node
    raise AssertionError("every address landed on the user's node")


def other_master(cluster: RedisCluster, *taken: RedisServer) -> RedisServer:
    """A master that is none of ``taken``."""
    return next(node for node in cluster.masters() if node.port not in {server.port for server in taken})


def stats(port: int) -> dict[str, int]:
    """Calls so far of EVALSHA and EVAL on the node at ``port``."""
    info = redis.Redis(port=port)
    try:
        found = info.info("commandstats")
    finally:
        info.close()
    return {name: int(found.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")}


def remaining(response: Any) -> int:
    """The remaining quota of the deciding counter, from the ``RateLimit`` header."""
    header = response.headers["RateLimit"]
    return int(header.split(";r=")[1].split(";")[0])


@pytest.fixture
def redis_py_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The script calls made through redis-py's cluster client: its command
    path (a call sent again there) and its pipeline (which is never used)."""
    calls: list[tuple[Any, ...]] = []
    execute_command = redis.cluster.RedisCluster.execute_command
    execute = redis.cluster.ClusterPipeline.execute

    def spy_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and str(args[0]).upper() in ("EVAL", "EVALSHA"):
            calls.append(args)
        return execute_command(self, *args, **kwargs)

    def spy_pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(("pipeline",))
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.cluster.RedisCluster, "execute_command", spy_command)
    monkeypatch.setattr(redis.cluster.ClusterPipeline, "execute", spy_pipeline)
    return calls


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """The script calls sent on any connection (to a node, by whichever
    client): ``(port, name)`` per call each time it is sent."""
    return spy_sends(monkeypatch, only=("EVAL", "EVALSHA"))


def ports(sends: list[tuple[int, str]]) -> list[int]:
    return [port for port, _ in sends]


def connected(port: int) -> int:
    """How many clients the node on ``port`` has connected now, besides the asking one."""
    return int(redis_command(port, "INFO", "clients").split("connected_clients:")[1].split()[0]) - 1


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    """The session's cluster, emptied, its scripts flushed, its stats reset."""
    redis_cluster.flushall()
    for node in redis_cluster.masters():
        redis_command(node.port, "SCRIPT", "FLUSH")
        redis_command(node.port, "CONFIG", "RESETSTAT")
    return redis_cluster


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A cluster of this test's own, whose slots and nodes it may change;
    the other masters go on serving while one is down."""
    with redis_cluster(masters=3, full_coverage=False) as fresh:
        yield fresh


def test_each_request_sends_one_call_to_each_of_its_nodes(
    cluster: RedisCluster, redis_py_calls: list[tuple[Any, ...]], sends: list[tuple[int, str]]
) -> None:
    app = limited_app(cluster.url, SPEC)
    ip, ip_node, user_node = on_two_nodes(app, cluster)
    web = app.test_client()
    assert [get(web, ip=ip, user="ann").status_code for _ in range(7)] == [200] * 5 + [429] * 2
    # Each request sent one call to each of the two nodes (the first one's
    # EVALSHA met NOSCRIPT on both, and its EVAL was a second one to each).
    assert sorted(ports(sends)) == sorted([ip_node.port, user_node.port] * 8)
    assert redis_py_calls == []  # redis-py's cluster pipeline and command path: never
    assert stats(ip_node.port) == {"evalsha": 7, "eval": 1}
    assert stats(user_node.port) == {"evalsha": 7, "eval": 1}


@pytest.mark.parametrize("stalled", ["ip", "user"])
def test_both_nodes_are_sent_their_calls_before_either_reply_is_read(cluster: RedisCluster, stalled: str) -> None:
    """A request on two nodes sends each node its call before it reads
    either reply, so it waits about one round trip, not two. One node is
    stopped (``SIGSTOP``) while the request is in flight: the other node
    runs its call while the request still waits for the stopped one,
    whichever of the two it reads first. (Sent one after the other, the
    other node would get its call only after the stopped one answered, in
    one of the two cases.) Then the stopped node goes on, and the request
    is decided, each node having run its call once."""
    app = limited_app(cluster.url, SPEC, RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 20})
    ip, ip_node, user_node = on_two_nodes(app, cluster)
    web = app.test_client()
    assert remaining(get(web, ip=ip, user="ann")) == 4  # the scripts loaded
    victim, other = (ip_node, user_node) if stalled == "ip" else (user_node, ip_node)
    victim_before, other_before = stats(victim.port)["evalsha"], stats(other.port)["evalsha"]
    responses: list[Any] = []
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        request = threading.Thread(target=lambda: responses.append(get(web, ip=ip, user="ann")))
        request.start()
        deadline = time.monotonic() + 10
        while stats(other.port)["evalsha"] == other_before and time.monotonic() < deadline:
            time.sleep(0.01)
        ran_meanwhile = stats(other.port)["evalsha"] - other_before
        waiting = request.is_alive()
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    join_all([request], deadline=30, what="the request")
    assert (ran_meanwhile, waiting) == (1, True)
    assert remaining(responses[0]) == 3
    assert stats(victim.port)["evalsha"] - victim_before == 1
    assert stats(other.port)["evalsha"] - other_before == 1
    storage_of(app).close()


def test_a_request_on_two_nodes_sends_both_calls_before_it_reads(
    cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, seen from the client: at the first reply read, both nodes'
    calls were already sent."""
    app = limited_app(cluster.url, SPEC)
    ip, ip_node, user_node = on_two_nodes(app, cluster)
    web = app.test_client()
    assert remaining(get(web, ip=ip, user="ann")) == 4
    sent = spy_sends(monkeypatch, only=("EVALSHA",))
    at_first_read: list[list[int]] = []
    read_response = redis.connection.Connection.read_response

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not at_first_read:
            at_first_read.append(ports(sent))
        return read_response(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "read_response", spy)
    assert remaining(get(web, ip=ip, user="ann")) == 3
    assert sorted(at_first_read[0]) == sorted([ip_node.port, user_node.port])
    storage_of(app).close()


class Cancelled(BaseException):
    """Raised by a timer signal into a request that waits for a node, as a
    worker's request timeout or a cancelled green thread would."""


@pytest.mark.parametrize("stalled", ["ip", "user"])
def test_a_request_cancelled_while_it_waits_for_one_node_leaves_no_connection_behind(
    cluster: RedisCluster, stalled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests on two nodes are interrupted while they wait for one,
    stopped (``SIGSTOP``), node: for its reply, or, once its connection was
    closed, for a new connection's handshake, before anything was sent. The
    other node's connection, sent its call and perhaps not read yet, is
    closed and put back, not lost from the pool nor left with a reply for
    the next request; each call that was sent ran once (the stopped node's
    when it went on), and the next requests are decided."""
    app = limited_app(cluster.url, "100/m", RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 20})
    ip, ip_node, user_node = on_two_nodes(app, cluster)
    web = app.test_client()
    assert remaining(get(web, ip=ip, user="ann")) == 99
    victim, other = (ip_node, user_node) if stalled == "ip" else (user_node, ip_node)
    before = {node.port: stats(node.port)["evalsha"] for node in (victim, other)}
    connections = connected(other.port)
    sent = spy_sends(monkeypatch, only=("EVALSHA",))

    def cancel(signum: int, frame: Any) -> None:
        raise Cancelled

    previous = signal.signal(signal.SIGALRM, cancel)
    try:
        for _ in range(3):
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                signal.setitimer(signal.ITIMER_REAL, 0.2)
                with pytest.raises(Cancelled):
                    get(web, ip=ip, user="ann")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                os.kill(victim.pid, signal.SIGCONT)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert sent  # the first one, at least, was sent to both
    assert "RateLimit" in get(web, ip=ip, user="ann").headers
    for port, count in before.items():
        assert stats(port)["evalsha"] - count == ports(sent).count(port)
    assert connected(other.port) <= connections
    storage_of(app).close()


def test_a_request_on_two_nodes_chooses_its_script_once_per_fan_out(
    cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which script a request split across nodes takes depends only on what
    its fan-out is kept by (its keys, cost and plan): it is chosen on the
    first such request and kept with the fan-out, not chosen again."""
    app = limited_app(cluster.url, SPEC)
    ip, _, _ = on_two_nodes(app, cluster)
    chosen: list[frozenset[str]] = []
    choose = ScriptCache.choose

    def counted(self: ScriptCache, strategies: frozenset[str], calls: Any) -> Any:
        chosen.append(strategies)
        return choose(self, strategies, calls)

    monkeypatch.setattr(ScriptCache, "choose", counted)
    web = app.test_client()
    assert [get(web, ip=ip, user="ann").status_code for _ in range(7)] == [200] * 5 + [429] * 2
    assert chosen == [frozenset(["fixed-window"])]


def test_requests_leave_no_connection_behind(cluster: RedisCluster) -> None:
    """Each node's pool lends a request one connection and takes it back:
    after the first request (which also reads the slot map), thirty more
    leave each node no more clients than it had."""
    app = limited_app(cluster.url, "100/m")
    ip, ip_node, user_node = on_two_nodes(app, cluster)
    web = app.test_client()
    assert remaining(get(web, ip=ip, user="ann")) == 99
    before = {port: connected(port) for port in (ip_node.port, user_node.port)}
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(30)] == list(range(98, 68, -1))
    for port, count in before.items():
        assert connected(port) <= count
    storage_of(app).close()


def test_threads_count_exactly_on_a_cluster(cluster: RedisCluster) -> None:
    """Six threads share the path's pooled node connections: every request
    is decided, and exactly the quota is admitted."""
    app = limited_app(cluster.url, "100/m")
    ip, _, _ = on_two_nodes(app, cluster)
    results: list[int] = []
    lock = threading.Lock()

    def hammer() -> None:
        web = app.test_client()
        mine = [get(web, ip=ip, user="ann") for _ in range(30)]
        with lock:
            results.extend(r.status_code for r in mine if "RateLimit" in r.headers)

    threads = [threading.Thread(target=hammer) for _ in range(6)]
    for thread in threads:
        thread.start()
    join_all(threads, deadline=60, what="the request threads")
    assert sorted(results) == [200] * 100 + [429] * 80


def test_replies_equal_one_call_on_a_single_node(cluster: RedisCluster, redis_server: RedisServer) -> None:
    """The same requests on a cluster, where they are split by node and
    their replies merged, and on a single node, where each is one call, get
    the same answers: refusals, refunds across nodes and headers included."""
    single = limited_app(redis_server.url, "3/m", RATELIMIT_KEY_PREFIX="single:")
    split = limited_app(cluster.url, "3/m", RATELIMIT_KEY_PREFIX="split:")
    ip, _, _ = on_two_nodes(split, cluster)
    steps = [(f"198.51.100.{i}", "ann") for i in range(3)] + [(ip, "ann")] * 3 + [(ip, "")] * 4 + [(ip, "bob")] * 2
    answers = []
    for app in (split, single):
        web = app.test_client()
        answers.append(
            [
                (r.status_code, r.headers.get("RateLimit"), r.headers.get("Retry-After"))
                for r in (get(web, ip=who, user=user or None) for who, user in steps)
            ]
        )
    assert answers[0] == answers[1]
    assert [status for status, _, _ in answers[0]] == [200] * 3 + [429] * 3 + [200] * 3 + [429] + [429] * 2


def test_an_admission_merged_from_skewed_nodes_carries_the_time_whose_window_ends_first() -> None:
    # Ann's part has the least left, so its layer, remaining and reset
    # make the headers; Bob's node decided at 59.9 s, 0.1 s before its
    # minute ends, while Ann's second ends 0.8 s after its node's 0.2 s.
    # A block leased by the request ends with the earliest window: the
    # merged reply carries the time of the node whose window ends first.
    plan = entry("fw", [Layer(10, 1)]) + entry("fw", [Layer(100, 60)])
    parts = split(["{ann}:s", "{bob}:s"], ["", 1, plan])
    ann, bob = [1, 1, 5, 800_000, 0, 1_000_200_000], [1, 1, 50, 100_000, 0, 1_019_900_000]
    assert merge(parts, [ann, bob]) == [1, 1, 5, 800_000, 0, 1_019_900_000]
    assert merge(parts[::-1], [bob, ann]) == [1, 1, 5, 800_000, 0, 1_019_900_000]  # in either order
    # Nodes that decided at one time (a pinned clock) reply it, as one call would.
    assert merge(parts, [ann, [*bob[:5], ann[5]]]) == ann
    # A refusal is the refusing part's: its wait is never early.
    refused = [0, 1, 0, 100_000, 100_000, 1_019_900_000]
    assert merge(parts, [ann, refused]) == [0, 2, *refused[2:]]


def move_slot(cluster: RedisCluster, slot: int, source: RedisServer, target: RedisServer, finish: bool = True) -> None:
    """Migrate ``slot`` from ``source`` to ``target`` as ``redis-cli
    --cluster reshard`` does: IMPORTING, MIGRATING, MIGRATE of its keys,
    then (if ``finish``) SETSLOT NODE on every master."""
    target_id = redis_command(target.port, "CLUSTER", "MYID")
    source_id = redis_command(source.port, "CLUSTER", "MYID")
    redis_command(target.port, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    redis_command(source.port, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    keys = redis_command(source.port, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000")
    if keys:
        redis_command(source.port, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys)
    if finish:
        finish_move(cluster, slot, target)


def finish_move(cluster: RedisCluster, slot: int, target: RedisServer) -> None:
    target_id = redis_command(target.port, "CLUSTER", "MYID")
    for node in cluster.masters():
        redis_command(node.port, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)


def test_a_moved_slot_is_followed_and_counted_once(
    own_cluster: RedisCluster, redis_py_calls: list[tuple[Any, ...]], sends: list[tuple[int, str]]
) -> None:
    app = limited_app(own_cluster.url, "6/m")
    ip, ip_node, user_node = on_two_nodes(app, own_cluster)
    third = other_master(own_cluster, ip_node, user_node)
    web = app.test_client()
    assert [remaining(get(web, ip=ip)) for _ in range(2)] == [5, 4]
    # The IP's slot is migrating: its keys are already on the third node,
    # which the source answers with ASK.
    slot = slot_of(app, Identity("ip", ip))
    move_slot(own_cluster, slot, ip_node, third, finish=False)
    del redis_py_calls[:]
    assert remaining(get(web, ip=ip, user="ann")) == 3
    # The IP's call, answered ASK, was sent again through redis-py, which
    # asked the third node; the script was new there (NOSCRIPT), so its
    # EVAL went the same way.
    assert [args[0] for args in redis_py_calls] == ["EVALSHA", "EVAL"]
    # Now the slot is the third node's, on every node: the source answers MOVED.
    finish_move(own_cluster, slot, third)
    del redis_py_calls[:]
    assert remaining(get(web, ip=ip, user="ann")) == 2
    # redis-py followed the redirect and mended its slot map: one call sent
    # again through it, and the next requests go straight to the new node.
    assert len(redis_py_calls) == 1
    del redis_py_calls[:], sends[:]
    before = stats(third.port)["evalsha"]
    assert [remaining(get(web, ip=ip)) for _ in range(2)] == [1, 0]
    assert get(web, ip=ip).status_code == 429
    assert redis_py_calls == []
    assert ports(sends) == [third.port] * 3
    assert stats(third.port)["evalsha"] - before == 3
    # The user, on a node that never moved, counted each of its requests once.
    assert remaining(get(web, ip="203.0.113.9", user="ann")) == 3


def test_a_slot_map_read_again_elsewhere_routes_the_next_request_to_the_new_owner(
    own_cluster: RedisCluster, redis_py_calls: list[tuple[Any, ...]], sends: list[tuple[int, str]]
) -> None:
    # The storage keeps each key's node; a slot map redis-py reads again
    # (here after a move none of our requests saw) is not the one they came from.
    app = limited_app(own_cluster.url, "6/m")
    ip, ip_node, user_node = on_two_nodes(app, own_cluster)
    third = other_master(own_cluster, ip_node, user_node)
    web = app.test_client()
    assert remaining(get(web, ip=ip)) == 5
    key = app.extensions["ratelimit"].throttle.key(Policy(parse_limits("6/m"), "index"), Identity("ip", ip))
    storage = storage_of(app)
    assert storage.nodes([key]) == [f"127.0.0.1:{ip_node.port}"]
    move_slot(own_cluster, slot_of(app, Identity("ip", ip)), ip_node, third)
    storage.client.nodes_manager.initialize()
    del redis_py_calls[:], sends[:]
    assert storage.nodes([key]) == [f"127.0.0.1:{third.port}"]
    assert remaining(get(web, ip=ip)) == 4
    # Straight to the new owner, where the script is new: no redirect.
    assert redis_py_calls == []
    assert sends == [(third.port, "EVALSHA"), (third.port, "EVAL")]


def test_a_killed_nodes_call_fails_and_the_other_is_counted_once(
    own_cluster: RedisCluster, redis_py_calls: list[tuple[Any, ...]]
) -> None:
    app = limited_app(own_cluster.url, SPEC)
    ip, ip_node, user_node = on_two_nodes(app, own_cluster)
    web = app.test_client()
    live = next(
        f"198.51.100.{i}"
        for i in range(1, 200)
        if owner(own_cluster, slot_of(app, Identity("ip", f"198.51.100.{i}"))).port != ip_node.port
    )
    assert remaining(get(web, ip=ip, user="ann")) == 4
    before = stats(user_node.port)["evalsha"]
    ip_node.stop()  # its pooled connection is dead; no node takes over its slots
    del redis_py_calls[:]
    response = get(web, ip=ip, user="ann")
    assert response.status_code == 200  # failed open
    assert "RateLimit" not in response.headers  # undecided
    # The dead node's call failed, and was not sent again; the user's call
    # was answered, and not replayed.
    assert redis_py_calls == []
    assert stats(user_node.port)["evalsha"] - before == 1
    # So the user has spent 2 of 5, not 3: an address on a live node shows it.
    assert remaining(get(web, ip=live, user="ann")) == 2


def test_a_timeout_after_the_send_is_not_replayed(
    cluster: RedisCluster, redis_py_calls: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    app = limited_app(cluster.url, SPEC, RATELIMIT_STORAGE_OPTIONS={"socket_timeout": 0.3})
    ip, ip_node, _ = on_two_nodes(app, cluster)
    web = app.test_client()
    assert remaining(get(web, ip=ip, user="ann")) == 4
    before = stats(ip_node.port)["evalsha"]
    # DEBUG SLEEP blocks the IP's node longer than the socket timeout: its
    # script is sent, times out on our side, and runs when the node wakes.
    sleeper = threading.Thread(target=redis_command, args=(ip_node.port, "DEBUG", "SLEEP", "1"))
    sleeper.start()
    time.sleep(0.1)
    with caplog.at_level("WARNING", "flask_redis_throttle"):
        response = get(web, ip=ip, user="ann")
    join_all([sleeper], deadline=10, what="DEBUG SLEEP")
    assert response.status_code == 200  # failed open
    assert "RateLimit" not in response.headers
    assert "Timeout" in caplog.text
    assert redis_py_calls == []  # not replayed
    # The timed-out call ran once, when the node woke up: counted once.
    assert stats(ip_node.port)["evalsha"] - before == 1
    assert remaining(get(web, ip=ip)) == 2


def test_noscript_on_one_node_is_run_again_there_only(
    cluster: RedisCluster, redis_py_calls: list[tuple[Any, ...]]
) -> None:
    app = limited_app(cluster.url, SPEC)
    ip, ip_node, user_node = on_two_nodes(app, cluster)
    web = app.test_client()
    assert remaining(get(web, ip=ip, user="ann")) == 4
    redis_command(ip_node.port, "SCRIPT", "FLUSH")
    ip_before, user_before = stats(ip_node.port), stats(user_node.port)
    assert remaining(get(web, ip=ip, user="ann")) == 3
    # The flushed node ran EVALSHA (NOSCRIPT: nothing counted) and then EVAL;
    # the other ran its EVALSHA once.
    assert {k: v - ip_before[k] for k, v in stats(ip_node.port).items()} == {"evalsha": 1, "eval": 1}
    assert {k: v - user_before[k] for k, v in stats(user_node.port).items()} == {"evalsha": 1, "eval": 0}
    assert redis_py_calls == []
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(3)] == [2, 1, 0]


def test_resp3_works_on_a_cluster(cluster: RedisCluster) -> None:
    app = limited_app(cluster.url, "2/m", RATELIMIT_STORAGE_OPTIONS={"protocol": 3})
    ip, _, _ = on_two_nodes(app, cluster)
    web = app.test_client()
    assert [get(web, ip=ip, user="ann").status_code for _ in range(3)] == [200, 200, 429]
    storage_of(app).close()
