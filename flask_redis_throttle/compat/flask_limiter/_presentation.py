"""What a Flask-Limiter app sees of a decision already made (:ref:`shown-as-flask-limiter`)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from flask import Flask, Request, Response, g
from werkzeug.http import parse_date

from ...core.engine.keys import Identity
from ...core.engine.rates import Layer
from ...current import current_limit
from ...signals import request_refused
from ._grammar import written

logger = logging.getLogger("flask_redis_throttle")

#: On :data:`flask.g`: an ``on_breach`` function's error, raised or logged with the response.
BREACH_ERROR = "_flask_limiter_breach_error"


def limits_key(identity: Identity, scope: str, layer: Layer) -> str:
    """``RequestLimit.key``: the name Flask-Limiter gives a limit's counter."""
    return f"LIMITER/{identity.value}/{scope}/{layer.quota}/{written(layer.window).replace(' ', '/')}"


def describe_refusal(request: Request) -> str:
    """The 429's description without an ``error_message``: the refusing layer, as Flask-Limiter words it."""
    found = current_limit()
    return "Too Many Requests" if found is None else str(found.layer)


def log_refusals(app: Flask) -> None:
    """Log each refusal of ``app`` at INFO, as Flask-Limiter does."""

    @request_refused.connect_via(app)
    def log(sender: Flask, *, identity: Identity, layer: Layer, scope: str, shadow: bool, **extra: Any) -> None:
        if not shadow:
            logger.info("ratelimit %s (%s) exceeded at endpoint: %s", layer, identity.value, scope)


def respond(headers: bool, http_date: bool, swallow_errors: bool) -> Callable[[Response], Response]:
    """An ``after_request`` function, registered after the extension's so that it runs first:
    it raises an ``on_breach`` error, and gives a response let through Flask-Limiter's ``Retry-After``."""

    def after_request(response: Response) -> Response:
        error: Exception | None = g.pop(BREACH_ERROR, None)
        if error is not None:
            if not swallow_errors:
                raise error
            logger.error("on_breach callback failed with error %s", error, exc_info=error)
        found = current_limit() if headers else None
        if found is not None and not found.breached:
            now = time.time()
            reset_at: float = math.ceil(now + found.reset)  # as X-RateLimit-Reset: whole seconds, rounded up
            own = response.headers.getlist("Retry-After")
            if own:
                reset_at = max(reset_at, _retry_at(own[-1], now))
            response.headers.set(
                "Retry-After", formatdate(reset_at, usegmt=True) if http_date else str(int(reset_at - now))
            )
        return response

    return after_request


def _retry_at(value: str, now: float) -> float:
    """The moment an app's own ``Retry-After`` names (seconds or an HTTP-date); 0 if it is neither."""
    if value.isdigit():
        return now + int(value)
    moment = parse_date(value)
    return 0 if moment is None else moment.timestamp()
