"""An instance's resources, and whether they satisfy a configuration's `resources` (docs/fleets.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.configuration.gpus import GPU
from core.configuration.ranges import Range, format_measured_memory, format_memory, format_number
from core.configuration.resources import GPUSpec, ResourcesSpec, normalise_arch

# --- an instance's resources ----------------------------------------------------------------------------


class InstanceResources(BaseModel):
    """What an instance has. `cpu_arch` is `x86` or `arm` as its agent reports it; None: not known, which
    satisfies no spec that names an architecture (docs/fleets.md#placement-and-blocks). `shm_gb`: the
    size of its /dev/shm; None: not known, which satisfies no host job asking for a `shm_size`. `agent_uid`:
    the user its agent runs as (0: root); None: not known, which takes no host job with `privileged: true`."""

    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(ge=0)
    memory_gb: float = Field(ge=0)
    disk_gb: float = Field(ge=0)
    gpus: list[GPU] = Field(default_factory=list)
    cpu_arch: str | None = None
    shm_gb: float | None = Field(default=None, ge=0)
    agent_uid: int | None = Field(default=None, ge=0)

    @field_validator("cpu_arch", mode="before")
    @classmethod
    def _cpu_arch(cls, value: Any) -> Any:
        return None if value is None else normalise_arch(value)

    def gpu_summary(self) -> str:
        """`8xH100:80GB`, `1xA100:80GB+1xT4:16GB`, or `` without GPUs."""
        groups: dict[tuple[str, float], int] = {}
        for gpu in self.gpus:
            groups[gpu.name, gpu.memory_gb] = groups.get((gpu.name, gpu.memory_gb), 0) + 1
        return "+".join(f"{n}x{name}:{format_memory(memory)}" for (name, memory), n in groups.items())

    def pretty(self) -> str:
        """One short line: `cpu=8 mem=32GB disk=500GB gpu=8xH100:80GB` (no gpu word without GPUs)."""
        cpu = f"{self.cpu_arch}:{format_number(self.cpus)}" if self.cpu_arch else format_number(self.cpus)
        words = [
            f"cpu={cpu}",
            f"mem={format_measured_memory(self.memory_gb)}",
            f"disk={format_measured_memory(self.disk_gb)}",
        ]
        if self.gpus:
            words.append(f"gpu={self.gpu_summary()}")
        return " ".join(words)


# --- matching -------------------------------------------------------------------------------------------


# A tmpfs sized `1g` reports a few kB less than 1GB on some hosts: a job asking for 1GB fits it.
_SHM_SLACK_GB = 1 / 1024


def _within(value: float, wanted: Range[Any], check_max: bool) -> bool:
    return (wanted.min is None or value >= wanted.min) and (
        not check_max or wanted.max is None or value <= wanted.max
    )


def matching_gpus(instance: InstanceResources, spec: GPUSpec) -> list[GPU]:
    """The instance's GPUs of the spec's vendor, names (any case) and per-GPU memory."""
    names = {name.lower() for name in spec.name or []}
    return [
        gpu
        for gpu in instance.gpus
        if (spec.vendor is None or gpu.vendor == spec.vendor)
        and (not names or gpu.name.lower() in names)
        and (spec.memory is None or spec.memory.contains(gpu.memory_gb))
    ]


def shortfalls(
    instance: InstanceResources, spec: ResourcesSpec, *, check_max: bool = True, host: bool = False
) -> dict[str, str]:
    """Why `instance` does not fit `spec`, by resource (`cpu`, `cpu_arch`, `memory`, `shm_size`, `disk`,
    `gpu`, `gpu_memory`, in that order); {} when it fits.

    As dstack matches offers, an instance fits a range when its amount is at least the lower bound and,
    with `check_max` (the default), at most the upper bound: `cpu: 4` wants a 4-CPU instance, `cpu: 4..`
    any with 4 or more. `check_max=False` checks lower bounds only (an instance shared between jobs).
    GPUs: with no `gpu` spec any instance fits, GPUs or not; otherwise the number of the instance's GPUs
    that match the spec must be within its count range, and their memory within `total_memory`. With
    `host` (a job run on the host, not in a container, whose --shm-size is its own), `shm_size` is a
    lower bound on the instance's /dev/shm."""
    reasons: dict[str, str] = {}
    if not _within(instance.cpus, spec.cpu, check_max):
        reasons["cpu"] = f"needs {spec.cpu} CPUs, instance has {format_number(instance.cpus)}"
    if spec.cpu_arch is not None and spec.cpu_arch != instance.cpu_arch:
        has = instance.cpu_arch or "CPUs of an unknown architecture"
        reasons["cpu_arch"] = f"needs {spec.cpu_arch} CPUs, instance has {has}"
    if not _within(instance.memory_gb, spec.memory, check_max):
        wanted = spec.memory.format(format_memory)
        reasons["memory"] = (
            f"needs {wanted} memory, instance has {format_measured_memory(instance.memory_gb)}"
        )
    if host and spec.shm_size is not None:
        shm = instance.shm_gb
        if shm is None or shm + _SHM_SLACK_GB < spec.shm_size:
            has = "reports no /dev/shm" if shm is None else f"has {format_measured_memory(shm)}"
            wanted = format_memory(spec.shm_size)
            reasons["shm_size"] = f"needs {wanted} of /dev/shm on the host, instance {has}"
    if not _within(instance.disk_gb, spec.disk, check_max):
        wanted = spec.disk.format(format_memory)
        reasons["disk"] = f"needs {wanted} disk, instance has {format_measured_memory(instance.disk_gb)}"
    if spec.gpu is not None:
        matching = matching_gpus(instance, spec.gpu)
        if not _within(len(matching), spec.gpu.count, check_max):
            kind = spec.gpu.kind()
            what = f"{spec.gpu.count} GPUs" + (f" {kind}" if kind else "")
            have = f"{len(matching)} matching ({instance.gpu_summary()})" if instance.gpus else "no GPUs"
            reasons["gpu"] = f"needs {what}, instance has {have}"
        total = sum(gpu.memory_gb for gpu in matching)
        if spec.gpu.total_memory is not None and not _within(total, spec.gpu.total_memory, check_max):
            wanted = spec.gpu.total_memory.format(format_memory)
            reasons["gpu_memory"] = (
                f"needs {wanted} of GPU memory in total, matching GPUs have {format_measured_memory(total)}"
            )
    return reasons


def privileged_shortfall(instance: InstanceResources) -> str | None:
    """Why a job run on the host (no `image` or `python`) with `privileged: true` cannot run on `instance`;
    None when it can. Such a job is a process of the agent's user: only where that is root has it every
    privilege of the host, at least what a privileged container gets (every capability, every device:
    docs/containers.md#privileged). An agent that does not say (an older release) takes no such job."""
    uid = instance.agent_uid
    if uid == 0:
        return None
    has = "does not say which user it runs as" if uid is None else f"runs as uid {uid}"
    return f"privileged: true runs on the host only where the agent runs as root; instance's agent {has}"


def unsatisfied(instance: InstanceResources, spec: ResourcesSpec, *, check_max: bool = True) -> list[str]:
    """Why `instance` does not fit `spec`, one reason per resource (`shortfalls`); [] when it fits."""
    return list(shortfalls(instance, spec, check_max=check_max).values())


def satisfies(instance: InstanceResources, spec: ResourcesSpec, *, check_max: bool = True) -> bool:
    return not unsatisfied(instance, spec, check_max=check_max)
