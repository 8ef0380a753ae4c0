"""The app that ``suite.py``'s end-to-end section serves with gunicorn.

gunicorn loads ``e2e_app:create_app()`` in each worker, with ``benchmarks/``
on its Python path. The environment picks the limiter:

``BENCH_LIMITER``
    ``none`` (the bare app), ``ours`` (flask-redis-throttle) or
    ``flask-limiter``: the same apps as the in-process sections, from
    ``harness.py``: ``GET /`` answers ``ok``, limited by three layers on two
    identities (the client address and the ``X-User`` header), quotas no run
    reaches.
``BENCH_STRATEGY``
    the strategy, ``fixed-window`` unless set.
``BENCH_REDIS_URL``
    the throwaway redis-server the suite started.
"""

from __future__ import annotations

import os

from flask import Flask
from harness import bare_app, flask_limiter_app, our_app

LIMITERS = ("none", "ours", "flask-limiter")


def create_app() -> Flask:
    """The app the environment asks for."""
    limiter = os.environ.get("BENCH_LIMITER", "none")
    strategy = os.environ.get("BENCH_STRATEGY", "fixed-window")
    url = os.environ.get("BENCH_REDIS_URL", "")
    if limiter == "none":
        return bare_app()
    if not url.startswith("redis://127.0.0.1:"):
        raise RuntimeError(f"BENCH_REDIS_URL must be a loopback redis:// URL, not {url!r}")
    if limiter == "ours":
        return our_app(url, "rl-e2e:", strategy=strategy)
    if limiter == "flask-limiter":
        app, _limiter = flask_limiter_app(url, strategy)
        return app
    raise RuntimeError(f"BENCH_LIMITER must be one of {', '.join(LIMITERS)}, not {limiter!r}")
