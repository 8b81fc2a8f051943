"""Ferry's version: pyproject.toml's, as installed (docs/upgrades.md#releases)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def ferry_version() -> str:
    try:
        return version("ferry")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"
