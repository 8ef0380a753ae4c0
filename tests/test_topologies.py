"""Redis Cluster, Sentinel and TLS, each against real servers started here.

The core behaviour tests already run on the session's 3-master cluster (the
``cluster`` storage in conftest). These add what only a topology has: one
script per identity and node, refunds across nodes, failovers, and TLS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from flask import Flask
from helpers import add_login, evalsha_calls, extension_records, get, join_all, limited_app
from servers import RedisCluster, RedisSentinelGroup, redis_cluster, redis_command, redis_sentinel_group, tls_proxy

from flask_redis_throttle import Identity, RateLimit, limit
from flask_redis_throttle.core.engine.rates import parse_limits
from flask_redis_throttle.core.engine.throttle import Policy
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.testing import RedisServer, free_port

pytestmark = pytest.mark.redis


def evalsha_calls_per_master(cluster: RedisCluster) -> dict[int, int]:
    """EVALSHA calls so far, per master port."""
    calls = {}
    for node in cluster.masters():
        with redis.Redis(port=node.port) as client:
            calls[node.port] = evalsha_calls(client)
    return calls


def command_calls_per_master(cluster: RedisCluster) -> dict[int, int]:
    """COMMAND calls so far (any subcommand), per master port."""
    calls = {}
    for node in cluster.masters():
        with redis.Redis(port=node.port) as client:
            stats = client.info("commandstats")
            calls[node.port] = sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_command"))
    return calls


def cluster_client(cluster: RedisCluster) -> redis.cluster.RedisCluster:
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in cluster.startup_nodes]
    return redis.cluster.RedisCluster(startup_nodes=nodes)


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    redis_cluster.flushall()
    for node in redis_cluster.masters():
        redis_command(node.port, "CONFIG", "RESETSTAT")
    return redis_cluster


def test_each_identity_is_one_script_on_its_own_node(cluster: RedisCluster) -> None:
    app = limited_app(cluster.url, "10/s;100/m;1000/h")
    client = app.test_client()
    # Find an IP and a user whose keys live on different nodes.
    throttle = app.extensions["ratelimit"].throttle
    policy = Policy(parse_limits("10/s;100/m;1000/h"), "index")
    slots = cluster_client(cluster)
    node_of = {
        ident: slots.get_node_from_key(throttle.key(policy, ident)).port
        for ident in (Identity("ip", "192.0.2.1"), Identity("user", "ann"))
    }
    slots.close()
    get(client, user="ann")  # loads the script
    before = evalsha_calls_per_master(cluster)
    commands = command_calls_per_master(cluster)
    for _ in range(5):
        assert get(client, user="ann").status_code == 200
    after = evalsha_calls_per_master(cluster)
    spent = {port: after[port] - before[port] for port in after}
    # Three layers each, two identities: one script per identity per request,
    # on the node that holds that identity, and nothing anywhere else.
    expected = dict.fromkeys(after, 0)
    for port in node_of.values():
        expected[port] += 5
    assert spent == expected
    # Each call went straight to its node: no node was asked for the keys
    # of a call (COMMAND GETKEYS) first.
    assert command_calls_per_master(cluster) == commands


def test_a_refusal_by_one_identity_is_refunded_on_the_others(cluster: RedisCluster) -> None:
    app = limited_app(cluster.url, "3/m")
    client = app.test_client()
    # The user uses up its quota from three other addresses.
    for i in range(3):
        assert get(client, ip=f"198.51.100.{i}", user="ann").status_code == 200
    # From a fresh address, the user is refused; the address admitted the
    # request on its own node, and must have been given it back.
    for _ in range(5):
        assert get(client, ip="192.0.2.1", user="ann").status_code == 429
    # So the address still has its whole quota.
    response = get(client, ip="192.0.2.1")
    assert response.status_code == 200
    assert response.headers["RateLimit"].startswith('"1m";r=2;')
    assert [get(client, ip="192.0.2.1").status_code for _ in range(3)] == [200, 200, 429]


def test_script_flush_on_every_node_counts_no_request_twice(cluster: RedisCluster) -> None:
    app = limited_app(cluster.url, "4/m")
    client = app.test_client()
    assert get(client, user="ann").status_code == 200
    for node in cluster.masters():
        redis_command(node.port, "SCRIPT", "FLUSH")
    # Both identities' scripts meet NOSCRIPT; each is run again once only.
    assert [get(client, user="ann").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_an_apps_own_cluster_client_can_be_handed_over(cluster: RedisCluster) -> None:
    client = cluster_client(cluster)
    app = Flask("tests")
    app.config["TESTING"] = True
    add_login(app)

    @app.get("/")
    @limit("2/m")
    def index() -> str:
        return "ok"

    RateLimit(app, redis=client)
    assert app.extensions["ratelimit"].throttle.storage.cluster
    web = app.test_client()
    assert [get(web, user="ann").status_code for _ in range(3)] == [200, 200, 429]
    client.close()


class Traffic:
    """Threads sending requests until stopped, keeping every status code;
    a test client raises on a 500 from our code (TESTING), so any such
    error ends up in ``errors``."""

    def __init__(self, app: Flask, threads: int = 2) -> None:
        self.app = app
        self.statuses: list[int] = []
        #: ``(ip, user, status, decided)`` of each request; decided means
        #: Redis decided it, which only then sends the RateLimit header.
        self.results: list[tuple[str, str, int, bool]] = []
        self.errors: list[BaseException] = []
        self.slowest = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(threads)]

    def _run(self, n: int) -> None:
        client = self.app.test_client()
        i = 0
        while not self._stop.is_set():
            i += 1
            started = time.monotonic()
            ip, user = f"203.0.113.{n}", f"u{n}-{i % 50}"
            try:
                response = get(client, ip=ip, user=user)
                self.statuses.append(response.status_code)
                self.results.append((ip, user, response.status_code, "RateLimit" in response.headers))
            except BaseException as error:
                self.errors.append(error)
            self.slowest = max(self.slowest, time.monotonic() - started)
            time.sleep(0.005)

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        join_all(self._threads, deadline=10, what="traffic threads (a request hung)")


@pytest.fixture
def failover_cluster() -> Iterator[RedisCluster]:
    """Three masters with a replica each. The other masters go on serving
    their slots while one is down, until its replica takes over."""
    with redis_cluster(masters=3, replicas=1, full_coverage=False) as cluster:
        yield cluster


def test_cluster_master_failover_while_requests_flow(failover_cluster: RedisCluster) -> None:
    app = limited_app(failover_cluster.url, "1000/m", RATELIMIT_BREAKER_BACKOFF=0.2)
    victim = failover_cluster.masters()[0]
    # Where each identity the traffic uses lives before the failover.
    throttle = app.extensions["ratelimit"].throttle
    policy = Policy(parse_limits("1000/m"), "index")
    slots = cluster_client(failover_cluster)
    identities = [Identity("ip", f"203.0.113.{n}") for n in range(2)]
    identities += [Identity("user", f"u{n}-{i}") for n in range(2) for i in range(50)]
    on_victim = {
        ident.value for ident in identities if slots.get_node_from_key(throttle.key(policy, ident)).port == victim.port
    }
    slots.close()
    with Traffic(app) as traffic:
        time.sleep(0.3)
        victim.stop()  # its replica takes over after the node timeout (1 s)
        deadline = time.monotonic() + 20
        while len(failover_cluster.masters()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        failover_cluster.wait_until_ok()
        time.sleep(0.5)
    assert traffic.errors == []
    assert set(traffic.statuses) <= {200}
    assert traffic.slowest < 3.0
    # Requests whose identities all live on the other nodes were decided
    # throughout; only those touching the failed master may have failed open.
    elsewhere = [decided for ip, user, _, decided in traffic.results if not {ip, user} & on_victim]
    assert len(elsewhere) > 20
    assert all(elsewhere)
    # Limiting is exact again on the new topology, for identities on every node.
    strict = limited_app(failover_cluster.url, "2/m")
    web = strict.test_client()
    for i in range(12):
        assert [get(web, ip=f"192.0.2.{i}", user=f"v{i}").status_code for _ in range(3)] == [200, 200, 429]


def test_sentinel_failover_while_requests_flow() -> None:
    with redis_sentinel_group() as group:
        app = limited_app(group.url, "1000/m", RATELIMIT_BREAKER_BACKOFF=0.2)
        with Traffic(app) as traffic:
            time.sleep(0.3)
            group.failover()  # kills the master; the sentinel promotes the replica
            time.sleep(0.6)  # the breaker's back-off, and a probe
        assert traffic.errors == []
        assert set(traffic.statuses) <= {200}
        assert traffic.slowest < 3.0
        # The promoted replica decides, exactly.
        strict = limited_app(group.url, "2/m")
        web = strict.test_client()
        for i in range(3):
            assert [get(web, ip=f"192.0.2.{i}").status_code for _ in range(3)] == [200, 200, 429]
        master = redis.Redis(port=group.master.port)
        assert master.role()[0] == b"master"
        assert any(key.startswith(b"rl:{ip:") for key in master.scan_iter())
        master.close()


def test_tls_with_the_ca_limits_and_without_it_fails_open(redis_server: RedisServer, caplog) -> None:
    redis.Redis.from_url(redis_server.url).flushall()
    with tls_proxy(redis_server.port) as proxy:
        trusted = limited_app(proxy.url, "2/m", RATELIMIT_STORAGE_OPTIONS={"ssl_ca_certs": proxy.ca_file})
        web = trusted.test_client()
        assert [get(web).status_code for _ in range(3)] == [200, 200, 429]
        # A client that does not trust the server's certificate never sends
        # a command: it fails open, and says why.
        untrusting = limited_app(proxy.url, "2/m", RATELIMIT_KEY_PREFIX="other:")
        with caplog.at_level("WARNING", "flask_redis_throttle"):
            assert [get(untrusting.test_client()).status_code for _ in range(3)] == [200, 200, 200]
        assert "certificate verify failed" in extension_records(caplog)[-1].getMessage().lower()
        for app in (trusted, untrusting):
            app.extensions["ratelimit"].throttle.storage.close()


def test_a_storage_closes_cleanly(cluster: RedisCluster) -> None:
    storage = Storage.from_url(cluster.url)
    storage.close()  # never used: nothing was built, nothing to close
    assert storage.client.ping()  # and it still works after that
    storage.close()


def node_of_ip(app: Flask, cluster: RedisCluster, ips: list[str]) -> dict[str, int]:
    """The port of the master that holds each IP's counters under ``/``."""
    throttle = app.extensions["ratelimit"].throttle
    policy = Policy(parse_limits("1000/m"), "index")
    slots = cluster_client(cluster)
    try:
        return {ip: slots.get_node_from_key(throttle.key(policy, Identity("ip", ip))).port for ip in ips}
    finally:
        slots.close()


