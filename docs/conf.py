"""Sphinx configuration for the flask-redis-throttle documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html``. The build needs
no network access: intersphinx is deliberately not used.
"""

from importlib.metadata import version as _version

project = "flask-redis-throttle"
release = _version("flask-redis-throttle")
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]

# Document members in the order they appear in the source, which is the order
# in which they were written to be read.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

# Unresolved references to Flask, werkzeug or redis-py names stay plain text.
nitpicky = False

exclude_patterns = ["_build"]

html_theme = "furo"
html_title = f"{project} {release}"
html_show_copyright = False
