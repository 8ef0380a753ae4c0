"""The single server of flask_redis_throttle.testing and the topologies of
tests/servers.py come up, answer redis-py, and survive what tests do to them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient
from redis.sentinel import Sentinel
from servers import (
    RedisCluster,
    RedisReplyError,
    RedisSentinelGroup,
    TLSProxy,
    find_redis_cli,
    make_tls_certificates,
    redis_cluster,
    redis_command,
    redis_sentinel_group,
    tls_proxy,
    wait_until,
)

from flask_redis_throttle import testing
from flask_redis_throttle.testing import RedisServer, redis_server

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


def cluster_client(cluster: RedisCluster) -> ClusterClient:
    return ClusterClient(startup_nodes=[ClusterNode(host, port) for host, port in cluster.startup_nodes])


def test_redis_command_decodes_replies(server: RedisServer) -> None:
    assert redis_command(server.port, "PING") == "PONG"
    assert redis_command(server.port, "SET", "k", "v") == "OK"
    assert redis_command(server.port, "GET", "k") == "v"
    assert redis_command(server.port, "GET", "missing") is None
    assert redis_command(server.port, "RPUSH", "l", 1, 2) == 2
    assert redis_command(server.port, "LRANGE", "l", 0, -1) == ["1", "2"]
    with pytest.raises(RedisReplyError, match="WRONGTYPE"):
        redis_command(server.port, "GET", "l")
    redis_command(server.port, "FLUSHALL")


def test_a_cluster_serves_every_slot_and_recovers_a_restarted_master() -> None:
    # redis-cli, which creates the cluster.
    path = find_redis_cli()
    assert os.access(path, os.X_OK)
    assert os.path.basename(path) == "redis-cli"
    started = time.monotonic()
    with redis_cluster() as cluster:
        assert time.monotonic() - started < 10
        ports = [port for _, port in cluster.startup_nodes]
        assert cluster.url == "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports)
        assert sorted(node.port for node in cluster.masters()) == sorted(ports)
        client = cluster_client(cluster)
        try:
            keys = [f"key:{i}" for i in range(100)]  # spread over every master
            for key in keys:
                client.set(key, key)
            assert {client.keyslot(key) // 5462 for key in keys} == {0, 1, 2}
            assert all(client.get(key) == key.encode() for key in keys)

            cluster.flushall()
            assert not any(client.exists(key) for key in keys)

            victim = cluster.nodes[1]
            victim.stop()
            victim.start()
            cluster.wait_until_ok()
            assert len(cluster.masters()) == 3
            assert redis_command(victim.port, "CLUSTER", "COUNTKEYSINSLOT", 0) == 0
            for key in keys:
                client.set(key, "again")
            assert all(client.get(key) == b"again" for key in keys)
        finally:
            client.close()


def test_a_cluster_with_replicas_keeps_them_in_sync() -> None:
    with redis_cluster(masters=3, replicas=1) as cluster:
        assert len(cluster.nodes) == 6
        masters, replicas = cluster.masters(), cluster.replicas()
        assert len(masters) == len(replicas) == 3
        assert {node.port for node in masters} == {port for _, port in cluster.startup_nodes}
        client = cluster_client(cluster)
        try:
            client.set("k", "v")
            slot = client.keyslot("k")
            owner = next(n for n in masters if redis_command(n.port, "CLUSTER", "COUNTKEYSINSLOT", slot) == 1)
            # Replication is asynchronous: only after WAIT has the replica the key.
            assert redis_command(owner.port, "WAIT", 1, 2000) == 1

            def replicated() -> bool:
                # The replicas of now, and a few seconds to show the key: on
                # a machine loaded to stalling (CI runs this beside a busy
                # loop per core), a node can miss its 1 s node timeout, and
                # a failover or a resync moves the key under a fixed list.
                return any(
                    node is not owner and redis_command(node.port, "CLUSTER", "COUNTKEYSINSLOT", slot) == 1
                    for node in cluster.replicas()
                )

            wait_until(replicated, 10.0, "a replica to hold the key")
        finally:
            client.close()


def test_a_cluster_needs_three_masters() -> None:
    with pytest.raises(ValueError, match="3 masters"):
        RedisCluster(masters=2)


def test_a_sentinel_group_serves_and_fails_over_to_the_replica() -> None:
    started = time.monotonic()
    with redis_sentinel_group() as group:
        assert time.monotonic() - started < 10
        assert group.service == "mymaster"
        assert group.url == f"redis+sentinel://127.0.0.1:{group.sentinel_port}/mymaster"
        sentinel = Sentinel([("127.0.0.1", group.sentinel_port)], socket_timeout=1)
        try:
            assert sentinel.discover_master("mymaster") == ("127.0.0.1", group.master.port)
            assert sentinel.discover_slaves("mymaster") == [("127.0.0.1", group.replica.port)]
            master = sentinel.master_for("mymaster", socket_timeout=1)
            master.set("k", "before")
            assert master.wait(1, 2000) == 1

            old_master, old_replica = group.master, group.replica
            new_port = group.failover()
            assert new_port == old_replica.port
            assert group.master is old_replica
            assert group.replica is old_master
            assert not old_master.running

            assert sentinel.discover_master("mymaster") == ("127.0.0.1", new_port)
            promoted = sentinel.master_for("mymaster", socket_timeout=1)
            assert promoted.get("k") == b"before"
            promoted.set("k", "after")
            assert promoted.get("k") == b"after"
        finally:
            for client in sentinel.sentinels:
                client.close()


def test_a_tls_proxy_checks_certificates_and_forwards(server: RedisServer, tmp_path) -> None:
    with tls_proxy(server.port) as proxy:
        assert proxy.url == f"rediss://127.0.0.1:{proxy.port}/0"
        with redis.Redis.from_url(proxy.url, ssl_ca_certs=proxy.ca_file) as client:
            assert client.ping()
            client.set("tls", "yes")
            assert redis_command(server.port, "GET", "tls") == "yes"
            big = os.urandom(3 * 1024 * 1024)  # larger than the proxy's buffers, both ways
            client.set("big", big)
            assert client.get("big") == big
            client.delete("tls", "big")

        # The proxy's certificate is not trusted by default.
        with redis.Redis.from_url(proxy.url) as untrusting, pytest.raises(redis.ConnectionError, match="CERTIFICATE"):
            untrusting.ping()
        # Nor with some other CA.
        with (
            redis.Redis.from_url(proxy.url, ssl_ca_certs=make_tls_certificates(str(tmp_path)).ca_file) as other,
            pytest.raises(redis.ConnectionError, match="CERTIFICATE"),
        ):
            other.ping()


def test_a_tls_proxy_with_a_hostname_check() -> None:
    with redis_server() as server, tls_proxy(server.port) as proxy:
        url = f"rediss://localhost:{proxy.port}/0"
        with redis.Redis.from_url(url, ssl_ca_certs=proxy.ca_file, ssl_check_hostname=True) as client:
            assert client.ping()


def test_a_tls_proxy_can_require_client_certificates(server: RedisServer, tmp_path) -> None:
    certificates = make_tls_certificates(str(tmp_path))
    with tls_proxy(server.port, certificates, require_client_cert=True) as proxy:
        assert proxy.ca_file == certificates.ca_file
        with (
            redis.Redis.from_url(proxy.url, ssl_ca_certs=proxy.ca_file) as anonymous,
            pytest.raises(redis.ConnectionError),
        ):
            anonymous.ping()
        with redis.Redis.from_url(
            proxy.url,
            ssl_ca_certs=proxy.ca_file,
            ssl_certfile=certificates.client_cert_file,
            ssl_keyfile=certificates.client_key_file,
        ) as client:
            assert client.ping()


def test_a_tls_proxy_serves_many_clients_at_once(server: RedisServer) -> None:
    threads_before = threading.active_count()
    with tls_proxy(server.port) as proxy:
        assert threading.active_count() == threads_before + 1

        def work(i: int) -> int:
            with redis.Redis.from_url(proxy.url, ssl_ca_certs=proxy.ca_file) as client:
                pipe = client.pipeline(transaction=False)
                for _ in range(50):
                    pipe.incr(f"counter:{i % 4}")
                pipe.execute()
                for _ in range(10):
                    client.incr(f"counter:{i % 4}")
                return i

        pool = ThreadPoolExecutor(24)
        try:  # a deadline: a hung worker fails the test, not the suite's timeout
            done = sorted(pool.map(work, range(40), timeout=30))
        except TimeoutError:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()  # every worker has finished: its thread ends at once
        assert done == list(range(40))
        assert sum(int(str(redis_command(server.port, "GET", f"counter:{i}"))) for i in range(4)) == 40 * 60
        redis_command(server.port, "FLUSHALL")
    assert threading.active_count() == threads_before


def test_a_tls_proxy_passes_on_failures() -> None:
    with (
        redis_server() as target,
        tls_proxy(target.port) as proxy,
        redis.Redis.from_url(proxy.url, ssl_ca_certs=proxy.ca_file) as client,
    ):
        assert client.ping()
        proxy.drop_connections()
        time.sleep(0.1)
        # redis-py notices the dead connection, reconnects, and goes on.
        assert client.ping()

        target.stop()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        target.start()
        assert client.ping()

        proxy.stop()
        assert not proxy.running
        with pytest.raises(redis.ConnectionError):
            client.ping()
        proxy.start()
        assert client.ping()


def test_a_tls_proxy_closes_cleanly_with_connections_open(server: RedisServer) -> None:
    threads_before = threading.active_count()
    proxy = TLSProxy(server.port)
    proxy.start()
    with socket.create_connection(("127.0.0.1", proxy.port)) as half_open:  # no TLS handshake yet
        with redis.Redis.from_url(proxy.url, ssl_ca_certs=proxy.ca_file) as client:
            assert client.ping()
            proxy.close()
            with pytest.raises(redis.ConnectionError):
                client.ping()
        half_open.settimeout(5)
        assert half_open.recv(1) == b""
    assert threading.active_count() == threads_before
    assert not os.path.exists(proxy.ca_file)  # it made its certificates, and removed them


def test_sentinel_group_attributes_before_start() -> None:
    group = RedisSentinelGroup("other")
    try:
        assert group.url == f"redis+sentinel://127.0.0.1:{group.sentinel_port}/other"
        assert group.master.port != group.replica.port
    finally:
        group.close()


def test_the_package_keeps_only_the_single_server() -> None:
    """The launchers only this repository's tests use are not in the
    package, nor are names that clash with redis-py's."""
    assert set(testing.__all__) == {"RedisServer", "find_redis_server", "free_port", "redis_server", "server_version"}
    for name in ("RedisCluster", "Reply", "redis_cluster", "redis_sentinel_group", "tls_proxy", "redis_command"):
        assert not hasattr(testing, name), name


def test_the_launchers_import_from_the_repository_root() -> None:
    """The benchmarks import them as ``tests.servers``: servers.py imports
    nothing by a name that only ``tests/`` on ``sys.path`` would find."""
    code = "import tests.servers as servers; print(servers.redis_cluster.__name__)"
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout.strip()) == (0, "redis_cluster"), result.stderr
