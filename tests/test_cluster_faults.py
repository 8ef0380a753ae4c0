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
(:func:`~flask_redis_throttle.core.engine.keys.identity_tag`) and the cluster's slot
map, and its keys by ``SCAN`` of that tag
(:func:`~flask_redis_throttle.core.stores.reset.counter_pattern`).

``tests/test_topologies.py`` has the single faults without exact counts: a
dead master without replicas, and a failover with a 1000/m limit.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.cluster
from flask import Flask
from helpers import add_login, get, join_all
from servers import RedisCluster, redis_cluster

from flask_redis_throttle import RateLimit, limit, refusal_log
from flask_redis_throttle.core.engine.keys import identity_tag
from flask_redis_throttle.core.stores.reset import counter_pattern
from flask_redis_throttle.testing import RedisServer

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
    """:data:`THREADS` threads, each with its own test client, sending
    requests until stopped. The threads are shared out among ``groups`` of
    addresses; each sends from every address of its group in turn (starting
    at a different one), so that every address gets requests from several
    threads at once. A thread waiting on a stalled node sends nothing else
    meanwhile, as a web server's thread would not: give the addresses of a
    node that will stall a group of their own."""

    def __init__(self, app: Flask, *groups: list[str]) -> None:
        self.app = app
        self.groups = groups
        self.sent: dict[str, list[Sent]] = {ip: [] for group in groups for ip in group}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), name=f"traffic-{n}") for n in range(THREADS)]

    def _run(self, n: int) -> None:
        client = self.app.test_client()
        ips = self.groups[n % len(self.groups)]
        i = n // len(self.groups)
        while not self._stop.is_set():
            ip = ips[i % len(ips)]
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

    def refused_at_least(self, ips: list[str], count: int) -> Callable[[], bool]:
        """Whether Redis refused each of ``ips`` ``count`` times: its quota is spent."""
        return lambda: all(sum(1 for s in self.sent[ip] if s.status == 429) >= count for ip in ips)

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
    add_login(app)

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


def assert_decided_exactly(sent: dict[str, list[Sent]], ips: list[str], quota: int) -> None:
    """Every request of ``ips`` was decided, in time, and each address was
    admitted exactly its quota: a fault elsewhere never reached them."""
    assert {ip: undecided(sent[ip]) for ip in ips} == dict.fromkeys(ips, 0)
    assert {ip: admitted(sent[ip]) for ip in ips} == dict.fromkeys(ips, quota)
    assert max(slowest(sent[ip]) for ip in ips) < BOUND


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


class Migration:
    """Moving ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster
    reshard`` does, a step at a time: :meth:`begin` (``SETSLOT IMPORTING``
    and ``MIGRATING``), :meth:`move` each key (``MIGRATE``), :meth:`finish`
    (``SETSLOT NODE`` everywhere)."""

    def __init__(self, source: RedisServer, target: RedisServer, others: list[RedisServer], slot: int) -> None:
        self.source, self.target, self.slot = source, target, slot
        self.nodes = {node.port: admin(node.port) for node in (source, target, *others)}
        self.target_id = self._id(target)

    def _id(self, node: RedisServer) -> str:
        return str(self.nodes[node.port].execute_command("CLUSTER", "MYID").decode())

    def begin(self) -> None:
        self.nodes[self.target.port].execute_command(
            "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self._id(self.source)
        )
        self.nodes[self.source.port].execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.target_id)

    def keys(self, pattern: str) -> list[bytes]:
        """The keys on the source that match ``pattern``, found by ``SCAN``."""
        return list(dict.fromkeys(self.nodes[self.source.port].scan_iter(match=pattern, count=100)))

    def move(self, key: bytes) -> None:
        self.nodes[self.source.port].migrate("127.0.0.1", self.target.port, key, 0, 5000)

    def finish(self) -> None:
        left = self.nodes[self.source.port].execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 10)
        assert left == [], f"keys in slot {self.slot} that the test's address does not own: {left}"
        for port in (
            self.target.port,
            self.source.port,
            *(p for p in self.nodes if p not in (self.source.port, self.target.port)),
        ):
            self.nodes[port].execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)

    def close(self) -> None:
        for client in self.nodes.values():
            client.close()


def migrate(source: RedisServer, target: RedisServer, others: list[RedisServer], slot: int, pattern: str) -> int:
    """Move ``slot`` from ``source`` to ``target``, one key at a time,
    slowly: each key that matches ``pattern`` (found by ``SCAN`` on the
    source), with a pause after each step, so that requests arrive while
    the keys are split between the nodes. Returns how many keys moved."""
    pause = 0.3
    migration = Migration(source, target, others, slot)
    try:
        migration.begin()
        time.sleep(pause)
        keys = migration.keys(pattern)
        for key in keys:
            migration.move(key)
            time.sleep(pause)
        migration.finish()
        return len(keys)
    finally:
        migration.close()


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
            traffic.wait_for(traffic.refused_at_least(ips, 50), 120, "the quotas to be spent")
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


