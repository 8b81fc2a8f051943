"""The services section's runs (bench.services_bench): a service of the bench's replica submitted, its
replicas watched until ready, answers checked, and every run stopped at the end."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import Clock, Report
from bench.ferry_side import SHARED, FerrySide
from bench.services_parts import PROJECT, _session
from cli.api import FerryAPI
from core.configuration import ServiceConfiguration, parse_configuration
from core.status import RunStatus
from store import RunRecord

PORT = 8100  # every replica listens on it: each has its own network namespace
STDLIB_SCRIPT, UVICORN_SCRIPT = "replica.py", "replica_uvicorn.py"


class ServiceRuns:
    """The section's service runs: submitted, watched, stopped (bench.services_bench, .services_scaling)."""

    def __init__(self, ferry: FerrySide, report: Report, requests: int, trials: int, work: Path) -> None:
        self.ferry = ferry
        self.report = report
        self.requests = requests
        self.sequential = max(100, requests // 4)
        self.trials = trials
        self.work = work
        self.repo = work / "repo"
        self.marks = work / "marks"
        self.api: FerryAPI = ferry.api(PROJECT)
        self.started: list[str] = []  # the runs to stop, whatever happens
        self.proxy = ""
        self.proxy_pid: int | None = None

    # --- runs -------------------------------------------------------------------------------------

    def conf(self, name: str, uvicorn: bool = False, **fields: Any) -> ServiceConfiguration:
        # The uvicorn replica needs this interpreter's packages: its path, valid on this machine.
        python, script = (sys.executable, UVICORN_SCRIPT) if uvicorn else ("python3", STDLIB_SCRIPT)
        data = {
            "type": "service",
            "port": PORT,
            "commands": [f"exec {shlex.quote(python)} {script} {PORT} {self.marks / name}"],
            "resources": SHARED,
            "auth": False,
            "stop_duration": "20s",
            **fields,
        }
        conf = parse_configuration(data)
        assert isinstance(conf, ServiceConfiguration)
        return conf

    async def submit(self, name: str, **fields: Any) -> RunRecord:
        record = await self.api.submit(self.conf(name, **fields), repo_dir=self.repo, run_name=name)
        self.started.append(name)
        return record

    async def replicas(self, record: RunRecord) -> list[tuple[str, str]]:
        """(state, url) of the run's registered replicas."""
        rows = await asyncio.to_thread(self.ferry.store.list_service_replicas, [record.id])
        return [(r.state, r.url) for r in rows]

    async def until(self, what: str, check: Callable[[], Awaitable[bool]], limit: float) -> float:
        """Seconds until `check()` holds (every 0.05 s); RuntimeError after `limit`."""
        clock = Clock()
        while clock.elapsed() < limit:
            if await check():
                return clock.elapsed()
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{what}: not within {limit:.0f} s")

    async def ready(self, record: RunRecord, count: int, limit: float = 90) -> list[str]:
        """Until `count` replicas are ready and no other is registered; their URLs."""

        async def check() -> bool:
            found = await self.replicas(record)
            if len(found) == count and all(state == "ready" for state, _ in found):
                return True
            run = await asyncio.to_thread(self.ferry.store.get_run, record.id)
            if run is not None and RunStatus(run.status).is_finished():
                raise RuntimeError(f"run {record.run_name} {run.status}: {run.status_message}")
            return False

        await self.until(f"{count} replica(s) of {record.run_name} ready", check, limit)
        return [url for _, url in await self.replicas(record)]

    async def status(self, record: RunRecord) -> str:
        run = await asyncio.to_thread(self.ferry.store.find_run, record.project, record.run_name)
        return run.status if run is not None else "missing"

    async def stop_run(self, name: str) -> None:
        """Stopped (aborted if a graceful stop does not finish in 60 s), and waited for."""
        run = await asyncio.to_thread(self.ferry.store.find_run, PROJECT, name)
        if run is None or RunStatus(run.status).is_finished():
            return
        try:
            await self.api.stop(name)
            await asyncio.wait_for(self.api.wait(name), 60)
        except Exception:
            await self.api.stop(name, abort=True)
            await asyncio.wait_for(self.api.wait(name), 60)

    async def stop_all(self) -> None:
        for name in self.started:
            try:
                await self.stop_run(name)
            except Exception as err:
                self.report.note(f"services: could not stop run {name}: {type(err).__name__}: {err}")

    async def answers(self, url: str) -> bool:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            async with _session(1, timeout=5) as session, session.get(url) as response:
                await response.read()
                return response.status == 200
        return False
