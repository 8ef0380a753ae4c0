"""The exceptions: the input errors of :mod:`flask_redis_throttle.core.errors`, and the refusals, whose bodies
follow the client's ``Accept`` (:ref:`refusal-response`)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from werkzeug.datastructures import MIMEAccept
from werkzeug.exceptions import Forbidden, HTTPException, TooManyRequests
from werkzeug.http import parse_accept_header

from ._request.headers import Draft

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

    from .core.engine.keys import Identity
    from .core.engine.rates import Layer

from .core.errors import ConfigurationError, InputError, InvalidLimit

__all__ = [
    "BLOCKED",
    "Blocked",
    "BlockedForbidden",
    "ConfigurationError",
    "InputError",
    "InvalidLimit",
    "RateLimitExceeded",
]

#: The problem type of a block: a tag URI (RFC 4151), never fetched.
BLOCKED = "tag:flask-redis-throttle,2026:blocked"


# HTML comes last, so it loses every tie: ``*/*`` (curl) gets text.
_TEXT, _JSON, _HTML = "text/plain; charset=utf-8", "application/problem+json", "text/html; charset=utf-8"
_OFFERS = {"text/plain": _TEXT, "application/problem+json": _JSON, "application/json": _JSON, "text/html": _HTML}

# Only escaped text goes into the page.
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{code} {name}</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em;color:#222}}
h1{{font-size:1.4em}}</style>
</head>
<body>
<h1>{heading}</h1>
<p>{description}</p>
{retry}</body>
</html>
"""


class _Negotiated(HTTPException):
    """A refusal whose body is problem details, a page or a line of text, as ``Accept`` asks."""

    heading = "Too many requests"
    #: Whole seconds until the request would pass; None if not known, or never.
    retry_after: int | None = None
    #: The ``Retry-After`` header's value; None for no header.
    retry_after_header: str | None = None

    def problem(self) -> dict[str, Any]:
        """The RFC 9457 problem details of the JSON body."""
        problem: dict[str, Any] = {"type": BLOCKED, "title": "Blocked", "status": self.code, "detail": self.description}
        problem.update(self._details())
        if self.retry_after is not None:
            problem["retry_after"] = self.retry_after
        return problem

    def _details(self) -> dict[str, Any]:
        """The problem details' members that differ from a block's."""
        return {}

    def _content_type(self, environ: WSGIEnvironment | None) -> str:
        if environ is None:
            # error.get_response() in an error handler: the current request's.
            from flask import has_request_context, request

            environ = request.environ if has_request_context() else {}
        accept = parse_accept_header(environ.get("HTTP_ACCEPT"), MIMEAccept)
        return _OFFERS.get(accept.best_match(_OFFERS) or "", _TEXT)

    def get_body(self, environ: WSGIEnvironment | None = None, scope: dict[str, Any] | None = None) -> str:
        """Problem-details JSON, an HTML page, or a line of text, as ``Accept`` asks."""
        content_type = self._content_type(environ)
        if content_type == _HTML:
            return self._page()
        if content_type == _JSON:
            return json.dumps(self.problem())
        return f"{self.description}\n"

    def get_headers(
        self, environ: WSGIEnvironment | None = None, scope: dict[str, Any] | None = None
    ) -> list[tuple[str, str]]:
        """``Content-Type``, ``Vary: Accept`` (a shared cache must not give a JSON client the page), and
        ``Retry-After`` unless it never passes."""
        headers = [("Content-Type", self._content_type(environ)), ("Vary", "Accept")]
        if self.retry_after_header is not None:
            headers.append(("Retry-After", self.retry_after_header))
        return headers

    def _page(self) -> str:
        retry = ""
        if self.retry_after is not None:
            plural = "" if self.retry_after == 1 else "s"
            retry = (
                f'<p>You can try again in <strong id="retry-after">{self.retry_after}</strong> second{plural}.</p>\n'
            )
        description = html.escape(str(self.description))
        return _PAGE.format(code=self.code, name=self.name, heading=self.heading, description=description, retry=retry)


