"""The checks of numbers a user gives, written once: ``True`` is an ``int`` in Python, and a flag where a number is
wanted is a mistake, not a 1."""

from __future__ import annotations

from typing import TypeGuard


def is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, float) or is_integer(value)


def is_integer_in(value: object, least: float, most: float) -> TypeGuard[int]:
    return is_integer(value) and least <= value <= most
