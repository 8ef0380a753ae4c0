"""The checks of numbers a user gives, written once.

``True`` is an ``int`` in Python, so ``isinstance(value, int)`` lets
``cost=True`` or ``RATELIMIT_BREAKER_THRESHOLD = True`` through as 1. A flag
where a number is wanted is a mistake, so every option and setting that
takes a number asks these instead.
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["is_integer", "is_integer_in", "is_number"]


def is_integer(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an integer or a float, and not a bool."""
    return isinstance(value, float) or is_integer(value)


def is_integer_in(value: object, least: float, most: float) -> TypeGuard[int]:
    """Whether ``value`` is an integer from ``least`` to ``most``, and not a bool."""
    return is_integer(value) and least <= value <= most
