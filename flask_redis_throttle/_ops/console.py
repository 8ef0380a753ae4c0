"""Text for the command line: aligned tables, durations and times. It imports neither Flask nor Redis."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime, timezone


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``rows`` under ``header``, each column as wide as its widest cell, two spaces apart, lines not padded."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


def duration(seconds: float) -> str:
    """A span of time, short and rounded up: ``0.4s``, ``42.0s``, ``3m05s``, ``2h00m``, ``1d06h``."""
    if math.ceil(seconds * 10) < 600:
        return f"{math.ceil(seconds * 10) / 10:.1f}s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes + (rest > 0), 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours + (minutes > 0), 24)
    return f"{days}d{hours:02d}h"


def utc(moment: float) -> str:
    """A time in seconds since the epoch, as ``2025-06-01 12:00:00`` in UTC."""
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


_SPAN = re.compile(r"(?:[0-9]+[smhd])+", re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def parse_span(text: str) -> int | None:
    """The seconds a span such as ``90s``, ``1h30m`` or ``2d`` writes; None if ``text`` is no span."""
    text = text.strip()
    if not _SPAN.fullmatch(text):
        return None
    return sum(int(number) * _UNIT[unit] for number, unit in re.findall(r"([0-9]+)([smhd])", text))


def parse_moment(text: str, now: float) -> float:
    """Epoch seconds from a span before ``now`` or an ISO time (UTC without an offset); else a ValueError."""
    text = text.strip()
    span = parse_span(text)
    if span is not None:
        return now - span
    try:  # Python 3.10's fromisoformat does not read a "Z" suffix
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a span such as 10m, 1h or 2d nor an ISO time such as 2025-06-01T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
