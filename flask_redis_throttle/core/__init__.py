"""The Flask-free core: limits, keys, scripts, storage and the decision.

Nothing here imports Flask, Werkzeug or Flask-Login, nor anything of the
package outside ``core`` (``tests/test_layers.py`` checks it), so a worker,
a queue consumer or a script can throttle with it alone; see
:doc:`/core`. The Flask extension is one layer above it.

Stability: the names documented in the "Core" section of :doc:`/api` follow
the package's version like the names of ``flask_redis_throttle`` itself; any
other name in these modules may change in any release.
"""