def policy_followed(sent: list[Sent], fail_open: bool) -> bool:
    """Whether every request followed the failure policy: 200 without
    headers when failing open, 503 with ``Retry-After`` when failing closed."""
    if fail_open:
        return all(s.status == 200 and not s.decided for s in sent)
    return all(s.status == 503 and not s.decided and int(s.retry_after or 0) >= 1 for s in sent)


def decided_again_after(sent: list[Sent], moment: float) -> float:
    """When the first request sent after ``moment`` that every later request
    follows in being decided was sent: recovery, with no relapse."""
    later = [s for s in sent if s.started >= moment]
    assert later, "no request was sent after the fault ended"
    last_undecided = max((i for i, s in enumerate(later) if undecided([s])), default=-1)
    assert last_undecided < len(later) - 1, "no request was decided after the fault ended"
    return later[last_undecided + 1].started


# -- Failover -------------------------------------------------------------------


@pytest.fixture
def replicated() -> Iterator[RedisCluster]:
    """Three masters with a replica each, failing a silent node after 1 s;
    the other masters go on serving their slots meanwhile."""
    with redis_cluster(masters=3, replicas=1, node_timeout=1000, full_coverage=False) as cluster:
        yield cluster


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_failover_only_the_failed_masters_addresses_notice(replicated: RedisCluster, fail_open: bool) -> None:
    """A master is killed (``SIGKILL``) while eight threads send requests
    from addresses on every master; its replica is promoted after the node
    timeout. Addresses on the other masters never notice: every request is
    decided, in time, and each is admitted exactly its quota. Addresses on
    the failed master follow the failure policy from the kill until the
    promotion, then are decided again by the same app, and limited."""
    quota = 1000
    app = make_app(replicated.url, quota, fail_open=fail_open)
    by_master = addresses_by_master(replicated, per_master=2)
    victim_port = next(iter(by_master))
    victim = next(node for node in replicated.masters() if node.port == victim_port)
    failed = by_master[victim_port]
    healthy = [ip for port, group in by_master.items() if port != victim_port for ip in group]
    try:
        with Traffic(app, failed, healthy) as traffic:
            traffic.wait_for(traffic.sent_at_least(failed + healthy, 20), 30, "the first requests")
            killed = time.monotonic()
            victim.stop()
            traffic.wait_for(lambda: len(replicated.masters()) == 3, 30, "a replica to be promoted")
            promoted = time.monotonic()
            traffic.wait_for(
                lambda: all(decided_in(traffic.sent[ip], promoted) >= 20 for ip in failed),
                30,
                "the failed master's addresses to be decided again",
            )
            traffic.wait_for(traffic.refused_at_least(failed + healthy, 50), 120, "the quotas to be spent")
        assert traffic.errors == []
    finally:
        close(app)
    sent = traffic.sent
    # The other masters' addresses: decided throughout, counted exactly.
    assert_decided_exactly(sent, healthy, quota)
    # ...and they were admitted while the master was down.
    assert all(admitted([s for s in sent[ip] if killed <= s.started < promoted]) > 0 for ip in healthy)
    for ip in failed:
        # Decided before the kill (one request may have been in flight).
        assert undecided([s for s in sent[ip] if s.started < killed - 0.5]) == 0, ip
        # The failure policy until the promotion, never a wrong answer.
        down = [s for s in sent[ip] if s.decided is False]
        assert down, f"{ip}: no request noticed the failed master"
        assert policy_followed(down, fail_open), ip
        assert all(killed <= s.started + 0.5 for s in down), ip
        # Decided again, for good, soon after the promotion.
        assert decided_again_after(sent[ip], promoted) < promoted + 10, ip
        # And limited: counts written just before the kill may not have
        # reached the replica, so the address may get those again. A
        # request in flight at the kill may have been counted, and its count
        # replicated, while its reply died with the master: it was answered
        # by the failure policy, yet it spent quota.
        lost_replies = len(in_flight_at(sent[ip], killed))
        assert quota - lost_replies <= admitted(sent[ip]) <= quota + 20, ip
        assert (sent[ip][-1].status, sent[ip][-1].decided) == (429, True), ip
    assert max(slowest(sent[ip]) for ip in failed) < BOUND


def in_flight_at(sent: list[Sent], moment: float) -> list[Sent]:
    """The undecided requests that had been sent but not answered at
    ``moment``."""
    return [s for s in sent if undecided([s]) and s.started <= moment <= s.started + s.elapsed]


def decided_in(sent: list[Sent], since: float) -> int:
    """How many requests sent at or after ``since`` were decided."""
    return sum(1 for s in sent if s.started >= since and not undecided([s]))


# -- A stalled node -----------------------------------------------------------------


