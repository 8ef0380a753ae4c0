"""Prometheus metrics: every outcome counted through a real app on a real
Redis, the breaker's state per node, and the sums under gunicorn's
multiprocess mode with two real workers."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from helpers import FakeMonotonic, get, install, wait_for_gunicorn
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from servers import RedisCluster

from flask_redis_throttle import RateLimit, limit, testing
from flask_redis_throttle._ops.metrics import OUTCOMES, metrics_for
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import RedisServer, free_port

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A Redis of this test's own, to kill and restart."""
    with testing.redis_server() as server:
        yield server


def metered(url: str, registry: CollectorRegistry, **config: object) -> tuple[Flask, RateLimitState]:
    """An app on ``url`` whose metrics go to ``registry``: ``/`` allows 2 a
    minute, ``/shadow`` 1 a minute in shadow mode."""
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=url, **config)

    @app.route("/")
    @limit("2/m", scope="tight")
    def index() -> str:
        return "ok"

    @app.route("/shadow")
    @limit("1/m", shadow=True)
    def shadow() -> str:
        return "ok"

    RateLimit(app, metrics=registry)
    state: RateLimitState = app.extensions["ratelimit"]
    return app, state


def decisions(registry: CollectorRegistry, endpoint: str, scope: str) -> dict[str, float]:
    """The non-zero counts of ``ratelimit_decisions_total`` by outcome."""
    counts = {}
    for outcome in OUTCOMES:
        labels = {"endpoint": endpoint, "scope": scope, "outcome": outcome}
        value = registry.get_sample_value("ratelimit_decisions_total", labels)
        if value:
            counts[outcome] = value
    return counts


def test_each_outcome_of_redis_and_the_block_cache_is_counted(server: RedisServer) -> None:
    registry = CollectorRegistry()
    app, _state = metered(server.url, registry)
    client = app.test_client()
    # Two admitted; the third refused by Redis, which fills the block cache;
    # the fourth refused by the cache without asking Redis.
    assert [get(client).status_code for _ in range(4)] == [200, 200, 429, 429]
    assert [get(client, "/shadow").status_code for _ in range(2)] == [200, 200]
    assert decisions(registry, "index", "tight") == {"admitted": 2, "refused": 1, "blocked_in_process": 1}
    assert decisions(registry, "shadow", "shadow") == {"admitted": 1, "shadow_refused": 1}
    assert registry.get_sample_value("ratelimit_decision_seconds_count") == 6
    # Every decision took some time, and less than a minute.
    assert 0 < registry.get_sample_value("ratelimit_decision_seconds_sum") < 60  # type: ignore[operator]
    assert registry.get_sample_value("ratelimit_decision_seconds_bucket", {"le": "+Inf"}) == 6


@pytest.mark.parametrize(
    ("config", "outcome", "statuses"),
    [
        ({}, "fail_open", [200] * 4),
        ({"RATELIMIT_FAIL_OPEN": False}, "fail_closed", [503] * 4),
        # The fallback counts afresh in memory: 2 a minute, refused or not.
        ({"RATELIMIT_FALLBACK": True}, "fallback", [200, 200, 429, 429]),
    ],
)
def test_a_down_redis_is_counted_by_the_failure_policy(
    server: RedisServer, config: dict[str, object], outcome: str, statuses: list[int]
) -> None:
    registry = CollectorRegistry()
    app, _state = metered(server.url, registry, **config)
    client = app.test_client()
    assert get(client).status_code == 200
    server.stop()
    assert [get(client).status_code for _ in range(4)] == statuses
    assert decisions(registry, "index", "tight") == {"admitted": 1, outcome: 4}
    assert registry.get_sample_value("ratelimit_decision_seconds_count") == 5


def test_storage_up_follows_the_breaker(server: RedisServer) -> None:
    registry = CollectorRegistry()
    app, state = metered(server.url, registry, RATELIMIT_BREAKER_THRESHOLD=2, RATELIMIT_BREAKER_BACKOFF=5.0)
    assert state.throttle is not None
    assert state.throttle.breaker is not None
    clock = FakeMonotonic()
    state.throttle.breaker.clock = clock
    node = {"node": server.url}
    # Up from the start, before any request.
    assert registry.get_sample_value("ratelimit_storage_up", node) == 1
    client = app.test_client()
    server.stop()
    get(client)
    assert registry.get_sample_value("ratelimit_storage_up", node) == 1  # one failure: still closed
    get(client)
    assert registry.get_sample_value("ratelimit_storage_up", node) == 0
    server.start()
    clock.now += 5.0
    assert get(client).status_code == 200
    assert registry.get_sample_value("ratelimit_storage_up", node) == 1


