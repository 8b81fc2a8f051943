"""The scale section: many long-running runs sharing the local instance (bench/README.md, issue 19).

Their footprint while idle, one more run meanwhile (with where its time went, from its histories), then
all of them aborted: the agent must be left with no task and no job process.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from bench.common import Clock, files_mb, processes_mentioning, rss_mb
from bench.ferry_side import SHARED, FerrySide, configuration
from bench.histories import event_time, run_and_job, steps
from core.run_types import configurator_for
from core.status import JobStatus
from store import RunRecord


class ScaleSection:
    def __init__(self, side: FerrySide) -> None:
        self.side = side

    async def run(self, count: int, *, parallel: int = 32) -> None:
        """`count` long-running runs sharing the local instance; footprint and one more run meanwhile."""
        r = self.side.report
        timeout = max(420.0, count * 0.25)  # each wait: about 4 runs/s or better (10,000 runs: 42 minutes)
        conf = configuration(["sleep 3600"], SHARED)
        resources = configurator_for(conf).resources()
        r.put("scale_runs", count)
        r.put(
            "scale_job_allocation", f"cpu={resources.cpu:g} memory={resources.memory:g}GB gpu={resources.gpu}"
        )
        project = "scale"
        names = [f"s{i}" for i in range(count)]
        gate = asyncio.Semaphore(parallel)

        async def submit(name: str) -> None:
            async with gate:
                await self.side.submit(project, name, ["sleep 3600"])

        before = self._footprint()
        store_before = files_mb(self._store_files())
        clock = Clock()
        await asyncio.gather(*(submit(n) for n in names))
        r.put("scale_submit_s", clock.elapsed())
        r.put("scale_submit_rate_runs_per_s", count / clock.elapsed(), 1)
        running = await self._until(
            lambda: self.side.count_jobs(project, [JobStatus.RUNNING.value]) >= count, timeout
        )
        r.put("scale_all_running_s", clock.elapsed() if running else float("nan"))
        if not running:
            r.note(f"only {self.side.count_jobs(project, [JobStatus.RUNNING.value])} of {count} jobs RUNNING")
        # Activations the SDK took for deadlocks (not yielded within 2 s): each leaves its workflow stuck
        # on that worker (docs/scaling.md#many-runs-at-once).
        r.put("scale_worker_deadlocks", self._worker_log_count("TMPRL1101"))
        await asyncio.sleep(5)  # settle: the footprint of N jobs being watched, not of N being started
        after = self._footprint()
        busy = await asyncio.to_thread(self._cpu_percent, 10.0)
        for name in ("worker", "temporal", "agent"):
            r.put(f"scale_{name}_rss_mb", after[name] or float("nan"), 1)
            r.put(f"scale_{name}_rss_before_mb", before[name] or float("nan"), 1)
            r.put(f"scale_{name}_cpu_percent_while_idle", busy[name], 1)
        r.put("scale_idle_cpu_percent_total", sum(busy[n] for n in ("worker", "temporal", "agent")), 1)
        r.note("goals (issue 19): idle CPU of the three <= 50% of one core; worker RSS <= 2048 MB")
        r.put("scale_store_mb", files_mb(self._store_files()), 1)
        r.put("scale_store_growth_mb", files_mb(self._store_files()) - store_before, 1)
        r.put("scale_temporal_db_mb", files_mb(self._temporal_files()), 1)
        # One more run, while all of them are active: submit -> RUNNING and submit -> DONE.
        samples: list[tuple[float, float, float]] = []
        for i in range(3):
            try:
                samples.append(await asyncio.wait_for(self.side.latency_sample(1000 + i), 120))
            except TimeoutError:
                r.put("scale_one_more_run", "did not finish in 120 s")
                break
        r.distribution("scale_one_more_submit_to_running", "ms", [s[0] for s in samples], 1000)
        r.distribution("scale_one_more_submit_to_done", "ms", [s[2] for s in samples], 1000)
        await self._one_more_steps(self.side.latency_runs[-len(samples) :])
        # Abort them all; the agent must be left with no task and no job process.
        clock = Clock()
        api = self.side.api(project)

        async def abort(name: str) -> bool:
            """`ferry stop -x`; True once the run took it (an update may time out while the stack is
            saturated: it is tried again, up to three times)."""
            for _ in range(3):
                async with gate:
                    try:
                        await api.stop(name, abort=True)
                        return True
                    except WorkflowUpdateRPCTimeoutOrCancelledError:
                        continue
            return False

        taken = await asyncio.gather(*(abort(n) for n in names))
        r.put("scale_abort_requests_failed", taken.count(False))
        r.put("scale_abort_requests_s", clock.elapsed())
        stopped = await self._until(lambda: self.side.count_runs(project, finished=False) == 0, timeout)
        r.put("scale_abort_all_finished_s", clock.elapsed() if stopped else float("nan"))
        tasks = await self._agent_tasks()
        r.put("scale_agent_tasks_left", tasks)
        r.put("scale_job_processes_left", len(processes_mentioning(str(self.side.tasks_dir))))

    async def _one_more_steps(self, runs: list[tuple[RunRecord, float]]) -> None:
        """Where the one more run's time went: each step after its submission, from its histories."""
        timings: dict[str, list[float]] = {}
        for record, submitted in runs:
            run, job = await run_and_job(self.side.client, record.workflow_id)
            timings.setdefault("run workflow started", []).append(event_time(run[0]) - submitted)
            for name, at in steps(run, job).items():
                timings.setdefault(name, []).append(event_time(run[0]) - submitted + at)
        if timings:
            self.side.report.note("one more run, each step after its submission: p50 of the samples (ms)")
        for name, ats in sorted(timings.items(), key=lambda item: statistics.median(item[1])):
            self.side.report.note(f"  {statistics.median(ats) * 1000:7.0f}  {name}")

    def _worker_log_count(self, text: str) -> int:
        logs = self.side.stack.dir.glob("worker*.log")
        return sum(path.read_text(errors="replace").count(text) for path in logs)

    def _footprint(self) -> dict[str, float | None]:
        footprint: dict[str, float | None] = {}
        for name in ("worker", "temporal", "agent"):
            sizes = [rss_mb(pid) for pid in self.side.pids(name)]
            footprint[name] = None if None in sizes else sum(size or 0.0 for size in sizes)
        return footprint

    def _cpu_percent(self, seconds: float) -> dict[str, float]:
        first = self.side.cpu_times()
        time.sleep(seconds)
        return {name: (used - first[name]) / seconds * 100 for name, used in self.side.cpu_times().items()}

    def _store_files(self) -> list[Path]:
        db = self.side.home / "ferry.db"
        return [db, db.with_name("ferry.db-wal"), db.with_name("ferry.db-shm")]

    def _temporal_files(self) -> list[Path]:
        db = self.side.stack.db_file
        return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]

    async def _agent_tasks(self) -> int:
        from activities.agent_client import AgentClient
        from embedded.local_agent import ensure_local_agent

        agent = await asyncio.to_thread(ensure_local_agent, self.side.home)
        async with AgentClient(agent.url, agent.token) as client:
            return len(await client.list_tasks())

    async def _until(self, check: Callable[[], bool], timeout: float, every: float = 0.25) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await asyncio.to_thread(check):
                return True
            await asyncio.sleep(every)
        return False
