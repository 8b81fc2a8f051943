"""Latency of a trivial task on the local backend: submit -> job RUNNING and submit -> run DONE.

A real dev server (tuned as docs/README.md says), a worker, the local agent and a SQLite store, all on
this machine. Run with `.venv/bin/python bench/lifecycle_bench.py [RUNS]`; prints `name: value` lines.
The times come from the eventlogs: the job's `start` event and the run's `clean` event (which follows
the release of the job's resources), measured from the moment the client began to submit.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from cli.api import FerryAPI  # noqa: E402
from core.configuration import TaskConfiguration, parse_configuration  # noqa: E402
from core.settings import Settings  # noqa: E402
from embedded.devserver import dev_server_command, wait_for_port  # noqa: E402
from embedded.local_agent import free_port, stop_local_agent  # noqa: E402
from store import open_store  # noqa: E402
from worker.main import build_worker, local_instances  # noqa: E402
from worker.temporal import connect  # noqa: E402

TRIVIAL = {
    "type": "task",
    "commands": ["echo hello"],
    "resources": {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."},
}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


async def measure(runs: int, home: Path, address: str) -> tuple[list[float], list[float]]:
    settings = Settings.from_env({"FERRY_HOME": str(home)})
    store = open_store(settings.database_url)
    client = await connect(address)
    instances = local_instances(settings)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    api = FerryAPI(client, store, project=queue, task_queue=queue)
    repo = home / "repo"
    repo.mkdir()
    to_running: list[float] = []
    to_done: list[float] = []
    async with build_worker(client, instances, store, task_queue=queue):
        for n in range(runs + 1):  # the first run warms caches and connections; it is not counted
            started = time.time()
            conf = parse_configuration(TRIVIAL)
            assert isinstance(conf, TaskConfiguration)
            record = await api.submit(conf, repo_dir=repo, run_name=f"bench-{n}")
            final = await api.wait(record.run_name)
            assert final.status == "done", final.status
            [job] = store.list_job_submissions(final.id)
            start = next(e.timestamp for e in api.job_events(final, job.id) if e.name == "start")
            clean = next(e.timestamp for e in api.run_events(final) if e.name == "clean")
            if n:
                to_running.append(start - started)
                to_done.append(clean - started)
    await instances.aclose()
    return to_running, to_done


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp:
        home = Path(tmp)
        port = free_port()
        server = subprocess.Popen(
            dev_server_command(port=port, ui_port=None, db_file=home / "temporal.db"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, 60, server)
            to_running, to_done = asyncio.run(measure(runs, home, f"127.0.0.1:{port}"))
        finally:
            server.terminate()
            server.wait(10)
            stop_local_agent(home)
    print(f"lifecycle_runs: {runs}")
    for name, values in (("submit_to_running", to_running), ("submit_to_done", to_done)):
        print(f"lifecycle_{name}_p50_ms: {statistics.median(values) * 1000:.0f}")
        print(f"lifecycle_{name}_p90_ms: {percentile(values, 0.9) * 1000:.0f}")


if __name__ == "__main__":
    main()
