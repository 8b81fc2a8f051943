"""Durations as configurations write them: `90s`, `5m`, `1h`, `2d`, `1w`, plain seconds, or `off`.
Standard library only: the agent spells them too (core.configuration.durations makes them fields)."""

from __future__ import annotations

import re
from typing import Any

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PATTERN = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")

OFF = "off"


def parse_duration(value: Any) -> int:
    """Seconds for a duration; raises ValueError for anything else (`off` included: see parse_optional)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 90s, 5m, 1h, 2d or 1w, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return value
    if isinstance(value, str):
        match = _PATTERN.match(value.lower())
        if match:
            return int(match.group(1)) * _UNITS[match.group(2) or "s"]
    raise ValueError(f"expected a duration such as 90s, 5m, 1h, 2d or 1w, got {value!r}")


def parse_optional_duration(value: Any) -> int | None:
    """Like parse_duration, but `off` (or YAML's `false`) means no limit: None."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() == OFF):
        return None
    return parse_duration(value)


def format_duration(seconds: int | None) -> str:
    """The shortest exact spelling of a duration: 3600 -> `1h`, 90 -> `90s`, None -> `off`."""
    if seconds is None:
        return OFF
    if seconds == 0:
        return "0s"
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"
