"""Where an endpoint's limits come from: the view, its blueprints, ``RATELIMIT_DEFAULT`` and
``RATELIMIT_APPLICATION``, each unless an exemption drops it (see docs/limits.rst).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from flask import Flask
from flask.views import http_method_funcs

from ..decorators import EXEMPT_ATTRIBUTE, LIMITS_ATTRIBUTE, Exemption
from .config import Settings
from .spec import LimitSpec


def limits_of(app: Flask, endpoint: str, settings: Settings, method: str) -> list[tuple[LimitSpec, str]]:
    """Every limit of ``endpoint``, whatever the method, with where it was written;
    ``RATELIMIT_DEFAULT`` among them unless a limit that applies to ``method`` overrides it."""
    view = app.view_functions.get(endpoint)
    if view is None or endpoint == "static" or endpoint.endswith(".static"):
        return []
    exemption: Exemption | None = getattr(view, EXEMPT_ATTRIBUTE, None)
    found = []
    if exemption is None or not exemption.own_limits:  # the view's, or its class's for a class-based view
        found = [(spec, "view") for spec in getattr(view, LIMITS_ATTRIBUTE, ())]
        view_class = getattr(view, "view_class", None)
        if isinstance(view_class, type):
            found += [(spec, "view") for spec in class_view_limits(view_class)]
    drops = set() if exemption is None else set(exemption.drops)
    replacing = settings.blueprint_mode == "replace"
    applying = [spec for spec, _ in found if spec.applies_to(method)]
    replaced = replacing and _overrides_default(applying, settings.default_mode)
    for innermost, name in enumerate(blueprints_of(app, endpoint)):
        blueprint = app.blueprints[name]
        exemption = getattr(blueprint, EXEMPT_ATTRIBUTE, None)
        if "blueprints" not in drops and not replaced:
            specs = () if exemption is not None and exemption.own_limits else getattr(blueprint, LIMITS_ATTRIBUTE, ())
            found += [(spec, f"blueprint {name}") for spec in specs]
            # A blueprint replaces those around it, for its own views, when all its limits would replace the default.
            replaced = (
                replacing
                and innermost == 0
                and bool(specs)
                and all(_overrides_default([spec], settings.default_mode) for spec in specs)
            )
        # An enclosing blueprint's exemption still counts when its limits do not.
        if exemption is not None and (innermost == 0 or exemption.nested):
            drops |= exemption.drops
    own = [spec for spec, _ in found if spec.applies_to(method)]
    if "default" not in drops and settings.default and not _overrides_default(own, settings.default_mode):
        found += [(spec, "RATELIMIT_DEFAULT") for spec in settings.default]
    if "application" not in drops:
        found += [(spec, "RATELIMIT_APPLICATION") for spec in settings.application]
    return found


def _overrides_default(own: list[LimitSpec], mode: str) -> bool:
    """Whether any of ``own`` drops ``RATELIMIT_DEFAULT``, by its ``override_defaults`` or else ``mode``."""
    return any(mode == "replace" if spec.override_defaults is None else spec.override_defaults for spec in own)


def class_view_limits(view_class: type) -> list[LimitSpec]:
    """The limits put on the methods of a class-based view: ``dispatch_request``'s apply to every
    method, a handler's (``get``, ``post``...) to its HTTP method only (``get``'s to ``HEAD`` too),
    in that order, handlers by name.

    :raises TypeError: for a limit or an :func:`~flask_redis_throttle.exempt` that would never
        apply: on a method that handles no request, an exempt on a method, or a handler's limit
        whose ``methods=`` leaves out the handler's own method.
    """
    handlers: dict[str, frozenset[str] | None] = {"dispatch_request": None}
    handlers |= {name: frozenset({name.upper()}) for name in sorted(http_method_funcs)}
    found: list[LimitSpec] = []
    for name, methods in handlers.items():
        for spec in getattr(getattr(view_class, name, None), LIMITS_ATTRIBUTE, ()):
            if methods is not None:
                if spec.methods is not None and not spec.methods & methods:
                    raise TypeError(
                        f"limit {spec.limit!r} on {view_class.__qualname__}.{name}() has methods "
                        f"{sorted(spec.methods)!r}, which leave out {name.upper()}: it would never apply"
                    )
                spec = dataclasses.replace(spec, methods=methods)
            found.append(spec)
    for name in dir(view_class):  # what the view would ignore in silence
        attribute = getattr(view_class, name, None)
        if getattr(attribute, EXEMPT_ATTRIBUTE, False):
            raise TypeError(
                f"exempt() on {view_class.__qualname__}.{name}() is never applied: exempt the whole view with "
                f"`decorators = [exempt]` on {view_class.__qualname__}"
            )
        if name not in handlers and getattr(attribute, LIMITS_ATTRIBUTE, None):
            raise TypeError(
                f"limit() on {view_class.__qualname__}.{name}() is never applied: {name}() handles no request. "
                "Put it on get(), post()... or dispatch_request(), or in the class's `decorators`"
            )
    return found


def blueprints_of(app: Flask, endpoint: str) -> Iterator[str]:
    """The blueprints ``endpoint`` belongs to, innermost first, as ``request.blueprints`` gives them."""
    name = endpoint.rpartition(".")[0]
    while name:
        if name in app.blueprints:
            yield name
        name = name.rpartition(".")[0]
