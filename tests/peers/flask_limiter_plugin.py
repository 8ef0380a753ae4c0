"""The pytest plugin ``flask_limiter_suite.py`` runs Flask-Limiter's own tests with.

* ``flask_limiter`` and its public submodules are the extension's
  ``flask_redis_throttle.compat.flask_limiter`` modules, so every
  ``from flask_limiter import ...`` in those tests gets the shim.
* ``docker_services``, the fixture their ``conftest.py`` starts storages
  with, starts a ``redis-server`` (``flask_redis_throttle.testing``) on the
  port those tests connect to, once per session; a test that needs
  memcached or MongoDB is skipped: a storage we do not have.
* Their tests move time with ``hiro``, which replaces ``time.time``. The
  extension's scripts read Redis's clock; here they are given the time
  that has passed, by ``time.time()``, since the test started, added to an
  instant on a day boundary, as the repository's own tests pin it
  (``tests/helpers.py``). So hiro moves the scripts' clock, and a test's
  first request starts a fresh window, as the ``limits`` library's windows
  start at their first hit, wherever the wall clock is.
* Each test's outcome is written, as JSON lines, to ``$FRT_PEER_OUTCOMES``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator

import pytest

from flask_redis_throttle.compat import flask_limiter
from flask_redis_throttle.compat.flask_limiter import commands, constants, errors, util
from flask_redis_throttle.core.engine.throttle import Throttle
from flask_redis_throttle.testing import RedisServer

#: The port Flask-Limiter's tests find Redis on (its ``docker-compose.yml``'s).
REDIS_PORT = 46379

for name, module in {"": flask_limiter, ".util": util, ".constants": constants, ".errors": errors}.items():
    sys.modules[f"flask_limiter{name}"] = module
sys.modules["flask_limiter.commands"] = commands


#: Where the scripts' clock starts for each test: a day boundary.
START = 1_800_000_000 // 86_400 * 86_400


class Services:
    """What the tests' ``docker_services`` fixture is asked for."""

    def __init__(self) -> None:
        self.redis: RedisServer | None = None

    def start(self, name: str) -> None:
        if name != "redis":
            pytest.skip(f"{name}: a storage we do not have")
        if self.redis is None:
            self.redis = RedisServer(port=REDIS_PORT)
            try:
                self.redis.start()
            except RuntimeError as error:
                self.redis = None
                pytest.fail(f"could not start redis-server on port {REDIS_PORT}, which the tests expect: {error}")

    def wait_for_service(self, name: str, port: int, check: object) -> None:
        """The server is up once :meth:`start` returns."""

    def close(self) -> None:
        if self.redis is not None:
            self.redis.close()


@pytest.fixture(scope="session")
def _services() -> Iterator[Services]:
    services = Services()
    yield services
    services.close()


@pytest.fixture
def docker_services(_services: Services) -> Services:
    return _services


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.time()

    def now(self: Throttle) -> int:
        return int((START + time.time() - started) * 1_000_000)

    monkeypatch.setattr(Throttle, "now", now)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("FRT_PEER_OUTCOMES")
    if not path:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "skipped" if report.skipped else report.outcome
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2]
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps({"test": report.nodeid, "outcome": outcome, "reason": reason}) + "\n")
