"""Flask-Limiter's ``flask_limiter.util``: its key functions.

``get_remote_address`` given as a ``key_func`` counts the built-in ``"ip"``
identity (IPv6 clients grouped by ``RATELIMIT_IPV6_PREFIX``); called
directly, it returns the address as Flask-Limiter's does.
"""

from __future__ import annotations

from flask import request

__all__ = ["get_ipaddr", "get_remote_address"]


def get_remote_address() -> str:
    """The client's address, ``request.remote_addr``, or ``"127.0.0.1"`` when there is none."""
    return request.remote_addr or "127.0.0.1"


def get_ipaddr() -> str:
    """The first address of ``X-Forwarded-For``, else the client's address.

    Any client can send that header: behind a proxy you trust, use
    werkzeug's ``ProxyFix`` and :func:`get_remote_address` instead.
    """
    route = request.access_route
    return route[0] if route else get_remote_address()
