"""Breach hooks: the :data:`rate_limited` signal, and ``on_breach`` functions.

When a limit refuses a request (or would have, in shadow mode), the
extension calls the limit's ``on_breach``, then ``RATELIMIT_ON_BREACH``, with
a :class:`Breach`, then sends :data:`rate_limited` in Flask's signal style,
with the app as sender and every field of the breach as a keyword argument.
Receivers take ``**extra``, so that a field added later does not make them
raise ``TypeError`` on every refusal::

    from flask_redis_throttle.signals import rate_limited

    @rate_limited.connect_via(app)
    def count_breach(sender, identity, layer, **extra):
        metrics.increment("rate_limited", tags=[identity.kind])

An ``on_breach`` function may return a response (a :class:`flask.Response`)
to send instead of the 429, as in Flask-Limiter: the first one returned,
the limit's before ``RATELIMIT_ON_BREACH``'s, wins; the rate limit headers
are still added to it. Anything else it returns is ignored, and so is a
response for a shadow refusal, which lets the request through.

A hook that raises is logged and skipped: the 429 still goes out, and the
other hooks still run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from blinker import Namespace
from flask import Flask, Request
from werkzeug.wrappers import Response

from .core.keys import Identity
from .core.rates import Rate

__all__ = ["Breach", "notify", "rate_limited"]

logger = logging.getLogger("flask_redis_throttle")

_signals = Namespace()

#: Sent with the app as sender each time a limit refuses a request, with the
#: fields of :class:`Breach` as keyword arguments; receivers should accept
#: ``**extra`` for fields added later.
rate_limited = _signals.signal("rate-limited")


@dataclass(frozen=True)
class Breach:
    """A refusal, as the breach hooks see it.

    :param request: the refused request.
    :param endpoint: its endpoint.
    :param scope: the scope of the limit that refused it.
    :param identity: whose counter was full.
    :param layer: the layer that refused it.
    :param retry_after: whole seconds until it would pass, as in
        ``Retry-After``; None if it can never pass, because it costs more
        than the whole quota of ``layer`` (the 429 then has no
        ``Retry-After``).
    :param shadow: True if the limit is in shadow mode, so the request was
        let through after all.
    :param penalized: True if the identity was refused because it is
        blocked by the limit's penalty (or has just been).
    """

    request: Request
    endpoint: str
    scope: str
    identity: Identity
    layer: Rate
    retry_after: int | None
    shadow: bool = False
    penalized: bool = False


def notify(app: Flask, breach: Breach, hooks: Iterable[Callable[[Breach], object] | None]) -> Response | None:
    """Call each hook with ``breach``, then send :data:`rate_limited`.

    An exception in a hook or a receiver is logged with its traceback, and
    the next one is called.

    :returns: the first response a hook returned, to send instead of the
        429; None if none returned one. Receivers' return values are ignored.
    """
    response = None
    for hook in hooks:
        if hook is None:
            continue
        try:
            returned = hook(breach)
        except Exception:
            logger.exception("on_breach hook %r failed; the refusal stands", hook)
            continue
        if response is None and isinstance(returned, Response):
            response = returned
    if rate_limited.receivers:
        _send(app, breach)
    return response


def _send(app: Flask, breach: Breach) -> None:
    """Send :data:`rate_limited` to each receiver of ``app``'s, logging their failures."""
    fields = {field.name: getattr(breach, field.name) for field in dataclasses.fields(breach)}
    for receiver in rate_limited.receivers_for(app):
        try:
            receiver(app, **fields)
        except TypeError:
            logger.exception(
                "rate_limited receiver %r failed; the refusal stands. Receivers get every field of Breach "
                "as a keyword argument (%s): if it does not take them all, add **extra",
                receiver,
                ", ".join(fields),
            )
        except Exception:
            logger.exception("rate_limited receiver %r failed; the refusal stands", receiver)
