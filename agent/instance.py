"""The host's CPUs, memory and disk."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostCapacity:
    cpus: int
    memory_bytes: int


def cpu_count() -> int:
    # The CPUs this process may run on, which is what a cgroup- or taskset-limited host offers.
    return len(os.sched_getaffinity(0)) or os.cpu_count() or 1


def memory_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemTotal missing from /proc/meminfo")


def host_capacity() -> HostCapacity:
    return HostCapacity(cpus=cpu_count(), memory_bytes=memory_bytes())


def disk_usage(path: Path) -> tuple[int, int]:
    """(total, free) bytes of the filesystem holding `path`."""
    usage = shutil.disk_usage(path)
    return usage.total, usage.free
