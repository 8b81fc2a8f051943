"""On a host with NVIDIA GPUs: the agent's GPU detection, allocation and a job on its allocated GPU.

    python scripts/gpu_check.py [--python /path/to/python-with-torch]

Starts a real `ferry-agent` on a scratch data dir, prints what it detected, runs a job that holds one GPU
(and, with `--python`, multiplies matrices on it with torch), shows that a second job asking for more GPUs
than are free is refused while the first holds its GPU, and prints `name: value` lines of what it saw.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
TOKEN = "gpu-check"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="an interpreter with torch, for a CUDA job")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-gpu-check-"))
    (work / "token").write_text(TOKEN)
    (work / "token").chmod(0o600)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent.main", "--port", str(port), "--token-file", str(work / "token")]
        + ["--data-dir", str(work / "data"), "--log-level", "warning"],
        env=env,
        cwd=REPO,
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}/api", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        for _ in range(200):
            try:
                if http.get("/healthcheck").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        info = http.get("/instance/info").json()
        print("gpus_detected:", len(info["gpus"]))
        for gpu in info["gpus"]:
            print(f"gpu_{gpu['index']}: {gpu['name']}, {gpu['memory_mib']} MiB")
        print("container_engine:", info["container_engine"])
        if not info["gpus"]:
            return 1
        commands = ['echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"']
        if args.python:
            code = (
                "import torch; x = torch.ones(4096, 4096, device='cuda'); torch.cuda.synchronize(); "
                "print('torch_devices', torch.cuda.device_count(), torch.cuda.get_device_name(0)); "
                "print('matmul_sum', float((x @ x).sum()))"
            )
            commands.append(f'{args.python} -c "{code}"')
        commands.append("sleep 2")
        all_gpus = len(info["gpus"])
        http.post("/tasks", json={"id": "gpu-job", "resources": {"gpu": 1}}).raise_for_status()
        task = http.get("/tasks/gpu-job").json()
        print("allocated_gpu_indices:", task["gpu_indices"])
        refused = http.post("/tasks", json={"id": "too-many", "resources": {"gpu": all_gpus}})
        print("second_job_for_all_gpus:", refused.status_code, refused.json().get("detail"))
        spec = {"run_name": "gpu-check", "commands": commands, "shell": "bash"}
        http.post("/tasks/gpu-job/job", json=spec).raise_for_status()
        http.post("/tasks/gpu-job/run").raise_for_status()
        while (task := http.get("/tasks/gpu-job").json())["status"] != "terminated":
            time.sleep(0.2)
        log = http.get("/tasks/gpu-job/pull", params={"offset": 0}).json()
        print("job_log:")
        print(base64.b64decode(log["logs"]).decode(errors="replace"))
        print("job_exit_status:", task["exit_status"])
        print("free_gpus_after:", http.get("/instance/info").json()["free_gpu_indices"])
        return 0 if task["exit_status"] == 0 else 1
    finally:
        agent.terminate()
        agent.wait(10)


if __name__ == "__main__":
    raise SystemExit(main())