def test_a_cluster_reports_each_node(redis_cluster: RedisCluster) -> None:
    registry = CollectorRegistry()
    port = redis_cluster.masters()[0].port
    app, _state = metered(f"redis+cluster://127.0.0.1:{port}/0", registry)
    client = app.test_client()
    for n in range(30):  # 30 addresses: their keys land on every master
        get(client, "/", ip=f"192.0.2.{n}")
    up = {
        sample.labels["node"]: sample.value
        for metric in registry.collect()
        if metric.name == "ratelimit_storage_up"
        for sample in metric.samples
    }
    nodes = {f"127.0.0.1:{master.port}" for master in redis_cluster.masters()}
    assert up == {f"redis+cluster://127.0.0.1:{port}/0": 1, **dict.fromkeys(nodes, 1)}


def test_the_same_registry_serves_several_apps(server: RedisServer) -> None:
    registry = CollectorRegistry()
    first, _ = metered(server.url, registry)
    second, _ = metered(server.url, registry, RATELIMIT_KEY_PREFIX="second:")
    get(first.test_client())
    get(second.test_client())
    assert decisions(registry, "index", "tight") == {"admitted": 2}
    assert metrics_for(registry) is metrics_for(registry)


def test_metrics_off_by_default(server: RedisServer) -> None:
    app = Flask("tests")
    state = install(app, RATELIMIT_STORAGE_URL=server.url)
    assert state.metrics is None


def test_a_registry_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"metrics='yes' must be True, False or a prometheus_client"):
        RateLimit(Flask("tests"), metrics="yes")  # type: ignore[arg-type]


APP = """\
import os
from flask import Flask
from flask_redis_throttle import RateLimit, limit

app = Flask("served")
app.config["RATELIMIT_STORAGE_URL"] = os.environ["FRT_TEST_REDIS_URL"]

@app.route("/")
@limit("1000/m")
def index():
    return str(os.getpid())

RateLimit(app, metrics=True)
"""


def test_gunicorn_multiprocess_mode_sums_the_workers(server: RedisServer, tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (tmp_path / "served.py").write_text(textwrap.dedent(APP))
    port = free_port()
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "FRT_TEST_REDIS_URL": server.url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    command = [sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", f"127.0.0.1:{port}", "served:app"]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_gunicorn(port, process)
        pids = set()
        for _ in range(40):  # a new connection each: the sync workers take turns as the kernel hands them out
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/", headers={"Connection": "close"})
            response = connection.getresponse()
            assert response.status == 200
            pids.add(response.read())
            connection.close()
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(metrics_dir))
        labels = {"endpoint": "index", "scope": "index", "outcome": "admitted"}
        # 40 and the one request that waited for the server to answer.
        assert registry.get_sample_value("ratelimit_decisions_total", labels) == 41
        assert registry.get_sample_value("ratelimit_decision_seconds_count") == 41
        assert registry.get_sample_value("ratelimit_storage_up", {"node": server.url}) == 1
    finally:
        process.terminate()
        process.wait(timeout=30)
    # Both workers wrote their own files, which the collector summed.
    writers = {path.stem.rsplit("_", 1)[1] for path in metrics_dir.glob("histogram_*.db")}
    assert len(writers) == 2, sorted(os.listdir(metrics_dir))


def test_the_fast_path_exports_what_the_public_methods_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import flask_redis_throttle._ops.metrics as module

    fast_registry, public_registry = CollectorRegistry(), CollectorRegistry()
    fast = module.Metrics(fast_registry)
    monkeypatch.setattr(module, "_fast_inc", lambda counter: None)
    monkeypatch.setattr(module, "_fast_observe", lambda histogram: None)
    public = module.Metrics(public_registry)
    # On the bounds, between them, below the first and above the last.
    amounts = [0.0, 0.00005, 0.0001, 0.0002, 0.001, 0.0011, 0.5, 1.0, 3.0]
    for metrics in (fast, public):
        for n, amount in enumerate(amounts):
            metrics.decided("index", "index", OUTCOMES[n % len(OUTCOMES)], amount)

    def samples(registry: CollectorRegistry) -> list[tuple[str, list[tuple[str, str]], float]]:
        return sorted(
            (s.name, sorted(s.labels.items()), s.value)
            for m in registry.collect()
            for s in m.samples
            if not s.name.endswith("_created")
        )

    assert samples(fast_registry) == samples(public_registry)
    assert fast_registry.get_sample_value("ratelimit_decision_seconds_bucket", {"le": "0.0001"}) == 3


def test_metrics_without_prometheus_client_name_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if it were not installed
    app = Flask("tests")
    app.config.update(TESTING=True, RATELIMIT_STORAGE_URL="memory://")
    with pytest.raises(ImportError, match=r'pip install "flask-redis-throttle\[prometheus\]"$'):
        RateLimit(app, metrics=True)