@pytest.fixture
def partial_cluster() -> Iterator[RedisCluster]:
    """Three masters and no replicas, serving their slots while one is down."""
    with redis_cluster(masters=3, replicas=0, full_coverage=False) as cluster:
        yield cluster


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_a_dead_master_leaves_the_other_nodes_deciding(
    partial_cluster: RedisCluster, fail_open: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A master is killed while threads send requests from addresses on
    every node. Addresses on the other nodes go on being decided, each
    request counted exactly once; only those on the dead node follow the
    failure policy, quickly."""
    app = limited_app(partial_cluster.url, "1000/m", RATELIMIT_FAIL_OPEN=fail_open)
    candidates = [f"192.0.2.{i}" for i in range(1, 120)]
    victim = partial_cluster.masters()[0]
    nodes = node_of_ip(app, partial_cluster, candidates)
    dead = [ip for ip in candidates if nodes[ip] == victim.port][:3]
    healthy = [ip for ip in candidates if nodes[ip] != victim.port][:6]
    results: dict[str, list[tuple[int, bool, float]]] = {ip: [] for ip in dead + healthy}
    errors: list[BaseException] = []
    stop = threading.Event()

    def send(ips: list[str], pause: float) -> None:
        client = app.test_client()
        try:
            while not stop.is_set():
                for ip in ips:
                    started = time.monotonic()
                    response = get(client, ip=ip)
                    elapsed = time.monotonic() - started
                    results[ip].append((response.status_code, "RateLimit" in response.headers, elapsed))
                    time.sleep(pause)
        except BaseException as error:  # surfaced below
            errors.append(error)

    # More traffic to the dead node than to the others, so that its failures
    # come several in a row, as they do when most requests touch it. Its
    # threads still sleep a millisecond between requests: once its breaker is
    # open, a request does no I/O, and two threads that never block hold the
    # GIL for a switch interval each time another thread wakes, which starved
    # the healthy threads on a loaded machine (on Python 3.10, to half the
    # requests 3.11 sends) below the ten requests this test asks of them.
    groups = [(dead, 0.001), (dead, 0.001), (healthy[:3], 0.01), (healthy[3:], 0.01)]
    threads = [threading.Thread(target=send, args=group) for group in groups]
    caplog.set_level("WARNING", "flask_redis_throttle")
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        victim.stop()
        killed = {ip: len(sent) for ip, sent in results.items()}
        time.sleep(2.5)  # past the node timeout: the cluster marks the node failed
    finally:
        stop.set()
        join_all(threads, deadline=15, what="traffic threads (a request hung)")
    assert errors == []
    for ip in healthy:
        sent = results[ip]
        assert len(sent) > killed[ip] + 10, ip  # traffic went on after the kill
        assert [(status, decided) for status, decided, _ in sent] == [(200, True)] * len(sent), ip
        assert max(elapsed for _, _, elapsed in sent) < 2.0
        # Counted exactly once each: the next request sees them all.
        response = get(app.test_client(), ip=ip)
        assert response.headers["RateLimit"].startswith(f'"1m";r={1000 - len(sent) - 1};'), ip
    # The warning names the dead node.
    assert f"127.0.0.1:{victim.port}" in extension_records(caplog)[0].getMessage()
    undecided = (200, False) if fail_open else (503, False)
    for ip in dead:
        # Two threads send to the dead node's addresses: each may have had a
        # request of this address in flight at the kill, answered just before.
        after = results[ip][killed[ip] + 2 :]
        assert after, ip
        assert {(status, decided) for status, decided, _ in after} == {undecided}, ip
        assert max(elapsed for _, _, elapsed in after) < 2.0
    # Once the breaker of the dead node opened, its requests were answered at once.
    slow = [elapsed for ip in dead for _, _, elapsed in results[ip][killed[ip] :] if elapsed >= 0.2]
    assert len(slow) <= 10, slow


def timed_statuses(app: Flask, count: int, pause: float = 0.0) -> list[tuple[int, bool, float, str | None]]:
    """``count`` GETs from a fresh client: status, whether Redis decided,
    seconds taken, and the ``Retry-After`` header."""
    client = app.test_client()
    results = []
    for i in range(count):
        started = time.monotonic()
        response = get(client, ip=f"192.0.2.{i % 200}")
        elapsed = time.monotonic() - started
        decided = "RateLimit" in response.headers
        results.append((response.status_code, decided, elapsed, response.headers.get("Retry-After")))
        time.sleep(pause)
    return results


@pytest.fixture(scope="module")
def sentinel_group() -> Iterator[RedisSentinelGroup]:
    with redis_sentinel_group() as group:
        yield group


def counting_calls(state: Any) -> list[int]:
    """Record every script call the throttle makes to Redis."""
    calls: list[int] = []
    evaluate = state.throttle.sender.evaluate

    def counted(*args: Any) -> Any:
        calls.append(1)
        return evaluate(*args)

    state.throttle.sender.evaluate = counted
    return calls


@pytest.mark.parametrize("dead", [(1, 0), (0, 1), (2, 1)], ids=["dead-first", "dead-last", "three-dead"])
def test_dead_sentinels_cost_a_request_no_more_than_the_timeouts(
    sentinel_group: RedisSentinelGroup, dead: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    """Sentinels that do not answer, listed before or after the live one:
    the first requests of a new process, which discover the master, are
    decided, each within the client's timeouts (0.5 s), not after
    redis-py's default retries with back-off (seconds per dead sentinel)."""
    before, after = ([f"127.0.0.1:{free_port()}" for _ in range(n)] for n in dead)
    hosts = [*before, f"127.0.0.1:{sentinel_group.sentinel_port}", *after]
    app = limited_app(f"redis+sentinel://{','.join(hosts)}/{sentinel_group.service}", "1000/m")
    with caplog.at_level("WARNING", "flask_redis_throttle"):
        results = timed_statuses(app, 5)
    assert [(status, decided) for status, decided, _, _ in results] == [(200, True)] * 5
    assert max(elapsed for _, _, elapsed, _ in results) < 1.0
    assert caplog.records == []


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_with_every_sentinel_dead_requests_and_probes_are_quick(
    fail_open: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """No sentinel answers: every request, the breaker's probes included,
    follows the failure policy within the timeouts."""
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()},127.0.0.1:{free_port()}/mymaster"
    app = limited_app(url, "1000/m", RATELIMIT_FAIL_OPEN=fail_open, RATELIMIT_BREAKER_BACKOFF=0.05)
    state = app.extensions["ratelimit"]
    calls = counting_calls(state)
    # Paced past the back-off, so that the breaker lets probes through.
    with caplog.at_level("WARNING", "flask_redis_throttle"):
        results = timed_statuses(app, 8, pause=0.06)
    assert len(calls) >= 5  # the first three failures, then probes
    assert {(status, decided) for status, decided, _, _ in results} == {(200 if fail_open else 503, False)}
    assert max(elapsed for _, _, elapsed, _ in results) < 1.0
    if not fail_open:
        assert all(int(retry_after or 0) >= 1 for *_, retry_after in results)
    assert "No master found for 'mymaster'" in caplog.records[0].getMessage()
