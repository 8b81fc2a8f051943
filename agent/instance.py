"""The host's CPUs, their architecture, memory, /dev/shm and disk, and the user the agent runs as."""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostCapacity:
    cpus: int
    memory_bytes: int


def cpu_count() -> int:
    # The CPUs this process may run on, which is what a cgroup- or taskset-limited host offers.
    return len(os.sched_getaffinity(0)) or os.cpu_count() or 1


# The spellings core accepts in `cpu: arm:4` (core/configuration/resources.py `normalise_arch`), kept here
# because the agent runs on the host's own Python and does not import core.configuration.
_ARCHES = {
    **{spelling: "x86" for spelling in ("x86", "x86_64", "amd64", "x64")},
    **{spelling: "arm" for spelling in ("arm", "arm64", "aarch64")},
}


def cpu_arch(machine: str | None = None) -> str | None:
    """`x86` or `arm`, as placement matches `cpu: arm:4` (docs/fleets.md#placement-and-blocks), from
    `platform.machine()` (`x86_64`, `aarch64`, `arm64`, `AMD64`); None for any other (ppc64le, riscv64)."""
    name = platform.machine() if machine is None else machine
    return _ARCHES.get(name.strip().lower())


def memory_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemTotal missing from /proc/meminfo")


def host_capacity() -> HostCapacity:
    """The host's, or what a Slurm allocation gives this node (the agent runs as its task there:
    docs/backends.md#a-slurm-backend): the CPUs and memory Slurm says in the task's environment."""
    cpus, memory = slurm_limits(os.environ)
    return HostCapacity(cpus=cpus or cpu_count(), memory_bytes=memory * 2**20 if memory else memory_bytes())


def slurm_limits(environ: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(CPUs, memory in MB) a Slurm allocation gives this node; None where it says nothing."""
    if not environ.get("SLURM_JOB_ID"):
        return None, None
    cpus = environ.get("SLURM_CPUS_ON_NODE", "")
    memory = environ.get("SLURM_MEM_PER_NODE", "")
    return (int(cpus) if cpus.isdigit() else None, int(memory) if memory.isdigit() else None)


def shm_bytes(path: str = "/dev/shm") -> int | None:
    """The size of the host's /dev/shm, which a job run on the host shares: placement matches it to the
    job's `resources.shm_size` (docs/fleets.md#placement-and-blocks); None when the host has none."""
    try:
        return shutil.disk_usage(path).total
    except OSError:
        return None


def agent_uid() -> int:
    """The user id this agent runs as, and so every job it runs on the host: placement sends a host job with
    `privileged: true` only to an agent that runs as root, 0 (docs/containers.md#privileged)."""
    return os.geteuid()


def disk_usage(path: Path) -> tuple[int, int]:
    """(total, free) bytes of the filesystem holding `path`."""
    usage = shutil.disk_usage(path)
    return usage.total, usage.free