@pytest.fixture
def patient() -> Iterator[RedisCluster]:
    """Three masters, no replicas, that wait 5 s before failing a silent
    node: a stall of a few seconds is only a stall."""
    with redis_cluster(masters=3, replicas=0, node_timeout=5000, full_coverage=False) as cluster:
        yield cluster


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_a_stalled_master_affects_only_its_own_addresses(patient: RedisCluster, fail_open: bool) -> None:
    """A master is stopped (``SIGSTOP``) for four seconds while eight threads
    send requests from addresses on every master. Its own addresses follow
    the failure policy, each request within the socket timeout, then are
    decided again once it resumes. The other addresses are decided
    throughout, in time, and each is admitted exactly its quota; their
    refusals, logged on their own nodes, are all in the refusal log. Once
    the stalled master's breaker is open, its addresses' requests no longer
    wait for it, but for the breaker's probes.

    The stalled master is the one that holds the slot of the refusal log's
    name, where a log of one stream would have been."""
    quota = 300
    app = make_app(patient.url, quota, fail_open=fail_open)
    by_master = addresses_by_master(patient, per_master=2)
    with cluster_client(patient) as client:
        victim_port = client.get_node_from_key("rl:refusals").port
    victim = next(node for node in patient.masters() if node.port == victim_port)
    stalled = by_master[victim_port]
    healthy = [ip for port, group in by_master.items() if port != victim_port for ip in group]
    try:
        with Traffic(app, stalled, healthy) as traffic:
            traffic.wait_for(traffic.sent_at_least(healthy, quota // 2), 60, "the first requests")
            stopped = time.monotonic()
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                # Long enough that, after its first requests' two timeouts,
                # its addresses are decided by the breaker for a while.
                time.sleep(4.0)
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            resumed = time.monotonic()
            traffic.wait_for(
                lambda: all(decided_in(traffic.sent[ip], resumed) >= 20 for ip in stalled),
                30,
                "the stalled master's addresses to be decided again",
            )
            traffic.wait_for(traffic.refused_at_least(healthy, 50), 120, "the quotas to be spent")
        assert traffic.errors == []
        logged = dict(refusal_log(app).top(100))
    finally:
        close(app)
    sent = traffic.sent
    assert_decided_exactly(sent, healthy, quota)
    assert all(len([s for s in sent[ip] if stopped <= s.started < resumed]) > 10 for ip in healthy)
    refused = {f"ip:{ip}": sum(1 for s in sent[ip] if s.status == 429) for ip in healthy}
    assert {identity: logged.get(identity, 0) for identity in refused} == refused
    # None waited more than twice the socket timeout. (redis-py's cluster
    # client, which sends a timed-out command again, made requests wait
    # longer. On the public client path, the first request of each stalled
    # address, sent as the master stopped, has been seen to wait two
    # timeouts, the later ones one; docs/deployment.rst says so.)
    assert max(slowest(sent[ip]) for ip in stalled) < 2.5 * SOCKET_TIMEOUT
    # Once the breaker was open, only its probes waited for the node.
    waited = [s for ip in stalled for s in sent[ip] if stopped - 1 <= s.started < resumed and s.elapsed >= 0.5]
    assert len(waited) <= 15, waited
    for ip in stalled:
        during = [s for s in sent[ip] if stopped <= s.started < resumed - SOCKET_TIMEOUT]
        assert len(during) > 10, ip
        assert policy_followed(during, fail_open), ip
        # Decided again, for good, soon after it resumed.
        assert decided_again_after(sent[ip], resumed) < resumed + 10, ip


def test_a_request_on_two_nodes_waits_for_the_keys_a_migration_split(cluster: RedisCluster) -> None:
    """A request known by an address and a user on different masters, while
    the address's keys are split between two nodes by a migration that
    completes 0.3 s later: the request waits for it, is decided, and both
    identities count it once."""
    app = make_app(cluster.url, 4)
    by_master = addresses_by_master(cluster, per_master=1)
    ports = list(by_master)
    source, target, other = (next(n for n in cluster.masters() if n.port == port) for port in ports)
    ip = by_master[source.port][0]
    with cluster_client(cluster) as client:
        slot = client.keyslot(tag_of(ip))
        user = next(
            f"u{i}" for i in range(10_000) if client.get_node_from_key(identity_tag("user", f"u{i}")).port == other.port
        )
    web = app.test_client()
    migration = Migration(source, target, [other], slot)
    try:
        assert [get(web, ip=ip, user=user).status_code for _ in range(2)] == [200, 200]
        migration.begin()
        first, *rest = migration.keys(counter_pattern("rl:", tag_of(ip)))
        assert rest, "one key per scope: the script's keys can be split"
        migration.move(first)

        def complete() -> None:
            time.sleep(0.3)
            for key in rest:
                migration.move(key)
            migration.finish()

        mover = threading.Thread(target=complete)
        mover.start()
        started = time.monotonic()
        response = get(web, ip=ip, user=user)
        elapsed = time.monotonic() - started
        join_all([mover], 10, "the migration")
        assert (response.status_code, "RateLimit" in response.headers) == (200, True)
        assert 0.2 < elapsed < BOUND
        # Counted once on each node: one more each, then both are full.
        assert [get(web, ip=ip, user=user).status_code for _ in range(2)] == [200, 429]
        assert get(web, ip=ip).status_code == 429
        assert get(web, ip="192.0.2.250", user=user).status_code == 429
    finally:
        migration.close()
        close(app)