class RateLimitExceeded(_Negotiated, TooManyRequests):
    """A request was refused because a layer of its limit had no room left: 429 with ``Retry-After`` in whole
    seconds, rounded up (:doc:`/responses`).

    :param layer: the layer that refused it (the longest wait, when several did).
    :param identity: whose counter refused it.
    :param retry_after: seconds until the request would pass.
    :param scope: the name the counters are kept under.
    :param retry_after_header: the ``Retry-After`` value, when it is an HTTP-date.
    :param penalized: whether the identity serves a penalty.
    :param cost: the request's cost, when it exceeds ``layer``'s whole quota: it never passes, no ``Retry-After``.
    :param violated_policies: the layers it exceeded, for ``quota-exceeded`` problem details; None for ``about:blank``.
    :param concurrent: whether ``layer`` is a concurrency cap.
    """

    def __init__(
        self,
        layer: Layer,
        identity: Identity,
        retry_after: float,
        scope: str,
        retry_after_header: str | None = None,
        penalized: bool = False,
        cost: int | None = None,
        violated_policies: Sequence[str] | None = None,
        concurrent: bool = False,
    ) -> None:
        seconds = None if cost is not None else max(1, math.ceil(retry_after))
        super().__init__(_description(layer, seconds, penalized, cost, concurrent), retry_after=seconds)
        #: The :class:`~flask_redis_throttle.Layer` that refused the request.
        self.layer = layer
        #: The :class:`~flask_redis_throttle.Identity` whose counter was full.
        self.identity = identity
        #: Whole seconds until the request would pass; None if it never can.
        self.retry_after: int | None = seconds
        #: The scope the counters are kept under.
        self.scope = scope
        #: The ``Retry-After`` header's value; None when the request can never pass.
        self.retry_after_header = None if seconds is None else retry_after_header or str(seconds)
        #: Whether the identity serves a penalty.
        self.penalized = penalized
        self.cost = cost
        self.violated_policies = None if violated_policies is None else tuple(violated_policies)
        self.concurrent = concurrent

    def _details(self) -> dict[str, Any]:
        draft = Draft.of_problem(self.violated_policies is not None)
        details: dict[str, Any] = {"type": draft.problem_type, "title": draft.problem_title}
        if self.violated_policies is not None:
            details["violated-policies"] = list(self.violated_policies)
        return details


class Blocked(_Negotiated, TooManyRequests):
    """A request was refused because an identity of it is blocked by an :doc:`override </overrides>`: 429 with
    ``Retry-After`` until the block ends, no ``RateLimit`` headers, problem details of the type :data:`BLOCKED`.

    :param retry_after: seconds until the block ends.
    :param retry_after_header: the ``Retry-After`` value, when it is an HTTP-date.
    """

    heading = "Blocked"

    def __init__(self, retry_after: float, retry_after_header: str | None = None) -> None:
        seconds = max(1, math.ceil(retry_after))
        super().__init__(f"Blocked for {seconds} more second{'' if seconds == 1 else 's'}.", retry_after=seconds)
        #: Whole seconds until the block ends.
        self.retry_after: int | None = seconds
        #: The ``Retry-After`` header's value.
        self.retry_after_header = retry_after_header or str(seconds)


class BlockedForbidden(_Negotiated, Forbidden):
    """As :class:`Blocked`, with ``RATELIMIT_OVERRIDE_BLOCK_STATUS = 403``: no ``Retry-After``."""

    heading = "Blocked"

    def __init__(self) -> None:
        super().__init__("Access is blocked.")


def _description(layer: Layer, seconds: int | None, penalized: bool, cost: int | None, concurrent: bool) -> str:
    """The one-line message of a refusal: the body's text and ``detail``."""
    wait = f"Try again in {seconds} second{'' if seconds == 1 else 's'}."
    if concurrent:
        requests = "request" if layer.quota == 1 else "requests"
        return f"Concurrency limit exceeded: at most {layer.quota} {requests} at once. {wait}"
    if seconds is None:
        return (
            f"Rate limit exceeded: this request costs {cost}, more than the whole quota of {layer}; it can never pass."
        )
    exceeded = "Rate limit exceeded too often" if penalized else "Rate limit exceeded"
    return f"{exceeded}: {layer}. {wait}"
