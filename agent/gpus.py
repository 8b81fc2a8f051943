"""The host's GPUs, as `nvidia-smi` reports them; none where it is absent or fails."""

from __future__ import annotations

import logging
import shutil
import subprocess

from core.wire.agent_api import GpuInfo

logger = logging.getLogger(__name__)

NVIDIA_SMI_QUERY = ["--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"]


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


def detect_gpus(timeout: float = 15.0) -> list[GpuInfo]:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return []
    try:
        result = subprocess.run(
            [executable, *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=timeout, check=True
        )
        return parse_nvidia_smi(result.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        # A broken driver must not keep the agent from serving CPU tasks.
        logger.warning("nvidia-smi failed, reporting no GPUs: %s", exc)
        return []
