"""The words of a never-fits line: why no instance of a fleet could ever take a request (docs/fleets.md)."""

from __future__ import annotations

from core.fleets.placement import InstanceSlot
from core.wire.job_messages import NodeRequest

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


def arch_never_fits(node: NodeRequest, slots: list[InstanceSlot], whose: str) -> str | None:
    """`no instance of fleet lab has an arm CPU (they are x86)`, when no instance has the CPU architecture
    `node` names; None when one has, when it names none, or when an instance is not yet described (an
    elastic fleet's instance to be made: its agent will say). An unknown architecture is none."""
    arch = node.spec.cpu_arch if node.spec is not None else None
    if arch is None or not slots or any(slot.hardware is None for slot in slots):
        return None
    have = {slot.hardware.cpu_arch for slot in slots if slot.hardware is not None}
    if arch in have:
        return None
    kinds = sorted(kind for kind in have if kind is not None)
    kinds += ["of an unknown architecture"] if None in have else []
    they = "it is" if len(slots) == 1 else "they are"
    return f"no instance{f' of {whose}' if whose else ''} has an {arch} CPU ({they} {' or '.join(kinds)})"
