"""The ``flask ratelimit`` command group, and what other command lines
built on the extension (``flask limiter``, see :doc:`/flask-limiter`) share
with it: the report code, importable for tests, scripts and front ends.

Flask's command line finds the group through the package's
``flask.commands`` entry point; import it from here to invoke it in a test,
as ``app.test_cli_runner().invoke(ratelimit, ["limits"])``. See :doc:`/cli`.
"""

from __future__ import annotations

from ._ops.cli import ratelimit, storage_errors, throttle_of
from ._ops.console import duration, table
from ._ops.reports import RouteLimits, counted_kinds, is_exempt, methods_of, route_limits
from ._request.identity import parse_identity, spec_name

__all__ = [
    "RouteLimits",
    "counted_kinds",
    "duration",
    "is_exempt",
    "methods_of",
    "parse_identity",
    "ratelimit",
    "route_limits",
    "spec_name",
    "storage_errors",
    "table",
    "throttle_of",
]
