"""The host's GPUs, as `nvidia-smi` reports them; none where it is absent or fails."""

from __future__ import annotations

import logging
import shutil
import subprocess

from core.wire.agent_api import GpuInfo, GpuUse

logger = logging.getLogger(__name__)

NVIDIA_SMI_QUERY = ["--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"]
# What a task's GPUs are doing now (docs/jobs.md#metrics): utilization over the driver's last sample
# period, and memory in MiB.
GPU_USE_QUERY = "--query-gpu=index,utilization.gpu,memory.used,memory.total"
MIB = 2**20


def parse_nvidia_smi(output: str) -> list[GpuInfo]:
    """Parse `index, name, memory.total` CSV lines; a GPU name may itself contain commas."""
    gpus = []
    for line in output.splitlines():
        if not line.strip():
            continue
        index, rest = line.split(",", 1)
        name, memory = rest.rsplit(",", 1)
        gpus.append(GpuInfo(index=int(index), name=name.strip(), memory_mib=int(float(memory))))
    return sorted(gpus, key=lambda gpu: gpu.index)


def _number(field: str) -> float | None:
    """A figure of nvidia-smi's CSV; None for what it cannot tell (`[N/A]`, `[Not Supported]`)."""
    try:
        return float(field.strip())
    except ValueError:
        return None


def _mib(field: str) -> int | None:
    value = _number(field)
    return None if value is None else int(value * MIB)


def parse_gpu_use(output: str) -> list[GpuUse]:
    """Parse `index, utilization.gpu, memory.used, memory.total` CSV lines (no units, no header)."""
    gpus = []
    for line in output.splitlines():
        fields = line.split(",")
        if len(fields) != 4:
            continue
        index, utilization, used, total = fields
        gpus.append(
            GpuUse(
                index=int(index),
                utilization_percent=_number(utilization),
                memory_used_bytes=_mib(used),
                memory_total_bytes=_mib(total),
            )
        )
    return sorted(gpus, key=lambda gpu: gpu.index)


def _nvidia_smi(args: list[str], timeout: float) -> str | None:
    """nvidia-smi's output; None where there is none or it fails (said in the agent's log)."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        result = subprocess.run(
            [executable, *args], capture_output=True, text=True, timeout=timeout, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("nvidia-smi failed: %s", exc)
        return None
    return result.stdout


def detect_gpus(timeout: float = 15.0) -> list[GpuInfo]:
    output = _nvidia_smi(NVIDIA_SMI_QUERY, timeout)
    try:
        return parse_nvidia_smi(output or "")
    except ValueError as exc:
        # A broken driver must not keep the agent from serving CPU tasks.
        logger.warning("nvidia-smi's answer is unreadable, reporting no GPUs: %s", exc)
        return []


def gpu_use(indices: list[int], timeout: float = 3.0) -> list[GpuUse]:
    """Blocking: what the GPUs of these host indices are doing now; [] when nvidia-smi cannot tell."""
    if not indices:
        return []
    selected = "--id=" + ",".join(str(index) for index in indices)
    output = _nvidia_smi([GPU_USE_QUERY, "--format=csv,noheader,nounits", selected], timeout)
    try:
        return parse_gpu_use(output or "")
    except ValueError as exc:
        logger.warning("nvidia-smi's answer is unreadable: %s", exc)
        return []
