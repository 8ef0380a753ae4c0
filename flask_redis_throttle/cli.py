"""The ``flask ratelimit`` command group (:doc:`/cli`, found through the ``flask.commands`` entry point), and the
report code other front ends built on the extension, such as ``flask limiter``, share with it."""

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
