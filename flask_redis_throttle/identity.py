"""Who is asking: the identities a Flask request is known by.

Built-in identities, chosen by name in ``RATELIMIT_IDENTITIES`` or
``@limit(..., identities=...)``:

* ``"ip"``: ``request.remote_addr``. IPv6 addresses are grouped by network
  (``RATELIMIT_IPV6_PREFIX``, /64 by default), because one client usually
  owns a whole /64. ``X-Forwarded-For`` is never read: a client can set it
  to anything. Behind a proxy, use :class:`werkzeug.middleware.proxy_fix.ProxyFix`.
* ``"user"``: the Flask-Login ``current_user.get_id()``, when someone is
  logged in. Without Flask-Login, or a ``LoginManager`` on the app, it never
  applies.
* ``"user-or-ip"``: the user when logged in, else the IP.

A callable ``key(request) -> str | None`` is a custom identity; returning
None means it does not apply to this request. Its counters are kept under its
module and qualified name, which are the same in every process; two key
functions with the same name in the same module (two lambdas, say) would
therefore share counters, so give key functions names of their own.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

from flask import Request

from .keys import Identity

try:
    from flask_login import current_user
except ImportError:  # Flask-Login is optional; without it there are no users
    current_user = None

__all__ = ["IDENTITY_NAMES", "IdentitySpec", "Resolver", "check_identities", "resolvers"]

#: A custom key function: given the request, a string, or None when it does not apply.
KeyFunction = Callable[[Request], str | None]
#: How identities are named in settings: a built-in name or a key function.
IdentitySpec = str | KeyFunction
#: A compiled identity: given the request, an :class:`Identity` or None.
Resolver = Callable[[Request], Identity | None]

IDENTITY_NAMES = ("ip", "user", "user-or-ip")


def check_identities(value: Any) -> tuple[IdentitySpec, ...] | None:
    """Return ``value`` as a tuple if it is a valid identity list, else None.

    Valid is a non-empty list or tuple of built-in names and callables.
    """
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if all(callable(item) or item in IDENTITY_NAMES for item in value):
        return tuple(value)
    return None


def resolvers(specs: Sequence[IdentitySpec], ipv6_prefix: int, logins: bool) -> tuple[Resolver, ...]:
    """Compile identity specs into resolvers, once per view.

    :param specs: built-in names and key functions.
    :param ipv6_prefix: the prefix length IPv6 clients are grouped by.
    :param logins: whether the app has a Flask-Login ``LoginManager``; without
        one, the user identity never applies.
    """
    ip = partial(_ip, ipv6_prefix=ipv6_prefix)
    user = _user if logins and current_user is not None else _nobody
    built_in: dict[str, Resolver] = {"ip": ip, "user": user, "user-or-ip": lambda r: user(r) or ip(r)}
    return tuple(
        built_in[spec] if isinstance(spec, str) else partial(_custom, spec, f"key:{_function_name(spec)}")
        for spec in specs
    )


def _ip(request: Request, ipv6_prefix: int) -> Identity:
    address = request.remote_addr or ""
    if ":" in address:
        address = _ipv6_group(address, ipv6_prefix)
    return Identity("ip", address)


@lru_cache(maxsize=4096)
def _ipv6_group(address: str, prefix: int) -> str:
    """The network an IPv6 address belongs to, or the IPv4 address it maps."""
    try:
        parsed = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.IPv6Network((parsed, prefix), strict=False))


def _user(request: Request) -> Identity | None:
    if not current_user.is_authenticated:
        return None
    return Identity("user", str(current_user.get_id()))


def _nobody(request: Request) -> None:
    return None


def _custom(function: KeyFunction, kind: str, request: Request) -> Identity | None:
    value = function(request)
    if value is None:
        return None
    return Identity(kind, str(value))


def _function_name(function: KeyFunction) -> str:
    """A name for a key function that is the same in every process, so that
    all app servers count its identities under the same keys."""
    module = getattr(function, "__module__", None) or ""
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}.{name}" if module else name
