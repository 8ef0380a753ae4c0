"""The connections a cluster's nodes closed while they sat idle in redis-py's
pools (Redis's ``timeout``, ``CLIENT KILL``, a restart): redis-py's pool
finds each before anything is sent on it, and the request is decided on a
new one, each identity counted once.

Counts are judged by requests through a Flask app, never by reading keys."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from helpers import get, limited_app
from servers import RedisCluster, redis_command
from test_cluster_path import on_two_nodes, remaining, storage_of

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


def close_idle_connections(port: int) -> None:
    """Close, from the node's end, every normal client connection to the
    node on ``port`` (the app's idle pooled ones among them), as Redis's
    ``timeout`` would."""
    redis_command(port, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


def test_connections_both_nodes_closed_while_idle_are_replaced_before_the_send(
    redis_cluster: RedisCluster,
) -> None:
    """A cluster node's client has no retry of its own on redis-py 8, so a
    call written to a closed connection would fail, not be replayed: the
    pool's checkout finds it closed, and the request is decided on fresh
    connections, each identity counted once."""
    app, web, ip, ip_node, user_node = counted_twice(redis_cluster, "kept-closed:")
    for port in (ip_node.port, user_node.port):
        close_idle_connections(port)
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [97, 96]
    # The user's own count, with an address that never shared its node.
    assert remaining(get(web, ip="203.0.113.7", user="ann")) == 95
    storage_of(app).close()


def test_a_connection_one_node_closed_is_replaced_and_the_other_serves_on(redis_cluster: RedisCluster) -> None:
    app, web, ip, _, user_node = counted_twice(redis_cluster, "kept-one:")
    close_idle_connections(user_node.port)
    assert [remaining(get(web, ip=ip, user="ann")) for _ in range(2)] == [97, 96]
    assert remaining(get(web, ip="203.0.113.8", user="ann")) == 95
    storage_of(app).close()
