"""Faults that a Redis Cluster has and a single node does not, under traffic.

Each test starts a cluster of its own, puts an app on it, and breaks the
cluster while eight threads, each with a test client of its own, send
requests from addresses whose counters live on every master. A request must
never be a 500 (the app runs with ``TESTING``, so an exception escaping the
extension fails the test outright). A request is *decided* when Redis
decided it: a 200 or a 429 with the ``RateLimit`` header; otherwise it
followed the failure policy (200 without the header, or 503).

Counts are judged by requests, never by reading counters: under a limit the
traffic exceeds, an address whose counters Redis kept throughout is admitted
exactly its quota, so none of its requests was lost or counted twice. Where
an address's counters live is found from its hash tag
(:func:`~flask_redis_throttle.keys.identity_tag`) and the cluster's slot
map, and its keys by ``SCAN`` of that tag
(:func:`~flask_redis_throttle.reset.counter_pattern`).

``tests/test_topologies.py`` has the single faults without exact counts: a
dead master without replicas, and a failover with a 1000/m limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.cluster
from conftest import get, join_all
from flask import Flask

from flask_redis_throttle import RateLimit, limit
from flask_redis_throttle.keys import identity_tag
from flask_redis_throttle.reset import counter_pattern
from flask_redis_throttle.testing import RedisCluster, RedisServer, redis_cluster

pytestmark = pytest.mark.redis

#: The longest any request may take, in seconds, whatever the fault: the
#: client waits at most its socket timeout for a reply, and the rest is
#: slack for a machine busy with other work.
BOUND = 3.0

#: The client's socket timeout in these tests. The default 0.5 s is what a
#: stalled node costs; on a loaded machine a healthy reply can take longer
#: than that, and would be counted as a fault.
SOCKET_TIMEOUT = 1.0

#: How many threads send requests.
THREADS = 8


@dataclass(frozen=True)
class Sent:
    """One request and what it got."""

    ip: str
    status: int
    #: Whether Redis decided it: only then does the response carry ``RateLimit``.
    decided: bool
    retry_after: str | None
    #: When it was sent, on the monotonic clock, and how long it took.
    started: float
    elapsed: float


class Traffic:
    """:data:`THREADS` threads, each with its own test client, each sending
    requests from every address in turn (starting at a different one) until
    stopped: every address gets requests from several threads at once."""

    def __init__(self, app: Flask, ips: list[str]) -> None:
        self.app = app
        self.ips = ips
        self.sent: dict[str, list[Sent]] = {ip: [] for ip in ips}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), name=f"traffic-{n}") for n in range(THREADS)]

    def _run(self, n: int) -> None:
        client = self.app.test_client()
        i = n
        while not self._stop.is_set():
            ip = self.ips[i % len(self.ips)]
            i += 1
            started = time.monotonic()
            try:
                response = get(client, ip=ip)
            except BaseException as error:  # a 500: surfaced by the test
                self.errors.append(error)
                return
            elapsed = time.monotonic() - started
            decided = "RateLimit" in response.headers
            self.sent[ip].append(
                Sent(ip, response.status_code, decided, response.headers.get("Retry-After"), started, elapsed)
            )

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait until ``condition`` holds, failing after ``timeout`` seconds
        (or at once if a thread met an error)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.errors:
                pytest.fail(f"a request failed while waiting for {what}: {self.errors[0]!r}")
            if time.monotonic() > deadline:
                counts = {ip: len(sent) for ip, sent in self.sent.items()}
                pytest.fail(f"timed out after {timeout} s waiting for {what}; requests so far: {counts}")
            time.sleep(0.05)

    def sent_at_least(self, ips: list[str], count: int) -> Callable[[], bool]:
        return lambda: all(len(self.sent[ip]) >= count for ip in ips)

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        join_all(self._threads, deadline=30, what="traffic threads (a request hung)")


def make_app(url: str, quota: int, fail_open: bool = True, **config: Any) -> Flask:
    """An app whose ``/`` admits ``quota`` requests a minute, and ten times
    that an hour in another scope, so that each address's script touches
    keys of two scopes. Every refusal asks Redis (no block cache), and the
    breaker probes a failed node after 0.2 s, at most 1 s apart, so that
    recovery is seen within a short test."""
    app = Flask("cluster-faults")
    app.config.update(
        TESTING=True,
        RATELIMIT_STORAGE_URL=url,
        RATELIMIT_FAIL_OPEN=fail_open,
        RATELIMIT_BLOCK_CACHE_SIZE=0,
        RATELIMIT_STORAGE_OPTIONS={"socket_timeout": SOCKET_TIMEOUT},
        RATELIMIT_BREAKER_BACKOFF=0.2,
        RATELIMIT_BREAKER_MAX_BACKOFF=1.0,
        RATELIMIT_REFUSAL_LOG_SIZE=100_000,
    )
    app.config.update(config)

    @app.get("/")
    @limit(f"{quota}/m")
    @limit(f"{10 * quota}/h", scope="site")
    def index() -> str:
        return "ok"

    RateLimit(app)
    return app


def close(app: Flask) -> None:
    app.extensions["ratelimit"].throttle.storage.close()


def cluster_client(cluster: RedisCluster) -> redis.cluster.RedisCluster:
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in cluster.startup_nodes]
    return redis.cluster.RedisCluster(startup_nodes=nodes)


def tag_of(ip: str) -> str:
    """The hash tag of an address's counters (the apps here have no secret)."""
    return identity_tag("ip", ip)


