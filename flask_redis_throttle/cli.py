"""The ``flask ratelimit`` command group, importable for tests and scripts.

Flask's command line finds the group through the package's
``flask.commands`` entry point; import it from here to invoke it in a test,
as ``app.test_cli_runner().invoke(ratelimit, ["limits"])``. See :doc:`/cli`.
"""

from __future__ import annotations

from ._cli import ratelimit

__all__ = ["ratelimit"]
