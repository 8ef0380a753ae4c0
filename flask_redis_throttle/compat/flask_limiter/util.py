"""Flask-Limiter's key functions; ``get_remote_address`` counts the built-in ``"ip"`` identity."""

from __future__ import annotations

from flask import request

__all__ = ["get_ipaddr", "get_remote_address"]


def get_remote_address() -> str:
    """The client's address, ``request.remote_addr``, or ``"127.0.0.1"`` when there is none."""
    return request.remote_addr or "127.0.0.1"


def get_ipaddr() -> str:
    """The first address of ``X-Forwarded-For`` (any client can send it: prefer ``ProxyFix``), else the client's."""
    route = request.access_route
    return route[0] if route else get_remote_address()