def addresses_by_master(cluster: RedisCluster, per_master: int) -> dict[int, list[str]]:
    """``per_master`` addresses whose counters live on each master, by port,
    each in a slot of its own."""
    found: dict[int, list[str]] = {node.port: [] for node in cluster.masters()}
    slots_taken: set[int] = set()
    with cluster_client(cluster) as client:
        for i in range(1, 5000):
            ip = f"10.0.{i // 250}.{i % 250}"
            slot = client.keyslot(tag_of(ip))
            port = client.get_node_from_key(tag_of(ip)).port
            if len(found[port]) < per_master and slot not in slots_taken:
                found[port].append(ip)
                slots_taken.add(slot)
            if all(len(ips) == per_master for ips in found.values()):
                return found
    raise AssertionError(f"not enough addresses on each master: {found}")


def admitted(sent: list[Sent]) -> int:
    """How many requests Redis admitted."""
    return sum(1 for s in sent if s.status == 200 and s.decided)


def undecided(sent: list[Sent]) -> int:
    """How many requests Redis did not decide (they followed the failure policy)."""
    return sum(1 for s in sent if not (s.decided and s.status in (200, 429)))


def slowest(sent: list[Sent]) -> float:
    return max((s.elapsed for s in sent), default=0.0)


def error_replies(cluster: RedisCluster, code: str) -> int:
    """How many ``code`` error replies (``TRYAGAIN``, ``ASK``...) the
    masters gave since they started (``INFO errorstats``)."""
    total = 0
    for node in cluster.masters():
        with admin(node.port) as client:
            total += int(client.info("errorstats").get(f"errorstat_{code}", {}).get("count", 0))
    return total


def admin(port: int) -> redis.Redis:
    """A plain client on one node, for the commands that operate it."""
    return redis.Redis(port=port, socket_timeout=10)


# -- Slot migration -----------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    """Three masters, no replicas; each test may reshape it."""
    with redis_cluster(masters=3, replicas=0, full_coverage=False) as cluster:
        yield cluster


def migrate(source: RedisServer, target: RedisServer, others: list[RedisServer], slot: int, pattern: str) -> int:
    """Move ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster
    reshard`` does, one key at a time, slowly: ``SETSLOT IMPORTING`` and
    ``MIGRATING``, ``MIGRATE`` of each key that matches ``pattern`` (found by
    ``SCAN`` on the source) with a pause after each, so that requests arrive
    while the keys are split between the nodes; then ``SETSLOT NODE``
    everywhere. Returns how many keys moved."""
    pause = 0.3
    nodes = {node.port: admin(node.port) for node in (source, target, *others)}
    try:
        source_id = nodes[source.port].execute_command("CLUSTER", "MYID").decode()
        target_id = nodes[target.port].execute_command("CLUSTER", "MYID").decode()
        nodes[target.port].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        nodes[source.port].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        time.sleep(pause)
        keys = list(dict.fromkeys(nodes[source.port].scan_iter(match=pattern, count=100)))
        for key in keys:
            nodes[source.port].migrate("127.0.0.1", target.port, key, 0, 5000)
            time.sleep(pause)
        left = nodes[source.port].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
        assert left == [], f"keys in slot {slot} that the traffic's address does not own: {left}"
        for port in (target.port, source.port, *(node.port for node in others)):
            nodes[port].execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return len(keys)
    finally:
        for client in nodes.values():
            client.close()


def test_slot_migration_mid_traffic_decides_every_request_and_counts_each_once(cluster: RedisCluster) -> None:
    """The slot of one address moves to another master while eight threads
    send requests from it and from addresses on every master. Its keys are
    moved one at a time, so for a while they are split between the nodes
    (each node then answers its multi-key script ``TRYAGAIN``), and then all
    on the target (the source answers ``ASK``). Every request is decided,
    and every address, the moving one included, is admitted exactly its
    quota: no count was lost or doubled by the move."""
    quota = 1000
    app = make_app(cluster.url, quota)
    by_master = addresses_by_master(cluster, per_master=2)
    source_port = next(iter(by_master))
    source = next(node for node in cluster.masters() if node.port == source_port)
    target, *others = [node for node in cluster.masters() if node is not source]
    moving = by_master[source_port][0]
    ips = [ip for group in by_master.values() for ip in group]
    with cluster_client(cluster) as client:
        slot = client.keyslot(tag_of(moving))
    try:
        with Traffic(app, ips) as traffic:
            traffic.wait_for(traffic.sent_at_least([moving], 10), 30, "the first requests")
            moved = migrate(source, target, others, slot, counter_pattern("rl:", tag_of(moving)))
            during = admitted(traffic.sent[moving])
            # Every address goes well past its quota, after the move too.
            traffic.wait_for(traffic.sent_at_least(ips, quota + 50), 120, "the traffic to exceed the quotas")
        assert traffic.errors == []
    finally:
        close(app)
    assert moved >= 2  # the keys of both scopes
    # Requests met the keys split (TRYAGAIN), and all on the target (ASK).
    assert error_replies(cluster, "TRYAGAIN") > 0
    assert error_replies(cluster, "ASK") > 0
    assert during < quota, "the address ran out of quota before its slot moved: nothing was tested"
    assert {ip: undecided(traffic.sent[ip]) for ip in ips} == dict.fromkeys(ips, 0)
    assert {ip: admitted(traffic.sent[ip]) for ip in ips} == dict.fromkeys(ips, quota)
    assert max(slowest(traffic.sent[ip]) for ip in ips) < BOUND
    with cluster_client(cluster) as client:
        assert client.get_node_from_key(tag_of(moving)).port == target.port
