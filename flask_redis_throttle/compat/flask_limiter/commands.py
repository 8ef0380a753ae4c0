"""Flask-Limiter's ``flask_limiter.commands``: ``cli`` is the ``flask
ratelimit`` group's commands under Flask-Limiter's group name, ``limiter``,
for tests that invoke it with ``app.test_cli_runner()``; see :doc:`/cli`."""

from __future__ import annotations

from flask.cli import AppGroup

from ...cli import ratelimit

__all__ = ["cli"]

#: ``flask limiter``: the same commands as ``flask ratelimit``.
cli = AppGroup("limiter", help=ratelimit.help, commands=ratelimit.commands)
