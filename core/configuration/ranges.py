"""Ranges and sizes as configurations write them: `2..8`, `8GB..`, `..64GB`, `512MB`, `1TB`.

Bounds are inclusive and None is an open end; sizes are kept in GB, with 1024 between MB, GB and TB as
dstack counts them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any, Generic, Self, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

T = TypeVar("T", int, float)

_FACTORS = {"mb": 1 / 1024, "mib": 1 / 1024, "gb": 1.0, "gib": 1.0, "tb": 1024.0, "tib": 1024.0}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SIZE = re.compile(rf"^({_NUMBER})\s*([A-Za-z]*)$")
_WHOLE = re.compile(r"^[0-9]+$")


def format_number(value: float) -> str:
    """The shortest spelling that reads back as the same float: 8.0 -> `8`, 0.5 -> `0.5`."""
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(float(value))


def check_bounds(low: float | None, high: float | None, fmt: Callable[[Any], str] = format_number) -> None:
    for bound in (low, high):
        if bound is not None and not math.isfinite(bound):
            raise ValueError(f"{bound} is not a finite number")
        if bound is not None and bound < 0:
            raise ValueError(f"{fmt(bound)} is negative")
    if low is not None and high is not None and low > high:
        raise ValueError(f"the lower bound {fmt(low)} is above the upper bound {fmt(high)}")


class Range(BaseModel, Generic[T]):
    """An inclusive range; None is an open end. Also validates from `2`, `"2..8"`, `"4.."` and `"..8"`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: T | None = None
    max: T | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            raise ValueError(f"expected a number or a range such as 2..8, got {data!r}")
        if isinstance(data, int | float):
            return {"min": data, "max": data}
        if isinstance(data, str):
            low, high = split_range(data)
            return {"min": low, "max": high}
        return data

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_bounds(self.min, self.max)
        return self

    def contains(self, value: T) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def format(self, formatter: Callable[[T], str]) -> str:
        """`2..8`, `2..`, `..8`, `..` (no bounds), or `2` when both bounds are equal."""
        if self.min is not None and self.min == self.max:
            return formatter(self.min)
        low = "" if self.min is None else formatter(self.min)
        high = "" if self.max is None else formatter(self.max)
        return f"{low}..{high}"

    def __str__(self) -> str:
        return self.format(format_number)


def split_range(text: str) -> tuple[str | None, str | None]:
    text = text.strip()
    if not text:
        raise ValueError("the value is empty")
    if ".." not in text:
        return text, text
    parts = text.split("..")
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not a range such as 2..8, 2.. or ..8")
    return parts[0].strip() or None, parts[1].strip() or None


# --- sizes ---------------------------------------------------------------------------------------------


def size_gb(value: Any) -> float:
    """GB in a size, or ValueError with a reason that names the part at fault (for use inside ranges)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a size such as 512MB, 8GB or 1TB, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("the value is empty")
        if text.startswith("-"):
            raise ValueError(f"{text!r} is negative")
        match = _SIZE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a size such as 512MB, 8GB or 1TB")
        unit = match.group(2)
        if unit.lower() not in _FACTORS and unit:
            raise ValueError(f"unknown unit {unit!r} in {text!r}: use MB, GB or TB")
        gb = float(match.group(1)) * _FACTORS[unit.lower() or "gb"]
    else:
        gb = float(value)
    if not math.isfinite(gb):
        raise ValueError(f"{value!r} is not a finite size")
    if gb < 0:
        raise ValueError(f"{value!r} is negative")
    return gb


def parse_memory(value: str | int | float) -> float:
    """GB in a size: `512MB` -> 0.5, `1TB` -> 1024.0, 16 or `16` -> 16.0 (a bare number is GB)."""
    try:
        return size_gb(value)
    except ValueError as error:
        raise ValueError(f"invalid memory size {value!r}: {error}") from None


def format_memory(gb: float) -> str:
    """The short spelling parse_memory reads back exactly: 0.5 -> `512MB`, 8 -> `8GB`, 1024 -> `1TB`."""
    # Scaling by 1024 is exact in binary floating point, so the round trip loses nothing.
    if gb >= 1024 and (gb / 1024).is_integer():
        return f"{format_number(gb / 1024)}TB"
    if gb >= 1 or gb == 0:
        return f"{format_number(gb)}GB"
    return f"{format_number(gb * 1024)}MB"


def format_measured_memory(gb: float) -> str:
    """A measured amount, to be read not parsed: 23.540584 -> `23.5GB`, 0.3 -> `307MB`."""
    return format_memory(round(gb, 1) if gb >= 1 else round(gb * 1024) / 1024)


def whole_number(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is not a whole number")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-") and _WHOLE.match(text[1:]):
            raise ValueError(f"{text!r} is negative")
        if not _WHOLE.match(text):
            raise ValueError(f"{text!r} is not a whole number")
        value = int(text)
    if value < 0:
        raise ValueError(f"{value} is negative")
    return value


def bounds(value: Any, parse: Callable[[Any], T], fmt: Callable[[T], str]) -> tuple[T | None, T | None]:
    """The bounds of a number, a `low..high` string, a {"min", "max"} mapping or a Range."""
    if value is None:
        raise ValueError("the value is empty")
    if isinstance(value, Range):
        raw_low, raw_high = value.min, value.max
    elif isinstance(value, dict):
        unknown = sorted(str(key) for key in set(value) - {"min", "max"})
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}: a range has only min and max")
        raw_low, raw_high = value.get("min"), value.get("max")
    elif isinstance(value, str):
        raw_low, raw_high = split_range(value)
    else:
        raw_low = raw_high = value
    low = None if raw_low is None else parse(raw_low)
    high = None if raw_high is None else parse(raw_high)
    check_bounds(low, high, fmt)
    return low, high


def parse_memory_range(value: Any, what: str = "memory size") -> Range[float]:
    """`8GB..`, `..64GB`, `8GB..64GB`, `16GB` (exactly), 16 (GB), {"min": "8GB"} -> a range in GB."""
    try:
        low, high = bounds(value, size_gb, format_memory)
    except ValueError as error:
        raise ValueError(f"invalid {what} {value!r}: {error}") from None
    return Range[float](min=low, max=high)


def parse_count_range(value: Any, what: str = "count") -> Range[int]:
    """`4`, `"2..8"`, `"4.."`, `"..8"`, {"min": 2, "max": 8} -> a range of whole numbers."""
    try:
        low, high = bounds(value, whole_number, str)
    except ValueError as error:
        raise ValueError(f"invalid {what} {value!r}: {error}") from None
    return Range[int](min=low, max=high)


def optional_memory(value: Any) -> float | None:
    return None if value is None else parse_memory(value)


# Field types for other configuration models (volume sizes, ...): any spelling in, GB kept.
MemorySize = Annotated[float, BeforeValidator(parse_memory)]
MemoryRange = Annotated[Range[float], BeforeValidator(parse_memory_range)]
