"""The connections the lean cluster path keeps per node between requests:
polled together before each send, so that one a node closed while it sat
idle is replaced rather than written to.

Counts are judged by requests through a Flask app, never by reading keys."""

from __future__ import annotations

import select
import time
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from helpers import get, limited_app
from servers import RedisCluster, redis_command
from test_lean_cluster import node_pools, on_two_nodes, remaining, storage_of

from flask_redis_throttle.core import wire

pytestmark = pytest.mark.redis


def counted_twice(redis_cluster: RedisCluster, prefix: str) -> tuple[Flask, FlaskClient, str, Any, Any]:
    """An app limited to 100/m whose requests (an address and the user
    "ann") reach two nodes, after two of them: each node's pool keeps one
    connection. Returns the app, its client, the address and the two nodes."""
    app = limited_app(redis_cluster.url, "100/m", RATELIMIT_KEY_PREFIX=prefix)
    ip, ip_node, user_node = on_two_nodes(app, redis_cluster)
    web = app.test_client()
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [99, 98]
    return app, web, ip, ip_node, user_node


def kept(app: Flask, port: int) -> list[Any]:
    """The connections the lean path keeps to the node on ``port``."""
    return wire.cluster.lean_of(node_pools(app)[port])._free


def close_from_the_server(port: int, conn: Any) -> int:
    """Close ``conn`` from the server's end, as Redis's ``timeout`` would,
    and wait until the client's end has seen it; return its local port."""
    host, local = conn._sock.getsockname()[:2]
    redis_command(port, "CLIENT", "KILL", "ADDR", f"{host}:{local}")
    deadline = time.monotonic() + 5
    while not select.select([conn._sock], (), (), 0)[0]:
        assert time.monotonic() < deadline, "the server did not close the connection"
        time.sleep(0.01)
    return int(local)


def test_kept_connections_both_nodes_closed_while_idle_are_replaced_before_the_send(
    redis_cluster: RedisCluster,
) -> None:
    """Redis's ``timeout``, or a ``CLIENT KILL``, closes a kept connection
    between requests. A cluster node's connection has no retry, so a call
    written to it would fail, not be replayed: the poll before the send
    finds it, and the request is decided on fresh connections, each
    identity counted once."""
    app, web, ip, ip_node, user_node = counted_twice(redis_cluster, "kept-closed:")
    closed = {port: close_from_the_server(port, kept(app, port)[0]) for port in (ip_node.port, user_node.port)}
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [97, 96]
    for port, local in closed.items():
        # Connected anew (redis-py's pool may hand back the same object).
        [fresh] = kept(app, port)
        assert fresh._sock.getsockname()[1] != local
    # The user's own count, with an address that never shared its node.
    assert remaining(get(web, ip="203.0.113.7", user="ann")) == 95
    storage_of(app).close()


def test_a_kept_connection_one_node_closed_is_replaced_and_the_other_kept(redis_cluster: RedisCluster) -> None:
    """Only the closed node's connection is replaced; the other node's kept
    one serves on."""
    app, web, ip, ip_node, user_node = counted_twice(redis_cluster, "kept-one:")
    [closed] = kept(app, user_node.port)
    [open_] = kept(app, ip_node.port)
    open_port = open_._sock.getsockname()[1]
    local = close_from_the_server(user_node.port, closed)
    assert remaining(get(web, ip=ip, user="ann")) == 97
    assert kept(app, ip_node.port) == [open_]
    assert open_._sock.getsockname()[1] == open_port
    [fresh] = kept(app, user_node.port)
    assert fresh._sock.getsockname()[1] != local
    storage_of(app).close()
