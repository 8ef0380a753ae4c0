"""The Flask-free core: limits, keys, scripts, storage and the decision.

Nothing here imports Flask, Werkzeug or Flask-Login, nor the package outside ``core`` (``tests/test_layers.py``
checks it), so a worker, a queue consumer or a script can throttle with it alone (see :doc:`/core`). The names
documented in the "Core" section of :doc:`/api` follow the package's version; any other may change in any release.
"""
