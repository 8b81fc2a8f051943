"""What the host has and what its tasks hold: CPUs, memory and GPU indices.

Amounts are kept in integer milli-CPUs and MiB so that adding and freeing fractional requests never
drifts. A task's share is recorded when it is submitted and returned when it terminates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.wire.agent_api import Resources


class InsufficientResources(Exception):
    """The request does not fit in what is free; the message names what is short."""


def _milli_cpu(cpu: float) -> int:
    return round(cpu * 1000)


def _mib(memory_gb: float) -> int:
    return round(memory_gb * 1024)


def _number(value: float) -> str:
    return f"{value:.10g}"


@dataclass
class ResourceLedger:
    cpu_milli: int
    memory_mib: int
    gpu_indices: list[int]
    _held: dict[str, tuple[int, int, list[int]]] = field(default_factory=dict)

    @classmethod
    def for_host(cls, cpus: int, memory_bytes: int, gpu_indices: list[int]) -> ResourceLedger:
        return cls(cpu_milli=cpus * 1000, memory_mib=memory_bytes // 2**20, gpu_indices=sorted(gpu_indices))

    def _used(self) -> tuple[int, int, set[int]]:
        cpu = sum(held[0] for held in self._held.values())
        memory = sum(held[1] for held in self._held.values())
        gpus = {index for held in self._held.values() for index in held[2]}
        return cpu, memory, gpus

    def free_gpu_indices(self) -> list[int]:
        used = self._used()[2]
        return [index for index in self.gpu_indices if index not in used]

    def total(self) -> Resources:
        return Resources(cpu=self.cpu_milli / 1000, memory=self.memory_mib / 1024, gpu=len(self.gpu_indices))

    def free(self) -> Resources:
        cpu, memory, gpus = self._used()
        return Resources(
            cpu=(self.cpu_milli - cpu) / 1000,
            memory=(self.memory_mib - memory) / 1024,
            gpu=len(self.gpu_indices) - len(gpus),
        )

    def allocate(self, holder: str, request: Resources) -> list[int]:
        """Reserve `request` for `holder` and return the GPU indices it gets; raise if it does not fit."""
        if holder in self._held:
            return list(self._held[holder][2])
        used_cpu, used_memory, _ = self._used()
        free_cpu, free_memory = self.cpu_milli - used_cpu, self.memory_mib - used_memory
        free_gpus = self.free_gpu_indices()
        short = []
        if _milli_cpu(request.cpu) > free_cpu:
            short.append(f"CPU: requested {_number(request.cpu)}, free {_number(free_cpu / 1000)}")
        if _mib(request.memory) > free_memory:
            short.append(f"memory: requested {_number(request.memory)}GB, free {free_memory / 1024:.2f}GB")
        if request.gpu > len(free_gpus):
            short.append(f"GPU: requested {request.gpu}, free {len(free_gpus)} of {len(self.gpu_indices)}")
        if short:
            raise InsufficientResources("not enough resources on this host: " + "; ".join(short))
        gpus = free_gpus[: request.gpu]
        self._held[holder] = (_milli_cpu(request.cpu), _mib(request.memory), gpus)
        return list(gpus)

    def restore(self, holder: str, request: Resources, gpu_indices: list[int]) -> None:
        """Record a share granted before a restart, as it was granted."""
        self._held[holder] = (_milli_cpu(request.cpu), _mib(request.memory), list(gpu_indices))

    def release(self, holder: str) -> None:
        self._held.pop(holder, None)
