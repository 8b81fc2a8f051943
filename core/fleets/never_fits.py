"""The words of a never-fits line: why no instance of a fleet could ever take a request (docs/fleets.md)."""

from __future__ import annotations

SHOWN = 5  # instances named per reason, and reasons named, in a never-fits line


def explain_never_fits(why: dict[str, list[str]]) -> str:
    """`h1, h2: needs 8 GPUs H100, instance has no GPUs. h3: ...`: instances with the same reasons as one."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, reasons in why.items():
        groups.setdefault(tuple(reasons), []).append(name)
    parts = []
    for said, names in list(groups.items())[:SHOWN]:
        more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
        parts.append(f"{', '.join(names[:SHOWN])}{more}: {'; '.join(said)}")
    if len(groups) > SHOWN:
        hidden = sum(len(names) for names in list(groups.values())[SHOWN:])
        parts.append(f"{hidden} more instance(s), for other reasons")
    return ". ".join(parts)
