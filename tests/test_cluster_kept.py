"""The connections the lean cluster path keeps per node between requests:
polled together before each send, so that one a node closed while it sat
idle is replaced rather than written to.

Counts are judged by requests through a Flask app, never by reading keys."""

from __future__ import annotations

import select
import time
from typing import Any

import pytest
from helpers import get, limited_app
from servers import RedisCluster, redis_command
from test_lean_cluster import node_pools, on_two_nodes, remaining, storage_of

from flask_redis_throttle.core import wire

pytestmark = pytest.mark.redis


def wait_closed(conn: Any) -> None:
    """Until the client's end of ``conn`` has seen the server close it."""
    deadline = time.monotonic() + 5
    while not select.select([conn._sock], (), (), 0)[0]:
        assert time.monotonic() < deadline, "the server did not close the connection"
        time.sleep(0.01)


def test_kept_connections_both_nodes_closed_while_idle_are_replaced_before_the_send(
    redis_cluster: RedisCluster,
) -> None:
    """Redis's ``timeout``, or a ``CLIENT KILL``, closes a kept connection
    between requests. A cluster node's connection has no retry, so a call
    written to it would fail, not be replayed: the poll before the send
    finds it, and the request is decided on fresh connections, each
    identity counted once."""
    app = limited_app(redis_cluster.url, "100/m", RATELIMIT_KEY_PREFIX="kept-closed:")
    ip, ip_node, user_node = on_two_nodes(app, redis_cluster)
    web = app.test_client()
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [99, 98]
    pools = node_pools(app)
    kept = {port: wire.cluster.lean_of(pools[port])._free[0] for port in (ip_node.port, user_node.port)}
    closed = {}
    for port, conn in kept.items():
        host, closed[port] = conn._sock.getsockname()[:2]
        redis_command(port, "CLIENT", "KILL", "ADDR", f"{host}:{closed[port]}")
        wait_closed(conn)
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [97, 96]
    for port in kept:
        # Connected anew (redis-py's pool may hand back the same object).
        [fresh] = wire.cluster.lean_of(pools[port])._free
        assert fresh._sock.getsockname()[1] != closed[port]
    # The user's own count, with an address that never shared its node.
    assert remaining(get(web, ip="203.0.113.7", user="ann")) == 95
    storage_of(app).close()


def test_a_kept_connection_one_node_closed_is_replaced_and_the_other_kept(redis_cluster: RedisCluster) -> None:
    """Only the closed node's connection is replaced; the other node's kept
    one serves on."""
    app = limited_app(redis_cluster.url, "100/m", RATELIMIT_KEY_PREFIX="kept-one:")
    ip, ip_node, user_node = on_two_nodes(app, redis_cluster)
    web = app.test_client()
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [99, 98]
    pools = node_pools(app)
    [closed] = wire.cluster.lean_of(pools[user_node.port])._free
    [open_] = wire.cluster.lean_of(pools[ip_node.port])._free
    host, local = closed._sock.getsockname()[:2]
    open_port = open_._sock.getsockname()[1]
    redis_command(user_node.port, "CLIENT", "KILL", "ADDR", f"{host}:{local}")
    wait_closed(closed)
    assert remaining(get(web, ip=ip, user="ann")) == 97
    assert wire.cluster.lean_of(pools[ip_node.port])._free == [open_]
    assert open_._sock.getsockname()[1] == open_port
    [fresh] = wire.cluster.lean_of(pools[user_node.port])._free
    assert fresh._sock.getsockname()[1] != local
    storage_of(app).close()
